"""The options of `vanilla-transformer train`, and how a command line and a recipe become them.

Five dataclasses, parsed by transformers' `HfArgumentParser` (`DataclassParser`, as `run_translation.py` does): the
model (`ModelArguments`), the data (`DataArguments`), the tokenizer (`TokenizerArguments`), the run's own
(`RunArguments`: decoding, time limit, averaging, output) and `VanillaTrainingArguments`, the Trainer's
`Seq2SeqTrainingArguments` re-defaulted to the paper's recipe (section 5) with the few fields it lacks, and the fields
of what the run derives from the options (`init=False`). Each validates itself in `__post_init__`. A command line is
read once (`read_command_line`: one pass of the parser; the recipe, `--recipe NAME` or a JSON file, read once, by
`preflight` for `train`); `build_arguments` makes the dataclasses from it with the recipe's values as defaults, checks
what needs more than one of them and sets what the run derives: the recipe, its `cpu_float32` options, the warm-up
fitted to the budget (the learning rate's rules are schedule.py's). `--help` lists the recipe's options in groups;
`--help_all` adds the Trainer's others, still accepted. `options.json` describes this parser for `preflight.py`,
which prints the help and checks the command line before torch and transformers load (`write_option_table` rewrites
it). docs/training.md explains every option group.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import HfArgumentParser, Seq2SeqTrainingArguments

from ..configuration_vanilla_transformer import PRESETS
from ..generation_vanilla_transformer import check_decoding, check_positive_int
from ..precision import bf16_support
from .preflight import (  # the command line's part that needs neither torch nor transformers
    OPTIONS_FILE,
    TRAINER_GROUP,
    TRUE_WORDS,
    ErrorsAsValues,
    add_parser_options,
    bf16_word,
    check_minutes,
    default_recipe,
    describe_parser,
    format_help,
    given_options,
    number_or_none,
    output_dir_problem,
    parser_settings,
    read_recipe,
    resume_value,
    with_defaults,
)
from .schedule import fit_warmup_of, keep_schedule_of_checkpoint


logger = logging.getLogger(__name__)

MODEL_PRESETS = tuple(PRESETS)  # --preset: the model sizes of the paper's Table 3, and the small one
KEEP_CHECKPOINTS = ("averaged", "last", "all")  # --keep_checkpoints: see RunArguments
LR_SCHEDULES = ("noam", "trainer")


def check_fraction(name: str, value, why: str) -> None:
    """ValueError naming `name` unless 0 <= value < 1."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1), got {value!r} ({why}).")


@dataclass
class ModelArguments:
    _argument_group_name = "model (the paper's Table 3 sizes; every other field is an override)"

    preset: str = field(default="small", metadata={"help": f"Model size: one of {list(MODEL_PRESETS)}."})
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
    qk_head_dim: int | None = field(
        default=None, metadata={"help": "d_k, each head's query/key width (default d_model / h; Table 3, row B)."}
    )
    v_head_dim: int | None = field(
        default=None, metadata={"help": "d_v, each head's value width (default d_model / h)."}
    )
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

    def __post_init__(self):
        if self.preset not in MODEL_PRESETS:
            raise ValueError(f"`preset` {self.preset!r} does not exist: choose one of {list(MODEL_PRESETS)}.")
        for name in (
            "d_model",
            "layers",
            "encoder_layers",
            "decoder_layers",
            "heads",
            "qk_head_dim",
            "v_head_dim",
            "ffn_dim",
        ):
            check_positive_int(f"`{name}`", getattr(self, name), none="")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if getattr(self, name) is not None:
                check_fraction(name, getattr(self, name), "a dropout probability")


@dataclass
class DataArguments:
    _argument_group_name = "data (docs/training.md: the formats)"

    dataset: str = field(
        default="multi30k/data/task1/raw",
        metadata={
            "help": "{split}.{lang}[.gz] files, a TSV/JSONL file, a save_to_disk directory or a Hub dataset id "
            "(e.g. wmt14); default: a clone of Multi30k's repository (README)."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration, e.g. 'de-en'."})
    src_lang: str = field(default="en", metadata={"help": "Source language code."})
    tgt_lang: str = field(default="de", metadata={"help": "Target language code."})
    train_split: str = field(default="train", metadata={"help": "Name of the training split in the data."})
    validation_split: str = field(
        default="val", metadata={"help": "Name of the validation split in the data ('' = none: no evaluation)."}
    )
    test_split: str | None = field(
        default="test_2016_flickr", metadata={"help": "Test split, translated once at the end ('' = none)."}
    )
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
    preprocessing_num_workers: int | None = field(
        default=None,
        metadata={
            "help": "Processes for tokenization and length filtering (default: one per available CPU core, at most "
            "one per 50,000 training pairs)."
        },
    )

    def __post_init__(self):
        self.test_split = self.test_split or None
        check_positive_int("`max_length`", self.max_length)
        for name in ("max_train_samples", "max_eval_samples", "preprocessing_num_workers"):
            check_positive_int(f"`{name}`", getattr(self, name), none="")
        if self.max_length_ratio is not None and not self.max_length_ratio >= 1:
            raise ValueError(f"`max_length_ratio` must be at least 1, got {self.max_length_ratio!r}.")


@dataclass
class TokenizerArguments:
    _argument_group_name = "tokenizer (section 5.1: one BPE vocabulary shared by both languages)"

    tokenizer: str | None = field(
        default=None,
        metadata={"help": "Path or Hub id of a tokenizer; by default one is trained on the training split."},
    )
    vocab_size: int = field(default=8000, metadata={"help": "Shared vocabulary size of a trained tokenizer."})
    min_frequency: int = field(default=2, metadata={"help": "Minimum pair frequency for a BPE merge."})

    def __post_init__(self):
        check_positive_int("`vocab_size`", self.vocab_size)
        check_positive_int("`min_frequency`", self.min_frequency)


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
            "help": "Length penalty alpha of beam search, saved in the model's generation config (validation and "
            "test BLEU use it, and so do the model's users). None: section 6.1's 0.6."
        },
    )
    num_beams: int | None = field(
        default=None,
        metadata={"help": "Beam size, saved in the model's generation config like --length_penalty. None: 4."},
    )
    length_penalty_form: str | None = field(
        default=None,
        metadata={
            "help": "What --length_penalty divides the log-probability by: 'length' (|Y| ** alpha, the default) or "
            "'gnmt' (((5 + |Y|) / 6) ** alpha, the paper's, section 6.1)."
        },
    )
    early_stopping: str | None = field(
        default=None,
        metadata={
            "help": "When beam search ends a sentence: 'true' (num_beams hypotheses finished, the default), 'never' "
            "(none running can beat them) or 'false' (transformers' heuristic)."
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
    keep_checkpoints: str = field(
        default="averaged",
        metadata={
            "help": "What a finished run keeps of its checkpoints: averaged = the newest whole and the weights of the "
            "averaged and best ones; last = the newest; all = every one (docs/training.md).",
            "choices": KEEP_CHECKPOINTS,
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Delete the earlier run in --output_dir first. Without it, or --resume_from_checkpoint, a "
            "non-empty --output_dir is refused, unless it holds only what a run writes before its first checkpoint."
        },
    )

    def __post_init__(self):
        check_positive_int("`average_last`", self.average_last, minimum=0)
        check_positive_int("`test_batch_size`", self.test_batch_size)
        if self.keep_checkpoints not in KEEP_CHECKPOINTS:
            raise ValueError(
                f"`keep_checkpoints` must be one of {list(KEEP_CHECKPOINTS)}, got {self.keep_checkpoints!r}."
            )
        check_decoding(
            num_beams=self.num_beams, length_penalty=self.length_penalty, length_penalty_form=self.length_penalty_form
        )
        if isinstance(self.early_stopping, bool):  # a recipe's JSON true / false
            self.early_stopping = str(self.early_stopping).lower()
        if self.early_stopping is not None:
            self.early_stopping = self.early_stopping.strip().lower()
            if self.early_stopping not in ("true", "false", "never"):
                raise ValueError(f"`early_stopping` must be true, false or never, got {self.early_stopping!r}.")
        check_minutes(self.max_train_minutes)


def resolve_bf16(value, fp16: bool, device_type: str) -> tuple[bool, str]:
    """(bfloat16 on, why) for a `bf16` of True/False, "true"/"false" or "auto" (on where `device_type` has bfloat16
    natively, unless fp16 is asked for): the one rule behind `VanillaTrainingArguments.bf16` and the choice of a
    recipe's `cpu_float32` options."""
    value = bf16_word(value)
    if value == "auto":
        if fp16:
            return False, "fp16 asked for"
        native, reason = bf16_support(device_type)
        return native, f"bf16=auto: {reason}"
    return value, "bf16 asked for" if value else ("fp16 asked for" if fp16 else "float32")


@dataclass
class VanillaTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with the paper's defaults (section 5) and the recipe's own fields.

    Re-defaulted (each can still be overridden): `adam_beta1=0.9`, `adam_beta2=0.98`, `adam_epsilon=1e-9`,
    `weight_decay=0.0` (with the default `optim="adamw_torch_fused"`, the Trainer's fused AdamW is then the paper's
    Adam), `max_grad_norm=0.0` (no clipping), `warmup_steps=4000`, `label_smoothing_factor=0.1` (section 5.4; the
    trainer's loss, `trainer.LabelSmoothedLoss`), `predict_with_generate=True`,
    `metric_for_best_model="bleu"` and `ddp_find_unused_parameters=False`. The learning rate follows `lr_schedule`:
    "noam" (the paper's, `schedule.NoamLR`, which has no use for `learning_rate` and `lr_scheduler_type`) or "trainer"
    (the stock schedule `lr_scheduler_type` with `learning_rate`).
    """

    lr_schedule: str = field(
        default="noam",
        metadata={
            "help": "noam: the paper's warm-up and inverse square root decay (section 5.3, eq. 3); trainer: the "
            "Trainer's --lr_scheduler_type with --learning_rate.",
            "choices": LR_SCHEDULES,
        },
    )
    lr_factor: float = field(
        default=1.0,
        metadata={"help": "Constant multiplier of the paper's learning-rate schedule (1.0 in the paper)."},
    )
    lr_cooldown: float = field(
        default=0.0,
        metadata={
            "help": "Fraction of the run (of max_steps, or of max_train_minutes) at its end over which the learning "
            "rate falls linearly to zero; not in the paper: 0 = none."
        },
    )
    max_tokens: int | None = field(
        default=4096,
        metadata={
            "help": "Tokens of a training batch per process, the larger of source and target, padding included "
            "(section 5.1); None: batches of per_device_train_batch_size sentences."
        },
    )
    max_sentences: int | None = field(
        default=None, metadata={"help": "Optional cap on the number of sentences in a token-based batch."}
    )
    subword_split: float = field(
        default=0.0,
        metadata={
            "help": "Probability of undoing each BPE merge of a training sentence, drawn anew per batch (BPE-dropout, "
            "Provilkov et al. 2020; not in the paper): 0 = off."
        },
    )
    bidirectional_steps: int = field(
        default=0,
        metadata={
            "help": "Updates at the start of training whose batches are reversed (target -> source) with probability "
            "1/2 (BiT, Ding et al. 2021; not in the paper): 0 = off."
        },
    )
    pad_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "Pad batches to a multiple of this many tokens, counted in the token budget (8 suits GPU tensor "
            "cores; docs/performance.md); None: pad to the longest sequence."
        },
    )

    # The paper's values for fields of TrainingArguments (a dataclass field redeclared in a subclass keeps its
    # place and takes the new default).
    adam_beta1: float = field(default=0.9, metadata={"help": "Adam beta1 (section 5.3: 0.9)."})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam beta2 (section 5.3: 0.98)."})
    adam_epsilon: float = field(default=1e-9, metadata={"help": "Adam epsilon (section 5.3: 1e-9)."})
    weight_decay: float = field(default=0.0, metadata={"help": "L2 weight decay of Adam (the paper uses none)."})
    max_grad_norm: float = field(default=0.0, metadata={"help": "Gradient clipping norm; 0 = none (paper)."})
    warmup_steps: float = field(default=4000, metadata={"help": "Warm-up updates (section 5.3: 4000)."})
    label_smoothing_factor: float = field(
        default=0.1,
        metadata={
            "help": "Label smoothing, the paper's epsilon_ls (section 5.4: 0.1; 0 = plain cross-entropy), of the "
            "trainer's loss."
        },
    )
    predict_with_generate: bool = field(default=True, metadata={"help": "Evaluate BLEU on beam-search translations."})
    metric_for_best_model: str | None = field(
        default="bleu", metadata={"help": "The metric that selects the best checkpoint (validation BLEU)."}
    )
    ddp_find_unused_parameters: bool | None = field(
        default=False,
        metadata={"help": "Every parameter gets a gradient in every step, so DDP need not search for unused ones."},
    )
    # Mixed precision: `bf16` also takes "auto" (the recipes' value), resolved in __post_init__ to a bool.
    bf16: str = field(
        default="false",
        metadata={
            "help": "bfloat16 mixed precision (float32 weights, Adam state and loss): true, false, or auto = on where "
            "the hardware has bfloat16 natively (a CUDA GPU; a CPU with AVX512_BF16 or AMX).",
            "nargs": "?",
            "const": "true",
        },
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "Skip NaN/inf losses in the logged training loss. Off: the check reads the loss on the host after "
            "every micro-batch, a GPU sync and a break in compiled graphs."
        },
    )

    # What the run derives from the options (init=False: no option of the command line, not in `to_dict`), set where
    # it is decided and read by the trainer, its callbacks, the log and results.json ("training"). `build_arguments`
    # sets the recipe: {"name", "default": chosen by the corpus's size, no --recipe} and its `cpu_float32` options
    # that apply (None: none).
    recipe: dict | None = field(init=False, default=None)
    recipe_cpu_float32: dict | None = field(init=False, default=None)
    # The warm-up fitted to the run or kept from its checkpoint (`schedule.fit_warmup_of`,
    # `schedule.keep_schedule_of_checkpoint`, `callbacks.WarmupFitter`): {"warmup_steps": [recipe's, fitted],
    # "lr_factor": [...], ...}; None: the options' own.
    warmup_fitted: dict | None = field(init=False, default=None)
    # {"lr_factor": whether to scale it} when `callbacks.WarmupFitter` fits the warm-up to the run's speed, else None.
    fit_warmup_to_speed: dict | None = field(init=False, default=None)
    precision_reason: str | None = field(init=False, default=None)  # why `bf16` is what it is (`resolve_bf16`)

    def __post_init__(self):
        self._resolve_bf16()
        super().__post_init__()
        # The Trainer takes accelerate launch's --mixed_precision (ACCELERATE_MIXED_PRECISION) when neither bf16 nor
        # fp16 is on, and ignores it otherwise: the run's own precision wins either way (docs/distributed.md).
        launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        if not (self.bf16 or self.fp16):
            self.mixed_precision = "no"
        if launcher not in ("no", self.mixed_precision):
            logger.warning(
                "accelerate launch's --mixed_precision %s is not used: the run trains in %s (%s; --bf16 and --fp16 "
                "set it).",
                launcher,
                {"no": "float32"}.get(self.mixed_precision, self.mixed_precision),
                self.precision_reason,
            )
        check_fraction("label_smoothing_factor", self.label_smoothing_factor, "the paper uses 0.1")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"`lr_schedule` must be one of {list(LR_SCHEDULES)}, got {self.lr_schedule!r}.")
        if not self.lr_factor > 0:
            raise ValueError(f"`lr_factor` must be positive, got {self.lr_factor!r} (the paper's schedule has 1.0).")
        check_fraction(
            "lr_cooldown", self.lr_cooldown, "a fraction of the run; 0 = the paper's schedule, no cool-down"
        )
        if self.lr_cooldown and self.lr_schedule != "noam":
            raise ValueError(
                f"`lr_cooldown` belongs to the paper's schedule (`lr_schedule`='noam'), not to the Trainer's "
                f"{self.lr_scheduler_type!r}: pick that schedule's own decay instead."
            )
        check_positive_int("`max_tokens`", self.max_tokens, none="")
        check_positive_int("`max_sentences`", self.max_sentences, none="")
        check_fraction("subword_split", self.subword_split, "0 = off; BPE-dropout's paper uses 0.1")
        check_positive_int("`bidirectional_steps`", self.bidirectional_steps, minimum=0)
        check_positive_int("`pad_to_multiple_of`", self.pad_to_multiple_of, none="")

    def _resolve_bf16(self) -> None:
        """`bf16` as a bool (the Trainer's type), from True/False, "true"/"false" or "auto" (`resolve_bf16`);
        `precision_reason` says why, for the log and results.json. Runs before the Trainer's own `__post_init__`,
        which reads `bf16`."""
        asked = self.bf16
        self.bf16, self.precision_reason = resolve_bf16(asked, self.fp16, self._training_device_type())
        if self.bf16 and not (isinstance(asked, str) and asked.strip().lower() == "auto"):
            native, reason = bf16_support(self._training_device_type())
            if not native:
                logger.warning("bf16 asked for, but %s.", reason)

    def _training_device_type(self) -> str:
        # The device the Trainer will pick, known before `TrainingArguments.__post_init__` sets it up. An accelerator
        # torch was built for but cannot find (PyPI's CUDA build on a machine without a GPU) is none: the CPU.
        accelerator = torch.accelerator.current_accelerator(check_available=True)
        return "cpu" if self.use_cpu or accelerator is None else accelerator.type


ARGUMENT_CLASSES = (ModelArguments, DataArguments, TokenizerArguments, RunArguments, VanillaTrainingArguments)
# The options: the dataclasses' fields but those the run derives (`init=False`).
OPTION_NAMES = frozenset(f.name for cls in ARGUMENT_CLASSES for f in dataclasses.fields(cls) if f.init)

# What `--help` shows of VanillaTrainingArguments (the recipe's options and the run's), by group and in this order;
# the Trainer's other fields are listed by `--help_all` and accepted either way.
HELP_GROUPS = {
    "recipe (section 5; docs/model.md lists every departure from the paper)": (
        "max_tokens",
        "max_sentences",
        "gradient_accumulation_steps",
        "lr_schedule",
        "warmup_steps",
        "lr_factor",
        "lr_cooldown",
        "label_smoothing_factor",
        "adam_beta1",
        "adam_beta2",
        "adam_epsilon",
        "subword_split",
        "bidirectional_steps",
        "bf16",
        "fp16",
        "torch_compile",
        "pad_to_multiple_of",
        "learning_rate",
        "lr_scheduler_type",
    ),
    "decoding (the model's generation config, and evaluation)": (
        "num_beams",
        "length_penalty",
        "length_penalty_form",
        "early_stopping",
        "test_batch_size",
        "per_device_eval_batch_size",
        "max_eval_samples",
    ),
    "run and output": (
        "output_dir",
        "max_steps",
        "num_train_epochs",
        "max_train_minutes",
        "eval_strategy",
        "eval_steps",
        "eval_on_start",
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "average_last",
        "keep_checkpoints",
        "logging_steps",
        "report_to",
        "plots",
        "seed",
        "resume_from_checkpoint",
        "overwrite_output_dir",
        "use_cpu",
        "dataloader_num_workers",
        "push_to_hub",
        "hub_model_id",
        "hub_private_repo",
    ),
}
# The help of Trainer options whose stock text does not say what they do here (sentence batches, scripts that
# resume, a push at every save).
HELP_TEXTS = {
    "gradient_accumulation_steps": "Micro-batches per update: an update holds about max_tokens x processes x this "
    "many tokens per side (the paper's base recipe: 3,125 x 8 x 1 = 25,000). The loss is normalised by the "
    "update's target tokens, so splitting an update does not change it.",
    "resume_from_checkpoint": "Continue a run: true = the newest complete checkpoint of --output_dir, or a "
    "checkpoint-<step> directory. The learning rate, data order, augmentation and losses go on as without the "
    "stop. A checkpoint whose optimizer state a finished run removed (--keep_checkpoints) is refused.",
    "save_total_limit": "Checkpoints kept while training: the oldest are deleted (the best by validation stays "
    "too). At the end, --keep_checkpoints decides what stays.",
    "push_to_hub": "Publish the run on the Hub as --hub_model_id. The token and the repo are checked before "
    "training; the Trainer pushes the model at each save (--hub_strategy); at the end one commit uploads the final "
    "model, its card, plots and results.json and deletes the training files those pushes left (docs/sharing.md).",
    "hub_model_id": "The Hub repo to publish to: 'namespace/name', or 'name' in your namespace. Default: the name "
    "of --output_dir.",
    "max_steps": "Updates to train for (with --max_train_minutes, at most this many); -1: --num_train_epochs decides.",
    "output_dir": "Where the run writes its model, checkpoints and report. Default: the recipe's, else "
    "runs/DATASET_SRC_TGT_PRESET (runs/my_corpus_en_cs_small), as the recipes name theirs.",
    "dataloader_num_workers": "Processes that load the batches; 0: the training process itself.",
    "use_cpu": "Train on the CPU even with an accelerator. Default: true where torch finds none, else false.",
    "hub_private_repo": "Create the Hub repo private. Visibility is chosen only when the repo is created: true with "
    "an existing public repo is an error.",
}
# Options of the Trainer that this recipe replaces: given with the paper's schedule or token batches, they would be
# silently ignored, so they are refused, naming what to use instead.
IGNORED_UNLESS = {
    "learning_rate": (
        lambda a: a.lr_schedule == "noam",
        "the paper's schedule (`lr_schedule` noam) sets the rate: "
        "use `lr_factor`, or `lr_schedule` trainer to use `learning_rate`",
    ),
    "lr_scheduler_type": (
        lambda a: a.lr_schedule == "noam",
        "it names a stock schedule, used only with `lr_schedule` trainer",
    ),
    "per_device_train_batch_size": (
        lambda a: a.max_tokens is not None,
        "batches hold about `max_tokens` tokens: "
        "set `max_tokens`, or `max_tokens` none for batches of this many sentences",
    ),
}


class DataclassParser(ErrorsAsValues, HfArgumentParser):
    """`HfArgumentParser` of the five dataclasses (preflight's `OptionParser` reads the same options from
    options.json, before torch loads), whose errors are ValueErrors: `train` prints them as every command prints its
    errors, one line `vanilla-transformer train: error: ...` naming the flag, exit status 2."""


def build_parser(show_all: bool = False) -> DataclassParser:
    """The parser of `train`, its option groups in the order `--help` lists them: the model's, the data's and the
    tokenizer's (their dataclasses'), then HELP_GROUPS, then the Trainer's other options, listed with `show_all`
    (accepted either way)."""
    fields = {}
    for cls in ARGUMENT_CLASSES:
        hints = typing.get_type_hints(cls)
        fields.update((f.name, (f, hints[f.name])) for f in dataclasses.fields(cls) if f.init)
    listed = {name for names in HELP_GROUPS.values() for name in names}
    groups = {
        cls._argument_group_name: [f.name for f in dataclasses.fields(cls) if f.name not in listed]
        for cls in (ModelArguments, DataArguments, TokenizerArguments)
    }
    groups.update(HELP_GROUPS)
    grouped = {name for names in groups.values() for name in names}
    groups[TRAINER_GROUP] = [name for name in fields if name not in grouped]
    # Each group of `--help` as a dataclass of its fields, which HfArgumentParser makes into one argument group of
    # options (`_argument_group_name`); what the parser builds are the five dataclasses (`dataclass_types` below).
    layout = [
        dataclasses.make_dataclass(
            f"HelpGroup{number}",
            [_option_field(*fields[name], shown=show_all or title != TRAINER_GROUP) for name in names],
            namespace={"_argument_group_name": title},
            kw_only=True,
        )
        for number, (title, names) in enumerate(groups.items())
    ]
    parser = DataclassParser(layout, **parser_settings())
    parser.dataclass_types = list(ARGUMENT_CLASSES)  # what `parse_dict` builds
    add_parser_options(parser)
    return parser


def _option_field(field: dataclasses.Field, hint, shown: bool) -> tuple:
    """`(name, type, field)` of `make_dataclass` for one option: `field`'s default, with HELP_TEXTS' help, no help
    where not `shown`, and `none` accepted for an optional number (`--max_tokens none`)."""
    metadata = dict(field.metadata, help=HELP_TEXTS.get(field.name, field.metadata.get("help")))
    if not shown:
        metadata["help"] = argparse.SUPPRESS
    kinds = typing.get_args(hint)
    number = next((kind for kind in kinds if kind in (int, float)), None)
    kind = number_or_none(number) if number and len(kinds) == 2 and type(None) in kinds else hint
    default = dataclasses.field(default=field.default, default_factory=field.default_factory, metadata=metadata)
    return field.name, kind, default


def trains_in_float32_on_cpu(bf16, fp16, use_cpu) -> bool:
    """Whether the run trains in float32 on a CPU, from the raw `bf16` (true/false/auto), `fp16` and `use_cpu` of the
    command line or recipe, before the arguments are built (the decision `VanillaTrainingArguments` makes)."""
    fp16, use_cpu = (str(v).strip().lower() in TRUE_WORDS for v in (fp16, use_cpu))
    device = VanillaTrainingArguments._training_device_type(SimpleNamespace(use_cpu=use_cpu))
    return device == "cpu" and not fp16 and not resolve_bf16(bf16, fp16, device)[0]


def parse_args(argv: list[str] | None = None, train_pairs: int | None = None):
    """The five dataclasses from the command line `argv` (default `sys.argv[1:]`), a recipe giving defaults that the
    command line overrides: the one `--recipe` names, or without it the recipe for a corpus of `train_pairs` training
    pairs (`default_recipe`; the small-corpus one while that is unknown). Every error is a ValueError whose message
    names the option in backticks (`as_flags` turns them into flags); `--help` / `--help_all` print and exit. For
    Python callers: `train` reads its command line once (`read_command_line`) and builds the arguments from it
    (`build_arguments`), again for the corpus's size once the data is read."""
    return build_arguments(read_command_line(argv), train_pairs)


@dataclass
class CommandLine:
    """`train`'s command line, read once by the parser: the options it gives (`given`, typed as the dataclasses'
    fields), the recipe it names (or without --recipe the small-corpus one: `recipe`, with its options and
    `cpu_float32` options, read once), and the command's own `defaults` (over the recipe's, under the command line).
    What `build_arguments` makes the arguments from."""

    parser: DataclassParser
    given: dict
    recipe: str
    recipe_options: dict
    cpu_float32: dict
    defaults: dict


def read_command_line(
    argv: list[str] | None = None, recipe: tuple[str, dict, dict] | None = None, defaults: dict | None = None
) -> CommandLine:
    """One pass of the parser over `argv`: the options it gives, and the recipe it names, `recipe` (name, options,
    cpu_float32 options) where `preflight` has read it. `--help` / `--help_all` print and exit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    given = given_options(parser, argv, OPTION_NAMES)
    if recipe is None:
        name = given.get("recipe") or default_recipe()
        recipe = (name, *read_recipe(name, OPTION_NAMES))
    if given.get("help") or given.get("help_all"):  # `preflight` prints them too, from options.json
        shown = build_parser(show_all=bool(given.get("help_all")))
        print(format_help(shown, given, recipe[1], recipe[2]), end="")
        raise SystemExit(0)
    return CommandLine(parser, given, *recipe, defaults=dict(defaults or {}))


def build_arguments(command_line: CommandLine, train_pairs: int | None = None):
    """The five dataclasses of `command_line`, and what the run derives from them, in their declared fields: the
    recipe (without --recipe, the one for `train_pairs` training pairs), its `cpu_float32` options where the run
    trains in float32 on a CPU (`trains_in_float32_on_cpu`; the precision itself is `VanillaTrainingArguments`'),
    and the warm-up fitted to the run's budget (`schedule.fit_warmup_of`) or kept from the checkpoint resumed
    (`schedule.keep_schedule_of_checkpoint`). `--num_train_epochs` given without `--max_steps` counts (a recipe's
    `max_steps` would override it)."""
    parser, given = command_line.parser, command_line.given
    name = given.get("recipe") or default_recipe(train_pairs)
    if name == command_line.recipe:
        recipe, cpu_float32 = command_line.recipe_options, command_line.cpu_float32
    else:  # no --recipe, and a corpus of the other size than the one assumed before the data was read
        recipe, cpu_float32 = read_recipe(name, OPTION_NAMES)
    # Without an accelerator, say so to the Trainer: only then does it set up gloo data parallelism across the
    # processes of `accelerate launch --multi_gpu` / `torchrun` (otherwise each CPU process trains alone).
    defaults = {"use_cpu": torch.accelerator.current_accelerator(check_available=True) is None, **recipe}
    precision = [given.get(key, defaults.get(key, parser.get_default(key))) for key in ("bf16", "fp16", "use_cpu")]
    if cpu_float32 and trains_in_float32_on_cpu(*precision):
        defaults.update(cpu_float32)  # the command line still wins
    else:
        cpu_float32 = {}
    if "num_train_epochs" in given and "max_steps" not in given:
        defaults["max_steps"] = -1  # the Trainer lets a positive max_steps win over the epochs asked for
    defaults.update(command_line.defaults)
    parsed = parser.parse_dict(with_defaults(parser, given, defaults), allow_extra_keys=True)
    model_args, data_args, tok_args, run_args, training_args = parsed
    training_args.recipe = {"name": name, "default": "recipe" not in given}
    training_args.recipe_cpu_float32 = cpu_float32 or None
    check_combination(set(given) | set(recipe) | set(cpu_float32), *parsed)
    if training_args.resume_from_checkpoint:
        keep_schedule_of_checkpoint(training_args, given)
    elif "warmup_steps" not in given:
        minutes, recipe_minutes = run_args.max_train_minutes, recipe.get("max_train_minutes")
        fit_warmup_of(training_args, minutes, recipe_minutes, lr_factor_given="lr_factor" in given)
    return parsed


def check_combination(given: set[str], model_args, data_args, tok_args, run_args, training_args) -> None:
    """What needs more than one dataclass, or knows which options were given: refuse what would be ignored."""
    for name, (ignored, why) in IGNORED_UNLESS.items():
        if name in given and ignored(training_args):
            raise ValueError(f"`{name}` would be ignored: {why}.")
    if training_args.max_tokens is not None and data_args.max_length > training_args.max_tokens:
        raise ValueError(
            f"`max_length` {data_args.max_length} exceeds `max_tokens` {training_args.max_tokens}: a pair of that "
            f"length would not fit in any batch; lower max_length or raise max_tokens."
        )
    # The Trainer's convention: True = the newest checkpoint in output_dir.
    training_args.resume_from_checkpoint = resume_value(training_args.resume_from_checkpoint)
    if training_args.resume_from_checkpoint:  # the output directory itself is `train.prepare_output_dir`'s
        problem = output_dir_problem(Path(training_args.output_dir), training_args.resume_from_checkpoint, False)
        if problem:
            raise ValueError(problem)


def write_option_table(path: Path = OPTIONS_FILE) -> None:
    """Write `options.json`, the description of this parser that `preflight` builds `--help` and its checks from
    without torch or transformers: run after changing an option (a test compares the file with this parser)."""
    path.write_text(json.dumps(describe_parser(build_parser(show_all=True)), indent=1) + "\n", encoding="utf-8")
