"""Commands that cannot work fail at once, and `translate` loses nothing it did.

Every check that needs only the options and the file system runs before torch, transformers or the model load: each
row of issue 51 is run in-process with the model registration (the first thing loading does) replaced by a failure,
so a check made after loading fails the test; and in a subprocess, where the row must exit 2 on one line without
importing torch or transformers. `translate` streams: windows of lines sorted by length, written in input order as
each is done; an interruption part-way leaves a prefix of the full output, line for line.
"""

import io
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
    assert_row_refused_before_loading,
    assert_rows_refused_without_torch,
    read_multi30k,
    run_command,
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
        (["translate", "--model", "someone/not-cached"], "--model 'someone/not-cached'", "no such folder here"),
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

    monkeypatch.setattr(vanilla_transformer.registration, "register", load)
    monkeypatch.setattr("vanilla_transformer.translation.loading.load_model", load)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setattr(sys, "stdin", None)  # translate without --input must not read stdin before refusing


@pytest.mark.parametrize("index", range(12))
def test_each_row_fails_before_loading_in_one_line(index, tmp_path, nothing_loads, capsys):
    assert_row_refused_before_loading(rows(tmp_path)[index], tmp_path, capsys)


def test_each_row_fails_in_a_process_without_torch(tmp_path):
    assert_rows_refused_without_torch(rows(tmp_path), cwd=ROOT, env=subprocess_env())


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
    real, sizes = translate_module._translate, []

    def translate(model, tokenizer, sentences, **kwargs):
        if len(sizes) == windows:
            raise KeyboardInterrupt
        sizes.append(len(sentences))
        return real(model, tokenizer, sentences, **kwargs)

    monkeypatch.setattr(translate_module, "_translate", translate)  # what translate_stream runs per window
    return sizes


def test_an_interruption_leaves_a_prefix_of_the_full_output(tiny_model, source, tmp_path, monkeypatch, capsys):
    assert run_translate(tiny_model, source, tmp_path / "full.de", "--window", "6") == 0
    full = (tmp_path / "full.de").read_text(encoding="utf-8").splitlines()
    assert sorted(os.listdir(tmp_path)) == ["full.de"]  # a finished run leaves no .partial
    sizes = interrupt_after(monkeypatch, 3)
    assert run_translate(tiny_model, source, tmp_path / "part.de", "--window", "6") == 130
    assert sizes == [6, 6, 6]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted; the translations of the first 18 lines are in" in err, err
    assert (
        f"{tmp_path / 'part.de.partial'}, and {tmp_path / 'part.de'} is not written; the rest starts at line 19" in err
    )
    assert not (tmp_path / "part.de").exists()  # the output's name is only ever a complete output
    assert (tmp_path / "part.de.partial").read_text(encoding="utf-8").splitlines() == full[:18]


def test_an_existing_output_is_replaced_only_by_a_finished_run(tiny_model, source, tmp_path, monkeypatch, capsys):
    output = tmp_path / "out.de"
    output.write_text("earlier output\n", encoding="utf-8")
    output.chmod(0o640)
    interrupt_after(monkeypatch, 2)
    assert run_translate(tiny_model, source, output, "--window", "6") == 130
    assert output.read_text(encoding="utf-8") == "earlier output\n"
    assert len((tmp_path / "out.de.partial").read_text(encoding="utf-8").splitlines()) == 12
    assert "out.de is left as it was" in capsys.readouterr().err
    monkeypatch.undo()
    assert run_translate(tiny_model, source, output, "--window", "6") == 0
    assert len(output.read_text(encoding="utf-8").splitlines()) == 40
    assert sorted(os.listdir(tmp_path)) == ["out.de"] and output.stat().st_mode & 0o777 == 0o640


def test_a_crash_part_way_keeps_the_finished_windows_and_says_where(tiny_model, source, tmp_path, monkeypatch, capsys):
    real, calls = translate_module._translate, []

    def translate(model, tokenizer, sentences, **kwargs):  # the third window runs out of memory
        calls.append(len(sentences))
        if len(calls) == 3:
            raise RuntimeError("out of memory")
        return real(model, tokenizer, sentences, **kwargs)

    monkeypatch.setattr(translate_module, "_translate", translate)  # what translate_stream runs per window
    (tmp_path / "out.de").write_text("earlier output\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="out of memory"):  # an unexpected error keeps its traceback
        run_translate(tiny_model, source, tmp_path / "out.de", "--window", "6")
    assert "stopped by the error below; the translations of the first 12 lines are in" in capsys.readouterr().err
    assert (tmp_path / "out.de").read_text(encoding="utf-8") == "earlier output\n"
    assert len((tmp_path / "out.de.partial").read_text(encoding="utf-8").splitlines()) == 12


def test_an_input_that_is_not_utf8_fails_before_loading_and_keeps_the_output(tmp_path, nothing_loads, capsys):
    # Issue 58's repro: a Latin-1 line used to truncate the existing output to 0 bytes once the model had loaded.
    (tmp_path / "k.out").write_text("keep\n", encoding="utf-8")
    (tmp_path / "l.txt").write_bytes(b"Ein Hund.\n" * 3000 + b"M\xe4dchen\n")  # far beyond the first window
    argv = ["translate", "--model", DEFAULT_MODEL, "--input", f"{tmp_path}/l.txt", "--output", f"{tmp_path}/k.out"]
    status, err = run_command(argv, capsys)
    assert_refused_in_one_line(status, err, argv, "--input", "is not UTF-8: line 3001 has the byte b'\\xe4'")
    assert "iconv -f latin1 -t utf-8" in err
    assert (tmp_path / "k.out").read_text(encoding="utf-8") == "keep\n" and sorted(os.listdir(tmp_path)) == [
        "k.out",
        "l.txt",
    ]


def test_a_line_that_is_not_utf8_part_way_keeps_the_finished_windows(tiny_model, tmp_path, monkeypatch, capsys):
    # Standard input cannot be read before the model loads: its lines are checked window by window.
    (tmp_path / "out.de").write_text("keep\n", encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"A dog.\nA cat.\nM\xe4dchen\nA man.\n")))
    argv = ["translate", "--model", str(tiny_model), "--output", str(tmp_path / "out.de"), "--window", "1"]
    status, err = run_command([*argv, "--device", "cpu", "--num_beams", "1", "--max_new_tokens", "4"], capsys)
    assert_refused_in_one_line(status, err, argv, "--input standard input", "line 3 has the byte")
    assert "the translations of the first 2 lines are in" in err and "the rest starts at line 3 of the input" in err
    assert (tmp_path / "out.de").read_text(encoding="utf-8") == "keep\n"
    assert len((tmp_path / "out.de.partial").read_text(encoding="utf-8").splitlines()) == 2


@pytest.mark.parametrize("where", ["file", "stdin"])
def test_an_empty_input_gives_an_empty_output_and_one_line(where, tiny_model, tmp_path, monkeypatch, capsys):
    def no_loading(*args, **kwargs):
        raise Loaded("an empty input needs no model")

    monkeypatch.setattr("vanilla_transformer.translation.loading.load_model", no_loading)
    (tmp_path / "empty.en").write_bytes(b"")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    given = ["--input", str(tmp_path / "empty.en")] if where == "file" else []
    status, err = run_command(
        ["translate", "--model", str(tiny_model), *given, "--output", f"{tmp_path}/e.de"], capsys
    )
    assert status == 0 and err.count("\n") == 1 and "is empty: nothing to translate; " in err, err
    assert (tmp_path / "e.de").read_bytes() == b""


def test_n_best_gives_distinct_translations(tmp_path, capsys):
    # The shipped DE->EN model's beam holds this sentence's best translation twice (two token sequences, one text):
    # `generate`'s 3 best were 2 texts; --n_best 3 gives 3 different ones, the best first, and --n_best 6 says in one
    # line that its beam of 6 has fewer.
    (tmp_path / "in.de").write_text("Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.\n", encoding="utf-8")

    def n_best(count: int) -> list[tuple[float, str]]:
        base = ["translate", "--model", "multi30k-de-en", "--input", f"{tmp_path}/in.de", "--device", "cpu"]
        assert main([*base, "--output", f"{tmp_path}/out.en", "--n_best", str(count)]) == 0
        rows = [line.split("\t") for line in (tmp_path / "out.en").read_text(encoding="utf-8").splitlines()]
        assert {index for index, _, _ in rows} == {"0"}
        return [(float(score), text) for _, score, text in rows]

    assert main(["translate", "--model", "multi30k-de-en", "--input", f"{tmp_path}/in.de", "--output",
                 f"{tmp_path}/best.en", "--device", "cpu"]) == 0  # fmt: skip
    three = n_best(3)
    assert len({text for _, text in three}) == 3 and [s for s, _ in three] == sorted(
        (s for s, _ in three), reverse=True
    )
    assert three[0][1] == (tmp_path / "best.en").read_text(encoding="utf-8").strip()  # the same search
    assert capsys.readouterr().err == ""
    six = n_best(6)
    assert len({text for _, text in six}) == len(six) < 6 and six[:3] == three
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--n_best 6: 1 of 1 sentences have fewer distinct translations" in err, err


def test_a_blank_line_has_one_empty_hypothesis(tiny_model, source, tmp_path):
    assert run_translate(tiny_model, source, tmp_path / "nbest.de", "--num_beams", "4", "--n_best", "4") == 0
    rows = [line.split("\t") for line in (tmp_path / "nbest.de").read_text(encoding="utf-8").splitlines()]
    assert [row for row in rows if row[0] in ("3", "17")] == [["3", "0.000000", ""], ["17", "0.000000", ""]]


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
    partial = tmp_path / "part.de.partial"  # the output's name is given only to a complete output
    while time.monotonic() < deadline and process.poll() is None:  # until two windows are on disk
        if partial.exists() and partial.read_bytes().count(b"\n") >= 10:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert not output.exists()
    written = partial.read_text(encoding="utf-8").splitlines()
    assert 10 <= len(written) < 2000 and len(written) % 5 == 0, len(written)  # whole windows only
    assert written == (full * 50)[: len(written)]
    assert f"interrupted; the translations of the first {len(written)} lines are in" in err
