"""The data's way into the model (section 5.1): parallel corpora through `datasets` (`corpus.py`), the shared BPE
tokenizer (`tokenizer.py`), and batches of about N tokens grouped by length (`batching.py`)."""
