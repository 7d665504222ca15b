#!/usr/bin/env python
"""Train the Transformer of "Attention Is All You Need" with the paper's recipe (section 5) on the HF Trainer.

    python train.py --config configs/multi30k_en_de_cpu.json            # one CPU
    accelerate launch train.py --config configs/wmt14_en_de_base.json   # several GPUs or machines

Every option is a field of the dataclasses below (`python train.py --help` lists them); `--config FILE.json`
(or `--config=FILE.json`) sets any of them, an unknown key in it is an error, and options given on the command
line win over the file. The file's `cpu_float32` object, if any, holds options that replace the file's own when the
run trains in float32 on a CPU (where `bf16: "auto"` finds no native bfloat16): the hour then holds ~3x fewer
updates, and a short run wants other settings than a long one. The run writes into
`--output_dir`: checkpoints, the final model with tokenizer and generation config (ready for
`from_pretrained`), the averaged model (`averaged/`, when `--average_last K`), `results.json`, TensorBoard logs
and PNG plots of loss, learning rate and BLEU.

Thin on purpose: parse, build, run. The pieces live in the package: data loading and token batches
(`vanilla_transformer.data`), the tokenizer (`.tokenization`), the trainer with the paper's optimizer, schedule
and loss (`.trainer`), checkpoint averaging (`.averaging`), BLEU (`.metrics`) and batched translation
(`.translate`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from datasets import DatasetDict
from transformers import DataCollatorForSeq2Seq, HfArgumentParser, ProgressCallback, set_seed

from vanilla_transformer import PRESETS, VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.averaging import average_checkpoints
from vanilla_transformer.data import load_parallel_corpus, tokenize_corpus
from vanilla_transformer.metrics import compute_bleu_with_lowercase
from vanilla_transformer.model_card import write_attention_figure, write_model_card
from vanilla_transformer.precision import cpu_bfloat16_units, cpu_model_name
from vanilla_transformer.tokenization import check_tokenizer_fits_model, load_tokenizer, train_tokenizer
from vanilla_transformer.trainer import (
    TimeLimit,
    TimeLimitProgressCallback,
    VanillaTrainingArguments,
    VanillaTransformerTrainer,
    complete_checkpoints,
    last_checkpoint,
)
from vanilla_transformer.translate import translate


logger = logging.getLogger("train")


@dataclass
class ModelArguments:
    preset: str = field(
        default="small", metadata={"help": f"Model size: one of {sorted(PRESETS)} (base/big: Table 3)."}
    )
    init_from: str | None = field(
        default=None, metadata={"help": "Start from this checkpoint (path or Hub id) instead of a fresh model."}
    )
    d_model: int | None = field(default=None, metadata={"help": "Override the preset's d_model."})
    layers: int | None = field(default=None, metadata={"help": "Override N, the encoder and decoder layer count."})
    encoder_layers: int | None = field(
        default=None, metadata={"help": "Override the encoder's layer count alone (wins over --layers; paper: N)."}
    )
    decoder_layers: int | None = field(
        default=None, metadata={"help": "Override the decoder's layer count alone (wins over --layers; paper: N)."}
    )
    heads: int | None = field(default=None, metadata={"help": "Override h, the attention head count."})
    ffn_dim: int | None = field(default=None, metadata={"help": "Override d_ff."})
    dropout: float | None = field(default=None, metadata={"help": "Override P_drop (residual dropout)."})
    attention_dropout: float | None = field(
        default=None, metadata={"help": "Dropout on attention weights (paper: 0)."}
    )
    activation_dropout: float | None = field(default=None, metadata={"help": "Dropout inside the FFN (paper: 0)."})
    position_embedding_type: str | None = field(default=None, metadata={"help": "'sinusoidal' (paper) or 'learned'."})
    normalize_before: bool | None = field(default=None, metadata={"help": "Pre-norm variant (paper: post-norm)."})
    attention_bias: bool | None = field(default=None, metadata={"help": "Biases in the attention projections."})
    max_position_embeddings: int | None = field(default=None, metadata={"help": "Learned position table size."})


@dataclass
class DataArguments:
    dataset: str = field(
        default="../shared/data/multi30k",
        metadata={
            "help": "Directory of {split}.{lang}[.gz] files, a TSV/JSONL file or directory, a save_to_disk "
            "directory, or a Hub dataset id with a `translation` column (e.g. wmt14)."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration, e.g. 'de-en'."})
    src_lang: str = field(default="en", metadata={"help": "Source language code."})
    tgt_lang: str = field(default="de", metadata={"help": "Target language code."})
    train_split: str = field(default="train", metadata={"help": "Name of the training split in the data."})
    validation_split: str = field(default="val", metadata={"help": "Name of the validation split in the data."})
    test_split: str | None = field(default="test_2016_flickr", metadata={"help": "Test split (BLEU at the end)."})
    src_column: str | None = field(default=None, metadata={"help": "Source column of a table without `translation`."})
    tgt_column: str | None = field(default=None, metadata={"help": "Target column of a table without `translation`."})
    max_length: int = field(default=128, metadata={"help": "Longest training pair kept, tokens per side."})
    max_length_ratio: float | None = field(
        default=2.5, metadata={"help": "Longest accepted length ratio of a training pair."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training pairs."})
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate during training on the first N validation pairs (speed)."}
    )
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenization."})


@dataclass
class TokenizerArguments:
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "Path or Hub id of a tokenizer; by default one is trained on the training split."},
    )
    vocab_size: int = field(default=8000, metadata={"help": "Shared vocabulary size of a trained tokenizer."})
    min_frequency: int = field(default=2, metadata={"help": "Minimum pair frequency for a BPE merge."})


@dataclass
class RunArguments:
    average_last: int = field(
        default=0,
        metadata={
            "help": "Average the last K checkpoints at the end (paper: 5 base, 20 big); 0 = off. With a learning-rate "
            "cool-down, only checkpoints written during it (fewer than K if fewer were)."
        },
    )
    length_penalty: float | None = field(
        default=None,
        metadata={
            "help": "Length penalty alpha of the model's beam search (its generation config: validation BLEU during "
            "training, test BLEU, and what users of the saved model get). None keeps section 6.1's 0.6, which the "
            "paper chose on its development set; a preset may set another chosen the same way (on validation data)."
        },
    )
    num_beams: int | None = field(
        default=None,
        metadata={
            "help": "Beam size of the model's beam search (its generation config, like --length_penalty). None keeps "
            "section 6.1's 4; a preset may set another chosen on validation data."
        },
    )
    test_batch_size: int = field(default=64, metadata={"help": "Sentences per batch for the final test translation."})
    plots: bool = field(default=True, metadata={"help": "Write PNG plots of loss, learning rate and BLEU."})
    max_train_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Stop training (with a final checkpoint) after this many minutes of wall-clock time, even "
            "before max_steps: 'train for about an hour' on a CPU. The schedule does not depend on max_steps."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an --output_dir that holds an earlier run: its contents are deleted first. "
            "Without it, a non-empty --output_dir is an error unless --resume_from_checkpoint is given."
        },
    )


PARSER_CLASSES = (ModelArguments, DataArguments, TokenizerArguments, RunArguments, VanillaTrainingArguments)
# A config file's key for options that replace the file's own when the run trains in float32 on a CPU (`bf16: "auto"`
# on a CPU without native bfloat16, or bf16 off): there the hour holds ~3x fewer updates, and what is best for a short
# run differs from what is best for a long one (the Multi30k presets; bench/multi30k_search.md).
CPU_FLOAT32 = "cpu_float32"


def parse_args(argv: list[str] | None = None):
    """Dataclasses from the command line, with `--config FILE.json` as defaults that the command line overrides."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(PARSER_CLASSES, description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="JSON file of options (a preset in configs/); CLI options win.")
    # Without an accelerator, say so to the Trainer: only then does it set up gloo data parallelism across the
    # processes of `accelerate launch --multi_gpu` / `torchrun` (otherwise each CPU process trains alone).
    parser.set_defaults(use_cpu=torch.accelerator.current_accelerator() is None)
    known = {a.dest for a in parser._actions} - {"help", "config"}
    # The file's values become the parser's defaults, so it is read before the real parse; argparse itself finds it
    # (`--config FILE` and `--config=FILE` alike).
    preparser = argparse.ArgumentParser(add_help=False)
    preparser.add_argument("--config", default=None)
    config_path = preparser.parse_known_args(argv)[0].config
    cpu_float32 = {}  # the config file's options for a float32 run on a CPU (CPU_FLOAT32)
    if config_path is not None:
        path = Path(config_path)
        if not path.is_file():
            available = ", ".join(sorted(p.name for p in Path(__file__).parent.joinpath("configs").glob("*.json")))
            raise ValueError(f"Preset file {config_path!r} does not exist; the presets in configs/ are: {available}.")
        defaults = json.loads(path.read_text())
        cpu_float32 = defaults.pop(CPU_FLOAT32, {})
        unknown = sorted(set(defaults) - known)
        if unknown:
            raise ValueError(f"{config_path}: unknown option(s) {unknown}; see `python train.py --help`.")
        if not isinstance(cpu_float32, dict):
            raise ValueError(f"{config_path}: {CPU_FLOAT32!r} must be an object of options, got {cpu_float32!r}.")
        # Which precision the run trains in decides whether these apply, so they cannot choose it themselves.
        unknown = sorted(set(cpu_float32) - (known - {"bf16", "fp16", "use_cpu"}))
        if unknown:
            raise ValueError(
                f"{config_path}: unknown option(s) {unknown} in {CPU_FLOAT32!r}; see `python train.py --help` (the "
                f"precision options cannot be set there)."
            )
        parser.set_defaults(**defaults)
    model_args, data_args, tok_args, run_args, training_args = _parse_into_dataclasses(parser, argv)
    if cpu_float32 and _trains_in_float32_on_cpu(training_args):
        # The file's float32 settings become the defaults in their turn: options on the command line still win.
        parser.set_defaults(**cpu_float32)
        model_args, data_args, tok_args, run_args, training_args = _parse_into_dataclasses(parser, argv)
        training_args.preset_cpu_float32 = cpu_float32
    resume = training_args.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() in ("true", "false"):
        # The Trainer's convention: True = the newest checkpoint in output_dir.
        training_args.resume_from_checkpoint = resume = True if resume.lower() == "true" else None
    if isinstance(resume, str) and not Path(resume).is_dir():
        raise ValueError(
            f"--resume_from_checkpoint {resume!r} is not a directory: pass a checkpoint-<step> directory of an "
            f"earlier run, or 'true' for the newest checkpoint in --output_dir."
        )
    if resume is True and last_checkpoint(training_args.output_dir) is None:
        raise ValueError(
            f"--resume_from_checkpoint true, but --output_dir {training_args.output_dir!r} holds no checkpoint-<step> "
            f"directory to resume from: check --output_dir, or start without --resume_from_checkpoint."
        )
    if run_args.length_penalty is not None and not math.isfinite(run_args.length_penalty):
        raise ValueError(f"--length_penalty must be a finite number, got {run_args.length_penalty!r}.")
    if run_args.num_beams is not None and run_args.num_beams < 1:
        raise ValueError(f"--num_beams must be at least 1, got {run_args.num_beams!r}.")
    if model_args.preset not in PRESETS:
        raise ValueError(f"--preset {model_args.preset!r} does not exist: choose one of {sorted(PRESETS)}.")
    if training_args.max_tokens is not None and data_args.max_length > training_args.max_tokens:
        raise ValueError(
            f"--max_length {data_args.max_length} exceeds --max_tokens {training_args.max_tokens}: a pair of that length "
            f"would not fit in any batch; lower max_length or raise max_tokens."
        )
    return model_args, data_args, tok_args, run_args, training_args


def _parse_into_dataclasses(parser, argv):
    # The dataclasses, then a namespace holding --config, then what argparse did not recognise.
    *parsed, _config_namespace, extra = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return parsed


def _trains_in_float32_on_cpu(training_args) -> bool:
    return training_args._training_device_type() == "cpu" and not (training_args.bf16 or training_args.fp16)


def build_config(model_args: ModelArguments, tokenizer) -> VanillaTransformerConfig:
    overrides = {
        "d_model": model_args.d_model,
        # The paper stacks N layers in each (section 3.1); Marian and BART let the two counts differ, and so do we.
        "encoder_layers": model_args.encoder_layers if model_args.encoder_layers is not None else model_args.layers,
        "decoder_layers": model_args.decoder_layers if model_args.decoder_layers is not None else model_args.layers,
        "encoder_attention_heads": model_args.heads,
        "decoder_attention_heads": model_args.heads,
        "encoder_ffn_dim": model_args.ffn_dim,
        "decoder_ffn_dim": model_args.ffn_dim,
        "dropout": model_args.dropout,
        "attention_dropout": model_args.attention_dropout,
        "activation_dropout": model_args.activation_dropout,
        "position_embedding_type": model_args.position_embedding_type,
        "normalize_before": model_args.normalize_before,
        "attention_bias": model_args.attention_bias,
        "max_position_embeddings": model_args.max_position_embeddings,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return VanillaTransformerConfig.from_preset(
        model_args.preset,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        **overrides,
    )


def prepare_output_dir(out_dir: Path, run_args: RunArguments, training_args) -> None:
    """Refuse to mix two runs in one directory: an earlier run's `checkpoint-*` would be averaged with this run's and
    its tokenizer reused. A non-empty directory is taken only to resume, or emptied with --overwrite_output_dir.
    Checked by the main process before any process writes there."""
    with training_args.main_process_first(desc="checking the output directory", local=False):
        if training_args.process_index != 0 or training_args.resume_from_checkpoint or not out_dir.is_dir():
            return
        entries = sorted(p.name for p in out_dir.iterdir())
        if not entries:
            return
        if not run_args.overwrite_output_dir:
            listing = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
            raise ValueError(
                f"--output_dir {str(out_dir)!r} is not empty ({listing}): continue that run with "
                f"--resume_from_checkpoint true, replace it with --overwrite_output_dir, or choose another --output_dir."
            )
        # Only a directory this script wrote is emptied: a mistyped --output_dir must not delete someone's files.
        written_by_a_run = ("trainer_state.json", "results.json", "tokenizer")
        if last_checkpoint(str(out_dir)) is None and not any((out_dir / name).exists() for name in written_by_a_run):
            raise ValueError(
                f"--overwrite_output_dir: {str(out_dir)!r} does not look like an output directory of train.py (no "
                f"checkpoint, tokenizer/, trainer_state.json or results.json), so it is not emptied: remove it "
                f"yourself or choose another --output_dir."
            )
        logger.warning("--overwrite_output_dir: deleting the earlier run in %s (%s).", out_dir, ", ".join(entries))
        for name in entries:
            path = out_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def tokenizer_settings(tok_args: TokenizerArguments, data_args: DataArguments) -> dict:
    """What a trained tokenizer depends on: stored beside it, and compared when a run finds one in its directory."""
    local = Path(data_args.dataset).exists()
    return {
        "vocab_size": tok_args.vocab_size,
        "min_frequency": tok_args.min_frequency,
        "dataset": str(Path(data_args.dataset).resolve()) if local else data_args.dataset,
        "dataset_config": data_args.dataset_config,
        "train_split": data_args.train_split,
        "src_lang": data_args.src_lang,
        "tgt_lang": data_args.tgt_lang,
        "src_column": data_args.src_column,
        "tgt_column": data_args.tgt_column,
        "max_train_samples": data_args.max_train_samples,
    }


TOKENIZER_SETTINGS = "training_settings.json"  # in OUTPUT_DIR/tokenizer/


def get_tokenizer(tok_args: TokenizerArguments, data_args: DataArguments, raw, training_args):
    if tok_args.tokenizer is not None:
        return load_tokenizer(tok_args.tokenizer)
    # Section 5.1: one vocabulary shared by source and target, learned on the training data only. Trained by the
    # main process and read back by the others, so that every process has the same one.
    tok_dir = Path(training_args.output_dir) / "tokenizer"
    settings = tokenizer_settings(tok_args, data_args)
    with training_args.main_process_first(desc="training the tokenizer"):
        if (tok_dir / "tokenizer.json").is_file():
            saved_path = tok_dir / TOKENIZER_SETTINGS
            saved = json.loads(saved_path.read_text()) if saved_path.is_file() else None
            if saved is None:
                logger.warning(
                    "%s has no %s: cannot check that it was trained as this run asks.", tok_dir, TOKENIZER_SETTINGS
                )
            elif saved != settings:
                changed = sorted(k for k in settings.keys() | saved.keys() if settings.get(k) != saved.get(k))
                raise ValueError(
                    f"The tokenizer of this run ({tok_dir}) was trained with "
                    f"{', '.join(f'{k}={saved.get(k)!r}' for k in changed)}, but this run asks for "
                    f"{', '.join(f'{k}={settings.get(k)!r}' for k in changed)}: resume with the run's settings, or "
                    f"train into another --output_dir (or --overwrite_output_dir)."
                )
            logger.info(
                "Using the tokenizer of this run in %s (trained by the main process, or before a resume).", tok_dir
            )
        elif training_args.process_index == 0:
            train = raw["train"]
            tokenizer = train_tokenizer(
                itertools.chain(train["source"], train["target"]),
                vocab_size=tok_args.vocab_size,
                min_frequency=tok_args.min_frequency,
            )
            tokenizer.save_pretrained(tok_dir)
            (tok_dir / TOKENIZER_SETTINGS).write_text(json.dumps(settings, indent=2) + "\n")
            logger.info(
                "Trained a shared BPE tokenizer of %d tokens on %d pairs -> %s", len(tokenizer), len(train), tok_dir
            )
    return load_tokenizer(str(tok_dir))


def plot_history(log_history: list[dict], out_dir: Path) -> list[str]:
    """PNG plots of training loss / NLL, learning rate and validation BLEU against the optimizer step."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (pip install 'vanilla-transformer[plot]'): no plots.")
        return []
    series = {
        "loss.png": [
            ("loss", "train loss (label-smoothed)"),
            ("nll_loss", "train NLL"),
            ("eval_loss", "validation loss"),
            ("eval_nll_loss", "validation NLL"),
        ],
        "learning_rate.png": [("learning_rate", "learning rate")],
        "bleu.png": [("eval_bleu", "validation BLEU")],
    }
    written = []
    for name, keys in series.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        drawn = False
        for key, label in keys:
            points = [(h["step"], h[key]) for h in log_history if key in h and "step" in h]
            if points:
                ax.plot(*zip(*points), marker="." if len(points) < 50 else None, label=label)
                drawn = True
        if drawn:
            ax.set_xlabel("optimizer step")
            ax.legend()
            ax.grid(alpha=0.3)
            fig.tight_layout()
            fig.savefig(out_dir / name, dpi=100)
            written.append(name)
        plt.close(fig)
    return written


def main(argv: list[str] | None = None) -> dict:
    model_args, data_args, tok_args, run_args, training_args = parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    transformers.logging.set_verbosity_warning()
    if getattr(training_args, "preset_cpu_float32", None):
        # Name what the command line changed, so the log says what the run really used.
        used = {k: getattr(a, k) for a in (model_args, data_args, tok_args, run_args, training_args) for k in vars(a)}
        changed = {k: used[k] for k, v in training_args.preset_cpu_float32.items() if used[k] != v}
        logger.info(
            "Training in float32 on a CPU (%s): the config file's %r options apply where the command line does not "
            "set them: %s%s",
            training_args.precision_reason,
            CPU_FLOAT32,
            training_args.preset_cpu_float32,
            f"; the command line sets {changed}" if changed else "",
        )
    set_seed(training_args.seed)
    out_dir = Path(training_args.output_dir)
    prepare_output_dir(out_dir, run_args, training_args)
    out_dir.mkdir(parents=True, exist_ok=True)
    if training_args.push_to_hub:
        # A missing or invalid token, or a namespace the token cannot write to, fails here, before any training.
        # The repo and the `--hub_revision` branch are created now: the Trainer pushes while training, and it
        # never creates a branch itself.
        from vanilla_transformer.hub import ensure_repo

        ensure_repo(
            training_args.hub_model_id or out_dir.name,
            private=bool(training_args.hub_private_repo),
            revision=training_args.hub_revision,
            token=training_args.hub_token,
        )

    # 1. Data (checked before anything is trained: missing files, line counts, languages, splits).
    splits = {"train": data_args.train_split, "validation": data_args.validation_split}
    if data_args.test_split:
        splits["test"] = data_args.test_split
    raw = load_parallel_corpus(
        data_args.dataset,
        data_args.src_lang,
        data_args.tgt_lang,
        splits=tuple(splits),
        split_names=splits,
        config_name=data_args.dataset_config,
        src_column=data_args.src_column,
        tgt_column=data_args.tgt_column,
    )
    if data_args.max_train_samples:
        raw["train"] = raw["train"].select(range(min(data_args.max_train_samples, len(raw["train"]))))

    # 2. Tokenizer and model, checked against each other.
    tokenizer = get_tokenizer(tok_args, data_args, raw, training_args)
    if model_args.init_from:
        model = VanillaTransformerForConditionalGeneration.from_pretrained(model_args.init_from)
    else:
        model = VanillaTransformerForConditionalGeneration(build_config(model_args, tokenizer))
    check_tokenizer_fits_model(tokenizer, model.config)
    if run_args.length_penalty is not None:
        # Set before training: the checkpoints (hence the averaged model) and the evaluations use it too.
        model.generation_config.length_penalty = run_args.length_penalty
    if run_args.num_beams is not None:
        model.generation_config.num_beams = run_args.num_beams
    logger.info(
        "Model: %s preset, %s parameters, %s",
        model_args.preset,
        f"{model.num_parameters():,}",
        model.config.to_diff_dict(),
    )

    # 3. Token ids, filtered by length (training split only; validation pairs are never dropped silently).
    with training_args.main_process_first(desc="tokenizing"):
        tokenized = tokenize_corpus(
            DatasetDict(train=raw["train"], validation=raw["validation"]),
            tokenizer,
            max_length=data_args.max_length,
            max_length_ratio=data_args.max_length_ratio,
            num_proc=data_args.preprocessing_num_workers,
        )
    eval_dataset = tokenized["validation"]
    if data_args.max_eval_samples:
        eval_dataset = eval_dataset.select(range(min(data_args.max_eval_samples, len(eval_dataset))))

    # 4. Train.
    limit = TimeLimit(run_args.max_train_minutes) if run_args.max_train_minutes else None
    trainer = VanillaTransformerTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        # Without `model=`: the model builds the decoder input from the labels itself, on the device.
        data_collator=DataCollatorForSeq2Seq(
            tokenizer, label_pad_token_id=-100, pad_to_multiple_of=training_args.pad_to_multiple_of
        ),
        callbacks=[limit] if limit else None,
    )
    if limit and trainer.pop_callback(ProgressCallback):  # the progress bar counts the time limit, not max_steps
        trainer.add_callback(TimeLimitProgressCallback(limit))
    started = time.perf_counter()
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    train_seconds = time.perf_counter() - started
    trainer.save_model()  # final model + tokenizer + generation config, ready for from_pretrained
    trainer.save_state()

    if not trainer.is_world_process_zero():
        return {}
    # What follows uses the final model as saved, loaded as a user loads it (float32), as the averaged model below is:
    # after bf16 training the Trainer's model still carries accelerate's mixed-precision wrapper, which runs its
    # forward (the decoder steps of `generate`) under bf16 autocast.
    final_model = VanillaTransformerForConditionalGeneration.from_pretrained(out_dir).to(trainer.model.device)

    # 5. Results of the final model: what the run was (results.json, in the model card's schema), test BLEU, plots.
    # Each directory describes its own weights: OUTPUT_DIR the final model, OUTPUT_DIR/averaged the average.
    results = collect_results(
        trainer, tokenizer, tokenized["train"], model_args, data_args, train_result, train_seconds
    )
    averaged_results = None
    if data_args.test_split:
        results["bleu"]["test"] = score_test_split(final_model, tokenizer, raw["test"], data_args, run_args, out_dir)
        # 6. The average of the last K checkpoints (section 6.1), scored on the same test split.
        if run_args.average_last:
            # Only checkpoints written during the cool-down, when the run had one (see the function).
            after = getattr(trainer.lr_scheduler, "cooldown_start", None)
            averaged = average_last_checkpoints(
                out_dir, run_args.average_last, tokenizer, trainer.model.device, after=after
            )
            if averaged is not None:
                model_averaged, names = averaged
                bleu = score_test_split(
                    model_averaged, tokenizer, raw["test"], data_args, run_args, out_dir / "averaged"
                )
                averaged_results = {
                    **results,
                    "bleu": {"test": bleu},
                    "checkpoint_averaging": {"num_checkpoints": len(names), "checkpoints": names, "after": after},
                }
                results["averaged_model"] = {"path": "averaged", "num_checkpoints": len(names), "bleu_test": bleu}
    if run_args.plots:
        curves = plot_history(trainer.state.log_history, out_dir)
        # Each card's figure: cross-attention of its own weights for the first validation sentence, a PNG pushed with
        # the plots. The averaged model's card shows the curves of the run its checkpoints come from, copied beside it
        # (a card only links files in its own directory).
        cards = [(results, final_model, out_dir)]
        if averaged_results is not None:
            cards.append((averaged_results, model_averaged, out_dir / "averaged"))
            for name in curves:
                shutil.copy2(out_dir / name, out_dir / "averaged" / name)
        for card_results, card_model, directory in cards:
            figure = write_attention_figure(
                card_model, tokenizer, raw["validation"][0]["source"], directory, split=data_args.validation_split
            )
            card_results["attention_figure"] = figure
            card_results["plots"] = curves + ([figure["file"]] if figure else [])

    # 7. results.json and model cards; the Hub.
    config, args = trainer.model.config, trainer.args
    write_results_and_card(out_dir, config, results, args.hub_model_id)
    if averaged_results is not None:
        write_results_and_card(out_dir / "averaged", config, averaged_results, None)
    if args.push_to_hub:
        # The Trainer pushed checkpoints while training (hub_strategy); the final push carries the model card
        # (written from results.json), the plots and the remote code.
        from vanilla_transformer.hub import push_run

        results["hub_commit"] = push_run(
            out_dir,
            args.hub_model_id or out_dir.name,
            private=bool(args.hub_private_repo),
            revision=args.hub_revision,
            token=args.hub_token,
        )
    return results


def collect_results(trainer, tokenizer, train_split, model_args, data_args, train_result, train_seconds) -> dict:
    """What the run was, in the schema of `vanilla_transformer.model_card`; `bleu` is filled in by the caller."""
    args, config = trainer.args, trainer.model.config
    train_tokens = sum(int(n) for n in train_split["tgt_len"]) + sum(int(n) for n in train_split["src_len"])
    epochs = trainer.state.epoch or 0.0
    local = Path(data_args.dataset).exists()
    return {
        "src_lang": data_args.src_lang,
        "tgt_lang": data_args.tgt_lang,
        # A local directory is named by its folder (e.g. "multi30k"); a Hub dataset also by its id (card metadata).
        "dataset": {
            "name": Path(data_args.dataset).name if local else data_args.dataset,
            **({"path": data_args.dataset} if local else {"hub_id": data_args.dataset}),
            "train_pairs": len(train_split),
            "splits": {
                "train": data_args.train_split,
                "validation": data_args.validation_split,
                "test": data_args.test_split,
            },
        },
        "preset": model_args.preset,
        "num_parameters": trainer.model.num_parameters(),
        "tokenizer": {"type": "BPE with byte fallback (shared source/target)", "vocab_size": len(tokenizer)},
        "decoding": {
            "num_beams": trainer.model.generation_config.num_beams,
            "length_penalty": trainer.model.generation_config.length_penalty,
            "max_length": "source length + 50",
        },
        "bleu": {},
        "training": {
            "steps": trainer.state.global_step,
            "epochs": round(epochs, 3),
            "train_runtime_s": round(train_seconds, 1),
            # Source + target tokens (padding excluded) per second of training; evaluations are inside the runtime.
            "tokens_per_second": round(train_tokens * epochs / train_seconds, 1) if train_seconds else None,
            "hardware": describe_hardware(),
            "world_size": args.world_size,
            # What the step ran in, and why (bf16="auto" follows the hardware; see vanilla_transformer.precision).
            "precision": {
                "mixed_precision": args.mixed_precision,
                "reason": getattr(args, "precision_reason", None),
                "attention": config._attn_implementation,
                "torch_compile": args.torch_compile,
                # The config file's `cpu_float32` options, when the run trained in float32 on a CPU (command-line
                # options won over them; the hyperparameters below are what the run used).
                "cpu_float32_options": getattr(args, "preset_cpu_float32", None),
            },
            "final_train_loss": train_result.training_loss,
            "hyperparameters": {
                "max_tokens": args.max_tokens,
                "warmup_steps": args.warmup_steps,
                "lr_factor": args.lr_factor,
                "lr_cooldown": args.lr_cooldown,
                # The updates where the cool-down ran (a timed run plans them during training), or None.
                "lr_cooldown_updates": [
                    getattr(trainer.lr_scheduler, "cooldown_start", None),
                    getattr(trainer.lr_scheduler, "cooldown_end", None),
                ]
                if args.lr_cooldown
                else None,
                "label_smoothing": args.label_smoothing,
                "subword_split": args.subword_split,
                "bidirectional_steps": args.bidirectional_steps,
                "adam_betas": [args.adam_beta1, args.adam_beta2],
                "adam_epsilon": args.adam_epsilon,
                "dropout": config.dropout,
                "gradient_accumulation_steps": args.gradient_accumulation_steps,
                "seed": args.seed,
            },
        },
        "checkpoint_averaging": None,
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "best_validation_bleu": trainer.state.best_metric,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def describe_hardware() -> str:
    """The machine as its speed depends on it, for results.json and the card: the CPU's name, the instruction set
    torch's kernels use and its bfloat16 units (tokens per second differ ~2x between two AVX512_BF16 CPUs: Zen 4's
    bfloat16 GEMMs run half as fast per core as another EPYC's), cores and threads, and the GPU."""
    cpu = ", ".join([platform.machine(), torch.backends.cpu.get_cpu_capability(), *cpu_bfloat16_units()])
    text = f"{cpu_model_name()} ({cpu}), {os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}"
    return text + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")


def score_test_split(model, tokenizer, test, data_args: DataArguments, run_args: RunArguments, out_dir: Path) -> dict:
    """Test BLEU of `model` (beam search with its generation config); the hypotheses go to `out_dir`."""
    started = time.perf_counter()
    hypotheses = translate(model, tokenizer, test["source"], batch_size=run_args.test_batch_size)
    result = compute_bleu_with_lowercase(hypotheses, test["target"])
    seconds = round(time.perf_counter() - started, 1)
    result.update(sentences=len(hypotheses), seconds=seconds, split=data_args.test_split)
    (out_dir / f"{data_args.test_split}.hyp.{data_args.tgt_lang}").write_text("\n".join(hypotheses) + "\n")
    logger.info("Test BLEU (%s): %s", out_dir, result)
    return result


def average_last_checkpoints(out_dir: Path, k: int, tokenizer, device, after: int | None = None):
    """The average of the run's last `k` complete checkpoints (fewer if it has fewer) written after update `after`
    (the start of the learning-rate cool-down, when the run had one), saved with the tokenizer in `out_dir/averaged`:
    (the averaged model, the checkpoints' names), or None without such checkpoints.

    Why only the cool-down: checkpoints are written every `save_steps` updates, but a timed run's updates depend on
    the machine (about 9,500 in the Multi30k preset's hour with bf16 on AVX512_BF16, about 2,800 in float32 on an
    AVX2-only CPU). The last 10 checkpoints, 300 updates apart, were the last 28% of the former run and almost all of
    the latter, whose average then held half-trained models (validation BLEU 27.8 against 34.7 for the final model).
    The cool-down is the same fraction of every run, and the paper averages the last checkpoints of a run (section
    6.1), not checkpoints from its start."""
    available = complete_checkpoints(str(out_dir), after=after)  # never one whose save did not finish
    window = f" written after update {after} (the learning-rate cool-down)" if after is not None else ""
    if not available:
        logger.warning("No checkpoint in %s%s: nothing to average.", out_dir, window)
        return None
    if len(available) < k:
        logger.warning(
            "Only %d checkpoints in %s%s: averaging %d, not %d.", len(available), out_dir, window, len(available), k
        )
    checkpoints = available[-k:]
    averaged_dir = Path(average_checkpoints(checkpoints, str(out_dir / "averaged")))
    tokenizer.save_pretrained(averaged_dir)
    model = VanillaTransformerForConditionalGeneration.from_pretrained(averaged_dir).to(device)
    return model, [Path(c).name for c in checkpoints]


def write_results_and_card(directory: Path, config, results: dict, repo_id: str | None) -> None:
    (directory / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    logger.info("Results written to %s", directory / "results.json")
    # The local card is the one the Hub gets (the Trainer's generic card is replaced); it needs test results.
    if results["bleu"]:
        write_model_card(directory, config, results, repo_id=repo_id)


if __name__ == "__main__":
    main()
