"""What the tests run on but do not test themselves: the loopback Hugging Face Hub (hub_server.py)."""
