"""The paper's training recipe on the Trainer: optimizer, schedule, label-smoothed loss, token batches, BLEU
evaluation, crash-safe checkpoints and exact resumption. Tiny models and 200 Multi30k pairs keep it fast."""

import itertools
import json
import logging
import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
import torch
import torch.nn.functional as F
from helpers import TINY_SIZES, read_multi30k, run_to_end, subprocess_env
from transformers import DataCollatorForSeq2Seq, ProgressCallback, TrainerCallback

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.checkpoints import last_checkpoint
from vanilla_transformer.data.batching import TokenBatchSampler
from vanilla_transformer.data.corpus import tokenize_corpus
from vanilla_transformer.data.tokenizer import train_tokenizer
from vanilla_transformer.evaluation.bleu import compute_bleu, decode_ids
from vanilla_transformer.loss_vanilla_transformer import label_smoothed_cross_entropy
from vanilla_transformer.modeling_vanilla_transformer import cache_of
from vanilla_transformer.training.callbacks import (
    CooldownPlanner,
    TimeLimit,
    TimeLimitProgressCallback,
    TrainingClock,
)
from vanilla_transformer.training.options import VanillaTrainingArguments
from vanilla_transformer.training.schedule import noam_learning_rate
from vanilla_transformer.training.trainer import LabelSmoothedLoss, build_trainer, resume_checkpoint


read = read_multi30k  # read(name, n): the first n lines of a Multi30k file


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(read("train.en.gz", 200) + read("train.de.gz", 200), vocab_size=400)


@pytest.fixture(scope="module")
def corpus(tokenizer):
    pairs = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"source": read("train.en.gz", 200), "target": read("train.de.gz", 200)}),
        validation=datasets.Dataset.from_dict({"source": read("val.en.gz", 12), "target": read("val.de.gz", 12)}),
    )
    return tokenize_corpus(pairs, tokenizer, max_length=64)


def tiny_model(tokenizer, seed=0, dropout=0.0):
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), **TINY_SIZES, dropout=dropout)
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(config)


def make_trainer(path, model, tokenizer, corpus, callbacks=(), **overrides):
    settings = dict(
        output_dir=str(path),
        max_steps=4,
        max_tokens=400,
        warmup_steps=4,
        logging_steps=1,
        save_strategy="no",
        eval_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        per_device_eval_batch_size=16,
        generation_max_length=8,
        seed=0,
    )
    settings.update(overrides)
    return build_trainer(
        model,
        VanillaTrainingArguments(**settings),
        tokenizer,
        corpus["train"],
        corpus.get("validation"),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        callbacks=callbacks,
    )


def resume(trainer, checkpoint=True):
    """`trainer.train` from `checkpoint` as the training command resumes: checked first by `resume_checkpoint`."""
    trainer.args.resume_from_checkpoint = checkpoint
    return trainer.train(resume_from_checkpoint=resume_checkpoint(trainer.args, trainer.model.config.d_model))


def train_logs(trainer):
    return {h["step"]: h for h in trainer.state.log_history if "loss" in h}


def check_option_resumes_exactly(tmp_path, make, **option):
    """For a training option drawn anew per update (e.g. `subword_split=0.2`): train `make(path, **settings)` for 6
    updates with it, and a copy resumed from its checkpoint-3: updates 4-6 must log the same losses and end with the
    same weights. And the option must matter: with it at 0 the same run trains otherwise."""
    settings = dict(max_steps=6, save_strategy="steps", save_steps=3, **option)
    full = make(tmp_path / "full", **settings)
    full.train()
    shutil.copytree(tmp_path / "full" / "checkpoint-3", tmp_path / "resumed" / "checkpoint-3")
    resumed = make(tmp_path / "resumed", **settings)
    resume(resumed)
    expected, got = train_logs(full), train_logs(resumed)
    for step in range(4, 7):
        assert got[step]["loss"] == expected[step]["loss"], step
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(p, q), name
    off = make(tmp_path / "off", **{**settings, **dict.fromkeys(option, 0)})
    off.train()
    assert train_logs(off)[6]["loss"] != expected[6]["loss"]


class GradientRecorder(TrainerCallback):
    """The accumulated gradients just before each optimizer update."""

    def __init__(self):
        self.grads = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})


# ---- Arguments ----


def test_arguments_default_to_the_paper_and_can_be_overridden(tmp_path):
    args = VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[])
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert (args.weight_decay, args.max_grad_norm, args.warmup_steps) == (0.0, 0.0, 4000)
    assert (args.label_smoothing_factor, args.lr_factor, args.max_tokens, args.max_sentences) == (0.1, 1.0, 4096, None)
    assert args.lr_schedule == "noam" and args.predict_with_generate
    assert args.subword_split == 0.0 and args.bidirectional_steps == 0  # not in the paper: off
    assert args.metric_for_best_model == "bleu" and args.greater_is_better is True
    other = VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], adam_beta2=0.997, warmup_steps=8000)
    assert (other.adam_beta2, other.warmup_steps) == (0.997, 8000)


@pytest.mark.parametrize(
    "overrides, name",
    [
        (dict(label_smoothing_factor=1.0), "label_smoothing_factor"),
        (dict(lr_schedule="inverse_sqrt"), "lr_schedule"),
        (dict(lr_factor=0.0), "lr_factor"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(max_sentences=-1), "max_sentences"),
        (dict(lr_cooldown=1.0), "lr_cooldown"),
        (dict(lr_cooldown=0.2, lr_schedule="trainer"), "lr_cooldown"),
        (dict(subword_split=1.0), "subword_split"),
        (dict(subword_split=-0.1), "subword_split"),
    ],
)
def test_bad_arguments_name_the_argument(tmp_path, overrides, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], **overrides)


@pytest.mark.parametrize("native", [True, False])
def test_bf16_auto_is_on_only_where_the_hardware_has_bfloat16(tmp_path, monkeypatch, native):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    args = VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16="auto")
    assert args.bf16 is native and args.mixed_precision == ("bf16" if native else "no")
    assert ("AVX512_BF16" if native else "emulated") in args.precision_reason
    # What the command line and the recipes give: strings; a bare `--bf16` is "true".
    assert VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, bf16="true").bf16 is True
    assert VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], bf16=False).bf16 is False
    with pytest.raises(ValueError, match="`bf16` must be true, false or auto, got 'sometimes'"):
        VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], bf16="sometimes")


def test_no_host_sync_defaults(tmp_path):
    args = VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[])
    assert args.logging_nan_inf_filter is False  # it reads every micro-batch's loss on the host
    assert args.bf16 is False and args.pad_to_multiple_of is None


# ---- Loss ----


def test_build_trainer_gives_the_paper_loss_and_bleu_through_the_trainers_arguments(tmp_path, tokenizer, corpus):
    trainer = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, label_smoothing_factor=0.2)
    assert isinstance(trainer.compute_loss_func, LabelSmoothedLoss)
    assert trainer.compute_loss_func.label_smoothing_factor == 0.2 and trainer.label_smoother is None
    assert trainer.compute_metrics is not None  # BLEU, from the tokenizer
    lengths = [len(ids) for ids in trainer.eval_dataset["input_ids"]]
    assert lengths == sorted(lengths, reverse=True) and len(lengths) == len(corpus["validation"])


@pytest.mark.parametrize("minutes", [None, 1], ids=["no time limit", "a time limit"])
def test_build_trainer_takes_arguments_built_in_python(tmp_path, tokenizer, corpus, minutes):
    """As build_trainer's error message tells a caller: `VanillaTrainingArguments(output_dir=...)` and nothing else,
    the run's derived state in its declared fields (issue 67: once `AttributeError: ... 'fit_warmup_to_speed'`)."""
    args = VanillaTrainingArguments(output_dir=str(tmp_path))
    assert (args.recipe, args.recipe_cpu_float32, args.warmup_fitted, args.fit_warmup_to_speed) == (None,) * 4
    assert args.precision_reason  # decided by the arguments themselves (bf16 false: float32)
    assert "fit_warmup_to_speed" not in args.to_dict()  # derived, not an option
    build_trainer(tiny_model(tokenizer), args, None, max_train_minutes=minutes)  # the call the docstring names
    args = VanillaTrainingArguments(output_dir=str(tmp_path), max_steps=2, max_tokens=400, report_to=[], use_cpu=True)
    trainer = build_trainer(tiny_model(tokenizer), args, tokenizer, corpus["train"], max_train_minutes=minutes)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(isinstance(c, TimeLimit) for c in trainer.callback_handler.callbacks) == bool(minutes)


def test_a_collator_that_makes_no_decoder_input_is_named(tmp_path, tokenizer, corpus):
    """The Trainer hands the labels to the loss, not to the model: a collator without the model makes no decoder
    input, and training and evaluation say so instead of failing inside the model."""
    args = VanillaTrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True)
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    model = tiny_model(tokenizer)
    trainer = build_trainer(model, args, tokenizer, corpus["train"], corpus["validation"], data_collator=collator)
    for run in (trainer.train, trainer.evaluate):
        with pytest.raises(
            ValueError, match="no `decoder_input_ids`: collate with `DataCollatorForSeq2Seq.*model=model"
        ):
            run()


def test_label_smoothed_loss_equals_a_hand_computation():
    torch.manual_seed(0)
    V, eps = 7, 0.1
    logits = torch.randn(2, 4, V, dtype=torch.float64)
    labels = torch.tensor([[3, 1, 2, -100], [6, 2, -100, -100]])
    smoothed, nll, n_tokens = label_smoothed_cross_entropy(logits, labels, eps)

    # Explicit target distribution: eps / V on every token, plus 1 - eps on the gold one (Szegedy et al.).
    hand_smoothed = hand_nll = 0.0
    for b, t in itertools.product(range(2), range(4)):
        gold = labels[b, t].item()
        if gold == -100:
            continue
        p = torch.softmax(logits[b, t], dim=-1)
        q = torch.full((V,), eps / V, dtype=torch.float64)
        q[gold] += 1 - eps
        hand_smoothed += -(q * p.log()).sum().item()
        hand_nll += -p[gold].log().item()
    assert n_tokens.item() == 5
    assert smoothed.item() == pytest.approx(hand_smoothed, rel=1e-12)
    assert nll.item() == pytest.approx(hand_nll, rel=1e-12)
    # The same convention as torch's; fairseq's eps / (V - 1) on the non-gold tokens is a different loss.
    torch_loss = F.cross_entropy(logits.view(-1, V), labels.view(-1), label_smoothing=eps, reduction="sum")
    assert smoothed.item() == pytest.approx(torch_loss.item(), rel=1e-12)
    lprobs = F.log_softmax(logits, -1)[labels != -100]
    gold_lp = lprobs.gather(-1, labels[labels != -100].unsqueeze(-1)).squeeze(-1)
    fairseq = (-(1 - eps) * gold_lp - eps / (V - 1) * (lprobs.sum(-1) - gold_lp)).sum()
    assert abs(smoothed.item() - fairseq.item()) > 1e-3
    # Without smoothing it is the plain cross-entropy.
    assert label_smoothed_cross_entropy(logits, labels, 0.0)[0].item() == pytest.approx(hand_nll, rel=1e-12)


def _smoothed_loss_of_a_batch(compile_with=None):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, requires_grad=True)
    labels = torch.tensor([[1, 2, 3, -100, -100], [4, 5, 6, 7, 8], [9, 10, -100, -100, -100]])
    loss_of = LabelSmoothedLoss(0.1, compile_with)
    loss = loss_of({"logits": logits}, labels, num_items_in_batch=torch.tensor(20))
    (grad,) = torch.autograd.grad(loss, logits)
    return loss.detach(), loss_of.sums, grad, logits.detach(), labels


def test_the_trainers_loss_is_the_smoothed_sum_over_the_updates_tokens():
    loss, sums, _, logits, labels = _smoothed_loss_of_a_batch()
    smoothed = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing=0.1, reduction="sum")
    nll = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
    torch.testing.assert_close(loss, smoothed / 20)  # 20: the target tokens of the whole update, not these 10
    torch.testing.assert_close(sums, torch.stack([smoothed, nll, torch.tensor(10.0)]))
    with pytest.raises(ValueError, match="The batch has no `labels`"):
        LabelSmoothedLoss(0.1)({"logits": logits}, None)


@pytest.mark.slow
def test_the_compiled_loss_equals_the_eager_one():
    """With `torch_compile` the loss is compiled too (inductor, about a minute on 2 CPU cores): the same loss, sums
    and gradient."""
    for eager, compiled in zip(_smoothed_loss_of_a_batch(), _smoothed_loss_of_a_batch(("inductor", None))):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_does_not_change_loss_or_gradients(tmp_path, tokenizer, corpus):
    """One update on 8 sentences, as 1 batch of 8 or 4 micro-batches of 2 (of different lengths: a per-micro-batch
    mean would weight their tokens differently)."""
    runs = {}
    for batch, accumulation in ((8, 1), (2, 4)):
        recorder = GradientRecorder()
        trainer = make_trainer(
            tmp_path / f"ga{accumulation}",
            tiny_model(tokenizer),
            tokenizer,
            corpus,
            [recorder],
            max_tokens=None,
            train_sampling_strategy="sequential",
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation,
            max_steps=2,
        )
        trainer.train()
        runs[accumulation] = (train_logs(trainer), recorder.grads)
    (logs1, grads1), (logs4, grads4) = runs[1], runs[4]
    for step in (1, 2):
        assert logs4[step]["loss"] == pytest.approx(logs1[step]["loss"], rel=1e-5)
        assert logs4[step]["nll_loss"] == pytest.approx(logs1[step]["nll_loss"], rel=1e-5)
        for name, grad in grads1[step - 1].items():
            torch.testing.assert_close(grads4[step - 1][name], grad, rtol=1e-4, atol=1e-7)

    # And the loss is the token mean over the 8 sentences, computed here independently.
    model = tiny_model(tokenizer)
    batch = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)(
        [{k: corpus["train"][i][k] for k in ("input_ids", "labels")} for i in range(8)]
    )
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=batch["decoder_input_ids"],
        ).logits
    expected = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), label_smoothing=0.1)
    assert logs4[1]["loss"] == pytest.approx(expected.item(), rel=1e-5)


# ---- Optimizer and schedule ----


def test_adam_and_the_paper_schedule(tmp_path, tokenizer, corpus):
    model = tiny_model(tokenizer)
    trainer = make_trainer(tmp_path, model, tokenizer, corpus, max_steps=6, warmup_steps=3, lr_factor=2.0)
    trainer.train()
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate wraps it
    assert type(optimizer) is torch.optim.AdamW  # weight decay 0: the paper's Adam (see the test below)
    for group in optimizer.param_groups:
        assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.9, 0.98), 1e-9, 0.0)
    # Each parameter once: the tied embedding / output projection is a single tensor.
    n_params = len({p.data_ptr() for p in trainer.model.parameters()})
    assert sum(len(g["params"]) for g in optimizer.param_groups) == n_params
    logs = train_logs(trainer)
    for step in range(1, 7):  # the rate each update ran with, eq. 3 at the update's number
        assert logs[step]["learning_rate"] == pytest.approx(noam_learning_rate(step, 32, 3, 2.0), rel=1e-12)
        assert logs[step]["ppl"] == pytest.approx(math.exp(logs[step]["nll_loss"]))
        assert logs[step]["nll_loss"] < logs[step]["loss"]  # smoothing adds the cross-entropy to the uniform


def test_cooldown_over_the_last_half_of_max_steps(tmp_path, tokenizer, corpus):
    trainer = make_trainer(
        tmp_path, tiny_model(tokenizer), tokenizer, corpus, max_steps=8, warmup_steps=3, lr_cooldown=0.5
    )
    trainer.train()
    used = [train_logs(trainer)[step]["learning_rate"] for step in range(1, 9)]
    assert used[:4] == pytest.approx([noam_learning_rate(step, 32, 3) for step in range(1, 5)], rel=1e-12)
    held = noam_learning_rate(4, 32, 3)
    assert used[4:] == pytest.approx([held * k / 5 for k in (4, 3, 2, 1)], rel=1e-12)


def test_the_trainers_fused_adamw_is_the_papers_adam_and_optim_is_honoured(tmp_path, tokenizer, corpus):
    """The stock `adamw_torch_fused` with weight decay 0 (the defaults here) is section 5.3's Adam(0.9, 0.98, 1e-9):
    a few updates of it give the same parameters, to the bit, as torch's fused Adam on the same gradients."""
    trainer = make_trainer(tmp_path / "default", tiny_model(tokenizer), tokenizer, corpus, max_steps=1)
    trainer.create_optimizer()
    optimizer = trainer.optimizer
    assert type(optimizer) is torch.optim.AdamW and optimizer.defaults["fused"] is True
    assert all(group["weight_decay"] == 0.0 for group in optimizer.param_groups)
    assert (optimizer.defaults["betas"], optimizer.defaults["eps"]) == ((0.9, 0.98), 1e-9)
    model = trainer.model
    reference = tiny_model(tokenizer)
    reference.load_state_dict(model.state_dict())
    adam = torch.optim.Adam(reference.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9, fused=True)
    for group in optimizer.param_groups:
        group["lr"] = 1e-3
    batch = next(iter(trainer.get_train_dataloader()))
    for _ in range(3):
        for net, opt in ((model, optimizer), (reference, adam)):
            net(**batch).loss.backward()
            opt.step()
            opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name
    other = make_trainer(tmp_path / "sgd", tiny_model(tokenizer), tokenizer, corpus, max_steps=1, optim="sgd")
    other.create_optimizer()
    assert type(other.optimizer) is torch.optim.SGD  # another `optim` is the Trainer's optimizer, not ignored


def test_logged_updates_carry_the_gradient_norm(tmp_path, tokenizer, corpus):
    trainer = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, max_steps=6, logging_steps=3)
    trainer.train()
    logs = train_logs(trainer)
    assert sorted(logs) == [3, 6] and all(logs[step]["grad_norm"] > 0 for step in logs)


# ---- Token batches and data parallelism ----


def test_token_batches_cover_the_epoch_within_the_budget(tmp_path, tokenizer, corpus):
    trainer = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, max_tokens=300)
    loader = trainer.get_train_dataloader()
    sampler = loader.batch_sampler
    assert isinstance(sampler, TokenBatchSampler) and sampler.max_tokens == 300
    batches = list(loader)
    assert len(batches) == len(loader) > 1
    assert sum(b["input_ids"].shape[0] for b in batches) == len(corpus["train"])
    for b in batches:
        rows, longest = b["input_ids"].shape[0], max(b["input_ids"].shape[1], b["labels"].shape[1])
        assert rows * longest <= 300
    first_epoch = list(sampler)
    loader.set_epoch(1)  # what the Trainer calls at each epoch: same batches, another order
    assert list(sampler) != first_epoch
    assert sorted(map(tuple, sampler)) == sorted(map(tuple, first_epoch))


# ---- Evaluation ----


def test_evaluation_reports_loss_nll_perplexity_and_bleu(tmp_path, tokenizer, corpus):
    model = tiny_model(tokenizer, seed=3)
    trainer = make_trainer(tmp_path, model, tokenizer, corpus, per_device_eval_batch_size=5)
    generation_config = model.generation_config.to_dict()
    metrics = trainer.evaluate()

    # Independently: token-weighted losses over the split, and BLEU of the same beam search.
    model.eval()
    collate = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    batch = collate([{k: row[k] for k in ("input_ids", "labels")} for row in corpus["validation"]])
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=batch["decoder_input_ids"],
        ).logits
        generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_length=8)
    flat_logits, flat_labels = logits.flatten(0, 1), batch["labels"].flatten()
    tokens = (flat_labels != -100).sum().item()
    nll = F.cross_entropy(flat_logits, flat_labels, reduction="sum").item() / tokens
    smoothed = F.cross_entropy(flat_logits, flat_labels, label_smoothing=0.1, reduction="sum").item() / tokens
    assert metrics["eval_nll_loss"] == pytest.approx(nll, rel=1e-5)
    assert metrics["eval_loss"] == pytest.approx(smoothed, rel=1e-5)
    assert metrics["eval_ppl"] == pytest.approx(math.exp(nll), rel=1e-5)
    hyps = tokenizer.batch_decode(generated, skip_special_tokens=True)
    refs = tokenizer.batch_decode(batch["labels"].masked_fill(batch["labels"] == -100, 0), skip_special_tokens=True)
    assert metrics["eval_bleu"] == pytest.approx(compute_bleu(hyps, refs)["score"], abs=1e-9)
    # Evaluating leaves the model's generation config (saved with every checkpoint) as it was.
    assert model.generation_config.to_dict() == generation_config


def test_evaluation_encodes_each_batch_once_without_cache_in_length_order(tmp_path, tokenizer, corpus):
    model = tiny_model(tokenizer, seed=3)
    trainer = make_trainer(tmp_path, model, tokenizer, corpus, per_device_eval_batch_size=4)
    encoded, loss_forwards = [], []
    model.model.encoder.register_forward_hook(
        lambda module, args, kwargs, output: encoded.append(kwargs["attention_mask"].sum(-1).tolist()),
        with_kwargs=True,
    )

    def on_forward(module, args, kwargs, output):
        if kwargs.get("encoder_outputs") is None:  # the loss forward (generation's steps reuse the encoding)
            loss_forwards.append(cache_of(output))

    model.register_forward_hook(on_forward, with_kwargs=True)
    trainer.evaluate()
    n = len(corpus["validation"])
    assert len(encoded) == math.ceil(n / 4) > 1  # the encoder runs once per batch, not again to generate
    assert loss_forwards == [None] * len(encoded)  # no KV cache built for the loss
    lengths = [length for batch in encoded for length in batch]
    assert len(lengths) == n and lengths == sorted(lengths, reverse=True)  # longest first: little padding


def test_best_checkpoint_by_bleu_is_kept(tmp_path, tokenizer, corpus):
    scores = iter([10.0, 30.0, 20.0])
    trainer = make_trainer(
        tmp_path,
        tiny_model(tokenizer),
        tokenizer,
        corpus,
        max_steps=6,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        save_total_limit=1,
        generation_max_length=3,
    )
    trainer.compute_metrics = lambda prediction: {"bleu": next(scores)}
    trainer.train()
    assert trainer.state.best_metric == 30.0
    assert trainer.state.best_model_checkpoint == str(tmp_path / "checkpoint-4")
    # save_total_limit=1 keeps the best and the last checkpoints during training and only the best at the end.
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-4"]


# ---- Precision ----


def test_bfloat16_on_a_cpu_trains_with_the_eager_attention(tmp_path, tokenizer, corpus):
    fp32 = make_trainer(tmp_path / "fp32", tiny_model(tokenizer), tokenizer, corpus)
    assert fp32.model.config._attn_implementation == "sdpa"
    bf16 = make_trainer(tmp_path / "bf16", tiny_model(tokenizer), tokenizer, corpus, bf16=True)
    assert bf16.args.mixed_precision == "bf16" and bf16.model.config._attn_implementation == "eager"


def test_bfloat16_training_reaches_the_float32_validation_loss(tmp_path, tokenizer):
    """300 updates on 2000 Multi30k pairs from the same seed, in float32 and under bfloat16 autocast (float32 master
    weights, Adam state and loss): the validation NLL agrees within 0.05 nats (the run lowers it by ~3 nats), and the
    training curves stay close all along."""
    pairs = datasets.DatasetDict(
        train=datasets.Dataset.from_dict({"source": read("train.en.gz", 2000), "target": read("train.de.gz", 2000)}),
        validation=datasets.Dataset.from_dict({"source": read("val.en.gz", 100), "target": read("val.de.gz", 100)}),
    )
    data = tokenize_corpus(pairs, tokenizer, max_length=64)
    runs = {}
    for name, bf16 in (("fp32", False), ("bf16", True)):
        trainer = make_trainer(
            tmp_path / name,
            tiny_model(tokenizer, seed=1, dropout=0.1),
            tokenizer,
            data,
            bf16=bf16,
            max_steps=300,
            max_tokens=500,
            warmup_steps=100,
            lr_factor=2.0,
            logging_steps=50,
            predict_with_generate=False,
            per_device_eval_batch_size=50,
        )
        start = trainer.evaluate()["eval_nll_loss"]
        trainer.train()
        runs[name] = (start, trainer.evaluate()["eval_nll_loss"], train_logs(trainer))
    (start, fp32, logs32), (_, bf16, logs16) = runs["fp32"], runs["bf16"]
    assert fp32 < start - 2.5, (start, fp32)  # it learned
    assert abs(bf16 - fp32) < 0.05, (fp32, bf16)
    for step in logs32:
        assert logs16[step]["nll_loss"] == pytest.approx(logs32[step]["nll_loss"], abs=0.1)


# ---- Checkpoints and resumption ----


def test_resume_reproduces_the_uninterrupted_run(tmp_path, tokenizer, corpus):
    """With dropout on (RNG state matters) and across an epoch boundary (the next epoch's order matters)."""
    common = dict(max_steps=9, max_tokens=1400, save_strategy="steps", save_steps=3)
    full = make_trainer(tmp_path / "full", tiny_model(tokenizer, dropout=0.1), tokenizer, corpus, **common)
    assert 3 < len(full.get_train_dataloader()) < 9  # the run crosses an epoch boundary after the checkpoint
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-3"
    names = set(os.listdir(checkpoint))
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= names
    assert not any(name.endswith(".bin") and name.startswith("pytorch_model") for name in names)

    shutil.copytree(checkpoint, tmp_path / "resumed" / "checkpoint-3")
    other_init = tiny_model(tokenizer, seed=99, dropout=0.1)  # the checkpoint must replace it
    resumed = make_trainer(tmp_path / "resumed", other_init, tokenizer, corpus, **common)
    resume(resumed)

    expected, got = train_logs(full), train_logs(resumed)
    for step in range(4, 10):
        for key in ("loss", "nll_loss", "learning_rate", "grad_norm"):
            assert got[step][key] == expected[step][key], (step, key)
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(p, q), name


def test_the_training_clock_counts_the_time_before_the_checkpoint_a_run_resumed_from(tmp_path, tokenizer, corpus):
    """Each checkpoint carries the seconds trained (`TrainingClock`, saved with the Trainer's state); a resumed run
    starts from them, so that results.json's training time is the model's. A checkpoint written before the clock
    existed has no entry: the resumed run trains and saves, its earlier time unknown (None)."""
    ticks = itertools.count()  # every reading of the clock is one second later

    def trainer(path):
        clock = TrainingClock(clock=lambda: float(next(ticks)))
        common = dict(max_steps=6, save_strategy="steps", save_steps=3)
        return make_trainer(path, tiny_model(tokenizer), tokenizer, corpus, callbacks=[clock], **common), clock

    full, clock = trainer(tmp_path / "full")
    full.train()
    saved = json.loads((tmp_path / "full" / "checkpoint-3" / "trainer_state.json").read_text())
    seconds = saved["stateful_callbacks"]["TrainingClock"]["attributes"]["seconds"]
    assert clock.resumed_at is None and 0 < seconds < clock.trained_seconds()

    shutil.copytree(tmp_path / "full" / "checkpoint-3", tmp_path / "resumed" / "checkpoint-3")
    resumed, clock = trainer(tmp_path / "resumed")
    resume(resumed)
    assert (clock.resumed_at, clock.before) == (3, seconds) and clock.trained_seconds() > seconds
    state = json.loads((tmp_path / "resumed" / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["stateful_callbacks"]["TrainingClock"]["attributes"]["seconds"] > seconds

    old = tmp_path / "old" / "checkpoint-3"
    shutil.copytree(tmp_path / "full" / "checkpoint-3", old)
    del saved["stateful_callbacks"]["TrainingClock"]
    (old / "trainer_state.json").write_text(json.dumps(saved))
    resumed, clock = trainer(tmp_path / "old")
    resume(resumed)
    assert (clock.resumed_at, clock.before) == (3, None) and (tmp_path / "old" / "checkpoint-6").is_dir()


def test_a_resume_does_not_call_the_tied_weights_missing(tmp_path, tokenizer, corpus):
    """The checkpoint saves the shared embedding once (section 3.4); the Trainer's load says the two stacks' embeddings
    and the output projection are missing, which read as a broken checkpoint (issue 68): not said. A key really
    missing still is."""
    said = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    trainer_logger = logging.getLogger("transformers.trainer")
    trainer_logger.addHandler(handler)
    try:
        common = dict(max_steps=2, save_strategy="steps", save_steps=2)
        make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, **common).train()
        again = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, **{**common, "max_steps": 3})
        assert resume(again).global_step == 3
        assert not [message for message in said if "missing keys" in message], said
        trainer_logger.warning("There were missing keys in the checkpoint model loaded: ['lm_head.weight', 'x'].")
        assert said[-1].endswith("['lm_head.weight', 'x'].")
    finally:
        trainer_logger.removeHandler(handler)


def test_resuming_with_another_schedule_is_refused(tmp_path, tokenizer, corpus):
    """The checkpoint's scheduler state holds its warm-up and factor; resuming would restore them over the new ones."""
    common = dict(max_steps=2, save_strategy="steps", save_steps=2)
    make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, **common).train()
    for change, message in [
        (dict(warmup_steps=5), "warmup_steps=4.*warmup_steps=5"),
        (dict(warmup_steps=5, max_steps=-1, num_train_epochs=2), "warmup_steps=4.*warmup_steps=5"),  # by epochs
        (dict(lr_factor=2.0), "lr_factor=1.0.*lr_factor=2.0"),
        (dict(lr_schedule="trainer"), "paper's learning-rate schedule.*'trainer'"),
    ]:
        settings = {**common, "max_steps": 4, **change}
        again = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, **settings)
        with pytest.raises(ValueError, match=message):
            resume(again)
    # The same schedule resumes.
    same = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, **{**common, "max_steps": 4})
    assert resume(same, str(tmp_path / "checkpoint-2")).global_step == 4


def test_a_crash_during_save_leaves_the_last_good_checkpoint(tmp_path, tokenizer, corpus, monkeypatch):
    common = dict(max_steps=6, save_strategy="steps", save_steps=2)
    trainer = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, **common)
    save_rng_state = trainer._save_rng_state

    def crash_at_step_4(output_dir):
        if trainer.state.global_step == 4:
            raise KeyboardInterrupt("killed while saving")
        save_rng_state(output_dir)

    monkeypatch.setattr(trainer, "_save_rng_state", crash_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2", "checkpoint-4"]
    assert "model.safetensors" in os.listdir(tmp_path / "checkpoint-4")  # written, but the save did not finish
    assert "trainer_state.json" not in os.listdir(tmp_path / "checkpoint-4")
    assert last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")

    again = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, **common)
    resume(again)
    assert again.state.global_step == 6
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    state = json.loads((tmp_path / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6


def test_only_complete_checkpoints_are_resumed_from(tmp_path, tokenizer, corpus):
    """A save is complete once `trainer_state.json` is written (the Trainer writes it last): a checkpoint without
    it, or with a truncated one, is never taken, whatever its step."""
    make_trainer(
        tmp_path, tiny_model(tokenizer), tokenizer, corpus, max_steps=2, save_strategy="steps", save_steps=2
    ).train()
    shutil.copytree(tmp_path / "checkpoint-2", tmp_path / "checkpoint-4")
    state = (tmp_path / "checkpoint-4" / "trainer_state.json").read_text()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text(state[: len(state) // 2])  # cut mid-write
    shutil.copytree(tmp_path / "checkpoint-2", tmp_path / "checkpoint-6")
    (tmp_path / "checkpoint-6" / "trainer_state.json").unlink()
    assert last_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-2")
    again = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, max_steps=3)
    with pytest.raises(ValueError, match="did not finish"):
        resume(again, str(tmp_path / "checkpoint-4"))
    assert resume(again).global_step == 3
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2"]  # the incomplete ones are gone


# ---- Time limit ----


def fake_clock(seconds_per_call: float):
    """A clock that advances `seconds_per_call` each time it is read: TimeLimit reads it once when training begins
    and once after each update, so it reads `step * seconds_per_call` after update `step`."""
    calls = itertools.count()
    return lambda: next(calls) * seconds_per_call


def test_time_limit_stops_saves_and_evaluates_at_the_step_it_is_reached(tmp_path, tokenizer, corpus):
    limit = TimeLimit(2.5, clock=fake_clock(60))  # 150 s: over after update 3 (180 s)
    trainer = make_trainer(
        tmp_path,
        tiny_model(tokenizer),
        tokenizer,
        corpus,
        [limit],
        max_steps=50,
        eval_strategy="steps",
        eval_steps=1000,
        generation_max_length=3,
    )
    trainer.train()
    assert trainer.state.global_step == 3
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-3"]
    assert [h["step"] for h in trainer.state.log_history if "eval_loss" in h] == [3]
    with pytest.raises(ValueError, match="minutes"):
        TimeLimit(0)


def test_time_limit_plans_the_cooldown_from_the_updates_per_second(tmp_path, tokenizer, corpus):
    """10 minutes, lr_cooldown 0.3. The first update is slow (start-up: 150 s), then 30 s each. The speed is
    measured from 240 s (update 4, 0.6 of the limit) to 420 s (update 10, 0.7: the cool-down starts): 6 updates in
    180 s, so the cool-down is planned to end at update 10 + 180 s / 30 s = 16, earlier than the one planned from
    max_steps (35-50); the average since the start (10 in 420 s) would say 14. Updates then get faster (10 s), so
    the run stops when the cool-down ends (update 16, 480 s), before the limit."""
    readings = iter([0, 150, 180, 210, 240, 270, 300, 330, 360, 390, 420, *range(430, 600, 10)])
    limit = TimeLimit(10, clock=lambda: next(readings))
    trainer = make_trainer(
        tmp_path,
        tiny_model(tokenizer),
        tokenizer,
        corpus,
        [limit, CooldownPlanner(limit)],
        max_steps=50,
        warmup_steps=3,
        lr_cooldown=0.3,
        save_strategy="steps",
        save_steps=1000,
    )
    trainer.train()
    assert trainer.state.global_step == 16
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-16"]
    used = [train_logs(trainer)[step]["learning_rate"] for step in range(1, 17)]
    assert used[:10] == pytest.approx([noam_learning_rate(step, 32, 3) for step in range(1, 11)], rel=1e-12)
    assert used[10:] == pytest.approx([noam_learning_rate(10, 32, 3) * k / 7 for k in range(6, 0, -1)], rel=1e-12)
    # The plan is part of the schedule's saved state, so a resumed run keeps it.
    saved = torch.load(tmp_path / "checkpoint-16" / "scheduler.pt", weights_only=True)
    assert (saved["cooldown_start"], saved["cooldown_end"]) == (10, 16)


def test_progress_bar_of_a_timed_run_counts_the_time_limit(tmp_path, tokenizer, corpus, capsys):
    """With a time limit, max_steps is only a ceiling (e.g. 100,000): the bar's total and ETA are the limit's."""
    limit = TimeLimit(2.5, clock=fake_clock(60))
    trainer = make_trainer(
        tmp_path, tiny_model(tokenizer), tokenizer, corpus, [limit], max_steps=100_000, disable_tqdm=False
    )
    assert trainer.pop_callback(ProgressCallback) is not None  # as train.py does
    trainer.add_callback(TimeLimitProgressCallback(limit))
    trainer.train()
    bar = capsys.readouterr().err.split("\r")  # (tqdm skips redraws less than 0.1 s apart: first and last are sure)
    assert any(" 0/150 s of the time limit" in line for line in bar)
    assert any("150/150 s of the time limit" in line and "update 3" in line for line in bar)  # capped at the limit
    assert not any("/100000" in line for line in bar)


# ---- Several processes (gloo on CPU) ----


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_scored_sentences(trainer) -> dict:
    """Makes the trainer's `compute_metrics` also record the decoded sentences it scores (returned dict, filled in
    at each evaluation)."""
    scored, bleu = {}, trainer.compute_metrics

    def compute_metrics(prediction):
        scored["hypotheses"] = decode_ids(prediction.predictions, trainer.processing_class)
        scored["references"] = decode_ids(prediction.label_ids, trainer.processing_class)
        return bleu(prediction)

    trainer.compute_metrics = compute_metrics
    return scored


TWO_PROCESS_SCRIPT = r"""
import json, os, sys
sys.path.insert(0, {tests!r})
import test_trainer as t
from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data.tokenizer import load_tokenizer
work, rank = sys.argv[1], int(os.environ["RANK"])
tok = load_tokenizer(work + "/model")
corpus = t.tokenize_corpus(t.datasets.DatasetDict(train=t.datasets.Dataset.from_dict(
    {{"source": t.read("train.en.gz", 200), "target": t.read("train.de.gz", 200)}})), tok, max_length=64)

# 1. A time limit whose clocks disagree: rank 1's runs 1.5x faster, it alone would stop one update earlier.
limit = t.TimeLimit(2.5, clock=t.fake_clock(60 if rank == 0 else 90))
trainer = t.make_trainer(work + "/limited", t.tiny_model(tok), tok, corpus, [limit], max_steps=50)
# Each process trains on its own token batches, all of them (the sampler shards itself; accelerate must not again).
batches = [len(batch["input_ids"]) for batch in trainer.get_train_dataloader()]
own = [len(b) for b in t.TokenBatchSampler.from_dataset(corpus["train"], 400, seed=0, num_replicas=2, rank=rank,
                                                         pad_to_multiple_of=trainer.args.pad_to_multiple_of)]
trainer.train()

# 1b. The cool-down planned in the time left, with the same disagreeing clocks (10 minutes, lr_cooldown 0.3): alone,
# rank 0 would plan updates 7 to 10 and rank 1 updates 5 to 6; both must plan the main process's.
limit = t.TimeLimit(10, clock=t.fake_clock(60 if rank == 0 else 90))
planned = t.make_trainer(work + "/planned", t.tiny_model(tok), tok, corpus, [limit, t.CooldownPlanner(limit)],
                         max_steps=50, warmup_steps=3, lr_cooldown=0.3)
planned.train()
cooldown = [planned.lr_scheduler.cooldown_start, planned.lr_scheduler.cooldown_end, planned.state.global_step]

# 2. Evaluation on 30 sentences in batches of 10: 3 batches for 2 processes.
model = VanillaTransformerForConditionalGeneration.from_pretrained(work + "/model")
evaluator = t.make_trainer(work + "/eval", model, tok, {{**corpus, "validation": corpus["train"].select(range(30))}},
                           per_device_eval_batch_size=10, generation_max_length=20)
scored = t.record_scored_sentences(evaluator)
metrics = evaluator.evaluate()
json.dump({{"steps": trainer.state.global_step, "eval": metrics, "scored": scored, "batches": batches, "own": own,
           "cooldown": cooldown}},
          open(f"{{work}}/rank{{rank}}.json", "w"))
"""


def test_two_processes_stop_at_the_same_step_and_evaluate_each_sentence_once(tmp_path, tokenizer, corpus):
    """Two gloo processes. Batches: each process trains on all of its own token batches (the sampler shards itself,
    accelerate must not deal them out again). The time limit: each process has its own clock; if each decided
    alone, one would enter the checkpoint's collectives while the other is in the next update's all-reduce (a hang).
    Evaluation: 30 sentences in batches of 10 make 2 rounds for 2 processes, the second filled up with the first
    batch again; the sentences scored (each once, in order), BLEU and the token-weighted loss must be those of one
    process. (Compared sentence by sentence: the tiny model's BLEU is near 0 whichever sentences are scored.)"""
    model = tiny_model(tokenizer)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    thirty = {**corpus, "validation": corpus["train"].select(range(30))}
    evaluator = make_trainer(
        tmp_path / "eval", model, tokenizer, thirty, per_device_eval_batch_size=10, generation_max_length=20
    )
    scored = record_scored_sentences(evaluator)
    single = evaluator.evaluate()
    assert len(scored["hypotheses"]) == 30

    script = tmp_path / "run.py"
    script.write_text(TWO_PROCESS_SCRIPT.format(tests=str(Path(__file__).resolve().parent)))
    # In a session of its own, so that a hang (the bug this guards against) ends with all its processes killed.
    run_to_end(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            str(free_port()),
            str(script),
            str(tmp_path),
        ],
        240,
    )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["batches"] == r["own"] and len(r["own"]) > 1
    assert sum(ranks[0]["own"]) + sum(ranks[1]["own"]) >= len(corpus["train"])  # together: the whole epoch
    # Rank 0's clock decides for both: over after update 3 (180 s > 150 s), where rank 1's alone says update 2.
    assert [r["steps"] for r in ranks] == [3, 3]
    # The cool-down plan is the main process's on both (its clock: updates 7 to 10, then the run ends).
    assert [r["cooldown"] for r in ranks] == [[7, 10, 10], [7, 10, 10]]
    assert sorted(os.listdir(tmp_path / "limited")) == ["checkpoint-3"]
    for r in ranks:  # each process scores the 30 sentences once, in order, as one process does
        assert r["scored"] == scored
        assert r["eval"]["eval_bleu"] == single["eval_bleu"]
        for key in ("eval_loss", "eval_nll_loss", "eval_ppl"):
            assert r["eval"][key] == pytest.approx(single[key], rel=1e-6), key


# ---- Data parallelism, for real (opt-in: ~1 minute on 2 CPU cores) ----

DDP_SCRIPT = r"""
import json, sys, torch
sys.path.insert(0, {tests!r})
import test_trainer as t
from transformers import TrainerCallback
accumulation, out = int(sys.argv[1]), sys.argv[2]
tok = t.train_tokenizer(t.read("train.en.gz", 200) + t.read("train.de.gz", 200), vocab_size=400)
corpus = t.tokenize_corpus(t.datasets.DatasetDict(train=t.datasets.Dataset.from_dict(
    {{"source": t.read("train.en.gz", 200), "target": t.read("train.de.gz", 200)}})), tok, max_length=64)
norms = []
class Norm(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, model=None, **kw):
        norms.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item())
trainer = t.make_trainer(out, t.tiny_model(tok), tok, corpus, [Norm()], max_steps=5,
                         gradient_accumulation_steps=accumulation)
trainer.train()
if trainer.args.process_index == 0:
    logs = t.train_logs(trainer)
    json.dump({{"loss": [logs[s]["loss"] for s in sorted(logs)], "norms": norms}}, open(out + ".json", "w"))
"""


@pytest.mark.slow
def test_two_processes_equal_one_process_accumulating_two_batches(tmp_path):
    """Each process takes every other token batch, so 2 processes x 1 batch per update see the same batches as
    1 process x 2 accumulated batches: the losses and gradients must agree."""
    script = tmp_path / "run.py"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).resolve().parent)))
    env = subprocess_env()
    subprocess.run([sys.executable, str(script), "2", str(tmp_path / "one")], check=True, env=env)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29571",
            str(script),
            "1",
            str(tmp_path / "two"),
        ],
        check=True,
        env=env,
    )
    one, two = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("one", "two"))
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)
    assert two["norms"] == pytest.approx(one["norms"], rel=1e-5)
