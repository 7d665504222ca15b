"""`VanillaTransformerTrainer`: the `Seq2SeqTrainer` with the paper's training recipe (section 5): token batches,
Adam with the warm-up schedule, the label-smoothed loss, and evaluation by loss and BLEU.

One update, in the order the Trainer (transformers 5.24, `Trainer.train`) calls this package:

1. `get_train_dataloader` (once per `train()` call, in a new order each epoch): batches of about `max_tokens` tokens
   from `batching.TokenBatchSampler`, sentences of similar length together (section 5.1), sharded across
   data-parallel processes by the sampler itself.
2. `get_batch_samples`: the update's micro-batches (`gradient_accumulation_steps` of them), augmented when asked
   (`subword_split`, `bidirectional_steps`: augmentation.py, not in the paper) before the Trainer counts their target
   tokens (`num_items_in_batch`); the decoder input is shifted from the labels.
3. The Trainer's `compute_loss`, once per micro-batch, inside its `training_step` (which then runs the backward): the
   model's logits, then `LabelSmoothedLoss` (the Trainer's `compute_loss_func`): the label-smoothed cross-entropy
   (section 5.4, epsilon `label_smoothing_factor`) divided by the target tokens of the whole update, so the gradients
   do not depend on how the update is split across micro-batches or processes; the sums for the logs are added up
   there.
4. The Trainer's gradient norm, for the logs (no clipping, as in the paper: `max_grad_norm=0`).
5. The optimizer step: the Trainer's own optimizer, `adamw_torch_fused` with weight decay 0, which is the paper's
   Adam with beta1 0.9, beta2 0.98, epsilon 1e-9 (section 5.3); then `lr_scheduler.step()`, the learning rate of eq. 3
   (section 5.3): `schedule.NoamLR`, which `create_scheduler` built before the first update.
6. The callbacks' `on_step_end` (callbacks.py, a run sized in minutes as the paper's runs are in hours, section 5.2):
   `TimeLimit` reads the clock and stops at the limit; `CooldownPlanner` plans the cool-down into the schedule
   (`NoamLR.set_cooldown`) once the time left is short, and stops when it ends.
7. `log`, every `logging_steps` updates: the Trainer's mean loss, plus `nll_loss` and `ppl` per target token.
8. Every `eval_steps` updates, `evaluate` -> `evaluation_loop` (the loss per target token of the split) ->
   `get_eval_dataloader` (sentences sorted by length) -> `prediction_step` per batch (the loss sentence by sentence,
   and beam search from the same encoding of the source) -> `compute_metrics` (cased sacreBLEU,
   `evaluation.bleu.make_compute_metrics`).
9. Every `save_steps` updates, the Trainer's checkpoint (model, optimizer, schedule, RNG states, position in the data):
   `train(resume_from_checkpoint=...)` continues the uninterrupted run's losses exactly (tests/test_trainer.py), and
   refuses a checkpoint whose schedule differs from the arguments or whose optimizer state was removed.

Precision (`bf16="auto"`) is resolved by `VanillaTrainingArguments` (options.py); in bfloat16 on a CPU the model runs
the eager attention, the fast kernel there (`precision.fast_attention_implementation`).
"""

from __future__ import annotations

import logging
import math
import os
from functools import partial

import datasets
import numpy as np
import torch
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer
from transformers.modeling_outputs import BaseModelOutput
from transformers.trainer import SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_utils import seed_worker

from ..checkpoints import has_resume_state, is_complete_checkpoint, last_checkpoint, remove_incomplete_checkpoints
from ..data.batching import TokenBatchSampler
from ..data.corpus import MODEL_INPUT_COLUMNS
from ..evaluation.attention import use_attention
from ..evaluation.bleu import make_compute_metrics
from ..loss_vanilla_transformer import label_smoothed_cross_entropy
from ..translation.precision import fast_attention_implementation
from .augmentation import maybe_reverse, merge_tree, split_batch, update_seed
from .options import VanillaTrainingArguments
from .schedule import NoamLR, peak_learning_rate


logger = logging.getLogger(__name__)


class LabelSmoothedLoss:
    """The training loss, as the Trainer's `compute_loss_func`: section 5.4's label-smoothed cross-entropy (epsilon
    `label_smoothing_factor`; float32, fused: `label_smoothed_cross_entropy`) of one micro-batch, summed over its
    target tokens and divided by `num_items_in_batch`, the target tokens of the whole update that the Trainer counts,
    so that the gradients do not depend on how the update is split across micro-batches or processes. The Trainer's
    `compute_loss` then scales it for data parallelism as it scales its own losses. Adds (smoothed loss, NLL, target
    tokens) of each micro-batch to `sums` (no host sync), which `VanillaTransformerTrainer.log` reads. With
    `compile_with` (a `torch.compile` backend and mode: `torch_compile`), the loss is compiled as well as the model,
    for any batch shape, and the compiler fuses its formula."""

    def __init__(self, epsilon: float, sums: torch.Tensor, compile_with: tuple[str, str | None] | None = None):
        self.epsilon, self.sums = epsilon, sums
        self.function = label_smoothed_cross_entropy
        if compile_with is not None:
            backend, mode = compile_with
            self.function = torch.compile(self.function, dynamic=True, backend=backend, mode=mode)

    def __call__(self, outputs, labels, num_items_in_batch=None) -> torch.Tensor:
        if labels is None:
            raise ValueError(
                "The batch has no `labels`: the training data must hold the tokenized targets in a `labels` column."
            )
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        loss_sum, nll_sum, tokens = self.function(logits, labels, self.epsilon)
        self.sums += torch.stack([loss_sum.detach(), nll_sum, tokens.to(loss_sum.dtype)]).to(self.sums)
        denominator = tokens.clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        if isinstance(denominator, torch.Tensor):
            denominator = denominator.to(loss_sum.device)
        return loss_sum / denominator


class VanillaTransformerTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with the paper's optimizer, schedule, label-smoothed loss, token-based batches, BLEU
    evaluation and crash-safe checkpoints; after `train`, its methods come in the order of the module docstring's
    update. Takes the same arguments as `Seq2SeqTrainer`, with `args` a `VanillaTrainingArguments`. When
    `compute_metrics` is not given and a tokenizer is (`processing_class`), BLEU on the decoded labels is computed by
    `evaluation.bleu.make_compute_metrics`.

    What passes between its methods: the sums of (smoothed loss, NLL, target tokens), added up by `LabelSmoothedLoss`
    until `log` reads them (training) and by `prediction_step` until `evaluation_loop` reads them (evaluation); and
    the schedule `create_scheduler` built, which `train` has built again for each call.
    """

    # Overridden: the defaults of `compute_loss_func` and `compute_metrics` come from `args` and the tokenizer.
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
                f"evenly). Launch one process per GPU instead: `accelerate launch -m vanilla_transformer.training.command ...` or `torchrun`."
            )
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
        if self.compute_loss_func is None:  # the Trainer's `compute_loss` then scales it as its own losses
            compiler = (self.args.torch_compile_backend or "inductor", self.args.torch_compile_mode)
            self.compute_loss_func = LabelSmoothedLoss(
                self.args.label_smoothing_factor,
                self._loss_sums["train"],
                compile_with=compiler if self.args.torch_compile else None,
            )
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
        if attention and getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa":
            use_attention(model, attention)
            logger.info("Attention: %s (torch's SDPA kernel is the slow one in %s on a CPU).", attention, precision)

    # ---- Resuming ----

    # Overridden: the checkpoint is chosen and loaded inside `Trainer.train`, before any callback runs.
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
            if not has_resume_state(resume_from_checkpoint) and not self.args.save_only_model:
                # The Trainer would go on without it, silently: a fresh Adam, the schedule from its start.
                raise ValueError(
                    f"`resume_from_checkpoint` {resume_from_checkpoint!r} holds the weights only: its optimizer state "
                    f"was removed at the end of its run (`keep_checkpoints`), which keeps it in the newest checkpoint. "
                    f"Resume from that one (`resume_from_checkpoint` true), or start a new run from these weights "
                    f"(`init_from`)."
                )
            self._check_schedule_of(resume_from_checkpoint)
            if self.args.should_save:
                remove_incomplete_checkpoints(self.args.output_dir)
        # A schedule this trainer built is built again for this call (its arguments or step count may have changed),
        # as the Trainer does with the schedules it builds itself; one given by the caller is kept.
        if self.lr_scheduler is not None and self.lr_scheduler is self._noam_scheduler:
            self.lr_scheduler = None
        return super().train(resume_from_checkpoint=resume_from_checkpoint or None, trial=trial, **kwargs)

    def _check_schedule_of(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, SCHEDULER_NAME)
        if not os.path.isfile(path):
            return  # a checkpoint saved without optimizer state (`save_only_model`): nothing is restored
        saved = torch.load(path, map_location="cpu", weights_only=True)  # numbers only, no pickled objects
        paper_schedule = self.args.lr_schedule == "noam"
        if paper_schedule != ("factor" in saved):
            kind = "the paper's learning-rate schedule" if "factor" in saved else "a stock Trainer schedule"
            raise ValueError(
                f"Checkpoint {checkpoint!r} was trained with {kind}, but this run sets "
                f"`lr_schedule`={self.args.lr_schedule!r} ({self.args.lr_scheduler_type!r}): "
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

    # ---- Token-based batches (section 5.1) ----

    # Overridden: no argument of the Trainer takes a batch sampler (its samplers yield sentences, not batches).
    def get_train_dataloader(self) -> DataLoader:
        """Batches of about `max_tokens` tokens, sentences of similar length together (section 5.1); with
        `max_tokens=None`, the Trainer's batches of `per_device_train_batch_size` sentences."""
        if self.args.max_tokens is None:
            return super().get_train_dataloader()
        dataset = self.train_dataset
        if not isinstance(dataset, datasets.Dataset):
            raise ValueError(
                f"`train_dataset` must be a datasets.Dataset (from vanilla_transformer.data.corpus.tokenize_corpus) for "
                f"token-based batches, got {type(dataset).__name__}: convert it, or set `max_tokens=None` for batches "
                f"of `per_device_train_batch_size` sentences."
            )
        # The sampler shards itself: each process gets its own batches of about `max_tokens` tokens, the same number
        # of them on every process, in an order fixed by (seed, epoch) so that a resumed run sees the same data.
        # Built before the length columns (`src_len`, `tgt_len`) are dropped.
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
        dataset = dataset.select_columns([name for name in dataset.column_names if name in MODEL_INPUT_COLUMNS])
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

    # ---- Per-update augmentation (not in the paper) ----

    # Overridden: the one step that sees an update's micro-batches before their target tokens are counted.
    def get_batch_samples(self, epoch_iterator, num_batches: int, device: torch.device):
        """The Trainer's micro-batches of one update, augmented before the target tokens that normalise the loss are
        counted: with `subword_split` > 0 their sentences split into smaller subwords, and during the first
        `bidirectional_steps` updates half of them reversed (augmentation.py; neither is in the paper). Each gets the
        decoder input shifted from its labels, on the device, when the collator did not make one (`LabelSmoothedLoss`
        reads the labels, so the model does not see them)."""
        if self.args.subword_split:
            # Lazy: the Trainer's loop takes its `num_batches` from the iterator, each split as it is taken.
            epoch_iterator = (self._split_subwords(batch, i) for i, batch in enumerate(epoch_iterator))
        if self.state.global_step < self.args.bidirectional_steps:
            epoch_iterator = (self._maybe_reverse(batch, i) for i, batch in enumerate(epoch_iterator))
        batches, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        shift = getattr(self.accelerator.unwrap_model(self.model), "prepare_decoder_input_ids_from_labels", None)
        for batch in batches:
            if shift is not None and "labels" in batch and "decoder_input_ids" not in batch:
                batch["decoder_input_ids"] = shift(batch["labels"])
            if self.args.torch_compile:
                # Token batches vary in sentences and in length: compile for any size at once (else torch.compile
                # compiles for the first shape, then again for each dimension seen to change).
                for tensor in batch.values():
                    if isinstance(tensor, torch.Tensor) and tensor.dim() == 2:
                        torch._dynamo.maybe_mark_dynamic(tensor, 0)
                        torch._dynamo.maybe_mark_dynamic(tensor, 1)
        return batches, num_items_in_batch

    def _update_seed(self, micro_batch: int, *stream: int) -> int:
        """`augmentation.update_seed` of this update, micro-batch and process (`stream` 2: the reversal)."""
        return update_seed(self.args.seed, self.state.global_step, micro_batch, self.args.process_index, *stream)

    def _maybe_reverse(self, batch: dict, micro_batch: int) -> dict:
        return maybe_reverse(batch, self._update_seed(micro_batch, 2), self.processing_class.pad_token_id)

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

    # ---- Gradient norm and schedule (section 5.3) ----

    # Overridden: stock `inverse_sqrt` lags eq. 3 by an update (schedule.py); `optimizers=` predates our optimizer.
    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """With `lr_schedule="noam"`, the paper's learning rate (section 5.3, eq. 3): `schedule.NoamLR`, peak
        `lr_factor * (d_model * warmup_steps)^-0.5` with `d_model` from the model config, and the cool-down asked for
        (`lr_cooldown`, not in the paper). With "trainer", the Trainer's own schedule (`lr_scheduler_type`)."""
        if self.lr_scheduler is None and self.args.lr_schedule == "noam":
            config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
            d_model = getattr(config, "d_model", None)
            if d_model is None:
                raise ValueError(
                    "The paper's learning-rate schedule needs `d_model` from the model config, which has none: use a "
                    "VanillaTransformer model, or `lr_schedule='trainer'` with `learning_rate`."
                )
            warmup = self.args.get_warmup_steps(num_training_steps)
            # A cool-down over the last `lr_cooldown` of the steps; `callbacks.CooldownPlanner` moves it earlier when
            # a time limit comes first (a timed run's `max_steps` is only a ceiling).
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

    # ---- Logs ----

    def _take_loss_sums(self, split: str) -> tuple[float, float, float]:
        """(smoothed sum, NLL sum, tokens) over all processes since the last call, then reset them."""
        sums = self._loss_sums[split].clone()
        if split == "train":  # evaluation sums are gathered already, without the repeated sentences
            sums = self.accelerator.reduce(sums, reduction="sum")
        self._loss_sums[split].zero_()
        return tuple(sums.tolist())

    # Overridden: `on_log` runs after `state.log_history` copied the logs and after the `report_to` callbacks.
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The Trainer's log; the periodic training log gains `nll_loss` and `ppl`, per target token since the last."""
        if "loss" in logs:  # the periodic training log (evaluation logs have `eval_loss`)
            _, nll_sum, tokens = self._take_loss_sums("train")
            if tokens > 0:
                logs["nll_loss"] = nll_sum / tokens
                logs["ppl"] = math.exp(min(logs["nll_loss"], 100.0))
        super().log(logs, start_time)

    # ---- Evaluation: loss, NLL, perplexity, BLEU ----

    # Overridden: `compute_metrics` gets predictions, not the per-token loss sums the split's loss needs.
    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        """The Trainer's loop over the split, each sentence gathered once, and the loss, NLL and perplexity per target
        token of the whole split (the Trainer's own `eval_loss` averages per-batch means)."""
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
            output.metrics[f"{metric_key_prefix}_loss"] = smoothed_sum / tokens
            output.metrics[f"{metric_key_prefix}_nll_loss"] = nll_sum / tokens
            output.metrics[f"{metric_key_prefix}_ppl"] = math.exp(min(nll_sum / tokens, 100.0))
        return output

    # Overridden: no Trainer eval sampler sorts by length (`group_by_length` shuffles, then sorts in groups).
    def get_eval_dataloader(self, eval_dataset=None):
        """The evaluation split sorted by source length, longest first, so that a batch holds sentences of similar
        length: beam search then pads little (scores are per sentence pair and do not depend on the order)."""
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(dataset, datasets.Dataset) and {"input_ids"} <= set(dataset.column_names):
            lengths = dataset.with_format("arrow").select_columns(["input_ids"])[:]
            lengths = lengths.column("input_ids").combine_chunks().value_lengths().to_numpy()
            eval_dataset = dataset.select(np.argsort(-lengths, kind="stable"))
        return super().get_eval_dataloader(eval_dataset)

    # Overridden: the Seq2SeqTrainer's encodes the source twice and fills the generation config with defaults.
    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        """One evaluation batch, as the Trainer's (loss, predictions, labels). The loss is this trainer's (smoothed,
        section 5.4), computed sentence by sentence without KV cache and added to the evaluation's sums. The
        predictions: with `predict_with_generate`, the translations, by beam search (the model's generation config)
        from the source's encoding that the loss forward computed (each source is encoded once); without it the
        logits, none with `prediction_loss_only`."""
        generate = self.args.predict_with_generate and not prediction_loss_only
        if "labels" not in inputs:  # nothing to score: the translations alone, or the Trainer's step
            if generate:
                return None, self._translate(model, inputs, None, gen_kwargs), None
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        labels = inputs["labels"]
        forward = {k: v for k, v in inputs.items() if k != "labels"}
        if "decoder_input_ids" not in forward:  # the collator had no `model=` to build them
            unwrapped = self.accelerator.unwrap_model(model)
            forward["decoder_input_ids"] = unwrapped.prepare_decoder_input_ids_from_labels(labels)
        with torch.no_grad(), self.compute_loss_context_manager():
            outputs = model(**forward, use_cache=False)
            logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
            smoothed, nll, tokens = label_smoothed_cross_entropy(
                logits, labels.to(logits.device), self.args.label_smoothing_factor, per_sequence=True
            )
        # Gathered like the predictions: under data parallelism the last round of batches is filled up with sentences
        # from the start of the split, which `gather_for_metrics` drops.
        sums = self.accelerator.gather_for_metrics(torch.stack([smoothed, nll, tokens.to(smoothed.dtype)], dim=-1))
        self._loss_sums["eval"] += sums.sum(0).to(self._loss_sums["eval"])
        loss = (smoothed.sum() / tokens.sum().clamp(min=1)).detach()
        if not generate:
            return (loss, None, None) if prediction_loss_only else (loss, logits, labels)
        encoder_outputs = BaseModelOutput(last_hidden_state=outputs["encoder_last_hidden_state"])
        return loss, self._translate(model, inputs, encoder_outputs, gen_kwargs), labels

    def _translate(self, model, inputs, encoder_outputs, gen_kwargs) -> torch.Tensor:
        """The translations of the batch's source, one per sentence, from `encoder_outputs` when given. Not through
        `Seq2SeqTrainer.prediction_step`: it fills the model's generation config with the library defaults
        (max_length=20, ...), which every later checkpoint would then save, and pads the outputs to that length; the
        evaluation loop pads the batches to a common width anyway (-100). The decoding is the model's generation config
        (which `Seq2SeqTrainingArguments.generation_config` replaces), with `generation_max_length` and
        `generation_num_beams` of the arguments when set; keyword arguments of `evaluate`/`predict` are not read (the
        Trainer keeps them only in a private attribute)."""
        args = {"max_length": self.args.generation_max_length, "num_beams": self.args.generation_num_beams}
        kwargs = {k: v for k, v in {**args, **gen_kwargs}.items() if v is not None}
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
        return generated
