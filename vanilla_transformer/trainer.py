"""The paper's training recipe (section 5) on the Hugging Face `Seq2SeqTrainer`.

`VanillaTrainingArguments` re-defaults `Seq2SeqTrainingArguments` to the paper and adds the few knobs the
Trainer lacks; `VanillaTransformerTrainer` changes only what the recipe needs:

- optimizer (section 5.3): torch's fused `Adam(beta1=0.9, beta2=0.98, eps=1e-9)` (one kernel for all parameters,
  CPU and CUDA), no weight decay, no gradient clipping (`max_grad_norm=0`, as in the paper and fairseq's
  `--clip-norm 0`; the gradient norm is then computed only for the updates that are logged). Another `optim` than
  the default `adamw_torch_fused` / `adamw_torch` gets the Trainer's optimizer;
- learning rate (section 5.3, eq. 3): `schedule.NoamLR`, warm-up 4000 updates, peak
  `lr_factor * (d_model * warmup_steps)^-0.5` with `d_model` read from the model config. It is used when
  `lr_scheduler_type="inverse_sqrt"` (the default here; `learning_rate` is then ignored); any other
  `lr_scheduler_type` gets the stock Trainer scheduler driven by `learning_rate`. Not in the paper, off by
  default: `lr_cooldown`, a linear decay to zero over the last fraction of the run (planned by `TimeLimit` in a
  timed run);
- loss (section 5.4): label-smoothed cross-entropy, epsilon 0.1, computed by the model (`epsilon_ls`, float32,
  see `label_smoothed_cross_entropy`; so that `torch_compile` compiles it with the forward), pad positions
  (label -100) excluded, normalized by the number of target tokens of the whole optimizer step. The Trainer counts them across gradient-accumulation micro-batches (and, with
  `average_tokens_across_devices`, across processes) and passes the count as `num_items_in_batch`, so the
  loss and its gradients do not depend on how a batch is split. The logs show the smoothed `loss` and,
  beside it, the plain `nll_loss` and `ppl` = exp(nll_loss) (natural log, per target token);
- batches (section 5.1): about `max_tokens` source and target tokens per batch and process, built by
  `batching.TokenBatchSampler`, which shards itself across data-parallel processes;
- not in the paper, off by default: `subword_split`, the sentences of each training batch re-segmented into smaller
  subwords at random (`subword_split.py`, a reproducible variant of BPE-dropout), before the loss's token count;
  and `bidirectional_steps`, the first updates trained on both directions (half of their batches reversed), BiT;
- precision: `bf16="auto"` (the presets) is bfloat16 autocast where the hardware has it natively, float32
  elsewhere (`precision.py`; the log and results.json say which and why); float32 master weights, Adam state and
  loss. In bfloat16 on a CPU the model runs the eager attention (torch's CPU SDPA is slow in bfloat16);
- evaluation: the loss, NLL and perplexity on the validation set, and cased detokenized sacreBLEU of
  beam-search translations (`predict_with_generate`, the model's generation config: beam 4, length penalty
  0.6); the best checkpoint by BLEU is tracked and kept (`metric_for_best_model="bleu"`). Sentences are sorted by
  length (little padding in beam search), the loss forward builds no KV cache, and its encoder output is what
  generation starts from (the source is encoded once). With several
  processes, predictions and per-sentence losses are gathered with `gather_for_metrics`, so that the sentences
  repeated to fill the last round of batches do not count twice: the scores equal one process's;
- time limit: the `TimeLimit` callback stops (and saves) after a wall-clock budget, the same step on every process;
  `TimeLimitProgressCallback` is the progress bar of such a run (seconds of the limit, not steps of `max_steps`);
- checkpoints: safetensors weights, in the Trainer's `checkpoint-<step>` directories. A checkpoint is complete
  once its `trainer_state.json` exists, which the Trainer writes last; resuming takes only complete ones
  (`last_checkpoint`), so a crash during a save never makes `resume_from_checkpoint=True` pick a half-written one.

Resuming (`trainer.train(resume_from_checkpoint=...)`) restores the model, the optimizer, the schedule
(`scheduler.pt`), the RNG states and the position in the data (the sampler's order depends only on its seed
and the epoch), so it continues the uninterrupted run's loss curve exactly (tests/test_trainer.py).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import datasets
import numpy as np
import torch
from accelerate.data_loader import prepare_data_loader
from accelerate.utils import broadcast
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import ProgressCallback, Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback
from transformers.modeling_outputs import BaseModelOutput
from transformers.trainer import SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_utils import SchedulerType, seed_worker
from transformers.training_args import OptimizerNames

from .averaging import CHECKPOINT_RE, complete_checkpoints, is_complete_checkpoint
from .batching import TokenBatchSampler
from .loss_vanilla_transformer import label_smoothed_cross_entropy
from .metrics import make_compute_metrics
from .precision import bf16_support, fast_attention_implementation
from .schedule import NoamLR, peak_learning_rate
from .subword_split import merge_tree, split_batch


logger = logging.getLogger(__name__)


@dataclass
class VanillaTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with the paper's defaults (section 5) and the recipe's own fields.

    Re-defaulted (each can still be overridden): `adam_beta1=0.9`, `adam_beta2=0.98`, `adam_epsilon=1e-9`,
    `weight_decay=0.0`, `max_grad_norm=0.0` (no clipping), `warmup_steps=4000`,
    `lr_scheduler_type="inverse_sqrt"` (the paper's schedule, see `schedule.py`; `learning_rate` is then
    unused), `predict_with_generate=True`, `metric_for_best_model="bleu"` and `ddp_find_unused_parameters=False`.
    """

    label_smoothing: float = field(
        default=0.1, metadata={"help": "Label smoothing epsilon (section 5.4: 0.1). 0 gives the plain cross-entropy."}
    )
    lr_factor: float = field(
        default=1.0,
        metadata={"help": "Constant multiplier of the paper's learning-rate schedule (1.0 in the paper)."},
    )
    lr_cooldown: float = field(
        default=0.0,
        metadata={
            "help": "Fraction of the run at its end over which the learning rate falls linearly to zero (a departure "
            "from the paper's schedule, whose decay never ends; 0 = none, the paper). The run's length is `max_steps` "
            "or, with a time limit (train.py's `max_train_minutes`), the time: the cool-down then starts when that "
            "fraction of the time is left, and its last update is estimated from the recent updates per second."
        },
    )
    max_tokens: int | None = field(
        default=4096,
        metadata={
            "help": "Token budget of a training batch per process (max of source and target tokens, padding "
            "included; the paper's batches hold ~25000 source + 25000 target tokens over 8 GPUs). None: batches "
            "of `per_device_train_batch_size` sentences instead."
        },
    )
    max_sentences: int | None = field(
        default=None, metadata={"help": "Optional cap on the number of sentences in a token-based batch."}
    )
    subword_split: float = field(
        default=0.0,
        metadata={
            "help": "Probability of undoing each BPE merge of a training sentence's tokens, source and target, drawn "
            "anew for every batch (subword_split.py: a seeded variant of BPE-dropout, Provilkov et al. 2020; not in "
            "the paper). Split sentences are longer, which `max_tokens` does not count: it budgets the deterministic "
            "encoding. 0 = off (the paper)."
        },
    )
    bidirectional_steps: int = field(
        default=0,
        metadata={
            "help": "Updates at the start of training whose batches are reversed with probability 1/2 (target -> "
            "source; bidirectional training, BiT, Ding et al. 2021, whose early stage is 1/3 of the updates; not in "
            "the paper). Needs the shared vocabulary (sections 5.1, 3.4). 0 = off (the paper)."
        },
    )
    pad_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "Pad batches to a multiple of this many tokens (train.py's collator) and count that padding in the "
            "token budget. 8 suits GPU tensor cores and bounds the shapes `torch_compile` sees; on a CPU it is only "
            "extra work (Multi30k batches: 21 in 100 tokens padding instead of 4). None: pad to the longest sequence."
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
    lr_scheduler_type: SchedulerType | str = field(
        default="inverse_sqrt",
        metadata={"help": "'inverse_sqrt' = the paper's schedule (schedule.NoamLR); others use `learning_rate`."},
    )
    predict_with_generate: bool = field(default=True, metadata={"help": "Evaluate BLEU on beam-search translations."})
    metric_for_best_model: str | None = field(
        default="bleu", metadata={"help": "The metric that selects the best checkpoint (validation BLEU)."}
    )
    ddp_find_unused_parameters: bool | None = field(
        default=False,
        metadata={"help": "Every parameter gets a gradient in every step, so DDP need not search for unused ones."},
    )
    # Mixed precision: `bf16` also takes "auto" (the presets' value), resolved in __post_init__ to a bool.
    bf16: str = field(
        default="false",
        metadata={
            "help": "bfloat16 mixed precision (autocast; float32 master weights, Adam state and loss): true, false, or "
            "auto = on where the hardware has bfloat16 natively (a CUDA GPU with bfloat16; a CPU with AVX512_BF16 or "
            "AMX), off elsewhere. The log and results.json say which was used and why.",
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

    def __post_init__(self):
        self._resolve_bf16()
        super().__post_init__()
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(
                f"`label_smoothing` must be in [0, 1), got {self.label_smoothing!r} (the paper uses 0.1)."
            )
        if not self.lr_factor > 0:
            raise ValueError(f"`lr_factor` must be positive, got {self.lr_factor!r} (the paper's schedule has 1.0).")
        if not 0.0 <= self.lr_cooldown < 1.0:
            raise ValueError(
                f"`lr_cooldown` must be a fraction of the run in [0, 1), got {self.lr_cooldown!r} (0 = the paper's "
                f"schedule, no cool-down)."
            )
        if self.lr_cooldown and SchedulerType(self.lr_scheduler_type) != SchedulerType.INVERSE_SQRT:
            raise ValueError(
                f"`lr_cooldown` belongs to the paper's schedule (`lr_scheduler_type='inverse_sqrt'`), not to "
                f"{self.lr_scheduler_type!r}: pick that schedule's own decay instead."
            )
        for name in ("max_tokens", "max_sentences"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"`{name}` must be a positive integer or None, got {value!r}.")
        if self.label_smoothing_factor != 0:
            raise ValueError(
                f"`label_smoothing_factor`={self.label_smoothing_factor!r} selects the Trainer's own label smoother, "
                f"which this trainer replaces: set `label_smoothing` instead and leave `label_smoothing_factor` at 0."
            )
        if not 0.0 <= self.subword_split < 1.0:
            raise ValueError(
                f"`subword_split` must be a probability in [0, 1), got {self.subword_split!r} (0 = off; BPE-dropout's "
                f"paper uses 0.1)."
            )
        value = self.bidirectional_steps
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"`bidirectional_steps` must be a non-negative integer (updates), got {value!r} (0 = off; BiT trains "
                f"the first third of the updates bidirectionally)."
            )
        value = self.pad_to_multiple_of
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ValueError(f"`pad_to_multiple_of` must be a positive integer or None, got {value!r} (e.g. 8).")

    def _resolve_bf16(self) -> None:
        """`bf16` as a bool (the Trainer's type), from True/False, "true"/"false" or "auto"; `precision_reason` says
        why, for the log and results.json. Runs before the Trainer's own `__post_init__`, which reads `bf16`."""
        value = self.bf16
        if isinstance(value, str):
            word = value.strip().lower()
            if word == "auto":
                if self.fp16:
                    self.bf16, self.precision_reason = False, "fp16 asked for"
                    return
                native, reason = bf16_support(self._training_device_type())
                self.bf16, self.precision_reason = native, f"bf16=auto: {reason}"
                return
            if word not in ("true", "false", "yes", "no", "1", "0"):
                raise ValueError(f"`bf16` must be true, false or auto, got {value!r}.")
            value = word in ("true", "yes", "1")
        self.bf16 = bool(value)
        self.precision_reason = "bf16 asked for" if self.bf16 else ("fp16 asked for" if self.fp16 else "float32")
        if self.bf16:
            native, reason = bf16_support(self._training_device_type())
            if not native:
                logger.warning("bf16 asked for, but %s.", reason)

    def _training_device_type(self) -> str:
        # The device the Trainer will pick, known before `TrainingArguments.__post_init__` sets it up.
        accelerator = torch.accelerator.current_accelerator()
        return "cpu" if self.use_cpu or accelerator is None else accelerator.type


class VanillaTransformerTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with the paper's optimizer, schedule, label-smoothed loss, token-based batches, BLEU
    evaluation and crash-safe checkpoints (see the module docstring). Takes the same arguments as
    `Seq2SeqTrainer`, with `args` a `VanillaTrainingArguments`. When `compute_metrics` is not given and a
    tokenizer is (`processing_class`), BLEU on the decoded labels is computed by `metrics.make_compute_metrics`.
    """

    # `compute_loss` already divides by the token count of the whole optimizer step: the Trainer must not
    # divide again by the number of accumulation steps.
    loss_is_scaled_for_ga = True

    def __init__(self, model=None, args: VanillaTrainingArguments | None = None, *positional, **kwargs):
        if args is None:
            args = VanillaTrainingArguments()
        if not isinstance(args, VanillaTrainingArguments):
            raise ValueError(
                f"`args` must be a VanillaTrainingArguments, got {type(args).__name__}: build it with "
                f"`VanillaTrainingArguments(output_dir=..., ...)` (it carries the paper's defaults)."
            )
        super().__init__(model, args, *positional, **kwargs)
        if self.args.n_gpu > 1:
            raise ValueError(
                f"`n_gpu`={self.args.n_gpu}: torch.nn.DataParallel is not supported (token batches cannot be split "
                f"evenly). Launch one process per GPU instead: `accelerate launch train.py ...` or `torchrun`."
            )
        # The Trainer counts the target tokens of each optimizer step (`num_items_in_batch`) only for models
        # that take loss kwargs; `compute_loss` below passes the count to the model.
        self.model_accepts_loss_kwargs = True
        if self.compute_metrics is None and self.args.predict_with_generate and self.processing_class is not None:
            self.compute_metrics = make_compute_metrics(self.processing_class)
        metric = (self.args.metric_for_best_model or "").removeprefix("eval_")
        if metric in ("bleu", "gen_len") and self.compute_metrics is None and self.args.eval_strategy != "no":
            raise ValueError(
                f"`metric_for_best_model`={self.args.metric_for_best_model!r} needs BLEU, but there is no "
                f"`compute_metrics` and no tokenizer to build one: pass `processing_class=tokenizer` (with "
                f"`predict_with_generate=True`), or set `metric_for_best_model='loss'`."
            )
        self._use_fast_attention()
        for option, why in (
            ("bidirectional_steps", "turns labels into source tokens padded with the tokenizer's pad id"),
            ("subword_split", "undoes the tokenizer's BPE merges"),
        ):
            if getattr(self.args, option) and getattr(self.processing_class, "pad_token_id", None) is None:
                raise ValueError(
                    f"`{option}` {why}, but the trainer has no tokenizer (with a pad token): pass "
                    f"`processing_class=tokenizer`."
                )
        self._merge_tree = None  # (left, right) of subword splitting, read from the tokenizer when first needed
        # Sums of (smoothed loss, NLL, target tokens) since the last log, for training and for evaluation.
        self._loss_sums = {split: torch.zeros(3, device=self.args.device) for split in ("train", "eval")}
        self._eval_sentence_sums = None  # the current evaluation batch's sums, one row per sentence
        self._noam_scheduler = None  # the paper's schedule, when `create_scheduler` built it

    def _use_fast_attention(self) -> None:
        """Log the precision and why; in bfloat16 on a CPU, switch the model to the eager attention, the fast kernel
        there (precision.fast_attention_implementation; not saved: checkpoints keep the default)."""
        precision = {"bf16": "bfloat16 autocast", "fp16": "float16 autocast"}.get(self.args.mixed_precision, "float32")
        logger.info(
            "Precision: %s on %s (%s).",
            precision,
            self.args.device,
            getattr(self.args, "precision_reason", "set by the arguments"),
        )
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.args.mixed_precision, torch.float32)
        attention = fast_attention_implementation(self.args.device, dtype)
        model = self.accelerator.unwrap_model(self.model)
        config = getattr(model, "config", None)
        if (
            attention
            and getattr(config, "_attn_implementation", attention) == "sdpa"
            and hasattr(model, "set_attn_implementation")
        ):
            model.set_attn_implementation(attention)
            logger.info("Attention: %s (torch's SDPA kernel is the slow one in %s on a CPU).", attention, precision)

    # ---- Resuming ----

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, **kwargs):
        """`Trainer.train`; `resume_from_checkpoint=True` takes the newest checkpoint of `output_dir`, and a
        checkpoint whose learning-rate schedule differs from these arguments is refused (the Trainer would restore
        the checkpoint's schedule, silently ignoring the new values)."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise ValueError(
                    f"`resume_from_checkpoint=True` but `output_dir` {self.args.output_dir!r} holds no complete "
                    f"checkpoint: pass the path of one, or start without resuming."
                )
        if resume_from_checkpoint:
            resume_from_checkpoint = str(resume_from_checkpoint)
            if not is_complete_checkpoint(resume_from_checkpoint):
                raise ValueError(
                    f"`resume_from_checkpoint` {resume_from_checkpoint!r} has no readable {TRAINER_STATE_NAME}, which "
                    f"the Trainer writes last: its save did not finish. Resume from an earlier checkpoint (True takes "
                    f"the newest complete one)."
                )
            self._check_schedule_of(resume_from_checkpoint)
            self._remove_incomplete_checkpoints()
        # A schedule this trainer built is built again for this call (its arguments or step count may have changed),
        # as the Trainer does with the schedules it builds itself; one given by the caller is kept.
        if self.lr_scheduler is not None and self.lr_scheduler is self._noam_scheduler:
            self.lr_scheduler = None
        return super().train(resume_from_checkpoint=resume_from_checkpoint or None, trial=trial, **kwargs)

    def _remove_incomplete_checkpoints(self) -> None:
        # What a crash during a save left: never resumed from, and rewritten when the run reaches that step again;
        # removed now so that neither checkpoint rotation nor averaging counts them meanwhile.
        if not self.args.should_save or not os.path.isdir(self.args.output_dir):
            return
        for name in sorted(os.listdir(self.args.output_dir)):
            path = os.path.join(self.args.output_dir, name)
            if CHECKPOINT_RE.match(name) and os.path.isdir(path) and not is_complete_checkpoint(path):
                logger.warning("Removing %s: its save did not finish (no %s).", path, TRAINER_STATE_NAME)
                shutil.rmtree(path)

    def _check_schedule_of(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, SCHEDULER_NAME)
        if not os.path.isfile(path):
            return  # a checkpoint saved without optimizer state (`save_only_model`): nothing is restored
        saved = torch.load(path, map_location="cpu", weights_only=True)  # numbers only, no pickled objects
        paper_schedule = SchedulerType(self.args.lr_scheduler_type) == SchedulerType.INVERSE_SQRT
        if paper_schedule != ("factor" in saved):
            kind = "the paper's learning-rate schedule" if "factor" in saved else "a stock Trainer schedule"
            raise ValueError(
                f"Checkpoint {checkpoint!r} was trained with {kind}, but this run sets "
                f"`lr_scheduler_type`={self.args.lr_scheduler_type!r}: "
                f"resume with the checkpoint's schedule, or start a new run from its weights (`--init_from`)."
            )
        if paper_schedule:
            # A warm-up given as a ratio depends on the step count, known here only from `max_steps`.
            warmup = saved["warmup_steps"]
            if self.args.warmup_steps >= 1 or self.args.max_steps > 0:
                warmup = self.args.get_warmup_steps(self.args.max_steps)
            ours = {
                "warmup_steps": warmup,
                "lr_factor": float(self.args.lr_factor),
                "d_model": getattr(self.accelerator.unwrap_model(self.model).config, "d_model", None),
            }
            theirs = {"warmup_steps": saved["warmup_steps"], "lr_factor": saved["factor"], "d_model": saved["d_model"]}
        else:
            ours, theirs = {"learning_rate": self.args.learning_rate}, {"learning_rate": saved["base_lrs"][0]}
        changed = [name for name in ours if ours[name] != theirs[name]]
        if changed:
            raise ValueError(
                f"Checkpoint {checkpoint!r} has the learning-rate schedule "
                f"{', '.join(f'{n}={theirs[n]!r}' for n in changed)}, but this run sets "
                f"{', '.join(f'{n}={ours[n]!r}' for n in changed)}; resuming would restore the checkpoint's values "
                f"and ignore these. Pass the checkpoint's values to continue its run, or start a new run from its weights "
                f"(`--init_from`)."
            )

    # ---- Optimizer and schedule (section 5.3) ----

    # `optim` values that mean the paper's Adam (with weight_decay=0, the default, Adam and AdamW are the same update);
    # the fused one is TrainingArguments' default. Any other `optim` gets the Trainer's own optimizer.
    PAPER_OPTIMIZERS = {OptimizerNames.ADAMW_TORCH_FUSED: True, OptimizerNames.ADAMW_TORCH: False}

    def create_optimizer(self, model=None):
        optim = OptimizerNames(self.args.optim)
        if self.optimizer is None and self.optimizer_cls_and_kwargs is None and optim in self.PAPER_OPTIMIZERS:
            opt_model = self.model if model is None else model
            # `parameters()` lists each tied weight once (shared embedding = lm_head).
            params = [p for p in opt_model.parameters() if p.requires_grad]
            # Fused: one kernel updates every parameter (CPU and CUDA), instead of a loop of small ops per tensor.
            fused = self.PAPER_OPTIMIZERS[optim] and all(p.is_floating_point() for p in params)
            self.optimizer = torch.optim.Adam(
                params,
                lr=self.args.learning_rate,  # replaced by the scheduler before the first update
                betas=(self.args.adam_beta1, self.args.adam_beta2),
                eps=self.args.adam_epsilon,
                weight_decay=self.args.weight_decay,
                fused=fused,
            )
            logger.info("Optimizer: the paper's Adam (section 5.3)%s.", ", fused" if fused else "")
        elif self.optimizer is None and self.optimizer_cls_and_kwargs is None:
            logger.info("Optimizer: `optim`=%s, the Trainer's (not the paper's Adam).", optim.value)
        return super().create_optimizer(model)

    def _get_grad_norm(self, model, grad_norm=None):
        """The gradient norm, for the logs. Without clipping (`max_grad_norm=0`, the paper's) the Trainer computes it
        after every update, an extra pass over all gradients (`clip_grad_norm_(params, inf)`, which also multiplies
        them by 1.0) and a host sync when read: here only before an update whose step will be logged."""
        if grad_norm is None and not self._logs_next_step():
            return None
        return super()._get_grad_norm(model, grad_norm=grad_norm)

    def _logs_next_step(self) -> bool:
        args, step = self.args, self.state.global_step + 1  # the update about to be made
        if args.logging_strategy != "steps":
            return True  # epoch-wise logs: no cheap way to know the last update of the epoch here
        every = self.state.logging_steps or args.logging_steps
        return (args.logging_first_step and step == 1) or (every and step % every == 0) or step >= self.state.max_steps

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        if self.lr_scheduler is None and SchedulerType(self.args.lr_scheduler_type) == SchedulerType.INVERSE_SQRT:
            config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
            d_model = getattr(config, "d_model", None)
            if d_model is None:
                raise ValueError(
                    "The paper's learning-rate schedule needs `d_model` from the model config, which has none: use a "
                    "VanillaTransformer model, or another `lr_scheduler_type` with an explicit `learning_rate`."
                )
            warmup = self.args.get_warmup_steps(num_training_steps)
            # A cool-down over the last `lr_cooldown` of the steps; a TimeLimit moves it earlier when time runs out
            # first (a timed run's `max_steps` is only a ceiling).
            start = max(round((1 - self.args.lr_cooldown) * num_training_steps), 1)
            cooldown = (None, None)  # none asked for, or a run too short for one
            if self.args.lr_cooldown and start < num_training_steps:
                cooldown = (start, num_training_steps)
            self.lr_scheduler = NoamLR(
                self.optimizer if optimizer is None else optimizer,
                d_model=d_model,
                warmup_steps=warmup,
                factor=self.args.lr_factor,
                cooldown_start=cooldown[0],
                cooldown_end=cooldown[1],
            )
            self._noam_scheduler = self.lr_scheduler  # rebuilt by the next `train()` call, see there
            logger.info(
                "Learning rate: the paper's schedule, d_model=%d, warmup=%d, factor=%g, peak %.3g at update %d.",
                d_model,
                warmup,
                self.args.lr_factor,
                peak_learning_rate(d_model, warmup, self.args.lr_factor),
                warmup,
            )
            if self.args.lr_cooldown:
                logger.info(
                    "Learning rate cool-down (not in the paper): linear to zero over the last %g of the run "
                    "(updates %s-%d unless a time limit comes first).",
                    self.args.lr_cooldown,
                    cooldown[0],
                    num_training_steps,
                )
        return super().create_scheduler(num_training_steps, optimizer)

    # ---- Loss (section 5.4) ----

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if "labels" not in inputs:
            raise ValueError(
                f"The batch has no `labels` (keys: {sorted(inputs)}): the training data must hold the tokenized "
                f"targets in a `labels` column."
            )
        if model.training:
            if self.args.torch_compile:
                # Token batches vary in sentences and in length: compile for any size at once (else torch.compile
                # compiles for the first shape, then again for each dimension seen to change).
                for tensor in inputs.values():
                    if isinstance(tensor, torch.Tensor) and tensor.dim() == 2:
                        torch._dynamo.maybe_mark_dynamic(tensor, 0)
                        torch._dynamo.maybe_mark_dynamic(tensor, 1)
            # The model computes the loss (label-smoothed, float32, fused: `label_smoothed_cross_entropy`), so that
            # it is part of a compiled graph under `torch_compile`; it builds the decoder input from the labels.
            outputs = model(
                **inputs,
                epsilon_ls=self.args.label_smoothing,
                num_items_in_batch=num_items_in_batch,
                use_cache=False,
            )
            loss = outputs.loss
            # The sums for the logs, from the normalized losses (no host sync: tensors are added up).
            denominator = outputs.num_target_tokens.clamp(min=1) if num_items_in_batch is None else num_items_in_batch
            sums = torch.stack(
                [loss.detach() * denominator, outputs.nll_loss * denominator, outputs.num_target_tokens.to(loss.dtype)]
            )
            self._loss_sums["train"] += sums.to(self._loss_sums["train"])
            if num_items_in_batch is not None and self.args.average_tokens_across_devices:
                # `num_items_in_batch` is then the count over all processes, and DDP averages the gradients over the
                # processes: multiply back by their number.
                loss = loss * self.accelerator.num_processes
            return (loss, outputs) if return_outputs else loss

        # Evaluation: the loss sentence by sentence (gathered per sentence in `prediction_step`), and no KV cache.
        inputs = dict(inputs)
        labels = inputs.pop("labels")
        if "decoder_input_ids" not in inputs:
            inputs["decoder_input_ids"] = self.accelerator.unwrap_model(model).prepare_decoder_input_ids_from_labels(
                labels
            )
        outputs = model(**inputs, use_cache=False)
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        smoothed, nll, tokens = label_smoothed_cross_entropy(
            logits, labels.to(logits.device), self.args.label_smoothing, per_sequence=True
        )
        loss = smoothed.sum() / tokens.sum().clamp(min=1)
        self._eval_sentence_sums = torch.stack([smoothed, nll, tokens.to(smoothed.dtype)], dim=-1)
        return (loss, outputs) if return_outputs else loss

    def _take_loss_sums(self, split: str) -> tuple[float, float, float]:
        """(smoothed sum, NLL sum, tokens) over all processes since the last call, then reset them."""
        sums = self._loss_sums[split].clone()
        if split == "train":  # evaluation sums are gathered already, without the repeated sentences
            sums = self.accelerator.reduce(sums, reduction="sum")
        self._loss_sums[split].zero_()
        return tuple(sums.tolist())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:  # the periodic training log (evaluation logs have `eval_loss`)
            _, nll_sum, tokens = self._take_loss_sums("train")
            if tokens > 0:
                logs["nll_loss"] = nll_sum / tokens
                logs["ppl"] = math.exp(min(logs["nll_loss"], 100.0))
        super().log(logs, start_time)

    # ---- Evaluation: loss, NLL, perplexity, BLEU ----

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        self._eval_sentence_sums = None
        if not self.args.predict_with_generate or prediction_loss_only:
            outputs = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        else:
            outputs = self._generate_step(model, inputs, **gen_kwargs)
        if self._eval_sentence_sums is not None:
            # The loss sentence by sentence, gathered like the predictions: under data parallelism the last round of
            # batches is filled up with sentences from the start of the split, which `gather_for_metrics` drops.
            sums = self.accelerator.gather_for_metrics(self._eval_sentence_sums)
            self._loss_sums["eval"] += sums.sum(0).to(self._loss_sums["eval"])
            self._eval_sentence_sums = None
        return outputs

    def _generate_step(self, model, inputs, **gen_kwargs):
        inputs = self._prepare_inputs(inputs)
        loss = labels = encoder_outputs = None
        if "labels" in inputs:
            # This trainer's (smoothed) loss, where `Seq2SeqTrainer` would take the model's own plain one.
            with torch.no_grad(), self.compute_loss_context_manager():
                loss, outputs = self.compute_loss(model, inputs, return_outputs=True)
            loss, labels = loss.detach(), inputs["labels"]
            # The source's encoding, computed for the loss, is what generation starts from: not encoded twice.
            encoder_outputs = BaseModelOutput(last_hidden_state=outputs["encoder_last_hidden_state"])
        # Translate the source alone. Not through `Seq2SeqTrainer.prediction_step`: it fills the model's generation
        # config with the library defaults (max_length=20, ...), which every later checkpoint would then save, and
        # pads the outputs to that length; the evaluation loop pads the batches to a common width anyway (-100).
        kwargs = {k: v for k, v in {**getattr(self, "_gen_kwargs", {}), **gen_kwargs}.items() if v is not None}
        source = {
            k: v for k, v in inputs.items() if k not in ("labels", "decoder_input_ids", "decoder_attention_mask")
        }
        if encoder_outputs is not None:
            kwargs["encoder_outputs"] = encoder_outputs
        generated = self.accelerator.unwrap_model(model).generate(**source, **kwargs)
        if generated.shape[0] != source["input_ids"].shape[0]:
            raise ValueError(
                f"Generation returned {generated.shape[0]} sequences for {source['input_ids'].shape[0]} sentences "
                f"(num_return_sequences={kwargs.get('num_return_sequences')}): BLEU evaluation scores one translation "
                f"per sentence; leave `num_return_sequences` at 1."
            )
        return loss, generated, labels

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        self._loss_sums["eval"].zero_()
        # `Seq2SeqTrainer.evaluate`/`predict` switch the Trainer's `gather_for_metrics` to a plain `gather` (for
        # several generated sequences per sentence, which `prediction_step` refuses). A plain gather keeps the
        # sentences repeated to fill the last round of batches of a multi-process evaluation: they would count
        # twice in BLEU. Back to the Trainer's default.
        self.gather_function = partial(
            self.accelerator.gather_for_metrics, use_gather_object=self.args.eval_use_gather_object
        )
        output = super().evaluation_loop(
            dataloader,
            description,
            prediction_loss_only=prediction_loss_only,
            ignore_keys=ignore_keys,
            metric_key_prefix=metric_key_prefix,
        )
        smoothed_sum, nll_sum, tokens = self._take_loss_sums("eval")
        if tokens > 0:
            # Per target token over the whole split (the Trainer's own `eval_loss` averages per-batch means).
            output.metrics[f"{metric_key_prefix}_loss"] = smoothed_sum / tokens
            output.metrics[f"{metric_key_prefix}_nll_loss"] = nll_sum / tokens
            output.metrics[f"{metric_key_prefix}_ppl"] = math.exp(min(nll_sum / tokens, 100.0))
        return output

    def get_eval_dataloader(self, eval_dataset=None):
        """The evaluation split sorted by source length, longest first, so that a batch holds sentences of similar
        length: beam search then pads little (scores are per sentence pair and do not depend on the order)."""
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(dataset, datasets.Dataset) and {"input_ids"} <= set(dataset.column_names):
            lengths = dataset.with_format("arrow").select_columns(["input_ids"])[:]
            lengths = lengths.column("input_ids").combine_chunks().value_lengths().to_numpy()
            eval_dataset = dataset.select(np.argsort(-lengths, kind="stable"))
        return super().get_eval_dataloader(eval_dataset)

    # ---- Token-based batches (section 5.1) ----

    def get_train_dataloader(self) -> DataLoader:
        if self.args.max_tokens is None:
            return super().get_train_dataloader()
        dataset = self.train_dataset
        if not isinstance(dataset, datasets.Dataset):
            raise ValueError(
                f"`train_dataset` must be a datasets.Dataset (from vanilla_transformer.data.tokenize_corpus) for "
                f"token-based batches, got {type(dataset).__name__}: convert it, or set `max_tokens=None` for batches "
                f"of `per_device_train_batch_size` sentences."
            )
        # The sampler shards itself: each process gets its own batches of about `max_tokens` tokens, the same number
        # of them on every process, in an order fixed by (seed, epoch) so that a resumed run sees the same data.
        # Built before the unused columns (`src_len`, `tgt_len`) are removed.
        sampler = TokenBatchSampler.from_dataset(
            dataset,
            self.args.max_tokens,
            shuffle=True,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            num_replicas=self.accelerator.num_processes,
            rank=self.accelerator.process_index,
            max_sentences=self.args.max_sentences,
            pad_to_multiple_of=self.args.pad_to_multiple_of,
        )
        dataset = self._remove_unused_columns(dataset, description="training")
        params = {
            "batch_sampler": sampler,
            "collate_fn": self.data_collator,
            "num_workers": self.args.dataloader_num_workers,
            "pin_memory": self.args.dataloader_pin_memory,
            "persistent_workers": self.args.dataloader_persistent_workers,
            "prefetch_factor": self.args.dataloader_prefetch_factor,
            "worker_init_fn": partial(
                seed_worker, num_workers=self.args.dataloader_num_workers, rank=self.args.process_index
            ),
        }
        if self.args.dataloader_multiprocessing_context is not None:
            params["multiprocessing_context"] = self.args.dataloader_multiprocessing_context
        # accelerate would wrap the batch sampler in a `BatchSamplerShard` dealing out its (already per-process)
        # batches once more, keeping 1 in `num_processes`. Prepared as the loader of one process, it only places
        # the batches on the device; the Trainer's `set_epoch` reaches the sampler directly, and through the
        # `SkipBatchSampler` of a resumed epoch.
        return prepare_data_loader(
            DataLoader(dataset, **params),
            self.accelerator.device,
            num_processes=1,
            process_index=0,
            put_on_device=self.accelerator.device_placement,
            non_blocking=self.accelerator.non_blocking,
        )

    # ---- Subword splitting (not in the paper; `subword_split`) ----

    def get_batch_samples(self, epoch_iterator, num_batches: int, device: torch.device):
        """The Trainer's micro-batches of one update; with `subword_split` > 0, their sentences split into smaller
        subwords (subword_split.py) before the target tokens that normalise the loss are counted."""
        if self.args.subword_split:
            # Lazy: the Trainer's loop takes its `num_batches` from the iterator, each split as it is taken.
            epoch_iterator = (self._split_subwords(batch, i) for i, batch in enumerate(epoch_iterator))
        if self.state.global_step < self.args.bidirectional_steps:
            epoch_iterator = (self._maybe_reverse(batch, i) for i, batch in enumerate(epoch_iterator))
        return super().get_batch_samples(epoch_iterator, num_batches, device)

    def _maybe_reverse(self, batch: dict, micro_batch: int) -> dict:
        """Bidirectional training (`bidirectional_steps`): the whole micro-batch, with probability 1/2, as target ->
        source pairs. Both sides end in `</s>` and share one vocabulary (sections 5.1, 3.4), so the swap is of the
        padded tensors: the labels' -100 become the pad id of the new source, the source's padding the new labels'
        -100. Seeded by the update's position, as the subword splits are: a resumed run reverses the same batches."""
        if np.random.default_rng(self._update_seed(micro_batch, 2)).random() >= 0.5:
            return batch
        labels, input_ids = batch["labels"], batch["input_ids"]
        source_mask = batch.get("attention_mask")
        if source_mask is None:
            source_mask = input_ids != self.processing_class.pad_token_id
        target_mask = labels != -100
        # The decoder's inputs (a collator given `model=` makes them) belonged to the old labels: the model shifts the
        # new labels itself.
        replaced = ("input_ids", "labels", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
        reversed_batch = {k: v for k, v in batch.items() if k not in replaced}
        reversed_batch["input_ids"] = labels.masked_fill(~target_mask, self.processing_class.pad_token_id)
        reversed_batch["attention_mask"] = target_mask.to(source_mask.dtype)
        reversed_batch["labels"] = input_ids.masked_fill(~source_mask.bool(), -100)
        return reversed_batch

    def _update_seed(self, micro_batch: int, *stream: int) -> int:
        """The seed of a per-update random choice (subword splits; `stream` 2: bidirectional reversal), from the
        update's position, not drawn from the global generator: the Trainer fetches a resumed run's first batches
        before it restores the random state, and accelerate's loader prefetches a batch."""
        key = [self.args.seed, self.state.global_step, micro_batch, self.args.process_index, *stream]
        return int(np.random.SeedSequence(key).generate_state(1)[0])

    def _split_subwords(self, batch: dict, micro_batch: int) -> dict:
        if self._merge_tree is None:
            self._merge_tree = merge_tree(self.processing_class)
        config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
        return split_batch(
            batch,
            *self._merge_tree,
            self.args.subword_split,
            pad_token_id=self.processing_class.pad_token_id,
            generator=torch.Generator().manual_seed(self._update_seed(micro_batch)),
            max_length=getattr(config, "max_position_embeddings", None),
            pad_to_multiple_of=self.args.pad_to_multiple_of,
        )


class TimeLimit(TrainerCallback):
    """Ends training after `minutes` of wall-clock time, saving (and, when the run evaluates, evaluating) at that
    step. The Trainer's own limits are in steps or epochs; the paper's runs, and CPU runs here, are sized in hours.

    The processes of a data-parallel run must stop at the same step: one that stopped a step early would wait in the
    checkpoint's collectives while the others wait in the next step's gradient all-reduce, and the run would hang.
    Their clocks are not the same, so the main process's clock decides, and its decision is broadcast to the others
    after every update (one tiny collective, next to the all-reduce of every gradient). `clock` returns seconds;
    the default is `time.monotonic`.

    With `lr_cooldown` (a fraction f of the run, VanillaTrainingArguments) and the paper's schedule, the limit also
    plans the cool-down: once f of the time is left (and the schedule's own cool-down, planned from `max_steps`,
    has not started), the cool-down starts at the current update and ends at the update the run is expected to
    reach at the limit, from its updates per second over the stretch of the same length just before (evaluations
    included, which recur; the start-up excluded). The run then stops at that update or at the limit, whichever
    comes first. The plan is part of the schedule's state (`scheduler.pt`): a resumed run keeps it.
    """

    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic):
        if not minutes > 0:
            raise ValueError(f"`minutes` must be positive, got {minutes!r}: the wall-clock budget of the training.")
        self.seconds = minutes * 60
        self.clock = clock
        self.started = None
        self.elapsed = 0.0  # seconds of training, as of the last update
        self._mark = None  # (seconds, update) when the window that measures the speed for the cool-down opened

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = self.clock()
        self.elapsed = 0.0
        self._mark = None

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        self.elapsed = self.clock() - self.started
        step = state.global_step
        scheduler = lr_scheduler if isinstance(lr_scheduler, NoamLR) else None
        fraction = getattr(args, "lr_cooldown", 0.0) if scheduler is not None else 0.0
        # Where the cool-down should end (0: not now): f of the time left, and the schedule's cool-down not started.
        end, rate = 0, 0.0
        if fraction and self._mark is None and self.elapsed >= (1 - 2 * fraction) * self.seconds:
            # The speed is measured over the stretch as long as the cool-down just before it: late enough to miss
            # the start-up (and a resumed run's reloading), long enough to hold the evaluations that recur.
            self._mark = (self.elapsed, step)
        late = fraction and self.elapsed >= (1 - fraction) * self.seconds
        if late and (scheduler.cooldown_start is None or step < scheduler.cooldown_start):
            since, first = self._mark if self._mark[0] < self.elapsed else (0.0, 0)
            rate = (step - first) / (self.elapsed - since) if self.elapsed > since else 0.0
            end = step + max(int((self.seconds - self.elapsed) * rate), 1)
        # The main process decides for all: [time is up, cool-down end].
        decision = broadcast(torch.tensor([int(self.elapsed >= self.seconds), end], device=args.device), 0).tolist()
        if decision[1] and (scheduler.cooldown_end is None or decision[1] < scheduler.cooldown_end):
            scheduler.set_cooldown(step, decision[1])
            logger.info(
                "Learning rate cool-down (%g of the time limit left): linear from %.3g after update %d to zero after "
                "update %d (%.2f updates/s lately).",
                fraction,
                scheduler.get_last_lr()[0],
                step,
                decision[1],
                rate,
            )
        finished = scheduler is not None and fraction and scheduler.cooldown_end is not None
        finished = finished and step >= scheduler.cooldown_end
        if decision[0] or finished:
            logger.info(
                "%s at step %d: saving and stopping.",
                f"Time limit of {self.seconds / 60:.1f} minutes reached" if decision[0] else "Cool-down finished",
                step,
            )
            control.should_training_stop = True
            control.should_save = True
            control.should_evaluate = args.eval_strategy != "no"
        return control


class TimeLimitProgressCallback(ProgressCallback):
    """The Trainer's progress bar for a run with a `TimeLimit`: it counts the limit's seconds rather than `max_steps`
    (which a timed run sets high, e.g. 100,000 steps: the stock bar's ETA would be a day for a one-hour run), with
    the update number beside it. It replaces the stock bar: `trainer.pop_callback(ProgressCallback)`, then
    `trainer.add_callback(TimeLimitProgressCallback(limit))`, after the `TimeLimit` (whose clock it shows)."""

    def __init__(self, limit: TimeLimit):
        super().__init__()
        self.limit = limit

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar = tqdm(
                total=round(self.limit.seconds),
                unit="s",
                dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n:.0f}/{total} s of the time limit [{elapsed}<{remaining}{postfix}]",
            )
        self.current_step = 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            # The limit's own reading of its clock (it runs first): the bar shows what the limit decides on.
            elapsed = min(self.limit.elapsed, self.limit.seconds)
            self.training_bar.set_postfix_str(f"update {state.global_step}", refresh=False)
            self.training_bar.update(elapsed - self.training_bar.n)
            self.current_step = state.global_step


def last_checkpoint(run_dir: str) -> str | None:
    """The newest complete checkpoint of `run_dir` (what `resume_from_checkpoint=True` takes), or None."""
    checkpoints = complete_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


__all__ = [
    "TimeLimit",
    "TimeLimitProgressCallback",
    "VanillaTrainingArguments",
    "VanillaTransformerTrainer",
    "complete_checkpoints",
    "is_complete_checkpoint",
    "last_checkpoint",
]
