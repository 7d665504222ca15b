"""A name that is no folder here and no Hub repo is refused in one line, after one request (issue 68).

`translate --model` and `train --dataset` take a name that is not a local folder for a Hub repo: the Hub is asked
once (here the session's loopback Hub, or a closed port for a Hub that cannot be reached), offline its cache, and
the command refuses before anything loads, naming both readings of the name. Without this, transformers and
`datasets` asked for each file with retries: 50 seconds and 46 lines for a mistyped path without a network.
"""

import time

import pytest
from helpers import Loaded, assert_refused_in_one_line, run_command, snapshot

import vanilla_transformer
from vanilla_transformer import hub_lookup
from vanilla_transformer.training import options


@pytest.fixture
def nothing_loads(monkeypatch):
    """Loading fails the test, and every test asks the Hub afresh (its answers are remembered per process)."""

    def load(*args, **kwargs):
        raise Loaded("the command began loading before it refused its options")

    monkeypatch.setattr(vanilla_transformer.registration, "register", load)
    monkeypatch.setattr("vanilla_transformer.translation.loading.load_model", load)
    monkeypatch.setattr(options, "read_command_line", load)
    hub_lookup.ask_hub.cache_clear()
    yield
    hub_lookup.ask_hub.cache_clear()


def commands(tmp_path, name: str) -> list[tuple[list[str], str]]:
    return [
        (["translate", "--model", name, "--input", "-"], f"--model {name!r}"),
        (["train", "--dataset", name, "--output_dir", str(tmp_path / "out")], f"--dataset {name!r}"),
    ]


def test_a_name_the_hub_does_not_hold_is_refused_after_one_request(hub, nothing_loads, tmp_path, capsys):
    for argv, flag in commands(tmp_path, "tester/no-such-repo"):
        asked = len(hub.requests)
        before = snapshot(tmp_path)
        status, err = run_command(argv, capsys)
        assert_refused_in_one_line(status, err, argv, flag, "no folder of that name here, and no Hub")
        assert snapshot(tmp_path) == before
        assert len([r for r in hub.requests[asked:] if "no-such-repo" in r.path]) == 1, hub.requests[asked:]


def test_a_hub_that_cannot_be_reached_is_said_in_one_line_at_once(hub, nothing_loads, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused
    for argv, flag in commands(tmp_path, "runs/does_not_exist"):
        started = time.monotonic()
        status, err = run_command(argv, capsys)
        assert_refused_in_one_line(status, err, argv, flag, "and the Hub could not be reached")
        assert time.monotonic() - started < 5


def test_a_repo_the_hub_holds_goes_on_to_load(hub, nothing_loads, tmp_path, capsys):
    from huggingface_hub import HfApi

    for repo_type in ("model", "dataset"):
        HfApi().create_repo(f"tester/lookup-{repo_type}", repo_type=repo_type, exist_ok=True)
    for argv in (["translate", "--model", "tester/lookup-model", "--input", "-"],
                 ["train", "--dataset", "tester/lookup-dataset", "--output_dir", str(tmp_path / "out")]):  # fmt: skip
        with pytest.raises(Loaded):
            run_command(argv, capsys)


def test_offline_a_name_with_an_unknown_namespace_reads_as_a_path(nothing_loads, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    for repo_type in ("models", "datasets"):
        (tmp_path / "hub" / f"{repo_type}--someone--cached").mkdir(parents=True)
    for argv, flag in commands(tmp_path, "runs/typo"):
        status, err = run_command(argv, capsys)
        assert_refused_in_one_line(status, err, argv, flag, "no such folder here")
        assert "unset HF_HUB_OFFLINE" not in err  # the Hub is not what the name meant
    for argv, flag in commands(tmp_path, "someone/other"):  # a namespace the cache knows: a repo not downloaded
        status, err = run_command(argv, capsys)
        assert_refused_in_one_line(status, err, argv, flag, "unset HF_HUB_OFFLINE to download it")
    _, train = commands(tmp_path, "someone/cached")
    with pytest.raises(Loaded):
        run_command(train[0], capsys)  # a dataset in the cache goes on to load
