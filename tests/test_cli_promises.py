"""The command line keeps the README's and docs' promises (issue 58). Its table: each command line that cannot work
exits 2 with one line on stderr that names the flag or the file and says what works, without a traceback, before
torch or transformers are imported, and nothing is written or truncated; each row runs in a new process
(`helpers.assert_refused_without_torch`), as a person's command line would. Then the defaults a user can guess, and
the docs' statements that a test can hold.
"""

import json
import logging
import re
import socket
from pathlib import Path

import pytest
from helpers import (
    Loaded,
    assert_refused_in_one_line,
    assert_refused_without_torch,
    run_command,
    snapshot,
    subprocess_env,
)

from vanilla_transformer.training import preflight
from vanilla_transformer.training import train as command
from vanilla_transformer.translation.shipped import DEFAULT_MODEL, PRETRAINED_DIR


ROOT = Path(__file__).resolve().parents[1]
PAIRS = ["a dog\tein Hund", "a cat\teine Katze", "a girl\tein Mädchen", "two men\tzwei Männer"]


def write_corpus(directory: Path, train: bytes | None = None) -> Path:
    """train/dev/test.tsv with a header `en de`; `train`: the training table's bytes instead."""
    directory.mkdir()
    table = ("en\tde\n" + "\n".join(PAIRS) + "\n").encode("utf-8")
    for split in ("train", "dev", "test"):
        (directory / f"{split}.tsv").write_bytes(train if train is not None and split == "train" else table)
    return directory


def train(corpus: Path, *options: str) -> list[str]:
    return ["train", "--dataset", str(corpus), "--train_split", "train", "--validation_split", "dev", "--test_split",
            "test", *options]  # fmt: skip


@pytest.fixture
def busy_port():
    """A port of 127.0.0.1 that another program listens on."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def rows(tmp: Path, port: int) -> list[tuple[list[str], str, str]]:
    """(argv, the flag or file the line names, what it says) for each row of issue 58's table."""
    (tmp / "k.out").write_text("keep\n", encoding="utf-8")  # an earlier output that must survive
    (tmp / "l.txt").write_bytes(b"M\xe4dchen\n")  # Latin-1
    (tmp / "ok.de").write_text("Ein Hund.\n", encoding="utf-8")
    corpus = write_corpus(tmp / "my_corpus")
    table = "en\tde\n" + "\n".join(PAIRS) + "\n"
    latin1 = write_corpus(tmp / "latin1", table.encode("latin-1"))
    short = write_corpus(tmp / "short", table.replace("a cat\teine Katze", "a cat").encode("utf-8"))
    long = write_corpus(tmp / "long", table.replace("two men\tzwei Männer", "two\tmen\tzwei Männer").encode("utf-8"))
    run = ["--src_lang", "en", "--tgt_lang", "de", "--output_dir", str(tmp / "run")]
    translate = ["translate", "--model", "multi30k-de-en"]
    return [
        ([*translate, "--input", f"{tmp}/l.txt", "--output", f"{tmp}/k.out"], f"--input {tmp}/l.txt",
         "is not UTF-8: line 1 has the byte b'\\xe4'; convert the file to UTF-8 from its encoding, e.g. `iconv -f "
         "latin1 -t utf-8"),
        ([*translate, "--input", f"{tmp}/ok.de", "--output", "/proc/out.de"], "--output '/proc/out.de'",
         "no file can be written in '/proc'"),
        (train(corpus, "--src_lang", "en", "--tgt_lang", "de", "--output_dir", "/proc/run"), "--output_dir '/proc/run'",
         "nothing can be created in '/proc'"),
        (train(corpus, "--src_lang", "en", "--tgt_lang", "de", "--output_dir", f"{corpus}/train.tsv"),
         f"--output_dir '{corpus}/train.tsv' is a file", "name a directory for the run"),
        (["demo", "--port", str(port)], f"--port {port}", f"choose another, e.g. --port {port + 1}, or --port 0"),
        (train(latin1, *run), f"'{latin1}/train.tsv' is not UTF-8: line 4", "iconv -f latin1 -t utf-8"),
        (train(short, *run), f"Line 3 of '{short}/train.tsv' has 1 tab-separated fields", "the header ['en', 'de']"),
        (train(long, *run), f"Line 5 of '{long}/train.tsv' has 3 tab-separated fields", "the header ['en', 'de']"),
        (train(corpus, *run, "--bf16", "maybe"), "--bf16", "must be true, false or auto, got 'maybe'"),
        (train(corpus, *run, "--max_train_minutes", "-5"), "--max_train_minutes", "must be positive, got -5.0"),
        (train(corpus, "--src_lang", "en", "--tgt_lang", "en", "--output_dir", str(tmp / "run")),
         "--src_lang and --tgt_lang are both 'en'", "pass two different languages"),
    ]  # fmt: skip


@pytest.mark.parametrize("index", range(11))
def test_each_row_is_one_line_before_torch_and_nothing_is_written(index, tmp_path, busy_port):
    argv, named, says = rows(tmp_path, busy_port)[index]
    if "/proc" in " ".join(argv) and not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    before = snapshot(tmp_path)
    assert_refused_without_torch(argv, named, says, cwd=tmp_path, env=subprocess_env())
    assert snapshot(tmp_path) == before  # nothing written, nothing truncated
    assert (tmp_path / "k.out").read_text(encoding="utf-8") == "keep\n"


def test_train_without_output_dir_writes_under_runs_and_says_so(tmp_path, monkeypatch, caplog):
    # As the recipes do (runs/multi30k_en_de_small), never the Trainer's ./trainer_output/.
    corpus = write_corpus(tmp_path / "my_corpus")
    monkeypatch.chdir(tmp_path)
    assert preflight.preflight(train(corpus)[1:])[0][-2:] == ["--output_dir", "runs/my_corpus_en_de_small"]
    assert preflight.preflight(train(corpus, "--preset", "base")[1:])[0][-1] == "runs/my_corpus_en_de_base"
    given, _ = preflight.preflight(train(corpus, "--output_dir", "mine")[1:])
    assert "runs/my_corpus_en_de_small" not in given

    def stop(*args, **kwargs):
        raise Loaded("the run reached its data")

    monkeypatch.setattr(command, "load_data", stop)
    with caplog.at_level(logging.INFO, logger="vanilla_transformer.training.train"), pytest.raises(Loaded):
        command.train([*train(corpus)[1:], "--report_to", "none"])
    assert "No --output_dir: the run writes runs/my_corpus_en_de_small" in caplog.text


def test_demo_mds_api_example_asks_for_a_layer_the_default_model_has():
    # docs/demo.md's `client.predict(...)`: its last value is the alignment's layer, which the page's dropdown
    # refuses beyond the model's decoder layers (0-2 for the shipped models).
    text = (ROOT / "docs" / "demo.md").read_text(encoding="utf-8")
    values = re.search(r"client\.predict\(\s*(.*?),\s*api_name=", text, re.S)[1].split(",")
    layers = json.loads((PRETRAINED_DIR / DEFAULT_MODEL / "config.json").read_text())["decoder_layers"]
    assert 0 <= int(values[-1]) < layers
    assert f"0-{layers - 1}\nfor the shipped models" in text


def test_attention_takes_every_format_matplotlib_writes_and_refuses_others(tmp_path, monkeypatch, capsys):
    # docs/attention.md: the extension picks the format (.jpg too); another is one line listing them, before loading.
    pytest.importorskip("matplotlib")

    def load(*args, **kwargs):
        raise Loaded("the figure's format was accepted")

    monkeypatch.setattr("vanilla_transformer.translation.loading.load_config", load)
    argv = ["attention", "--model", DEFAULT_MODEL, "A man sleeps.", "--output", str(tmp_path / "cross.xyz")]
    status, err = run_command(argv, capsys)
    assert_refused_in_one_line(status, err, argv, "--output", "a format matplotlib writes: .png, .svg, .pdf (or")
    assert ".jpg" in err and ".eps" in err
    text = (ROOT / "docs" / "attention.md").read_text(encoding="utf-8")
    for extension in (".jpg", ".eps", ".tif", ".webp"):
        assert f"`{extension}`" in text
        with pytest.raises(Loaded):
            run_command([*argv[:-1], str(tmp_path / f"cross{extension}")], capsys)
    assert sorted(tmp_path.iterdir()) == []


def test_training_md_names_the_checks_made_before_torch():
    # docs/training.md's list of what is checked in a fraction of a second: the table's rows above run --bf16,
    # --max_train_minutes, one language twice and --output_dir each in a process that imports neither torch nor
    # transformers; this holds the list.
    text = " ".join((ROOT / "docs" / "training.md").read_text(encoding="utf-8").split())
    assert "before torch and transformers load, in a fraction of a second (0.1-0.3 s measured" in text
    for named in ("two different languages", "`--bf16`", "`--max_train_minutes`", "`--output_dir`"):
        assert named in text.split("in a fraction of a second")[1].split("The other options")[0]
    assert "about a tenth of a second" not in text
