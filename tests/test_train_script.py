"""train.py end to end on real Multi30k data: it learns, it writes what it promises, and bad input stops it early."""

import gzip
import json
import logging
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import MULTI30K, subprocess_env, tiny_config, tiny_options, write_multi30k_subset

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data.tokenizer import load_tokenizer
from vanilla_transformer.training import report, steps, train
from vanilla_transformer.training import trainer as trainer_module
from vanilla_transformer.training.options import VanillaTrainingArguments, parse_args
from vanilla_transformer.training.preflight import RECIPES_DIR
from vanilla_transformer.training.report import describe_hardware


ROOT = Path(__file__).resolve().parents[1]


# Larger than TINY_SIZES: the size at which the first test's 120 updates lower the validation loss by 1.5 nats.
TINY_MODEL = tiny_options(d_model=64, layers=2, heads=4, ffn_dim=256, vocab_size=1000)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_multi30k_subset(
        tmp_path_factory.mktemp("multi30k"), {"train": 3000, "val": 100, "test_2016_flickr": 20}
    )


def _args(data_dir, out, *extra):
    return [
        "--dataset",
        str(data_dir),
        "--output_dir",
        str(out),
        *TINY_MODEL,
        "--max_tokens",
        "1024",
        "--warmup_steps",
        "40",
        "--lr_factor",
        "2.0",
        "--dropout",
        "0.1",
        "--logging_steps",
        "10",
        "--report_to",
        "none",
        "--seed",
        "3",
        "--dataloader_num_workers",
        "0",
        # Float32 on any CPU (the recipe without --recipe has bf16 "auto"): these runs compare numbers.
        "--bf16",
        "false",
        *extra,
    ]


def test_short_training_run_lowers_validation_loss_and_writes_a_loadable_model(data_dir, tmp_path):
    out = tmp_path / "run"
    results = train.train(
        _args(
            data_dir,
            out,
            "--max_steps",
            "120",
            "--eval_strategy",
            "steps",
            "--eval_steps",
            "120",
            "--eval_on_start",
            "--save_steps",
            "40",
            "--average_last",
            "2",
            "--lr_cooldown",  # the last 2 checkpoints, not the cool-down's (the recipe has one: 0.2)
            "0",
            "--predict_with_generate",
            "false",
            "--metric_for_best_model",
            "loss",
            "--test_batch_size",
            "10",
            "--length_penalty",
            "1.0",
            "--num_beams",
            "3",
        )
    )
    evals = [h for h in json.loads((out / "trainer_state.json").read_text())["log_history"] if "eval_loss" in h]
    first, last = evals[0], evals[-1]
    assert first["step"] == 0 and last["step"] == 120
    # An untrained 1000-token model is near ln(1000) = 6.9 nats; 120 updates on 3000 real pairs must get far below.
    assert last["eval_nll_loss"] < first["eval_nll_loss"] - 1.5, (first, last)
    assert last["eval_ppl"] < first["eval_ppl"] / 4

    # What the run promises: model + tokenizer ready for from_pretrained, averaged model, results, plots.
    model = VanillaTransformerForConditionalGeneration.from_pretrained(out)
    assert model.config.vocab_size == results["tokenizer"]["vocab_size"]
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()
    # --num_beams and --length_penalty are the saved decoding (section 6.1's beam 4 and 0.6 otherwise), of the average
    # too, and were the test's.
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (3, 1.0)
    averaged_model = VanillaTransformerForConditionalGeneration.from_pretrained(out / "averaged")
    assert (averaged_model.generation_config.num_beams, averaged_model.generation_config.length_penalty) == (3, 1.0)
    assert results["bleu"]["test"]["sentences"] == 20 and "tok:13a" in results["bleu"]["test"]["signature"]
    lower = results["bleu"]["test"]["lowercase"]
    assert "case:lc" in lower["signature"] and lower["score"] >= results["bleu"]["test"]["score"] - 1e-9
    # What the step ran in, and why (float32 here: --bf16 false), with the recipe's options for that case (no --recipe:
    # the small-corpus recipe).
    assert results["training"]["precision"] == {
        "mixed_precision": "no",
        "reason": "float32",
        "attention": "sdpa",
        "torch_compile": False,
        "cpu_float32_options": json.loads((RECIPES_DIR / "own_data_small.json").read_text())["cpu_float32"],
    }
    # The machine, as the speed figures depend on it: the instruction set torch's kernels use, cores, threads.
    hardware = results["training"]["hardware"]
    assert f"{torch.backends.cpu.get_cpu_capability()}" in hardware and "CPU cores, torch threads" in hardware
    # Each directory's results and card describe its own weights: the final model, and the average of 2 checkpoints.
    averaged = json.loads((out / "averaged" / "results.json").read_text())
    assert (
        averaged["checkpoint_averaging"]["num_checkpoints"] == 2 and (out / "averaged" / "model.safetensors").is_file()
    )
    assert averaged["checkpoint_averaging"]["checkpoints"] == ["checkpoint-80", "checkpoint-120"]
    assert results["decoding"]["length_penalty"] == 1.0 and averaged["decoding"]["length_penalty"] == 1.0
    assert results["decoding"]["num_beams"] == 3 and averaged["decoding"]["num_beams"] == 3
    assert (
        results["averaged_model"]["bleu_test"] == averaged["bleu"]["test"] and results["checkpoint_averaging"] is None
    )
    assert json.loads((out / "results.json").read_text())["bleu"]["test"]["score"] == results["bleu"]["test"]["score"]
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    assert card.data.eval_results[0].metric_value == results["bleu"]["test"]["score"]
    assert (
        ModelCard.load(out / "averaged" / "README.md").data.eval_results[0].metric_value
        == averaged["bleu"]["test"]["score"]
    )
    assert set(results["plots"]) >= {"loss.png", "learning_rate.png"}
    # The card shows the cross-attention figure of the first validation sentence, written beside it (pushed with it).
    assert results["attention_figure"]["file"] == "attention.png" and (out / "attention.png").stat().st_size > 0
    assert "attention.png" in results["plots"]
    assert "![Cross-attention of decoder layer" in card.content and "(attention.png)" in card.content
    # The averaged model's card shows the run's curves and its own attention figure, each file beside it.
    assert set(averaged["plots"]) == set(results["plots"]) and averaged["attention_figure"]["file"] == "attention.png"
    assert all((out / "averaged" / name).stat().st_size > 0 for name in averaged["plots"])
    averaged_card = ModelCard.load(out / "averaged" / "README.md").content
    assert "(attention.png)" in averaged_card and ("(bleu.png)" in averaged_card) == ("bleu.png" in results["plots"])
    assert len((out / "test_2016_flickr.hyp.de").read_text().splitlines()) == 20


@pytest.mark.parametrize(
    "change, match",
    [
        (["--preset", "huge"], "preset 'huge' does not exist"),
        (["--recipe", "configs/no_such_recipe.json"], "does not exist"),
        (["--tgt_lang", "xx"], "xx"),
        (["--dataset", "/nonexistent/corpus"], "does not exist"),
        (["--max_length", "5000"], "max_tokens"),
        (["--resume_from_checkpoint", "/nonexistent/checkpoint-7"], "resume_from_checkpoint"),
        (["--resume_from_checkpoint", "true"], "holds no checkpoint"),
        (["--length_penalty", "nan"], "length_penalty"),
        (["--length_penalty_form", "wu"], "'wu' is not a length penalty form"),
        (["--length_penalty_form", "gnmt", "--length_penalty", "-1"], "the GNMT penalty takes alpha >= 0"),
        (["--num_beams", "0"], "num_beams must be at least 1"),
    ],
)
def test_bad_arguments_fail_before_training(data_dir, tmp_path, change, match):
    with pytest.raises(ValueError, match=match):
        train.train(_args(data_dir, tmp_path / "run", "--max_steps", "1", *change))
    assert not list((tmp_path / "run").glob("checkpoint-*"))


@pytest.mark.parametrize("form", ["separate", "equals"])
def test_recipe_file_sets_defaults_that_the_command_line_overrides(tmp_path, form):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"max_steps": 7, "vocab_size": 1234, "preset": "base", "warmup_steps": 11}))
    option = ["--recipe", str(recipe)] if form == "separate" else [f"--recipe={recipe}"]
    model_args, _, tok_args, _, training_args = parse_args(
        [*option, "--output_dir", str(tmp_path / "run"), "--warmup_steps", "22", "--report_to", "none"]
    )
    assert (training_args.max_steps, tok_args.vocab_size, model_args.preset) == (7, 1234, "base")
    assert training_args.warmup_steps == 22  # the command line wins


@pytest.mark.parametrize("path", sorted(RECIPES_DIR.glob("*.json")), ids=lambda p: p.name)
def test_shipped_recipes_parse(path):
    model_args, data_args, _, run_args, training_args = parse_args(["--recipe", str(path)])
    assert training_args.output_dir and model_args.preset
    if path.name.startswith("multi30k_"):
        # One recipe for every Multi30k direction (tuned on EN->DE validation data): only the languages and the
        # output directory differ, and each direction's files exist in the tests' Multi30k sample.
        recipe = json.loads((RECIPES_DIR / "multi30k_en_de_cpu.json").read_text())
        own = json.loads(path.read_text())
        assert {k: v for k, v in own.items() if recipe.get(k) != v} == {
            k: own[k] for k in ("src_lang", "tgt_lang", "output_dir") if own[k] != recipe[k]
        }
        assert run_args.max_train_minutes == 60 and data_args.test_split == "test_2016_flickr"
        # The dataset is Multi30k as the README clones it; the tests' sample has the same file names.
        assert data_args.dataset == "multi30k/data/task1/raw"
        for split in ("train", "val", "test_2016_flickr"):
            for lang in (data_args.src_lang, data_args.tgt_lang):
                assert (MULTI30K / f"{split}.{lang}.gz").is_file()
        # Its float32-on-a-CPU options parse and apply on any machine (`--bf16 false --use_cpu` force that case).
        options = own["cpu_float32"]
        parsed = parse_args(["--recipe", str(path), "--bf16", "false", "--use_cpu", "true"])
        assert parsed[-1].recipe_cpu_float32 == options
        for key, value in options.items():
            assert [getattr(args, key) for args in parsed if hasattr(args, key)] == [value], key


class _VocabularyOf100:
    """What build_config reads of a tokenizer."""

    pad_token_id, bos_token_id, eos_token_id = 1, 0, 2

    def __len__(self):
        return 100


@pytest.mark.parametrize(
    "options, depths",
    [
        ([], (3, 3)),  # the preset's N
        (["--layers", "2"], (2, 2)),
        (["--layers", "2", "--decoder_layers", "1"], (2, 1)),  # the stack named wins over --layers
        (["--encoder_layers", "4", "--decoder_layers", "2"], (4, 2)),
        (["--encoder_layers", "5", "--layers", "1"], (5, 1)),
    ],
)
def test_layer_options_set_each_stack(tmp_path, options, depths):
    model_args, *_ = parse_args(["--preset", "small", "--output_dir", str(tmp_path / "run"), *options])
    config = steps.build_config(model_args, _VocabularyOf100())
    assert (config.encoder_layers, config.decoder_layers) == depths
    model = VanillaTransformerForConditionalGeneration(config)
    assert (len(model.model.encoder.layers), len(model.model.decoder.layers)) == depths


def test_unknown_key_in_recipe_file_is_named(tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"max_steps": 7, "max_step": 8}))
    for option in (["--recipe", str(recipe)], [f"--recipe={recipe}"]):
        with pytest.raises(ValueError, match="'max_step'"):
            parse_args([*option, "--output_dir", str(tmp_path / "run")])


CPU_FLOAT32_OPTIONS = {"subword_split": 0.0, "dropout": 0.1}


@pytest.mark.parametrize("native_bf16", [False, True], ids=["avx2", "avx512_bf16"])
def test_cpu_float32_options_apply_when_the_run_trains_in_float32_on_a_cpu(tmp_path, monkeypatch, native_bf16):
    """A recipe file's `cpu_float32` options replace its own when bf16 "auto" finds no native bfloat16 on the CPU, or
    bf16 is off; not when the run trains in bfloat16, nor off the CPU. The command line wins over them too."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(
        json.dumps(
            {"bf16": "auto", "use_cpu": True, "subword_split": 0.1, "dropout": 0.2, "cpu_float32": CPU_FLOAT32_OPTIONS}
        )
    )

    def parse(*extra):
        argv = ["--recipe", str(recipe), "--output_dir", str(tmp_path / "run"), "--report_to", "none", *extra]
        model_args, _, _, _, training_args = parse_args(argv)
        return training_args.subword_split, model_args.dropout, getattr(training_args, "recipe_cpu_float32", None)

    file_options, float32_options = (0.1, 0.2, None), (0.0, 0.1, CPU_FLOAT32_OPTIONS)
    assert parse() == (file_options if native_bf16 else float32_options)
    assert parse("--bf16", "false") == float32_options  # float32 asked for, on either CPU
    assert parse("--bf16", "true") == file_options
    assert parse("--bf16", "false", "--dropout", "0.3") == (0.0, 0.3, CPU_FLOAT32_OPTIONS)  # the command line wins
    assert parse("--bf16", "false", "--subword_split", "0.05")[:2] == (0.05, 0.1)
    # A GPU run in float32 (no native bfloat16 there) makes many more updates than a CPU's: the file's own options.
    monkeypatch.setattr(VanillaTrainingArguments, "_training_device_type", lambda self: "cuda")
    assert parse("--use_cpu", "false") == file_options


def test_a_torch_built_for_cuda_without_a_gpu_trains_as_a_cpu_run(tmp_path, monkeypatch):
    """PyPI's torch for Linux is built for CUDA and names CUDA as its accelerator also where no GPU is found
    (`current_accelerator()` without `check_available`): the run is then a CPU run, with a CPU's defaults (`use_cpu`,
    the recipe's `cpu_float32` options), as with torch's CPU build."""
    monkeypatch.setattr(
        torch.accelerator,
        "current_accelerator",
        lambda check_available=False: None if check_available else torch.device("cuda"),
    )
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"subword_split": 0.1, "cpu_float32": CPU_FLOAT32_OPTIONS}))
    argv = ["--recipe", str(recipe), "--output_dir", str(tmp_path / "run"), "--report_to", "none", "--bf16", "false"]
    _, _, _, _, training_args = parse_args(argv)
    assert training_args.use_cpu and training_args.recipe_cpu_float32 == CPU_FLOAT32_OPTIONS
    assert training_args.subword_split == 0.0


@pytest.mark.parametrize(
    "command_line", [[], ["--label_smoothing_factor", "0.3"]], ids=["recipe", "command_line_wins"]
)
def test_a_float32_cpu_run_trains_with_the_cpu_float32_options_and_records_them(
    data_dir, tmp_path, caplog, command_line
):
    options = {"subword_split": 0.05, "label_smoothing_factor": 0.2}
    recipe = tmp_path / "recipe.json"
    recipe.write_text(
        json.dumps(
            {"subword_split": 0.1, "label_smoothing_factor": 0.1, "bidirectional_steps": 1, "cpu_float32": options}
        )
    )
    extra = ["--max_steps", "2", "--test_split", "", "--plots", "false", "--max_train_samples", "300", *command_line]
    with caplog.at_level(logging.INFO, logger="vanilla_transformer.training.train"):
        results = train.train(["--recipe", str(recipe), *_args(data_dir, tmp_path / "run", *extra, "--bf16", "false")])
    assert results["training"]["precision"]["cpu_float32_options"] == options
    hyperparameters = results["training"]["hyperparameters"]
    smoothing = 0.3 if command_line else 0.2
    assert (hyperparameters["subword_split"], hyperparameters["label_smoothing_factor"]) == (0.05, smoothing)
    assert hyperparameters["bidirectional_steps"] == 1  # a recipe file's training field, recorded
    # The log names the options, and what the command line changed in them (what the run really used).
    (message,) = [r.getMessage() for r in caplog.records if "'cpu_float32' options apply" in r.getMessage()]
    assert str(options) in message
    assert message.endswith(
        "; the command line sets {'label_smoothing_factor': 0.3}" if command_line else str(options)
    )


@pytest.mark.parametrize(
    "options, match",
    [
        ({"subword_splt": 0.0}, "'subword_splt'"),
        ({"bf16": "true"}, "'bf16'.*precision options cannot be set there"),
        ([0.0], "must be an object"),
        (None, "must be an object"),
    ],
)
def test_bad_cpu_float32_options_are_named(tmp_path, options, match):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"max_steps": 7, "cpu_float32": options}))
    with pytest.raises(ValueError, match=match):
        parse_args(["--recipe", str(recipe), "--output_dir", str(tmp_path / "run")])


def test_an_earlier_run_in_the_output_dir_is_refused_resumed_or_overwritten(data_dir, tmp_path):
    """An earlier run's leftovers (a checkpoint, a tokenizer of another vocabulary size) must not leak into a new run:
    without a flag the directory is refused; --resume_from_checkpoint true continues the run only with the
    tokenizer settings it was trained with; --overwrite_output_dir starts afresh, averaging only its own
    checkpoints."""
    out = tmp_path / "run"
    short = [
        "--save_steps",
        "2",
        "--test_split",
        "",
        "--plots",
        "false",
        "--max_train_samples",
        "300",
        "--logging_steps",
        "1",
        "--keep_checkpoints",  # checkpoint-2 stays after the resumed run, to show that it was not written again
        "all",
    ]
    train.train(_args(data_dir, out, "--max_steps", "2", *short, "--vocab_size", "600"))
    assert json.loads((out / "tokenizer" / "training_settings.json").read_text())["vocab_size"] == 600
    with pytest.raises(ValueError, match="--output_dir .* is not empty.*--overwrite_output_dir"):
        train.train(_args(data_dir, out, "--max_steps", "4", *short))
    with pytest.raises(ValueError, match="vocab_size=600.*vocab_size=1000"):  # TINY_MODEL asks for 1000
        train.train(_args(data_dir, out, "--max_steps", "4", *short, "--resume_from_checkpoint", "true"))

    # Resuming with the run's settings: 'true' is the newest checkpoint of --output_dir (the Trainer's convention).
    written = (out / "checkpoint-2" / "model.safetensors").stat().st_mtime_ns
    train.train(
        _args(data_dir, out, "--max_steps", "4", *short, "--vocab_size", "600", "--resume_from_checkpoint", "true")
    )
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2, 3, 4]
    assert (out / "checkpoint-2" / "model.safetensors").stat().st_mtime_ns == written  # continued, not redone

    # Overwriting: a fresh tokenizer, and only this run's checkpoints in the average.
    (out / "checkpoint-999").mkdir()  # a leftover that would be the newest checkpoint
    results = train.train(
        _args(
            data_dir,
            out,
            "--max_steps",
            "2",
            "--save_steps",
            "1",
            "--average_last",
            "2",
            "--test_split",
            "test_2016_flickr",
            "--plots",
            "false",
            "--max_train_samples",
            "300",
            "--generation_max_length",
            "5",
            "--overwrite_output_dir",
        )
    )
    assert results["tokenizer"]["vocab_size"] == len(load_tokenizer(str(out / "tokenizer"))) != 600
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    averaged = json.loads((out / "averaged" / "results.json").read_text())
    assert averaged["checkpoint_averaging"]["checkpoints"] == ["checkpoint-1", "checkpoint-2"]


def test_a_run_stopped_before_its_first_checkpoint_is_started_again(data_dir, tmp_path, monkeypatch):
    """Issue 51: a run stopped before it saved anything leaves its tokenizer; the rerun, as typed the first time,
    starts there (reusing that tokenizer), and --resume_from_checkpoint says to do just that, never the reverse."""
    out = tmp_path / "run"
    short = ["--max_steps", "1", "--test_split", "", "--plots", "false", "--max_train_samples", "300"]

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module, "build_trainer", stop)
        with pytest.raises(KeyboardInterrupt):
            train.train(_args(data_dir, out, *short))
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer"]
    with pytest.raises(ValueError, match="holds no checkpoint.*start without --resume_from_checkpoint"):
        train.train(_args(data_dir, out, *short, "--resume_from_checkpoint", "true"))
    written = (out / "tokenizer" / "tokenizer.json").stat().st_mtime_ns
    results = train.train(_args(data_dir, out, *short))
    assert results["training"]["steps"] == 1 and (out / "model.safetensors").is_file()
    assert (out / "tokenizer" / "tokenizer.json").stat().st_mtime_ns == written  # the stopped run's, reused


def test_with_a_cool_down_only_its_checkpoints_are_averaged(data_dir, tmp_path):
    # A timed run's updates depend on the machine: the last K checkpoints of a slow machine's run reached back into
    # its first, half-trained updates. With a cool-down, the average takes only the checkpoints written during it.
    out = tmp_path / "run"
    short = ["--plots", "false", "--max_train_samples", "300", "--generation_max_length", "5", "--save_steps", "1"]
    keep_all = ["--keep_checkpoints", "all"]
    results = train.train(
        _args(data_dir, out, "--max_steps", "6", "--lr_cooldown", "0.5", "--average_last", "10", *short, *keep_all)
    )
    assert results["training"]["hyperparameters"]["lr_cooldown_updates"] == [3, 6]
    assert len(list(out.glob("checkpoint-*"))) == 6  # all written (and kept), three of them in the cool-down
    averaging = json.loads((out / "averaged" / "results.json").read_text())["checkpoint_averaging"]
    assert averaging == {
        "num_checkpoints": 3,
        "checkpoints": ["checkpoint-4", "checkpoint-5", "checkpoint-6"],
        "after": 3,
    }
    assert results["averaged_model"]["num_checkpoints"] == 3

    # Without a cool-down: the last K, as before.
    results = train.train(
        _args(
            data_dir,
            out,
            "--max_steps",
            "4",
            "--lr_cooldown",
            "0",
            "--average_last",
            "3",
            *short,
            "--overwrite_output_dir",
        )
    )
    averaging = json.loads((out / "averaged" / "results.json").read_text())["checkpoint_averaging"]
    assert averaging["checkpoints"] == ["checkpoint-2", "checkpoint-3", "checkpoint-4"] and averaging["after"] is None


def test_a_finished_run_keeps_the_newest_checkpoint_whole_and_the_averaged_ones_weights(data_dir, tmp_path):
    """--keep_checkpoints averaged (the default): after the report, the newest checkpoint stays whole (a resume
    continues it), the averaged ones keep their weights (their average is the averaged model, bit for bit) but not
    their optimizer state, and the others are deleted; a stripped checkpoint is refused for resuming."""
    from safetensors.torch import load_file

    from vanilla_transformer.training.averaging import average_checkpoints

    out = tmp_path / "run"
    short = ["--plots", "false", "--max_train_samples", "300", "--generation_max_length", "5", "--save_steps", "1"]
    # No cool-down: the recipe without --recipe has one (0.2), whose window in 6 updates would hold only checkpoint-6.
    short += ["--logging_steps", "1", "--average_last", "2", "--lr_cooldown", "0"]
    train.train(_args(data_dir, out, "--max_steps", "6", *short))
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-5", "checkpoint-6"]
    resume_state = {"optimizer.pt", "scheduler.pt", "rng_state.pth"}
    assert resume_state <= {p.name for p in (out / "checkpoint-6").iterdir()}
    kept = {p.name for p in (out / "checkpoint-5").iterdir()}
    assert {"model.safetensors", "trainer_state.json"} <= kept and not resume_state & kept
    # The stripped checkpoint keeps its time: the Trainer's rotation orders checkpoints by it in a resumed run.
    assert (out / "checkpoint-5").stat().st_mtime_ns < (out / "checkpoint-6").stat().st_mtime_ns
    again = average_checkpoints([str(out / "checkpoint-5"), str(out / "checkpoint-6")], str(tmp_path / "again"))
    averaged, recomputed = (
        load_file(out / "averaged" / "model.safetensors"),
        load_file(Path(again) / "model.safetensors"),
    )
    assert averaged.keys() == recomputed.keys() and all(torch.equal(averaged[k], recomputed[k]) for k in averaged)

    with pytest.raises(ValueError, match="holds the weights only.*--keep_checkpoints.*--resume_from_checkpoint true"):
        train.train(
            _args(data_dir, out, "--max_steps", "8", *short, "--resume_from_checkpoint", str(out / "checkpoint-5"))
        )
    # The newest continues: updates 7 and 8 after the first run's 6, then only it is left with --keep_checkpoints last.
    train.train(
        _args(
            data_dir, out, "--max_steps", "8", *short, "--resume_from_checkpoint", "true", "--keep_checkpoints", "last"
        )
    )
    state = json.loads((out / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "loss" in h] == list(range(1, 9))
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-8"]
    assert resume_state <= {p.name for p in (out / "checkpoint-8").iterdir()}


def test_progress_bar_shows_the_time_limit(data_dir, tmp_path, capsys):
    train.train(
        _args(
            data_dir,
            tmp_path / "run",
            "--max_steps",
            "2",
            "--max_train_minutes",
            "10",
            "--test_split",
            "",
            "--plots",
            "false",
            "--max_train_samples",
            "300",
            "--disable_tqdm",
            "false",
        )
    )
    err = capsys.readouterr().err
    assert "/600 s of the time limit" in err and "update 2" in err


def test_a_log_file_gets_no_progress_bars(data_dir, tmp_path, capsys):
    """stderr that is no terminal (capsys here, a file after `2> log`): the training's, evaluation's and `datasets`'
    bars would be lines of "\\r" redraws there (issue 68); the Trainer's logs are printed as lines instead."""
    options = ["--max_steps", "2", "--max_train_minutes", "10", "--test_split", "", "--plots", "false"]
    train.train(_args(data_dir, tmp_path / "run", *options, "--max_train_samples", "300"))
    out, err = capsys.readouterr()
    assert "\r" not in err and "\r" not in out, err[-2000:]
    assert "'loss'" in out  # the Trainer's PrinterCallback


def test_overwrite_only_empties_a_directory_of_a_run(data_dir, tmp_path):
    (tmp_path / "notes.txt").write_text("not a training run")
    with pytest.raises(ValueError, match="does not look like an output directory"):
        train.train(_args(data_dir, tmp_path, "--max_steps", "1", "--overwrite_output_dir"))
    assert (tmp_path / "notes.txt").is_file()


def test_bad_data_files_fail_before_training(data_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(data_dir, broken)
    with gzip.open(broken / "train.de.gz", "wt") as f:  # one line fewer than train.en
        f.writelines(["x\n"] * 2999)
    with pytest.raises(ValueError, match="3000.*2999|2999.*3000"):
        train.train(_args(broken, tmp_path / "run", "--max_steps", "1"))
    with gzip.open(broken / "train.de.gz", "wt") as f:
        f.write("")
    with pytest.raises(ValueError, match="empty"):
        train.train(_args(broken, tmp_path / "run", "--max_steps", "1"))


def test_tokenizer_that_does_not_fit_the_model_fails_before_training(data_dir, tmp_path):
    from vanilla_transformer.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["ein Hund läuft", "a dog runs"] * 50, vocab_size=300)
    tokenizer.save_pretrained(tmp_path / "tok")
    config = tiny_config(vocab_size=999, encoder_ffn_dim=32, decoder_ffn_dim=32)
    VanillaTransformerForConditionalGeneration(config).save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match="vocab"):
        train.train(
            _args(
                data_dir,
                tmp_path / "run",
                "--max_steps",
                "1",
                "--tokenizer",
                str(tmp_path / "tok"),
                "--init_from",
                str(tmp_path / "model"),
            )
        )


def _step_losses(run_dir: Path) -> list[float]:
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    return [h["loss"] for h in history if "loss" in h and "step" in h]


@pytest.mark.slow
def test_accelerate_launch_two_processes_matches_one_process(data_dir, tmp_path):
    """Two CPU processes (gloo) under `accelerate launch`: each process takes its own token batch, so one update sees two
    batches; one process accumulating two batches sees the same two. Without dropout the per-step losses agree.

    accelerate 1.15 starts a single process for `--cpu --num_processes 2` (its multi-CPU launch needs mpirun); its
    `--multi_gpu` launcher (torchrun) on a machine without GPUs gives the two gloo processes, because train.py sets
    `use_cpu` there. A small learning rate: Adam's first update is sign(gradient), which turns the rounding
    difference between an all-reduce and a local sum into full-size steps of opposite sign for near-zero gradients."""
    common = [
        "--max_steps",
        "6",
        "--logging_steps",
        "1",
        "--dropout",
        "0.0",
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--test_split",
        "",
        "--plots",
        "false",
        "--warmup_steps",
        "4",
        "--lr_factor",
        "0.05",
    ]
    env = subprocess_env()
    single = tmp_path / "single"
    subprocess.run(
        [sys.executable, "train.py", *_args(data_dir, single, *common, "--gradient_accumulation_steps", "2")],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=600,
        capture_output=True,
    )
    double = tmp_path / "double"
    tok = ["--tokenizer", str(single / "tokenizer")]  # the same tokenizer for both runs
    launcher = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
    ]
    result = subprocess.run(
        [*launcher, "train.py", *_args(data_dir, double, *common, *tok)],
        cwd=ROOT,
        env=env,
        timeout=600,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = _step_losses(single), _step_losses(double)
    assert json.loads((double / "results.json").read_text())["training"]["world_size"] == 2  # really two processes
    assert json.loads((single / "results.json").read_text())["training"]["world_size"] == 1
    assert len(one) == len(two) == 6
    assert torch.allclose(torch.tensor(one), torch.tensor(two), rtol=1e-4, atol=1e-4), (one, two)


def test_final_model_is_scored_as_saved_after_bf16_training(data_dir, tmp_path, monkeypatch):
    """results.json's test BLEU and the cards' attention figures are those of the model a user loads (float32), for
    the final model as for the average: after bf16 mixed-precision training the Trainer's model still carries
    accelerate's autocast wrapper on its forward, which made the final model's test translation run in bfloat16 (0.15
    BLEU off the saved model's on Multi30k) while the averaged model, built afresh, ran in float32."""
    seen = {"score_test_split": [], "write_attention_figure": []}

    def spy(name):
        real = getattr(report, name)

        def wrapper(model, *args, **kwargs):
            # The dtypes of every projection's output, encoder and decoder (generate calls them by different routes).
            dtypes = set()
            hook = lambda module, inputs, output: dtypes.add(output.dtype)  # noqa: E731
            handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Linear)]
            try:
                return real(model, *args, **kwargs)
            finally:
                for handle in handles:
                    handle.remove()
                seen[name].append(dtypes)

        monkeypatch.setattr(report, name, wrapper)

    spy("score_test_split")
    spy("write_attention_figure")
    out = tmp_path / "run"
    args = ["--max_steps", "4", "--bf16", "true", "--save_steps", "2", "--average_last", "2"]
    results = train.train(_args(data_dir, out, *args, "--eval_strategy", "no", "--test_batch_size", "10"))
    assert results["training"]["precision"]["mixed_precision"] == "bf16"
    # The final model, then the average.
    assert seen == {"score_test_split": [{torch.float32}] * 2, "write_attention_figure": [{torch.float32}] * 2}


@pytest.mark.parametrize(
    "units", [(), ("_is_avx512_bf16_supported",), ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
)
def test_the_recorded_hardware_names_the_cpus_bfloat16_units(monkeypatch, units):
    """Two AVX512_BF16 CPUs can differ 2x in tokens per second (Zen 4 runs bfloat16 GEMMs at half another EPYC's
    speed per core), so results.json and the card say which units the CPU has, as torch sees them."""
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, name, lambda name=name: name in units)
    hardware = describe_hardware()
    assert ("AVX512_BF16" in hardware) == ("_is_avx512_bf16_supported" in units)
    assert ("AMX" in hardware) == ("_is_amx_tile_supported" in units)
    assert torch.backends.cpu.get_cpu_capability() in hardware and hardware.endswith(
        f"torch threads {torch.get_num_threads()}"
        + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")
    )


def test_ctrl_c_keeps_a_checkpoint_and_its_resume_gives_the_uninterrupted_weights(data_dir, tmp_path):
    """A real SIGINT during training (issue 68): the run stops at the end of the update with a complete checkpoint,
    exits 130 with one line, no traceback, that names the checkpoint and the command that goes on; that command,
    run as printed, ends with the weights of the run that was never interrupted (dropout on: the RNG state counts)."""
    steps = 200
    common = ["--max_steps", str(steps), "--max_train_minutes", "none", "--save_steps", "1000", "--eval_strategy",
              "no", "--test_split", "", "--plots", "false", "--max_eval_samples", "4", "--num_beams", "1"]  # fmt: skip
    env = subprocess_env()
    whole = tmp_path / "whole"
    subprocess.run([sys.executable, "-m", "vanilla_transformer_cli", "train", *_args(data_dir, whole, *common)],
                   cwd=ROOT, env=env, check=True, timeout=600, capture_output=True)  # fmt: skip
    stopped = tmp_path / "stopped"
    argv = ["train", *_args(data_dir, stopped, *common, "--tokenizer", str(whole / "tokenizer"))]
    process = subprocess.Popen(
        [sys.executable, "-m", "vanilla_transformer_cli", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # the logged losses (stdout) and the log (stderr), in order
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background job starts with it ignored
    )
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any("'loss'" in line for line in lines):  # the first logged update
        assert process.poll() is None, "".join(lines)[-3000:]
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 130, "".join(lines)[-3000:]
    reader.join(timeout=10)
    err = "".join(lines)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    said = err.rstrip("\n").rsplit("\n", 1)[-1]
    step = int(said.split("interrupted after update ")[1].split(":")[0].replace(",", ""))
    assert 10 <= step < steps, said
    assert said.startswith(f"vanilla-transformer train: interrupted after update {step}: {stopped}/checkpoint-{step} "
                           "is kept, complete; to go on: vanilla-transformer train "), said  # fmt: skip
    assert (stopped / f"checkpoint-{step}" / "trainer_state.json").is_file()  # complete: written last
    assert not (stopped / "results.json").exists()  # the end of the run is the resumed run's

    command = shlex.split(said.split("to go on: ", 1)[1])
    assert command[:2] == ["vanilla-transformer", "train"] and command[-2:] == ["--resume_from_checkpoint", "true"]
    subprocess.run([sys.executable, "-m", "vanilla_transformer_cli", *command[1:]], cwd=ROOT, env=env, check=True,
                   timeout=600, capture_output=True)  # fmt: skip
    resumed = json.loads((stopped / "trainer_state.json").read_text())
    assert resumed["global_step"] == steps
    expected = VanillaTransformerForConditionalGeneration.from_pretrained(whole).state_dict()
    got = VanillaTransformerForConditionalGeneration.from_pretrained(stopped).state_dict()
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), name


def test_a_second_ctrl_c_stops_at_once():
    from vanilla_transformer.training.callbacks import Interrupt

    now = [0.0]
    interrupt = Interrupt(clock=lambda: now[0])
    interrupt._press(signal.SIGINT, None)  # the first: at the end of the update
    assert interrupt.pressed
    now[0] = 0.5
    interrupt._press(signal.SIGINT, None)  # the same key, passed on by a launcher (torchrun) to its processes
    now[0] = 3.0
    with pytest.raises(KeyboardInterrupt):
        interrupt._press(signal.SIGINT, None)
