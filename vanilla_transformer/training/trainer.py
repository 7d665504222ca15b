"""`VanillaTransformerTrainer`: the `Seq2SeqTrainer` with the paper's training recipe (section 5): token batches,
Adam with the warm-up schedule, the label-smoothed loss, and evaluation by loss and BLEU.

`build_trainer` makes it: the paper's loss and BLEU go in through the Trainer's own arguments (`compute_loss_func`,
`compute_metrics`), the evaluation split sorted by length once; `resume_checkpoint` checks a checkpoint before it.
One update, in the order the Trainer (transformers 5.24, `Trainer.train`) calls this package:

1. `get_train_dataloader` (once per `train()` call, in a new order each epoch): batches of about `max_tokens` tokens
   from `batching.TokenBatchSampler`, sentences of similar length together (section 5.1), sharded across
   data-parallel processes by the sampler itself.
2. `get_batch_samples`: the update's micro-batches (`gradient_accumulation_steps` of them), augmented when asked
   (`subword_split`, `bidirectional_steps`: augmentation.py, not in the paper) before the Trainer counts their target
   tokens (`num_items_in_batch`); an augmented batch is collated again, so the collator (given the model) makes its
   decoder input from the new labels, as it does for every batch.
3. The Trainer's `compute_loss`, once per micro-batch, inside its `training_step` (which then runs the backward): the
   model's logits, then `LabelSmoothedLoss` (the Trainer's `compute_loss_func`): the label-smoothed cross-entropy
   (section 5.4, `label_smoothing_factor`) divided by the target tokens of the whole update, so the gradients do not
   depend on how the update is split across micro-batches or processes; the sums for the logs are added up there.
4. The Trainer's gradient norm, for the logs (no clipping, as in the paper: `max_grad_norm=0`).
5. The optimizer step: the Trainer's own optimizer, `adamw_torch_fused` with weight decay 0, which is the paper's
   Adam with beta1 0.9, beta2 0.98, epsilon 1e-9 (section 5.3); then `lr_scheduler.step()`, the learning rate of eq. 3
   (section 5.3): `schedule.NoamLR`, which `create_scheduler` built before the first update.
6. The callbacks' `on_step_end` (callbacks.py, a run sized in minutes as the paper's runs are in hours, section 5.2):
   `TimeLimit` reads the clock and stops at the limit; `CooldownPlanner` plans the cool-down into the schedule
   (`NoamLR.set_cooldown`) once the time left is short, and stops when it ends.
7. `log`, every `logging_steps` updates: the Trainer's mean loss, plus `nll_loss` and `ppl` per target token.
8. Every `eval_steps` updates, `evaluate` -> `evaluation_loop` (the loss per target token of the split) ->
   `prediction_step` per batch (the loss sentence by sentence, and beam search from the same encoding of the source)
   -> `compute_metrics` (cased sacreBLEU, `evaluation.bleu.make_compute_metrics`).
9. Every `save_steps` updates, the Trainer's checkpoint (model, optimizer, schedule, RNG states, position in the data):
   `train(resume_from_checkpoint=resume_checkpoint(args, d_model))` continues the uninterrupted run's losses exactly
   (tests/test_trainer.py); `resume_checkpoint` refuses a checkpoint whose schedule differs from the arguments or
   whose optimizer state was removed.

Precision (`bf16="auto"`) is resolved by `VanillaTrainingArguments` (options.py); in bfloat16 on a CPU the model runs
the eager attention, the fast kernel there (`precision.fast_attention_implementation`).
"""

from __future__ import annotations

import ast
import logging
import math
from functools import partial

import datasets
import torch
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer
from transformers.modeling_outputs import BaseModelOutput
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import seed_worker

from ..checkpoints import has_resume_state, is_complete_checkpoint, last_checkpoint, remove_incomplete_checkpoints
from ..data.batching import TokenBatchSampler, longest_first
from ..data.corpus import MODEL_INPUT_COLUMNS
from ..evaluation.bleu import make_compute_metrics
from ..loss_vanilla_transformer import label_smoothed_cross_entropy, per_target_token
from ..precision import fast_attention_implementation, use_attention
from .augmentation import maybe_reverse, merge_tree, sentence_pairs, split_batch, update_seed
from .options import VanillaTrainingArguments
from .schedule import NoamLR, check_schedule_of, peak_learning_rate, planned_cooldown


logger = logging.getLogger(__name__)


class LabelSmoothedLoss:
    """The training loss, as the Trainer's `compute_loss_func` (`build_trainer` passes it): section 5.4's
    label-smoothed cross-entropy (`label_smoothing_factor`; float32, fused: `label_smoothed_cross_entropy`) of one
    micro-batch, summed over its target tokens and divided by `num_items_in_batch`, the target tokens of the whole
    update that the Trainer counts, so that the gradients do not depend on how the update is split across
    micro-batches or processes. The Trainer's `compute_loss` then scales it for data parallelism as it scales its own
    losses. Adds (smoothed loss, NLL, target tokens) of each micro-batch to `sums` (no host sync), which
    `VanillaTransformerTrainer.log` reads. With `compile_with` (a `torch.compile` backend and mode: `torch_compile`),
    the loss is compiled as well as the model, for any batch shape, and the compiler fuses its formula."""

    def __init__(self, label_smoothing_factor: float = 0.0, compile_with: tuple[str, str | None] | None = None):
        self.label_smoothing_factor = label_smoothing_factor
        self.sums: torch.Tensor | None = None  # made on the logits' device by the first call
        self.function = label_smoothed_cross_entropy
        if compile_with is not None:
            backend, mode = compile_with
            self.function = torch.compile(self.function, dynamic=True, backend=backend, mode=mode)

    @classmethod
    def of(cls, args: VanillaTrainingArguments) -> LabelSmoothedLoss:
        """The loss the arguments ask for: their `label_smoothing_factor`, compiled under `torch_compile`."""
        compiler = (args.torch_compile_backend or "inductor", args.torch_compile_mode)
        return cls(args.label_smoothing_factor, compile_with=compiler if args.torch_compile else None)

    def terms(self, logits: torch.Tensor, labels: torch.Tensor, per_sequence: bool = False):
        """(smoothed loss, NLL, target tokens), summed over the batch or, with `per_sequence`, over each sentence
        (evaluation's sums, never compiled): the one place training and evaluation compute the cross-entropy."""
        function = label_smoothed_cross_entropy if per_sequence else self.function
        return function(logits, labels.to(logits.device), self.label_smoothing_factor, per_sequence=per_sequence)

    def __call__(self, outputs, labels, num_items_in_batch=None) -> torch.Tensor:
        if labels is None:
            raise ValueError(
                "The batch has no `labels`: the training data must hold the tokenized targets in a `labels` column."
            )
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        loss_sum, nll_sum, tokens = self.terms(logits, labels)
        if self.sums is None:
            self.sums = torch.zeros(3, device=loss_sum.device)
        self.sums += torch.stack([loss_sum.detach(), nll_sum, tokens.to(loss_sum.dtype)]).to(self.sums)
        return per_target_token(loss_sum, tokens, num_items_in_batch)


def build_trainer(
    model,
    args: VanillaTrainingArguments,
    tokenizer,
    train_dataset=None,
    eval_dataset=None,
    *,
    data_collator=None,
    callbacks=(),
    max_train_minutes: float | None = None,
) -> VanillaTransformerTrainer:
    """A `VanillaTransformerTrainer` with the paper's recipe given through the Trainer's own arguments: the
    label-smoothed loss (`compute_loss_func`), BLEU (`compute_metrics`, with `predict_with_generate`), the evaluation
    split sorted by source length (read in order, it batches sentences of similar length), and the attention kernel
    that is fast in the run's precision. With `max_train_minutes`, the time limit, the warm-up fitted to the measured
    speed (when the options asked for it), the cool-down planned in the time left, and a progress bar that counts the
    limit. `data_collator` defaults to `DataCollatorForSeq2Seq` given the model, which makes the decoder input from
    the labels. What the arguments cannot be trained with is refused here, before anything runs."""
    from transformers import DataCollatorForSeq2Seq, ProgressCallback

    from .callbacks import CooldownPlanner, TimeLimit, TimeLimitProgressCallback, WarmupFitter

    if not isinstance(args, VanillaTrainingArguments):
        raise ValueError(
            f"`args` must be a VanillaTrainingArguments, got {type(args).__name__}: build it with "
            f"`VanillaTrainingArguments(output_dir=..., ...)` (it carries the paper's defaults)."
        )
    if args.n_gpu > 1:
        raise ValueError(
            f"`n_gpu`={args.n_gpu}: torch.nn.DataParallel is not supported (token batches cannot be split evenly). "
            f"Launch one process per GPU instead: `accelerate launch -m vanilla_transformer.training.train ...` "
            f"or `torchrun`."
        )
    for option, why in (
        ("bidirectional_steps", "turns labels into source tokens padded with the tokenizer's pad id"),
        ("subword_split", "undoes the tokenizer's BPE merges"),
    ):
        if getattr(args, option) and getattr(tokenizer, "pad_token_id", None) is None:
            raise ValueError(f"`{option}` {why}, but there is no tokenizer with a pad token: pass `tokenizer`.")
    compute_metrics = None
    if args.predict_with_generate and tokenizer is not None:
        compute_metrics = make_compute_metrics(tokenizer)
    metric = (args.metric_for_best_model or "").removeprefix("eval_")
    if metric in ("bleu", "gen_len") and compute_metrics is None and args.eval_strategy != "no":
        raise ValueError(
            f"`metric_for_best_model`={args.metric_for_best_model!r} needs BLEU, which needs a tokenizer and "
            f"`predict_with_generate=True`; or set `metric_for_best_model='loss'`."
        )
    use_fast_attention(model, args)
    limit = TimeLimit(max_train_minutes) if max_train_minutes else None
    callbacks = list(callbacks)
    if limit:
        fit = args.fit_warmup_to_speed
        callbacks += [limit, WarmupFitter(limit, scale_factor=fit["lr_factor"])] if fit else [limit]
        callbacks.append(CooldownPlanner(limit))
    if data_collator is None:  # given the model, it makes the decoder input from the labels (`check_decoder_input`)
        data_collator = DataCollatorForSeq2Seq(
            tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=args.pad_to_multiple_of
        )
    trainer = VanillaTransformerTrainer(
        model=model,
        args=args,
        data_collator=data_collator,
        train_dataset=train_dataset,
        eval_dataset=longest_first(eval_dataset) if eval_dataset is not None else None,
        processing_class=tokenizer,
        compute_loss_func=LabelSmoothedLoss.of(args),
        compute_metrics=compute_metrics,
        callbacks=callbacks or None,
    )
    TIED_WEIGHTS_FILTER.tied.update(getattr(model, "all_tied_weights_keys", None) or {})
    trainer_logger = logging.getLogger("transformers.trainer")
    if TIED_WEIGHTS_FILTER not in trainer_logger.filters:
        trainer_logger.addFilter(TIED_WEIGHTS_FILTER)
    # The Trainer builds its own `LabelSmoother` from `label_smoothing_factor`, which `compute_loss_func` overrides:
    # dropped, so that one label smoothing is in the trainer, not two.
    trainer.label_smoother = None
    if limit and trainer.pop_callback(ProgressCallback):  # the progress bar counts the time limit, not max_steps
        trainer.add_callback(TimeLimitProgressCallback(limit))
    return trainer


class TiedWeightsAreNotMissing(logging.Filter):
    """Drops the Trainer's "There were missing keys in the checkpoint model loaded: [...]" on a resume when the keys
    are the model's tied weights only: the embedding of each stack and the output projection are the one matrix
    `shared` (section 3.4), saved once under that name, and loading it sets all three. The warning read as a broken
    checkpoint (issue 68); any other missing key is still said. `tied` gathers the tied keys of the models built."""

    PREFIX = "There were missing keys in the checkpoint model loaded: "

    def __init__(self):
        super().__init__()
        self.tied: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.PREFIX):
            return True
        try:
            missing = set(ast.literal_eval(message.removeprefix(self.PREFIX).rstrip(".")))
        except (ValueError, SyntaxError):
            return True
        return not (missing and missing <= self.tied)


TIED_WEIGHTS_FILTER = TiedWeightsAreNotMissing()


def check_decoder_input(batch: dict) -> None:
    """The Trainer gives a batch's labels to the loss (`compute_loss_func`), not to the model, whose own shift of the
    labels into its decoder input (section 3) then does not run: the collator must have made the decoder input."""
    if "labels" in batch and "decoder_input_ids" not in batch:
        raise ValueError(
            "The batch has `labels` but no `decoder_input_ids`: collate with `DataCollatorForSeq2Seq(tokenizer, "
            "model=model)` (build_trainer's default), which makes them from the labels with the model's "
            "`prepare_decoder_input_ids_from_labels`."
        )


def use_fast_attention(model, args: VanillaTrainingArguments) -> None:
    """Log the precision and why; in bfloat16 on a CPU, switch the model to the eager attention, the fast kernel
    there (`precision.fast_attention_implementation`; not saved: checkpoints keep the default)."""
    precision = {"bf16": "bfloat16 autocast", "fp16": "float16 autocast"}.get(args.mixed_precision, "float32")
    logger.info("Precision: %s on %s (%s).", precision, args.device, args.precision_reason)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.mixed_precision, torch.float32)
    attention = fast_attention_implementation(args.device, dtype)
    if attention and getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa":
        use_attention(model, attention)
        logger.info("Attention: %s (torch's SDPA kernel is the slow one in %s on a CPU).", attention, precision)


def resume_checkpoint(args: VanillaTrainingArguments, d_model: int | None) -> str | None:
    """The checkpoint `args.resume_from_checkpoint` names, checked before the Trainer is built: `True` takes the
    newest complete checkpoint of `output_dir`; a checkpoint whose save did not finish, one whose optimizer state was
    removed, and one whose learning-rate schedule differs from these arguments (the Trainer would restore the
    checkpoint's schedule, silently ignoring the new values) are refused. On the main process, the incomplete
    checkpoints of `output_dir` are then removed. None: no resume."""
    checkpoint = args.resume_from_checkpoint
    if checkpoint is True:
        checkpoint = last_checkpoint(args.output_dir)
        if checkpoint is None:
            raise ValueError(
                f"`resume_from_checkpoint=True` but `output_dir` {args.output_dir!r} holds no complete "
                f"checkpoint: pass the path of one, or start without resuming."
            )
    if not checkpoint:
        return None
    checkpoint = str(checkpoint)
    if not is_complete_checkpoint(checkpoint):
        raise ValueError(
            f"`resume_from_checkpoint` {checkpoint!r} has no readable {TRAINER_STATE_NAME}, which the Trainer "
            f"writes last: its save did not finish. Resume from an earlier checkpoint (True takes the newest "
            f"complete one)."
        )
    if not has_resume_state(checkpoint) and not args.save_only_model:
        # The Trainer would go on without it, silently: a fresh Adam, the schedule from its start.
        raise ValueError(
            f"`resume_from_checkpoint` {checkpoint!r} holds the weights only: its optimizer state was removed at "
            f"the end of its run (`keep_checkpoints`), which keeps it in the newest checkpoint. Resume from that one "
            f"(`resume_from_checkpoint` true), or start a new run from these weights (`init_from`)."
        )
    check_schedule_of(checkpoint, args, d_model)
    if args.should_save:
        remove_incomplete_checkpoints(args.output_dir)
    return checkpoint


class VanillaTransformerTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with the paper's schedule, token-based batches, the label-smoothed loss's logs and BLEU
    evaluation; its methods come in the order of the module docstring's update. Build it with `build_trainer`, which
    passes the paper's loss and metrics through the Trainer's arguments; `args` is a `VanillaTrainingArguments`.

    What passes between its methods: the sums of (smoothed loss, NLL, target tokens), added up by `LabelSmoothedLoss`
    until `log` reads them (training) and by `prediction_step` until `evaluation_loop` reads them (evaluation); the
    schedule `create_scheduler` built, built again by the next `train()` call.
    """

    _merge_tree = None  # (left, right) of subword splitting, read from the tokenizer when first needed
    _noam_scheduler = None  # the paper's schedule, when `create_scheduler` built it
    _eval_sums = None  # (smoothed loss, NLL, target tokens) of the evaluation in progress

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
        `bidirectional_steps` updates half of them reversed (augmentation.py; neither is in the paper), then collated
        again (`_collate`), so that the collator makes the decoder input of the new labels."""
        if self.args.subword_split:
            # Lazy: the Trainer's loop takes its `num_batches` from the iterator, each split as it is taken.
            epoch_iterator = (self._split_subwords(batch, i) for i, batch in enumerate(epoch_iterator))
        if self.state.global_step < self.args.bidirectional_steps:
            epoch_iterator = (self._maybe_reverse(batch, i) for i, batch in enumerate(epoch_iterator))
        batches, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        for batch in batches:
            check_decoder_input(batch)
            if self.args.torch_compile:
                # Token batches vary in sentences and in length: compile for any size at once (else torch.compile
                # compiles for the first shape, then again for each dimension seen to change).
                for tensor in batch.values():
                    if isinstance(tensor, torch.Tensor) and tensor.dim() == 2:
                        torch._dynamo.maybe_mark_dynamic(tensor, 0)
                        torch._dynamo.maybe_mark_dynamic(tensor, 1)
        return batches, num_items_in_batch

    def _collate(self, pairs: list[dict], like: dict) -> dict:
        """Augmented `pairs` through the trainer's collator again, on the device of the batch they came from: padded
        as the data loader pads, with the decoder input made from the new labels (a collator given the model)."""
        device = like["input_ids"].device
        return {name: tensor.to(device) for name, tensor in self.data_collator(pairs).items()}

    def _update_seed(self, micro_batch: int, *stream: int) -> int:
        """`augmentation.update_seed` of this update, micro-batch and process (`stream` 2: the reversal)."""
        return update_seed(self.args.seed, self.state.global_step, micro_batch, self.args.process_index, *stream)

    def _maybe_reverse(self, batch: dict, micro_batch: int) -> dict:
        pairs = maybe_reverse(batch, self._update_seed(micro_batch, 2), self.processing_class.pad_token_id)
        return batch if pairs is None else self._collate(pairs, batch)

    def _split_subwords(self, batch: dict, micro_batch: int) -> dict:
        if self._merge_tree is None:
            self._merge_tree = merge_tree(self.processing_class)
        config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
        split = split_batch(
            sentence_pairs(batch, self.processing_class.pad_token_id),
            *self._merge_tree,
            self.args.subword_split,
            generator=torch.Generator().manual_seed(self._update_seed(micro_batch)),
            max_length=getattr(config, "max_position_embeddings", None),
        )
        return self._collate(split, batch)

    # ---- Gradient norm and schedule (section 5.3) ----

    # Overridden: stock `inverse_sqrt` lags eq. 3 by an update (schedule.py); `optimizers=` predates our optimizer.
    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """With `lr_schedule="noam"`, the paper's learning rate (section 5.3, eq. 3): `schedule.NoamLR`, peak
        `lr_factor * (d_model * warmup_steps)^-0.5` with `d_model` from the model config, and the cool-down asked for
        (`lr_cooldown`, not in the paper). With "trainer", the Trainer's own schedule (`lr_scheduler_type`)."""
        # A schedule this trainer built is built again on each `train()` call (its arguments or step count may have
        # changed), as the Trainer does with the schedules it builds itself; one given by the caller is kept.
        ours = self.lr_scheduler is None or self.lr_scheduler is self._noam_scheduler
        if ours and self.args.lr_schedule == "noam":
            config = getattr(self.accelerator.unwrap_model(self.model), "config", None)
            d_model = getattr(config, "d_model", None)
            if d_model is None:
                raise ValueError(
                    "The paper's learning-rate schedule needs `d_model` from the model config, which has none: use a "
                    "VanillaTransformer model, or `lr_schedule='trainer'` with `learning_rate`."
                )
            warmup = self.args.get_warmup_steps(num_training_steps)
            cooldown = planned_cooldown(self.args.lr_cooldown, num_training_steps)
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

    # Overridden: `on_log` runs after `state.log_history` copied the logs and after the `report_to` callbacks.
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """The Trainer's log; the periodic training log gains `nll_loss` and `ppl`, per target token since the last."""
        sums = getattr(self.compute_loss_func, "sums", None)  # LabelSmoothedLoss's, since the last log
        if "loss" in logs and sums is not None:  # the periodic training log (evaluation logs have `eval_loss`)
            _, nll_sum, tokens = self.accelerator.reduce(sums.clone(), reduction="sum").tolist()
            sums.zero_()
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
        self._eval_sums = torch.zeros(3, device=self.args.device)
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
        # Gathered already by `prediction_step`, without the sentences repeated to fill the last round of batches.
        smoothed_sum, nll_sum, tokens = self._eval_sums.tolist()
        if tokens > 0:
            output.metrics[f"{metric_key_prefix}_loss"] = smoothed_sum / tokens
            output.metrics[f"{metric_key_prefix}_nll_loss"] = nll_sum / tokens
            output.metrics[f"{metric_key_prefix}_ppl"] = math.exp(min(nll_sum / tokens, 100.0))
        return output

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
        check_decoder_input(inputs)
        forward = {k: v for k, v in inputs.items() if k != "labels"}
        loss_of = self.compute_loss_func
        if not isinstance(loss_of, LabelSmoothedLoss):  # a caller's own training loss: the split's is the paper's
            loss_of = LabelSmoothedLoss(self.args.label_smoothing_factor)
        with torch.no_grad(), self.compute_loss_context_manager():
            outputs = model(**forward, use_cache=False)
            logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
            smoothed, nll, tokens = loss_of.terms(logits, labels, per_sequence=True)
        # Gathered like the predictions: under data parallelism the last round of batches is filled up with sentences
        # from the start of the split, which `gather_for_metrics` drops.
        sums = self.accelerator.gather_for_metrics(torch.stack([smoothed, nll, tokens.to(smoothed.dtype)], dim=-1))
        if self._eval_sums is None:  # a `prediction_step` outside `evaluation_loop`
            self._eval_sums = torch.zeros(3, device=self.args.device)
        self._eval_sums += sums.sum(0).to(self._eval_sums)
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
