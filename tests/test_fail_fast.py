"""Commands that cannot work fail at once, and `translate` loses nothing it did.

Every check that needs only the options and the file system runs before torch, transformers or the model load: each
row of issue 51 is run in-process with the model registration (the first thing loading does) replaced by a failure,
so a check made after loading fails the test; and in a subprocess, where the row must exit 2 on one line without
importing torch or transformers. `translate` streams: windows of lines sorted by length, written in input order as
each is done; an interruption part-way leaves a prefix of the full output, line for line.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import (
    Loaded,
    assert_refused_in_one_line,
    assert_refused_without_torch,
    read_multi30k,
    run_command,
    snapshot,
    subprocess_env,
    tiny_config,
    train_steps,
)

import vanilla_transformer
from vanilla_transformer.commands import main
from vanilla_transformer.data.tokenizer import train_tokenizer
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.translation import translate as translate_module
from vanilla_transformer.translation.shipped import DEFAULT_MODEL


ROOT = Path(__file__).resolve().parents[1]


def rows(tmp: Path) -> list[tuple[list[str], str, str]]:
    """(argv, the flag the error names, what it says) for each command line of issue 51 that must fail at once."""
    (tmp / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    (tmp / "b.txt").write_text("one\n", encoding="utf-8")
    (tmp / "full").mkdir()
    (tmp / "full" / "model.bin").write_bytes(b"")
    return [
        (["translate", "--model", DEFAULT_MODEL, "--output", f"{tmp}/nodir/out.de"], "--output", "does not exist"),
        (["translate", "--model", "multi30k-en-dee"], "--model 'multi30k-en-dee'", f"did you mean {DEFAULT_MODEL}?"),
        (["translate", "--model", "someone/not-cached"], "--model 'someone/not-cached'", "the Hub is offline"),
        (["translate", "--model", "bad repo id"], "--model 'bad repo id'", "not a valid Hub repo id"),
        (["translate", "--model", DEFAULT_MODEL, "--input", f"{tmp}/a.txt", "--output", f"{tmp}/a.txt"], "--output",
         "is the input file"),
        (["translate", "--model", DEFAULT_MODEL, "--all_or_nothing"], "--all_or_nothing", "is for --output FILE"),
        (["score", "--hypotheses", f"{tmp}/a.txt", "--references", f"{tmp}/b.txt"], "--references", "2 lines"),
        (["score", "--hypotheses", f"{tmp}/a.txt", "--references", f"{tmp}/none.txt"], "--references", "not a file"),
        (["score", "--hypotheses", f"{tmp}/a.txt", "--references", f"{tmp}/a.txt", "--lang", "xx"], "--lang 'xx'",
         "Moses' tokenizer knows (as, bn,"),
        (["attention", "--model", DEFAULT_MODEL, "", "--output", f"{tmp}/cross.png"], "SOURCE ''", "is empty"),
        (["export", "ctranslate2", DEFAULT_MODEL, f"{tmp}/full"], "OUTPUT_DIR", "pass --force to overwrite it"),
        (["push", DEFAULT_MODEL, "bad repo//id", "--dry_run"], "repo_id 'bad repo//id'", "not a valid Hub repo id"),
    ]  # fmt: skip


@pytest.fixture
def nothing_loads(monkeypatch):
    """Loading fails the test: the registration that precedes every model load, and the loader itself."""

    def load(*args, **kwargs):
        raise Loaded("the command began loading before it refused its options")

    monkeypatch.setattr(vanilla_transformer, "register", load)
    monkeypatch.setattr("vanilla_transformer.translation.loading.load_model", load)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr(sys, "stdin", None)  # translate without --input must not read stdin before refusing


@pytest.mark.parametrize("index", range(12))
def test_each_row_fails_before_loading_in_one_line(index, tmp_path, nothing_loads, capsys):
    argv, flag, message = rows(tmp_path)[index]
    before = snapshot(tmp_path)
    status, err = run_command(argv, capsys)
    assert_refused_in_one_line(status, err, argv, flag, message)
    assert snapshot(tmp_path) == before  # nothing written


def test_each_row_fails_in_a_process_without_torch(tmp_path):
    for argv, flag, message in rows(tmp_path):
        assert_refused_without_torch(argv, flag, message, cwd=ROOT, env=subprocess_env())


def test_an_empty_existing_directory_is_a_fine_export_target(tmp_path, nothing_loads, capsys):
    pytest.importorskip("ctranslate2")  # without it, the command refuses before loading (the ct2 extra)
    (tmp_path / "empty").mkdir()
    with pytest.raises(Loaded):  # the checks pass: the command goes on to load the model
        main(["export", "ctranslate2", DEFAULT_MODEL, str(tmp_path / "empty")])


# ------------------------------------------------------------------------------------------------ streaming


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A tiny model trained for a few steps on Multi30k (its translations differ from sentence to sentence), saved."""
    english, german = read_multi30k("train.en.gz", 300), read_multi30k("train.de.gz", 300)
    tokenizer = train_tokenizer(english + german, vocab_size=400, model_max_length=128)
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), dropout=0.0))
    train_steps(model, tokenizer, english, german, steps=80, seed=0)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """40 Multi30k sentences of different lengths with blank lines among them."""
    lines = read_multi30k("test_2016_flickr.en.gz", 40)
    lines[3] = lines[17] = ""
    path = tmp_path_factory.mktemp("source") / "in.en"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_translate(model: Path, source: Path, output: Path, *options: str) -> int:
    base = ["translate", "--model", str(model), "--input", str(source), "--output", str(output), "--device", "cpu"]
    return main([*base, "--num_beams", "1", "--max_new_tokens", "12", "--batch_size", "1", *options])


def test_windows_keep_the_input_order(tiny_model, source, tmp_path):
    # One sentence per batch: each is decoded alone whatever the window, so the outputs must be equal line for line.
    assert run_translate(tiny_model, source, tmp_path / "whole.de", "--window", "1000") == 0
    assert run_translate(tiny_model, source, tmp_path / "windows.de", "--window", "7") == 0
    whole = (tmp_path / "whole.de").read_text(encoding="utf-8").split("\n")
    assert len(whole) == 41 and whole[3] == whole[17] == "" and len(set(whole)) > 20
    assert (tmp_path / "windows.de").read_text(encoding="utf-8").split("\n") == whole


def test_n_best_indices_count_through_the_windows(tiny_model, source, tmp_path):
    assert run_translate(tiny_model, source, tmp_path / "nbest.de", "--window", "7", "--n_best", "1") == 0
    indices = [int(line.split("\t")[0]) for line in (tmp_path / "nbest.de").read_text(encoding="utf-8").splitlines()]
    assert indices == list(range(40))


def interrupt_after(monkeypatch, windows: int) -> list[int]:
    """Make the `windows + 1`-th window's translation raise KeyboardInterrupt (Ctrl-C part-way); returns the sizes
    of the windows translated."""
    real, sizes = translate_module.translate, []

    def translate(model, tokenizer, sentences, **kwargs):
        if len(sizes) == windows:
            raise KeyboardInterrupt
        sizes.append(len(sentences))
        return real(model, tokenizer, sentences, **kwargs)

    monkeypatch.setattr(translate_module, "translate", translate)
    return sizes


def test_an_interruption_leaves_a_prefix_of_the_full_output(tiny_model, source, tmp_path, monkeypatch, capsys):
    assert run_translate(tiny_model, source, tmp_path / "full.de", "--window", "6") == 0
    full = (tmp_path / "full.de").read_text(encoding="utf-8").splitlines()
    sizes = interrupt_after(monkeypatch, 3)
    assert run_translate(tiny_model, source, tmp_path / "part.de", "--window", "6") == 130
    assert sizes == [6, 6, 6]
    assert "interrupted; the translations of the first 18 lines are in" in capsys.readouterr().err
    assert (tmp_path / "part.de").read_text(encoding="utf-8").splitlines() == full[:18]


def test_all_or_nothing_leaves_the_output_as_it_was(tiny_model, source, tmp_path, monkeypatch, capsys):
    (tmp_path / "out.de").write_text("earlier output\n", encoding="utf-8")
    interrupt_after(monkeypatch, 2)
    assert run_translate(tiny_model, source, tmp_path / "out.de", "--window", "6", "--all_or_nothing") == 130
    assert (tmp_path / "out.de").read_text(encoding="utf-8") == "earlier output\n"
    assert sorted(os.listdir(tmp_path)) == ["out.de"]  # no temporary file left
    monkeypatch.undo()
    assert run_translate(tiny_model, source, tmp_path / "out.de", "--window", "6", "--all_or_nothing") == 0
    assert len((tmp_path / "out.de").read_text(encoding="utf-8").splitlines()) == 40


def test_the_input_is_read_one_window_at_a_time(tiny_model):
    from vanilla_transformer.translation.loading import load_model

    model, tokenizer = load_model(str(tiny_model), device="cpu")
    read = []

    def lines():
        for i in range(100):
            read.append(i)
            yield f"A dog number {i} runs."

    stream = translate_module.translate_stream(model, tokenizer, lines(), window=10, max_new_tokens=2, num_beams=1)
    start, first = next(stream)
    assert (start, len(first)) == (0, 10) and len(read) == 10  # the first window is out before the 11th line is read
    assert [start for start, _ in stream] == list(range(10, 100, 10))


def test_a_long_line_gets_one_warning(tiny_model, caplog):
    from vanilla_transformer.translation.loading import load_model

    model, tokenizer = load_model(str(tiny_model), device="cpu")
    tokenizer.deprecation_warnings.clear()
    translate_module.translate(model, tokenizer, ["a dog " * 100], max_new_tokens=2, num_beams=1)
    # transformers' "Token indices sequence length is longer ... indexing errors" was not asked for (it sets this
    # key when it warns); the package's own truncation warning names the line.
    assert "sequence-length-is-longer-than-the-specified-maximum" not in tokenizer.deprecation_warnings
    assert [r.getMessage()[:7] for r in caplog.records if "truncated" in r.getMessage()] == ["Line 1 "]


def test_no_progress_bars_in_a_log(tiny_model, source, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer_cli", "translate", "--model", str(tiny_model), "--input",
         str(source), "--num_beams", "1", "--max_new_tokens", "4", "--device", "cpu"],
        capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 40
    assert "Loading weights" not in result.stderr and "sent/s" not in result.stderr, result.stderr


def test_ctrl_c_in_a_process_keeps_the_finished_windows(tiny_model, source, tmp_path):
    assert run_translate(tiny_model, source, tmp_path / "full.de", "--window", "5") == 0
    full = (tmp_path / "full.de").read_text(encoding="utf-8").splitlines()
    big = tmp_path / "big.en"  # the 40 lines 50 times: long enough to be interrupted part-way
    big.write_text(source.read_text(encoding="utf-8") * 50, encoding="utf-8")
    output = tmp_path / "part.de"
    command = [sys.executable, "-m", "vanilla_transformer_cli", "translate", "--model", str(tiny_model), "--input",
               str(big), "--output", str(output), "--window", "5", "--batch_size", "1", "--num_beams", "1",
               "--max_new_tokens", "12", "--device", "cpu"]  # fmt: skip
    # SIGINT's default action restored in the child, whatever this process's parent did with it (a background job
    # starts with SIGINT ignored, and Python then installs no KeyboardInterrupt handler).
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=subprocess_env(),
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:  # until two windows are on disk
        if output.exists() and output.read_bytes().count(b"\n") >= 10:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    written = output.read_text(encoding="utf-8").splitlines()
    assert 10 <= len(written) < 2000 and len(written) % 5 == 0, len(written)  # whole windows only
    assert written == (full * 50)[: len(written)]
    assert f"interrupted; the translations of the first {len(written)} lines are in" in err
