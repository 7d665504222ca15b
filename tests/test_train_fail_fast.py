"""Issue 51 for `train` and `average`: what needs only the options and the file system is checked before torch,
transformers or the model load, and `train --help` needs neither.

As tests/test_fail_fast.py does for the other commands: each row runs in-process with the options' dataclasses
(whose import loads torch and transformers), the registration and the averaging replaced by a failure, so a check
made after loading fails the test; and in a subprocess that must exit 2 on one line without importing torch or
transformers. `train --help` is printed from `training/options.json`, which must stay equal to the live parser.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    HEAVY,
    Loaded,
    assert_row_refused_before_loading,
    assert_rows_refused_without_torch,
    run_command,
    subprocess_env,
)

import vanilla_transformer
from vanilla_transformer.commands import main
from vanilla_transformer.training import options, preflight


ROOT = Path(__file__).resolve().parents[1]


def write_table(directory: Path, header: str, splits=("train", "val")) -> Path:
    directory.mkdir()
    for split in splits:
        (directory / f"{split}.tsv").write_text(f"{header}\na cat\teine Katze\n", encoding="utf-8")
    return directory


def write_lines(directory: Path, languages=("en", "de"), splits=("train", "val")) -> Path:
    directory.mkdir()
    for split in splits:
        for language in languages:
            (directory / f"{split}.{language}").write_text("a\n", encoding="utf-8")
    return directory


def rows(tmp: Path) -> list[tuple[list[str], str, str]]:
    """(argv, the flag the error names, what it says) for each command line of `train` and `average` that must fail
    at once."""
    tsv = write_table(tmp / "tsv", "source\ttarget")
    lines = write_lines(tmp / "lines")
    (tmp / "someone").mkdir()
    (tmp / "someone" / "notes.txt").write_text("not a run\n")
    (tmp / "finished").mkdir()
    (tmp / "finished" / "results.json").write_text("{}\n")
    (tmp / "run" / "checkpoint-4").mkdir(parents=True)
    (tmp / "run" / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    (tmp / "file.txt").write_text("x\n")
    out = ["--output_dir", str(tmp / "out"), "--test_split", ""]
    data = ["--dataset", str(lines), "--test_split", ""]
    empty = write_table(tmp / "empty", "en\tde")
    (empty / "train.tsv").write_text("")
    header_only = write_table(tmp / "header_only", "en\tde")
    (header_only / "train.tsv").write_text("en\tde\n")
    uneven = write_lines(tmp / "uneven")
    (uneven / "train.de").write_text("a\nb\n")
    named = write_table(tmp / "named", "english\tczech")
    pair = ["--src_lang", "en", "--tgt_lang", "cs", *out]
    return [
        (["train", "--dataset", str(empty), *out], f"Data file '{empty / 'train.tsv'}' is empty",
         "a header row and one pair per line"),
        (["train", "--dataset", str(header_only), *out], f"Data file '{header_only / 'train.tsv'}'",
         "holds a header row and no pair"),
        (["train", "--dataset", str(uneven), *out], "different line counts", f"'{uneven / 'train.de'}' has 2"),
        (["train", "--dataset", str(named), "--src_column", "english", "--tgt_column", "czesky", *pair],
         "--tgt_column 'czesky'", "has no such column; its columns are ['english', 'czech']"),
        (["train", "--dataset", str(named), *pair], "--src_lang 'en' (the column's default)", "has no such column"),
        (["train", *data, "--src_column", "english", "--output_dir", str(tmp / "out")], "--src_column 'english'",
         "is line files (train.en, train.de), found by language code"),
        (["train", *data, "--validation_split", "", "--eval_strategy", "steps", "--output_dir", str(tmp / "out")],
         "--eval_strategy steps", "but --validation_split '' names none"),
        (["train", "--dataset", str(tsv), *out], "--src_lang and --tgt_lang are required",
         "its columns ['source', 'target'] are not two language codes"),
        (["train", "--dataset", str(tsv), "--src_lang", "en", *out], "--tgt_lang is required", "not two language codes"),
        (["train", "--dataset", str(tmp / "no" / "such" / "corpus"), *out], "--dataset", "does not exist"),
        (["train", "--dataset", str(tsv / "train.tsv"), *out], "--dataset", "is a single file"),
        (["train", *data, "--validation_split", "dev", "--output_dir", str(tmp / "out")], "--validation_split 'dev'",
         "it has the splits ['train', 'val']"),
        (["train", *data, "--tgt_lang", "fr", "--output_dir", str(tmp / "out")], "--tgt_lang 'fr'",
         "has the languages ['de', 'en']"),
        (["train", *data, "--output_dir", str(tmp / "someone")], "--output_dir", "is no training run's directory"),
        (["train", *data, "--output_dir", str(tmp / "finished")], "--output_dir",
         "start again with --overwrite_output_dir"),
        (["train", *data, "--output_dir", str(tmp / "run")], "--output_dir",
         "continue that run with --resume_from_checkpoint true"),
        (["train", *data, "--output_dir", str(tmp / "someone"), "--overwrite_output_dir"], "--overwrite_output_dir",
         "does not look like an output directory of a training run"),
        (["train", *data, "--output_dir", str(tmp / "out"), "--resume_from_checkpoint", "true"],
         "--resume_from_checkpoint true", "start without --resume_from_checkpoint"),
        (["train", *data, "--output_dir", str(tmp / "out"), "--resume_from_checkpoint", str(tmp / "none")],
         "--resume_from_checkpoint", "is not a directory"),
        (["train", "--recipe", "multi30k_en_de", *out], "--recipe 'multi30k_en_de'", "does not exist"),
        (["train", "--max_stepz", "3", *out], "'--max_stepz'", "did you mean '--max_steps'?"),
        (["train", "--max_steps", "many", *out], "--max_steps", "invalid int value: 'many'"),
        (["average", "--output", str(tmp / "avg")], "RUN_DIR", "or --checkpoints"),
        (["average", str(tmp / "nowhere"), "--output", str(tmp / "avg")], "RUN_DIR", "no such directory"),
        (["average", str(tmp / "run"), "--last", "3", "--output", str(tmp / "avg")], "--last 3", "holds only 1"),
        (["average", str(tmp / "run"), "--last", "1", "--output", str(tmp / "file.txt")], "--output", "is a file"),
    ]  # fmt: skip


COUNT = 26


def _load(*args, **kwargs):
    raise Loaded("the command began loading before it refused its options")


@pytest.fixture
def nothing_loads(monkeypatch):
    """Loading fails the test: the options' dataclasses (torch and transformers), the registration, the averaging."""
    monkeypatch.setattr(options, "read_command_line", _load)
    monkeypatch.setattr(vanilla_transformer.registration, "register", _load)
    monkeypatch.setattr("vanilla_transformer.training.averaging.average_checkpoints", _load)


@pytest.mark.parametrize("index", range(COUNT))
def test_each_row_fails_before_loading_in_one_line(index, tmp_path, nothing_loads, capsys):
    table = rows(tmp_path)
    assert len(table) == COUNT
    assert_row_refused_before_loading(table[index], tmp_path, capsys)


def test_each_row_fails_in_a_process_without_torch(tmp_path):
    assert_rows_refused_without_torch(rows(tmp_path), cwd=tmp_path, env=subprocess_env(PYTHONPATH=str(ROOT)))


# ------------------------------------------------------------------------------------------------ what passes


def accepted(argv, capsys) -> None:
    """The early checks pass: the command goes on to load (which the fixture makes fail)."""
    with pytest.raises(Loaded):
        main(argv)


def test_languages_are_read_from_a_tables_two_language_code_columns(tmp_path, nothing_loads, monkeypatch, capsys):
    codes = write_table(tmp_path / "codes", "fr\tde")
    seen = []
    monkeypatch.setattr(options, "read_command_line", lambda argv, *rest: seen.append(argv) or _load())
    accepted(["train", "--dataset", str(codes), "--test_split", "", "--output_dir", str(tmp_path / "out")], capsys)
    assert seen[0][-4:] == ["--src_lang", "fr", "--tgt_lang", "de"]  # in column order: source first
    accepted(["train", "--dataset", str(codes), "--test_split", "", "--output_dir", str(tmp_path / "out"),
              "--src_lang", "de"], capsys)  # fmt: skip
    assert seen[1][-2:] == ["--tgt_lang", "fr"]  # the other column
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    for split in ("train", "val"):
        row = {"translation": {"en": "a cat", "pt_BR": "um gato"}}
        (jsonl / f"{split}.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    accepted(["train", "--dataset", str(jsonl), "--test_split", "", "--output_dir", str(tmp_path / "out")], capsys)
    assert seen[2][-4:] == ["--src_lang", "en", "--tgt_lang", "pt_BR"]
    named = write_table(tmp_path / "named", "source\ttarget")  # columns named, languages given: nothing to read
    accepted(["train", "--dataset", str(named), "--test_split", "", "--output_dir", str(tmp_path / "out"),
              "--src_lang", "en", "--tgt_lang", "de", "--src_column", "source", "--tgt_column", "target"], capsys)  # fmt: skip
    assert seen[3][-4:] == ["--src_column", "source", "--tgt_column", "target"]


def test_a_recipes_languages_count_as_given(tmp_path, nothing_loads, capsys):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"src_lang": "en", "tgt_lang": "de", "test_split": "", "src_column": "source",
                                  "tgt_column": "target"}))  # fmt: skip
    table = write_table(tmp_path / "tsv", "source\ttarget")
    accepted(["train", "--recipe", str(recipe), "--dataset", str(table), "--output_dir", str(tmp_path / "o")], capsys)


def test_the_output_dir_advice_does_not_loop(tmp_path, nothing_loads, capsys):
    """Each refusal names one way on, and taking it is accepted: never the advice to resume a run that has nothing
    to resume, nor the reverse."""
    data = ["train", "--dataset", str(write_lines(tmp_path / "lines")), "--test_split", "", "--output_dir"]
    stopped = tmp_path / "stopped"  # a run stopped before its first checkpoint: its tokenizer, its logs, a half save
    for name in ("tokenizer", "runs", "checkpoint-300"):
        (stopped / name).mkdir(parents=True)
    (stopped / "tokenizer" / "tokenizer.json").write_text("{}")
    assert preflight.stopped_before_first_checkpoint(stopped)
    accepted([*data, str(stopped)], capsys)  # a rerun starts there
    status, err = run_command([*data, str(stopped), "--resume_from_checkpoint", "true"], capsys)
    assert status == 2 and "start without --resume_from_checkpoint: a new run starts there" in err, err

    finished = tmp_path / "finished"  # a run without checkpoints left (--keep_checkpoints, or deleted)
    (finished / "tokenizer").mkdir(parents=True)
    (finished / "results.json").write_text("{}")
    for extra in ([], ["--resume_from_checkpoint", "true"]):
        status, err = run_command([*data, str(finished), *extra], capsys)
        advice = err.rsplit(": ", 1)[-1]
        assert status == 2 and advice.startswith("start again with --overwrite_output_dir"), err
    accepted([*data, str(finished), "--overwrite_output_dir"], capsys)

    resumable = tmp_path / "resumable"
    (resumable / "checkpoint-4").mkdir(parents=True)
    (resumable / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4}')
    status, err = run_command([*data, str(resumable)], capsys)
    assert status == 2 and "continue that run with --resume_from_checkpoint true" in err, err
    accepted([*data, str(resumable), "--resume_from_checkpoint", "true"], capsys)
    accepted([*data, str(resumable), "--overwrite_output_dir"], capsys)


def test_a_hub_dataset_id_is_left_to_the_loader(tmp_path, nothing_loads, capsys, monkeypatch):
    """Offline, a Hub dataset in the cache passes: its splits and columns are the loader's to check
    (tests/test_hub_lookup.py: the names no folder and no repo holds)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "hub" / "datasets--wmt--wmt14").mkdir(parents=True)
    accepted(["train", "--dataset", "wmt/wmt14", "--output_dir", str(tmp_path / "out")], capsys)


# ------------------------------------------------------------------------------------------------ --help


@pytest.fixture
def columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width


def live_help(argv: list[str]) -> str:
    """`--help` of the live parser: the dataclasses' HfArgumentParser, with the recipe's defaults."""
    known = {f.name for cls in options.ARGUMENT_CLASSES for f in options.dataclasses.fields(cls) if f.init}
    given = preflight.given_options(options.build_parser(), argv, known)
    recipe, cpu_float32 = preflight.read_recipe(given.get("recipe") or preflight.default_recipe(), known)
    parser = options.build_parser(show_all=bool(given.get("help_all")))
    return preflight.format_help(parser, given, recipe, cpu_float32)


def test_the_option_table_is_the_live_parsers():
    live = json.loads(json.dumps(preflight.describe_parser(options.build_parser(show_all=True))))
    assert live == preflight.option_table(), (
        "training/options.json differs from the options' dataclasses: run `python -c 'from "
        "vanilla_transformer.training.options import write_option_table; write_option_table()'`"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--help_all"],
        ["--recipe", "multi30k_en_de_cpu", "--help"],
        ["--recipe", "wmt14_en_de_base", "--help-all"],
        ["--num_train_epochs", "3", "-h"],
    ],
)
def test_the_fast_help_is_the_live_parsers(argv, columns, capsys):
    with pytest.raises(SystemExit) as exit_info:
        preflight.preflight(argv)
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == live_help(argv)


def test_the_help_fits_in_300_lines_and_help_all_keeps_every_option(columns, capsys):
    short, full = live_help(["--help"]), live_help(["--help_all"])
    assert len(short.splitlines()) <= 300
    shown = {line.split()[0] for line in full.splitlines() if line.startswith("  --")}
    table = preflight.option_table()
    every = {option["flags"][0] for group in table for option in group["options"]}
    assert every - shown == {flag for flag in every if flag.startswith("--no_")}  # `--plots false` says the same
    assert "--lr_scheduler_kwargs" in full and "--lr_scheduler_kwargs" not in short


def test_a_recipes_cpu_float32_values_are_shown_beside_its_own(columns):
    text = " ".join(live_help(["--recipe", "multi30k_en_de_cpu", "--help"]).split())
    assert "--max_tokens N Tokens of a training batch" in text
    assert "(default: 2048; 1024 when training in float32 on a CPU)" in text


def test_help_in_a_process_imports_neither_torch_nor_transformers(tmp_path):
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vanilla_transformer_cli", "train", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=subprocess_env(PYTHONPATH=str(ROOT), COLUMNS="80"),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import")}
    assert sorted(name for name in imported if name.split(".")[0] in HEAVY) == []
    assert result.stdout.startswith("usage: vanilla-transformer train") and len(result.stdout.splitlines()) <= 300
