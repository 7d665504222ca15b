"""`vanilla-transformer train` as a person meets it: the same losses as before the training layer moved, presets by
name, help in groups, and every option, preset and data error as one line naming the flag, with nothing written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import read_multi30k, subprocess_env, write_multi30k_subset
from safetensors.torch import load_file

from vanilla_transformer import train
from vanilla_transformer.training.arguments import PRESETS_DIR, parse_args, shipped_presets


REFERENCE = Path(__file__).resolve().parent / "data" / "reference_losses.json"
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
    try:
        train.train(args)
    finally:
        torch.set_default_dtype(default_dtype)
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
        (["--config", "no_such_preset"], "--config", "multi30k_en_de_cpu"),
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


def test_a_preset_key_with_a_typo_gets_a_did_you_mean(tmp_path, capsys, monkeypatch):
    preset = tmp_path / "mine.json"
    preset.write_text(json.dumps({"warmup_step": 100}))
    status, err = _run_main(["--config", str(preset)], capsys, monkeypatch, tmp_path / "cwd")
    assert status == 2 and "unknown option 'warmup_step'; did you mean 'warmup_steps'?" in err


def test_the_command_line_gives_no_traceback_and_exit_status_2(tmp_path):
    """As a person runs it: the module form and the repository's train.py, in another directory."""
    root = Path(__file__).resolve().parents[1]
    for command in ([sys.executable, "-m", "vanilla_transformer.train"], [sys.executable, str(root / "train.py")]):
        result = subprocess.run(
            [*command, "--dataset", str(tmp_path / "missing"), "--report_to", "none"],
            cwd=tmp_path,
            env=subprocess_env(),
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"vanilla-transformer train: error: --dataset={str(tmp_path / 'missing')!r} does not exist: pass an "
            "existing directory of `{split}.{lang}[.gz]` files, a .tsv/.jsonl file, a `save_to_disk` directory, or a "
            "Hub dataset id such as 'wmt/wmt14'."
        ]
        assert list(tmp_path.iterdir()) == []


def test_presets_are_shipped_and_selected_by_name_or_path(tmp_path):
    assert {"multi30k_en_de_cpu", "multi30k_de_en_cpu", "multi30k_en_fr_cpu", "wmt14_en_de_base"} <= set(
        shipped_presets()
    )
    by_name = parse_args(["--config", "multi30k_en_de_cpu", "--output_dir", str(tmp_path)])
    by_path = parse_args(["--config", str(PRESETS_DIR / "multi30k_en_de_cpu.json"), "--output_dir", str(tmp_path)])
    old_path = parse_args(["--config", "configs/multi30k_en_de_cpu.json", "--output_dir", str(tmp_path)])
    assert by_name[-1].to_dict() == by_path[-1].to_dict() == old_path[-1].to_dict()
    assert by_name[-1].label_smoothing_factor == 0.2 and by_name[3].num_beams == 6


def test_help_lists_the_recipe_in_groups_and_help_all_the_trainers_other_options(capsys):
    for flag, trainer_only_shown in (("--help", False), ("--help-all", True)):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(["--config", "multi30k_en_de_cpu", flag])
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
        # The preset's values are the defaults shown.
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


def _readme_command(marker: str) -> list[str]:
    """The command in README.md's code block after `marker`, as arguments after `vanilla-transformer train`."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = text.split(marker, 1)[1].split("```", 2)[1]
    (line,) = [line for line in block.splitlines() if line.strip()]
    words = line.split()
    assert words[:2] == ["vanilla-transformer", "train"]
    return words[2:]


def test_the_readmes_own_data_command_runs_as_written(tmp_path, monkeypatch):
    """The README's command for one's own data, on tables with other split names and columns (tab-separated, a
    header row), in the directory it names; only a tiny model and two updates are added after it (later wins)."""
    argv = _readme_command("<!-- own-data-command -->")
    corpus = tmp_path / argv[argv.index("--dataset") + 1]
    corpus.mkdir()
    src, tgt = argv[argv.index("--src_column") + 1], argv[argv.index("--tgt_column") + 1]
    for split, name, n in (("train", "train", 300), ("val", "validation", 20), ("test_2016_flickr", "test", 10)):
        pairs = zip(read_multi30k(f"{split}.en.gz", n), read_multi30k(f"{split}.de.gz", n))
        (corpus / f"{argv[argv.index(f'--{name}_split') + 1]}.tsv").write_text(
            f"{src}\t{tgt}\n" + "".join(f"{a}\t{b}\n" for a, b in pairs)
        )
    monkeypatch.chdir(tmp_path)
    tiny = ["--d_model", "32", "--layers", "1", "--heads", "2", "--ffn_dim", "64", "--vocab_size", "400"]
    results = train.train([*argv, *tiny, "--max_steps", "2", "--report_to", "none", "--plots", "false"])
    assert (results["src_lang"], results["tgt_lang"]) == ("en", "cs")
    assert results["dataset"]["splits"] == {"train": "train", "validation": "dev", "test": "test"}
    assert results["bleu"]["test"]["sentences"] == 10 and results["dataset"]["train_pairs"] == 300
    assert (tmp_path / argv[argv.index("--output_dir") + 1] / "model.safetensors").is_file()
