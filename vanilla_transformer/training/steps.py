"""The steps of a training run before the Trainer, as `vanilla-transformer train` takes them (training/train.py, the
command) and bench/input_pipeline.py times them: the corpus (`load_data`), the shared tokenizer (`get_tokenizer`:
trained on the training split, section 5.1, or reused), the token ids filtered by length (`tokenize`), and the model
with the run's decoding in its generation config (`build_model`). Each takes the options' dataclasses
(training/options.py) and the Trainer's arguments for the processes' order (`main_process_first`); torch, `datasets`
and transformers load in the functions, so the command's early checks run without them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from .options import DataArguments, ModelArguments, RunArguments, TokenizerArguments

logger = logging.getLogger(__name__)
TOKENIZER_SETTINGS = "training_settings.json"  # in OUTPUT_DIR/tokenizer/


def load_data(data_args: DataArguments):
    """The train, validation and (if any) test splits as source/target pairs (`data.load_parallel_corpus`)."""
    from ..data.corpus import load_parallel_corpus

    splits = {"train": data_args.train_split}
    for split in ("validation", "test"):  # --validation_split '' / --test_split '': none
        if getattr(data_args, f"{split}_split"):
            splits[split] = getattr(data_args, f"{split}_split")
    raw = load_parallel_corpus(
        data_args.dataset,
        data_args.src_lang,
        data_args.tgt_lang,
        splits=tuple(splits),
        split_names=splits,
        config_name=data_args.dataset_config,
        src_column=data_args.src_column,
        tgt_column=data_args.tgt_column,
        # Its errors name these flags, where the options' names differ from its arguments'.
        flags={"source": "--dataset", "config_name": "--dataset_config", **{s: f"--{s}_split" for s in splits}},
    )
    if data_args.max_train_samples:
        raw["train"] = raw["train"].select(range(min(data_args.max_train_samples, len(raw["train"]))))
    return raw


def get_tokenizer(tok_args: TokenizerArguments, data_args: DataArguments, raw, training_args):
    """The tokenizer given (`tokenizer`), or the run's own: trained on the training split (section 5.1), or found in
    OUTPUT_DIR/tokenizer when it was trained with the same settings (a resumed run)."""
    from ..data.corpus import iter_texts
    from ..data.tokenizer import load_tokenizer, train_tokenizer

    if tok_args.tokenizer is not None:
        return load_tokenizer(tok_args.tokenizer)
    # Section 5.1: one vocabulary shared by source and target, learned on the training data only. Trained by the
    # main process and read back by the others, so that every process has the same one. Every process of every
    # machine waits for it (`local=False`): another machine's first process would otherwise look at the directory
    # while the main process writes it (and could read a settings file half written).
    tok_dir = Path(training_args.output_dir) / "tokenizer"
    settings = tokenizer_settings(tok_args, data_args)
    with training_args.main_process_first(desc="training the tokenizer", local=False):
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
                iter_texts(train),  # all sources, then all targets
                vocab_size=tok_args.vocab_size,
                min_frequency=tok_args.min_frequency,
            )
            tokenizer.save_pretrained(tok_dir)
            (tok_dir / TOKENIZER_SETTINGS).write_text(json.dumps(settings, indent=2) + "\n")
            logger.info(
                "Trained a shared BPE tokenizer of %d tokens on %d pairs -> %s", len(tokenizer), len(train), tok_dir
            )
    return load_tokenizer(str(tok_dir))


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


def tokenize(raw, tokenizer, data_args: DataArguments, training_args):
    """Token ids, filtered by length (the training split only: validation pairs are never dropped silently)."""
    from datasets import DatasetDict

    from ..data.corpus import tokenize_corpus

    num_proc = tokenization_processes(data_args.preprocessing_num_workers, len(raw["train"]))
    logger.info("Tokenizing with %d process%s.", num_proc, "es" if num_proc > 1 else "")
    with training_args.main_process_first(desc="tokenizing"):
        tokenized = tokenize_corpus(
            DatasetDict({split: raw[split] for split in ("train", "validation") if split in raw}),
            tokenizer,
            max_length=data_args.max_length,
            max_length_ratio=data_args.max_length_ratio,
            num_proc=num_proc if num_proc > 1 else None,
        )
    if data_args.max_eval_samples and "validation" in tokenized:
        validation = tokenized["validation"]
        tokenized["validation"] = validation.select(range(min(data_args.max_eval_samples, len(validation))))
    return tokenized


PAIRS_PER_TOKENIZATION_PROCESS = 50_000


def tokenization_processes(requested: int | None, train_pairs: int) -> int:
    """--preprocessing_num_workers, or by default one process per available CPU core, but no more than one per
    `PAIRS_PER_TOKENIZATION_PROCESS` training pairs: a small corpus (Multi30k) is tokenized in seconds by one
    process, faster than worker processes start; WMT14 (4.5M pairs) uses every core."""
    if requested:
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, train_pairs // PAIRS_PER_TOKENIZATION_PROCESS))


def build_model(model_args: ModelArguments, run_args: RunArguments, tokenizer):
    """A fresh model of the preset's sizes (or `init_from`'s), checked against the tokenizer, with the run's decoding
    in its generation config (set before training: checkpoints, evaluations and the averaged model use it)."""
    from ..data.tokenizer import check_tokenizer_fits_model
    from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

    if model_args.init_from:
        model = VanillaTransformerForConditionalGeneration.from_pretrained(model_args.init_from)
    else:
        model = VanillaTransformerForConditionalGeneration(build_config(model_args, tokenizer))
    check_tokenizer_fits_model(tokenizer, model.config)
    set_decoding(model.generation_config, run_args)
    logger.info(
        "Model: %s preset, %s parameters, %s",
        model_args.preset,
        f"{model.num_parameters():,}",
        model.config.to_diff_dict(),
    )
    return model


def build_config(model_args: ModelArguments, tokenizer):
    """The model's config: the preset's sizes (Table 3), the overrides given, and the tokenizer's vocabulary."""
    from ..configuration_vanilla_transformer import VanillaTransformerConfig

    overrides = {
        "d_model": model_args.d_model,
        # The paper stacks N layers in each (section 3.1); Marian and BART let the two counts differ, and so do we.
        "encoder_layers": model_args.encoder_layers if model_args.encoder_layers is not None else model_args.layers,
        "decoder_layers": model_args.decoder_layers if model_args.decoder_layers is not None else model_args.layers,
        "encoder_attention_heads": model_args.heads,
        "decoder_attention_heads": model_args.heads,
        "qk_head_dim": model_args.qk_head_dim,
        "v_head_dim": model_args.v_head_dim,
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


def set_decoding(generation_config, run_args: RunArguments) -> None:
    """The run's decoding options (those it sets) into the model's generation config: beam size, length penalty and
    its form, early stopping. The WMT14 recipes set section 6.1's: beam 4, the GNMT penalty with alpha 0.6, and
    tensor2tensor's stopping rule ("never": a sentence ends when no running hypothesis can beat the finished ones)."""
    if run_args.length_penalty is not None:
        generation_config.length_penalty = run_args.length_penalty
    if run_args.num_beams is not None:
        generation_config.num_beams = run_args.num_beams
    if run_args.length_penalty_form is not None:
        generation_config.length_penalty_form = run_args.length_penalty_form
    if run_args.early_stopping is not None:
        generation_config.early_stopping = {"true": True, "false": False}.get(
            run_args.early_stopping, run_args.early_stopping
        )
    if generation_config.num_beams == 1:
        # Greedy search (`--num_beams 1`): the beam-only options back to their defaults, or transformers refuses to
        # save the generation config at the end of the run (a recipe's length penalty or early stopping without beams).
        generation_config.length_penalty, generation_config.early_stopping = 1.0, False
