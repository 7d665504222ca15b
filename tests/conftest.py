"""Test session set-up: offline by default, with a loopback Hub for the tests that push and pull.

huggingface_hub freezes its endpoint, cache paths and offline flag at import, so the loopback Hub is started and the
environment set here, before anything imports an HF library.
"""

import os

import pytest
from support.hub_server import start_session_hub  # standard library only; must come before any HF import


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# HF_ENDPOINT -> loopback, HF_TOKEN -> its test token, a fresh temporary HF_HOME, HF_HUB_DISABLE_XET=1, HF_HUB_OFFLINE=1.
HUB = start_session_hub()


@pytest.fixture
def hub(monkeypatch):
    """The session's loopback Hub (user "tester", org "test-org"); the client is online for this test only."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return HUB


@pytest.fixture(scope="module")
def tokenizer():
    """A shared BPE of 1,000 pieces over Multi30k's first 1,000 English and German training sentences, one per module
    (the attention figures, the demo, the pipeline); a module that needs another vocabulary defines its own."""
    from helpers import read_multi30k

    from vanilla_transformer.data.tokenizer import train_tokenizer

    return train_tokenizer(read_multi30k("train.en.gz", 1000) + read_multi30k("train.de.gz", 1000), vocab_size=1000)


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One torch thread: the models here are tiny, and on a 2-core machine shared with other jobs two threads per
    process were measured ~10x slower than one (thread oversubscription)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_unconfigure(config):
    HUB.stop()
