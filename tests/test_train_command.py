"""`vanilla-transformer train` as a person meets it: the same losses as before the training layer moved, recipes by
name, help in groups, and every option, recipe and data error as one line naming the flag, with nothing written."""

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import (
    MULTI30K,
    MULTI30K_CLONE,
    needs_multi30k_clone,
    read_multi30k,
    subprocess_env,
    tiny_options,
    write_multi30k_subset,
)
from safetensors.torch import load_file

from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerAttention
from vanilla_transformer.training import steps, train
from vanilla_transformer.training.options import parse_args
from vanilla_transformer.training.preflight import RECIPES_DIR, default_recipe, shipped_recipes


REFERENCE = Path(__file__).resolve().parent / "data" / "reference_losses.json"
# The slow test of the README's own-data command: its time limit, and the BLEU its models must reach. Not yet measured
# on a quiet machine (the two attempts shared a 2-core AVX2 EPYC with other jobs: 0.25 updates per second instead of the
# ~2.4 the Multi30k search measured in float32 there). Chosen from that search: ~2.4 updates per second give ~2,100
# updates in 15 minutes (warm-up fitted to ~525 of them), and its float32 runs reached ~28 validation BLEU at 2,000
# updates.
OWN_DATA_MINUTES = 15
OWN_DATA_MIN_BLEU = 10.0

# Other float64 kernels (ATen's scalar code instead of AVX2, another MKL code path, 2 threads) moved the logged losses by
# at most 2e-16 here; 1e-9 leaves a margin of a million for other CPUs, and changing one batch, one learning rate or the
# loss moves them by 7e-6 or more (reference_losses.json, "how").
RTOL = 1e-9


def _float64_run(tmp_path: Path, changes: tuple[str, ...] = ()) -> list[dict]:
    """The recorded run, with `changes` (flag, value, ...) to its options, trained with float64 as torch's default
    dtype (parameters, Adam state, loss and logs); its logged losses and learning rates, update by update."""
    recorded = json.loads(REFERENCE.read_text())
    args = list(recorded["args"])
    for flag, value in zip(changes[::2], changes[1::2]):
        args[args.index(flag) + 1] = value
    args = ["--label_smoothing_factor" if a == "--label_smoothing" else a for a in args]  # 6ff3192's name
    data = write_multi30k_subset(tmp_path / "data", {"train": 600, "val": 20})
    args[args.index("--dataset") + 1] = str(data)
    args[args.index("--output_dir") + 1] = str(tmp_path / "run")
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    # 6ff3192 drew W_Q, W_K, W_V with Xavier's own gain; the package now draws them with gain 1/sqrt(2) (a1833fa,
    # docs/performance.md "The race"). The same random numbers, scaled: without the attribute `_init_weights` reads,
    # the model starts where 6ff3192's did, and the comparison holds the training path alone.
    attention_init = VanillaTransformerAttention.__init__

    def plain_xavier(self, *args, **kwargs):
        attention_init(self, *args, **kwargs)
        for projection in (self.q_proj, self.k_proj, self.v_proj):
            del projection.xavier_gain

    VanillaTransformerAttention.__init__ = plain_xavier
    try:
        train.train(args)
    finally:
        torch.set_default_dtype(default_dtype)
        VanillaTransformerAttention.__init__ = attention_init
    assert {t.dtype for t in load_file(tmp_path / "run" / "model.safetensors").values()} == {torch.float64}
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    return [{k: h[k] for k in ("step", "loss", "nll_loss", "learning_rate")} for h in history if "loss" in h]


def test_losses_step_for_step_as_recorded_before_the_training_layer_moved(tmp_path):
    """A short run with every part of the recipe that touches a step (label smoothing 0.2, subword splitting,
    bidirectional updates, the cool-down, gradient accumulation) logs the losses and learning rates that commit 6ff3192
    (train.py and trainer.py before `vanilla_transformer/training/`) logged for the same options, in float64 with one
    torch thread (reference_losses.json, "how"). Float64, because float32 kernels differ across CPUs in the last bits
    and 16 updates grow that past 1e-4 (1.6e-4 on an AVX-512 CPU), a tolerance that would hide real changes; float64
    runs stay within 2e-16 of each other (RTOL)."""
    recorded = json.loads(REFERENCE.read_text())["losses"]
    logged = _float64_run(tmp_path)
    assert [row["step"] for row in logged] == [row["step"] for row in recorded] == list(range(1, 17))
    for now, then in zip(logged, recorded):
        assert now["learning_rate"] == pytest.approx(then["learning_rate"], rel=1e-12), now["step"]
        assert now["loss"] == pytest.approx(then["loss"], rel=RTOL), now["step"]
        assert now["nll_loss"] == pytest.approx(then["nll_loss"], rel=RTOL), now["step"]


@pytest.mark.parametrize(
    "change",
    [("--max_tokens", "511"), ("--lr_factor", "2.0001"), ("--label_smoothing", "0.19")],
    ids=["other-batches", "other-learning-rate", "other-loss"],
)
def test_the_loss_comparison_fails_for_another_batch_rate_or_loss(tmp_path, change):
    """The tolerance is not blind: other batches (from update 3), learning rates 5e-5 apart, or label smoothing 0.19
    instead of 0.2 move a logged loss by far more than RTOL (7e-6 for the learning rates, the smallest)."""
    recorded = json.loads(REFERENCE.read_text())["losses"]
    logged = _float64_run(tmp_path, change)
    moved = max(abs(now["loss"] - then["loss"]) / then["loss"] for now, then in zip(logged, recorded))
    assert moved > 1000 * RTOL


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_multi30k_subset(
        tmp_path_factory.mktemp("multi30k"), {"train": 200, "val": 20, "test_2016_flickr": 10}
    )


def _run_main(argv, capsys, monkeypatch, cwd: Path):
    cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    status = train.main(argv)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, flag, hint",
    [
        (["--dataset", "/no/such/corpus"], "--dataset", "does not exist"),
        (["--tgt_lang", "xx"], "--tgt_lang", "xx"),
        (["--max_tokenz", "10"], "--max_tokenz", "did you mean '--max_tokens'?"),
        (["--max_tokens", "0"], "--max_tokens", "at least 1"),
        (["--learning_rate", "0.001"], "--learning_rate", "--lr_factor"),
        (["--per_device_train_batch_size", "16"], "--per_device_train_batch_size", "--max_tokens"),
        (["--recipe", "no_such_recipe"], "--recipe", "multi30k_en_de_cpu"),
        (["--preset", "huge"], "--preset", "small"),
        (["--num_beams", "0"], "--num_beams", "at least 1"),
        (["--test_split", "test_2017"], "--test_split", "test_2016_flickr"),
    ],
)
def test_each_error_is_one_line_naming_the_flag_and_nothing_is_written(
    corpus, tmp_path, capsys, monkeypatch, argv, flag, hint
):
    options = ["--dataset", str(corpus), "--output_dir", "run", "--report_to", "none", "--max_steps", "1"]
    status, err = _run_main([*options, *argv], capsys, monkeypatch, tmp_path / "cwd")
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1, err
    assert lines[0].startswith("vanilla-transformer train: error: ") and flag in lines[0] and hint in lines[0]
    assert list((tmp_path / "cwd").iterdir()) == []  # no output directory, no trainer_output/


def test_other_split_names_are_pointed_to_their_flag(tmp_path, capsys, monkeypatch):
    """A directory of train/valid/test files: the error names --validation_split and the splits the data has."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_text("a\nb\n")
    status, err = _run_main(["--dataset", str(data), "--report_to", "none"], capsys, monkeypatch, tmp_path / "cwd")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "--validation_split <one of those>" in err and "'valid'" in err and "split_names=" not in err
    assert list((tmp_path / "cwd").iterdir()) == []


def test_a_recipe_key_with_a_typo_gets_a_did_you_mean(tmp_path, capsys, monkeypatch):
    recipe = tmp_path / "mine.json"
    recipe.write_text(json.dumps({"warmup_step": 100}))
    status, err = _run_main(["--recipe", str(recipe)], capsys, monkeypatch, tmp_path / "cwd")
    assert status == 2 and "unknown option 'warmup_step'; did you mean 'warmup_steps'?" in err


def test_the_command_line_gives_no_traceback_and_exit_status_2(tmp_path):
    """As a person runs it: the module form and the repository's train.py, in another directory."""
    root = Path(__file__).resolve().parents[1]
    for command in (
        [sys.executable, "-m", "vanilla_transformer.training.train"],
        [sys.executable, str(root / "train.py")],
    ):
        result = subprocess.run(
            [*command, "--dataset", str(tmp_path / "missing"), "--report_to", "none"],
            cwd=tmp_path,
            env=subprocess_env(PYTHONPATH=str(root)),  # this checkout's package, wherever the venv installed one
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"vanilla-transformer train: error: --dataset {str(tmp_path / 'missing')!r} does not exist: pass an "
            "existing directory of `{split}.{lang}[.gz]` files or of one .tsv/.jsonl file per split, a `save_to_disk` "
            "directory, or a Hub dataset id such as 'wmt14'."
        ]
        assert list(tmp_path.iterdir()) == []


def test_train_parses_its_command_line_once_per_parser_and_reads_its_recipe_once(tmp_path, monkeypatch):
    """One pass of each parser (preflight's before torch, the dataclasses' after) and one read of the recipe file per
    run: a value goes from the command line to what uses it, never back through a parser."""
    import argparse
    import collections

    passes, reads, depth = collections.Counter(), collections.Counter(), [0]
    parse_known_args, read_text = argparse.ArgumentParser.parse_known_args, Path.read_text

    def counting_parse(self, *args, **kwargs):  # a parser's own nested calls (subparsers) are one pass
        passes[type(self).__name__] += depth[0] == 0
        depth[0] += 1
        try:
            return parse_known_args(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    def counting_read(self, *args, **kwargs):
        if self.parent == RECIPES_DIR:
            reads[self.name] += 1
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", counting_parse)
    monkeypatch.setattr(Path, "read_text", counting_read)
    data = write_multi30k_subset(tmp_path / "data", {"train": 200, "val": 8})
    train.train(
        ["--recipe", "multi30k_en_de_cpu", "--dataset", str(data), "--test_split", "", *tiny_options(vocab_size=400)]
        + ["--max_steps", "2", "--max_train_minutes", "none", "--report_to", "none", "--plots", "false"]
        + ["--eval_strategy", "no", "--save_strategy", "no", "--output_dir", str(tmp_path / "run")]
    )
    assert dict(passes) == {"OptionParser": 1, "DataclassParser": 1}
    assert dict(reads) == {"multi30k_en_de_cpu.json": 1}


def test_recipes_are_shipped_and_selected_by_name_or_path(tmp_path):
    assert {"multi30k_en_de_cpu", "multi30k_de_en_cpu", "multi30k_en_fr_cpu", "wmt14_en_de_base"} <= set(
        shipped_recipes()
    )
    by_name = parse_args(["--recipe", "multi30k_en_de_cpu", "--output_dir", str(tmp_path)])
    by_path = parse_args(["--recipe", str(RECIPES_DIR / "multi30k_en_de_cpu.json"), "--output_dir", str(tmp_path)])
    assert by_name[-1].to_dict() == by_path[-1].to_dict()
    assert by_name[-1].label_smoothing_factor == 0.2 and by_name[3].num_beams == 6
    for other in ("configs/multi30k_en_de_cpu.json", "recipes/multi30k_en_de_cpu.json", "multi30k_en_de_cpu.json"):
        with pytest.raises(ValueError, match=f"--recipe '{other}' does not exist: it is neither a shipped recipe"):
            parse_args(["--recipe", other, "--output_dir", str(tmp_path)])


def _parsed(argv: list[str]) -> list[dict]:
    return [vars(options) if not hasattr(options, "to_dict") else options.to_dict() for options in parse_args(argv)]


def test_hyphens_and_underscores_parse_alike_and_an_old_name_is_refused(tmp_path):
    """One name per option, with underscores as every command; the hyphen spelling of the same name (HfArgumentParser's
    own) gives the same run. `--config`, the recipe's name in earlier versions, is an unknown option."""
    options = ["multi30k_en_de_cpu", "--max_tokens", "1000", "--lr_factor", "2", "--output_dir", str(tmp_path)]
    options += ["--num_beams", "3", "--max_train_minutes", "5", "--keep_checkpoints", "last", "--plots", "false"]
    underscores = _parsed(["--recipe", *options])
    assert underscores[-1]["max_tokens"] == 1000 and underscores[3]["num_beams"] == 3
    hyphens = [arg.replace("_", "-") if arg.startswith("--") else arg for arg in options]
    for argv in (
        ["--recipe", *hyphens],
        ["--recipe=" + options[0], *options[1:]],
    ):
        assert _parsed(argv) == underscores, argv
    with pytest.raises(SystemExit):  # --help-all is --help_all
        parse_args(["--help-all"])
    with pytest.raises(ValueError, match="^unrecognized argument '--config'"):
        parse_args(["--config", *options])
    with pytest.raises(ValueError, match="^unrecognized argument '--max-token'; did you mean '--max_tokens'"):
        parse_args(["--recipe", "multi30k_en_de_cpu", "--max-token", "1000"])


def test_help_lists_the_one_spelling_only(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = capsys.readouterr().out
    assert "--recipe RECIPE" in text and "--help_all" in text and "--max_tokens" in text
    assert re.findall(r"(?<![\w-])--[a-z0-9]+(?:-[a-z0-9]+)+", text) == [] and "--config" not in text
    assert "--no_plots" not in text  # `--plots false` says the same


def test_help_lists_the_recipe_in_groups_and_help_all_the_trainers_other_options(capsys):
    for flag, trainer_only_shown in (("--help", False), ("--help_all", True)):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(["--recipe", "multi30k_en_de_cpu", flag])
        assert exit_info.value.code == 0
        text = capsys.readouterr().out
        groups = [line for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
        assert [g.split(" (")[0].rstrip(":") for g in groups][:7] == [
            "options",
            "model",
            "data",
            "tokenizer",
            "recipe",
            "decoding",
            "run and output",
        ]
        assert ("--neftune_noise_alpha" in text) == trainer_only_shown
        # The recipe's values are the defaults shown.
        assert "--label_smoothing_factor" in text and "(default: 0.2)" in text


def test_help_says_what_the_trainers_options_do_here(capsys):
    """The stock help of the Trainer's options that this command uses otherwise is replaced: batches of tokens, a
    resume of this package's checkpoints, a push at the end."""
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for stock in ("Not directly used by Trainer", "per_device_train_batch_size *", "every time the model is saved"):
        assert stock not in text, stock
    assert "max_tokens x processes x this many tokens per side" in text
    assert "--keep_checkpoints {averaged,last,all}" in text and "(default: averaged)" in text
    assert "true = the newest complete checkpoint of --output_dir" in text


def test_an_optional_number_is_set_back_to_none_from_the_command_line(tmp_path):
    """`--max_tokens none`: batches of `--per_device_train_batch_size` sentences (then that option is not refused)."""
    *_, training_args = parse_args(
        ["--max_tokens", "none", "--per_device_train_batch_size", "16", "--output_dir", str(tmp_path)]
    )
    assert (training_args.max_tokens, training_args.per_device_train_batch_size) == (None, 16)


OWN_DATA = "<!-- own-data-command -->"
# Multi30k's split for each of the README command's split flags.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def _readme_command(marker: str) -> list[str]:
    """The command in README.md's code block after `marker`, as arguments after `vanilla-transformer train`."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = text.split(marker, 1)[1].split("```", 2)[1]
    (line,) = [line for line in block.splitlines() if line.strip()]
    words = line.split()
    assert words[:2] == ["vanilla-transformer", "train"]
    return words[2:]


def _set(argv: list[str], **values) -> list[str]:
    """`argv` with the values of the flags named replaced (each flag must be in it: only what it says is changed)."""
    argv = list(argv)
    for name, value in values.items():
        argv[argv.index(f"--{name}") + 1] = str(value)
    return argv


def _write_tables(argv: list[str], langs: tuple[str, str], sizes: dict[str, int | None], source=MULTI30K) -> None:
    """Multi30k's `langs` pairs (of the directory `source`) as the README's tables, in the directory `--dataset`
    names: `{split}.tsv` for each of the command's split names, a header row of its `--src_column` / `--tgt_column`,
    the first `sizes[flag]` pairs (None: all). A tab inside a sentence becomes a space (a table cannot hold it;
    Multi30k has one, in train.de)."""
    corpus = Path(argv[argv.index("--dataset") + 1])
    corpus.mkdir(parents=True)
    src, tgt = argv[argv.index("--src_column") + 1], argv[argv.index("--tgt_column") + 1]
    for flag, n in sizes.items():
        split = MULTI30K_SPLITS[flag]
        pairs = zip(*(read_multi30k(f"{split}.{lang}.gz", n, directory=source) for lang in langs))
        rows = [f"{src}\t{tgt}"] + ["\t".join(s.replace("\t", " ") for s in pair) for pair in pairs]
        (corpus / f"{argv[argv.index(f'--{flag}_split') + 1]}.tsv").write_text("\n".join(rows) + "\n", "utf-8")


def test_the_readmes_own_data_command_runs_as_written(tmp_path, monkeypatch):
    """The README's command for one's own data, on tables with other split names and columns (tab-separated, a
    header row), in the directory it names; only a tiny model and two updates are added after it (later wins). Two
    updates cannot make a translator: the run says so in its last line and its results."""
    argv = _readme_command(OWN_DATA)
    monkeypatch.chdir(tmp_path)
    _write_tables(argv, ("en", "de"), {"train": 300, "validation": 20, "test": 10})
    tiny = tiny_options(vocab_size=400)
    results = train.train([*argv, *tiny, "--max_steps", "2", "--report_to", "none", "--plots", "false"])
    assert (results["src_lang"], results["tgt_lang"]) == ("en", "cs")
    assert results["dataset"]["splits"] == {"train": "train", "validation": "dev", "test": "test"}
    assert results["bleu"]["test"]["sentences"] == 10 and results["dataset"]["train_pairs"] == 300
    assert (tmp_path / argv[argv.index("--output_dir") + 1] / "model.safetensors").is_file()
    # No --recipe: the small-corpus recipe, its warm-up fitted to the two updates asked for.
    recipe = results["training"]["recipe"]
    assert recipe["name"] == "own_data_small" and recipe["default"] and recipe["warmup_fitted"]["warmup_steps"][1] == 1
    (warning,) = results["warnings"]
    assert warning.startswith("Not a usable model: after 2 updates its ") and "--max_steps" in warning


def test_tokenization_uses_the_cores_for_a_large_corpus_only(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert steps.tokenization_processes(None, 29_000) == 1  # Multi30k: one process, no workers to start
    assert steps.tokenization_processes(None, 120_000) == 2
    assert steps.tokenization_processes(None, 4_500_000) == 16  # WMT14: every core
    assert steps.tokenization_processes(3, 4_500_000) == 3  # --preprocessing_num_workers wins


def test_without_recipe_the_recipe_is_the_multi30k_recipes_less_their_data():
    """The recipe of a run without --recipe is the evidence of the Multi30k search (docs/results.md, How the recipe was
    chosen): the Multi30k recipes' options less what names their data (languages, splits, files, output, the length
    filter); for a corpus of a million pairs or more, the same with the paper's regularisation."""
    small, large, multi30k = (
        json.loads((RECIPES_DIR / f"{name}.json").read_text())
        for name in ("own_data_small", "own_data_large", "multi30k_en_de_cpu")
    )
    data = {"dataset", "src_lang", "tgt_lang", "train_split", "validation_split", "test_split", "output_dir"}
    assert small == {k: v for k, v in multi30k.items() if k not in data | {"max_length"}}
    assert {k: v for k, v in large.items() if small[k] != v} == {
        "label_smoothing_factor": 0.1,
        "dropout": 0.1,
        "subword_split": 0.0,
        "cpu_float32": {"max_tokens": 1024, "warmup_steps": 1600, "save_steps": 200},
    }
    assert (default_recipe(), default_recipe(29_000), default_recipe(999_999)) == ("own_data_small",) * 3
    assert default_recipe(1_000_000) == "own_data_large"


@pytest.mark.parametrize("bf16, warmup", [("false", 1600), ("true", 800)], ids=["float32", "bf16"])
def test_the_default_recipe_fits_its_warm_up_to_the_runs_budget(tmp_path, bf16, warmup):
    """The recipe's warm-up is sized for its hour (float32 on a CPU: 1,600 of 6,000-8,500 updates). A `--max_steps`
    budget caps it at a quarter; a time limit leaves it to the run, which fits it to the speed it measures (WarmupFitter:
    tests/test_short_runs.py), unless the schedule cannot change during the run (`--lr_schedule trainer`: scaled by the
    limit); one given on the command line is kept; and `--num_train_epochs` counts (the recipe's max_steps would end
    the epochs' run otherwise)."""

    def parse(*options, train_pairs=None):
        argv = ["--output_dir", str(tmp_path / "run"), "--bf16", bf16, "--use_cpu", "true", *options]
        model_args, _, _, run_args, training_args = parse_args(argv, train_pairs=train_pairs)
        return model_args, run_args, training_args

    _, run_args, training_args = parse()
    assert training_args.recipe == {"name": "own_data_small", "default": True}
    assert (training_args.max_steps, run_args.max_train_minutes, training_args.warmup_steps) == (100_000, 60, warmup)
    assert training_args.warmup_fitted is None and run_args.average_last == 10
    assert training_args.fit_warmup_to_speed == {"lr_factor": True}
    assert (training_args.eval_strategy, training_args.label_smoothing_factor) == ("steps", 0.2)
    for options, fitted, in_run in (
        (["--max_train_minutes", "10"], warmup, True),  # the run fits it once it knows its speed
        (["--max_train_minutes", "120"], warmup, True),
        (["--max_steps", "1000"], 250, True),
        (["--max_train_minutes", "none", "--max_steps", "1000"], 250, False),
        (["--max_train_minutes", "10", "--warmup_steps", "4000"], 4000, False),  # the command line's
        (["--max_train_minutes", "10", "--lr_schedule", "trainer", "--lr_cooldown", "0"], round(warmup / 6), False),
    ):
        training_args = parse(*options)[-1]
        assert training_args.warmup_steps == fitted, options
        assert bool(training_args.fit_warmup_to_speed) == in_run, options
        if fitted in (warmup, 4000):
            assert training_args.warmup_fitted is None and training_args.lr_factor == 0.7
            continue
        # The same peak learning rate, lr_factor * (d_model * warmup_steps)^-0.5, after the shorter warm-up.
        factor = training_args.lr_factor
        assert training_args.warmup_fitted == {"warmup_steps": [warmup, fitted], "lr_factor": [0.7, factor]}
        assert factor / fitted**0.5 == pytest.approx(0.7 / warmup**0.5, rel=1e-5)
    training_args = parse("--max_steps", "1000", "--lr_factor", "1.0")[-1]  # the command line's factor
    assert (training_args.lr_factor, training_args.warmup_fitted) == (1.0, {"warmup_steps": [warmup, 250]})
    assert training_args.fit_warmup_to_speed == {"lr_factor": False}
    training_args = parse("--num_train_epochs", "5")[-1]
    assert (training_args.max_steps, training_args.num_train_epochs) == (-1, 5)
    assert parse("--num_train_epochs", "5", "--max_steps", "7")[-1].max_steps == 7
    model_args, _, training_args = parse(train_pairs=2_000_000)
    assert training_args.recipe == {"name": "own_data_large", "default": True}
    assert (training_args.label_smoothing_factor, model_args.dropout, training_args.subword_split) == (0.1, 0.1, 0.0)
    # A shipped recipe's own warm-up is fitted the same way, for a recipe named with --recipe.
    training_args = parse("--recipe", "multi30k_en_de_cpu", "--max_steps", "2000")[-1]
    assert training_args.recipe == {"name": "multi30k_en_de_cpu", "default": False}
    assert training_args.warmup_steps == 500 and training_args.fit_warmup_to_speed


def test_a_run_stopped_inside_its_warm_up_says_so_last_and_its_card_says_it_is_not_usable(
    corpus, tmp_path, capsys, monkeypatch, caplog
):
    """Three updates of a 100-update warm-up: the run does what it was asked (exit status 0), and its last line, its
    results.json and its model card say that the model cannot translate, and which flags fix that."""
    options = ["--dataset", str(corpus), "--output_dir", "run", "--report_to", "none", "--plots", "false"]
    tiny = tiny_options(vocab_size=400)
    with caplog.at_level(logging.INFO):
        status, _ = _run_main(
            [*options, *tiny, "--max_steps", "3", "--warmup_steps", "100", "--average_last", "0"],
            capsys,
            monkeypatch,
            tmp_path,
        )
    assert status == 0
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    (line,) = results["warnings"]
    assert line.startswith("Not a usable model: training stopped after 3 updates, inside its learning-rate warm-up ")
    assert "of 100 updates" in line and "--max_steps" in line and "--warmup_steps" in line
    assert f"test BLEU {results['bleu']['test']['score']:.2f}" in line
    ours = [r for r in caplog.records if r.name.startswith("vanilla_transformer")]
    assert (ours[-1].levelno, ours[-1].getMessage()) == (logging.WARNING, line)  # the run's last word
    card = (tmp_path / "run" / "README.md").read_text()
    assert "> **This is not a usable model.**" in card and f"> {line}" in card


@pytest.mark.slow
@needs_multi30k_clone
def test_the_readmes_own_data_command_trains_a_translator_on_a_corpus_without_a_recipe(tmp_path):
    """The README's own-data command as a person runs it (its console script, in a new process with the machine's
    threads) on Multi30k's French->German, a direction no recipe has, laid out as the README's tables (all 29,000
    training pairs, 1,014 validation, 1,000 test). Only the dataset, the languages, the columns, the output
    directory and the time limit are substituted. Without --recipe it trains until its limit, validates at the end,
    averages the checkpoints of its cool-down, and learns to translate.

    Sized for a 2-core CPU with AVX2 only (float32, the recipe's cpu_float32 options) with nothing else running: see
    OWN_DATA_MINUTES and OWN_DATA_MIN_BLEU; on a loaded machine the run ends inside its warm-up and says so."""
    argv = _set(
        _readme_command(OWN_DATA),
        dataset=tmp_path / "fr-de",
        src_lang="fr",
        tgt_lang="de",
        src_column="french",
        tgt_column="german",
        output_dir=tmp_path / "run",
        max_train_minutes=OWN_DATA_MINUTES,
    )
    _write_tables(argv, ("fr", "de"), {"train": None, "validation": None, "test": None}, source=MULTI30K_CLONE)
    script = Path(sys.executable).parent / "vanilla-transformer"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "vanilla_transformer.commands"]
    result = subprocess.run(
        [*command, "train", *argv],
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=OWN_DATA_MINUTES * 60 + 900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    results = json.loads((run / "results.json").read_text())
    training = results["training"]
    assert training["recipe"]["name"] == "own_data_small" and training["recipe"]["default"]
    # Until the limit (the cool-down may end a little before it), not until an epoch count.
    assert training["train_runtime_s"] >= 0.9 * OWN_DATA_MINUTES * 60 and training["steps"] < 100_000
    start, end = training["hyperparameters"]["lr_cooldown_updates"]
    assert training["steps"] > training["hyperparameters"]["warmup_steps"] and start < end
    history = json.loads((run / "trainer_state.json").read_text())["log_history"]
    validation = [h for h in history if "eval_bleu" in h]
    assert validation and validation[-1]["step"] == training["steps"]  # validated at the end
    averaging = json.loads((run / "averaged" / "results.json").read_text())["checkpoint_averaging"]
    assert averaging["num_checkpoints"] >= 2 and averaging["after"] == start  # the cool-down's checkpoints
    scores = {
        "validation": validation[-1]["eval_bleu"],
        "test": results["bleu"]["test"]["score"],
        "test, averaged": results["averaged_model"]["bleu_test"]["score"],
    }
    print(f"{training['steps']} updates in {training['train_runtime_s']:.0f} s on {training['hardware']}: {scores}")
    assert min(scores.values()) >= OWN_DATA_MIN_BLEU, scores
    assert results["warnings"] == [] and "not a usable model" not in (run / "README.md").read_text()
