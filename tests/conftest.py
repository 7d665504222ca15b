import os

# Tests never reach the Hugging Face Hub (there is no network here): everything is local files or the loopback Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
