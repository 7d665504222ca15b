"""Benchmark: this package's Transformer against transformers' `MarianMTModel` built as the same architecture, in
float32 and in bfloat16, eager and compiled, with MFU against this machine's measured peak.

What is timed, for each preset (`small`, `base`):

- a training step: forward with `labels` and the loss, backward, and the optimizer update (torch's fused Adam, the
  same code for every model), model in `train()` mode with the preset's dropout, on a padded batch of real Multi30k
  EN->DE sentences. Ours computes its training loss, label-smoothed (epsilon 0.1) cross-entropy, inside the model;
  Marian its own plain cross-entropy (less work than smoothing);
- beam-4 generation (`eval()`, `no_grad`, KV cache) of a padded batch of Multi30k source sentences.

Variants, all timed on the *same input tensors*, interleaved in one process (round-robin, rotating who goes first):

- `ours fp32`, `marian fp32`: float32, torch's SDPA attention (both models' default);
- `ours bf16`, `marian bf16` (with `--dtype float32,bfloat16`): training under `torch.autocast(bfloat16)` with
  float32 master weights (the Trainer's `--bf16`); generation with the model cast whole to bfloat16 (`translate
  --dtype bfloat16`). On a CPU both models then use the eager attention (two bfloat16 matmuls and a float32 softmax):
  torch's CPU SDPA kernel is slow in bfloat16 (see `vanilla_transformer/precision.py`); Marian gets the same choice,
  and `marian bf16 sdpa` is Marian as shipped (its default SDPA attention) under the same autocast;
- `ours bf16+compile` (with `--compile`): the same, the model wrapped in `torch.compile` (training only; the first,
  untimed run compiles, and its time is printed);
- `ours+bias fp32`: ours with `attention_bias=True`, which has exactly Marian's trainable parameters. Marian gets
  this model's weights (and its positional table), and the script checks that both then compute the same logits and
  generate the same tokens: their ratio is the noise floor of the run.

It prints, per variant, the median and inter-quartile range of the time on two clocks: wall time, and the CPU time of
the process (which leaves out the time spent waiting for a core on a shared machine; with `--threads 1` it is the
steadier figure); target tokens per second; the speed-up over `ours fp32` and the ratio to Marian in the same
precision, both as the median of the per-round ratios (each round runs every variant back to back, so the paired
ratio is less sensitive to load); and the MFU of the training step: its FLOPs (counted by `torch.utils.flop_counter`
on the padded batch, forward and backward; the optimizer is not counted) per second of CPU time, over this machine's
GEMM peak in its fastest precision (bfloat16 where it is native, float32 on an AVX2-only CPU), which `machine_peak.py`
measures at the start of the run with the same threads. `--profile` adds
a breakdown of where the time goes per kind of op (attention projections, attention core, FFN, LayerNorm,
embeddings, output projection, loss, generation loop, logits processors, KV cache), with operator counts and host
syncs, for ours and Marian in the lowest precision asked for, and for ours in float32.

Run from the repository root:
    python bench/bench_vs_marian.py --threads 1                                  # small + base, float32
    python bench/bench_vs_marian.py --threads 1 --dtype float32,bfloat16 --compile
    python bench/bench_vs_marian.py --presets small --reps 9 --profile
    python bench/bench_vs_marian.py --device cuda --dtype float32,bfloat16 --compile --train_batch 256 --gen_batch 64

This is a benchmark, not a test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from torch.autograd.profiler import record_function  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from transformers import GenerationConfig, MarianConfig, MarianMTModel  # noqa: E402


# Run as a script from a checkout: make the package importable without installing it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import MULTI30K, make_batches, read_lines  # noqa: E402  (bench/, the script's directory)
from machine_peak import cpu_flags, measure_peaks  # noqa: E402

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.modeling_vanilla_transformer import sinusoidal_position_encoding  # noqa: E402
from vanilla_transformer.precision import bf16_support, fast_attention_implementation  # noqa: E402
from vanilla_transformer.training.trainer import LabelSmoothedLoss  # noqa: E402


# Per-preset defaults, chosen so that a run of small + base with both dtypes and --compile stays within ~10 minutes
# on 2 CPU cores. `base` is ~8x the compute of `small`, hence smaller batches and fewer repetitions on CPU.
PRESET_DEFAULTS = {
    "small": dict(train_batch=32, gen_batch=16, reps=5, new_tokens=16),
    "base": dict(train_batch=12, gen_batch=4, reps=3, new_tokens=12),
    "big": dict(train_batch=8, gen_batch=4, reps=3, new_tokens=12),
}
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
LABEL_SMOOTHING = 0.1  # section 5.4: what ours computes in training
TRAINING_LOSS = LabelSmoothedLoss(LABEL_SMOOTHING)  # the trainer's (`compute_loss_func`)


# ----------------------------------------------------------------------------------------------------------------
# Data: real Multi30k sentences, one shared tokenizer, identical tensors for every model.
# ----------------------------------------------------------------------------------------------------------------


def build_tokenizer(data_dir: Path, vocab_size: int, sentences: int):
    """The package's shared EN+DE BPE tokenizer, trained on the first `sentences` training pairs."""
    from vanilla_transformer.data.tokenizer import train_tokenizer

    english = read_lines(data_dir / "train.en.gz", sentences)
    german = read_lines(data_dir / "train.de.gz", sentences)
    return train_tokenizer(english + german, vocab_size=vocab_size)


# ----------------------------------------------------------------------------------------------------------------
# Models: ours (two variants) and Marian configured as the same architecture.
# ----------------------------------------------------------------------------------------------------------------


def marian_config_like(config: VanillaTransformerConfig, max_positions: int) -> MarianConfig:
    """MarianConfig with our architecture: ReLU, post-norm (Marian is always post-norm), sqrt(d)-scaled embeddings
    shared by encoder, decoder and output (three-way tying), the same sizes, dropout and special-token ids."""
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        activation_function="relu",
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        max_position_embeddings=max_positions,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        # MarianConfig's default forces token 0 at the last step; ours forces nothing.
        forced_eos_token_id=None,
    )


def copy_into_marian(ours: VanillaTransformerForConditionalGeneration, marian: MarianMTModel) -> None:
    """Give Marian the weights of `ours` (built with attention_bias=True) and our positional table, so that both
    compute the same function. Names match except that our FFN is a sub-module (`ffn.fc1` vs `fc1`)."""
    state = {name.replace(".ffn.", "."): tensor for name, tensor in ours.state_dict().items()}
    missing, unexpected = marian.load_state_dict(state, strict=False)
    expected_missing = {
        "final_logits_bias",
        "model.encoder.embed_positions.weight",
        "model.decoder.embed_positions.weight",
    }
    if set(missing) - expected_missing or unexpected:
        raise RuntimeError(f"Weight mapping ours -> Marian is incomplete: missing {missing}, unexpected {unexpected}.")
    # Section 3.5's interleaved sin/cos (Marian's own table puts all sines first, then all cosines).
    with torch.no_grad():
        for positions in (marian.model.encoder.embed_positions, marian.model.decoder.embed_positions):
            table = sinusoidal_position_encoding(torch.arange(positions.num_embeddings), positions.embedding_dim)
            positions.weight.copy_(table.to(positions.weight))


def count_parameters(model: torch.nn.Module) -> tuple[int, int, int]:
    """(trainable, frozen, buffers) element counts; tied weights are counted once (`parameters()` de-duplicates)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    buffers = sum(b.numel() for b in model.buffers())
    return trainable, frozen, buffers


def check_tying(model: torch.nn.Module, name: str) -> None:
    shared = model.get_input_embeddings().weight
    encoder, decoder = model.get_encoder().embed_tokens.weight, model.get_decoder().embed_tokens.weight
    if not (model.get_output_embeddings().weight is shared and encoder is shared and decoder is shared):
        raise RuntimeError(f"{name}: embeddings are not three-way tied; the comparison would not be like for like.")


def build_models(preset: str, vocab_size: int, max_positions: int, device: torch.device, seed: int):
    """The three float32 models: ours, ours+bias, and Marian with ours+bias's weights."""
    torch.manual_seed(seed)
    config = VanillaTransformerConfig.from_preset(preset, vocab_size=vocab_size)
    ours = VanillaTransformerForConditionalGeneration(config)
    ours_bias = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset(preset, vocab_size=vocab_size, attention_bias=True)
    )
    marian = MarianMTModel(marian_config_like(config, max_positions))
    copy_into_marian(ours_bias, marian)
    models = {"marian": marian, "ours": ours, "ours+bias": ours_bias}
    for name, model in models.items():
        check_tying(model, name)
        model.to(device=device)
    return config, models


def print_differences(config: VanillaTransformerConfig, models: dict) -> None:
    counts = {name: count_parameters(model) for name, model in models.items()}
    print("  parameters (trainable, tied counted once | frozen | buffers):")
    for name, (trainable, frozen, buffers) in counts.items():
        print(f"    {name:10s} {trainable:>12,d} | {frozen:>9,d} | {buffers:>6,d}")
    same = counts["ours+bias"][0] == counts["marian"][0]
    extra = counts["marian"][0] - counts["ours"][0]
    bias_count = (config.encoder_layers * 4 + config.decoder_layers * 8) * config.d_model
    print(
        f"    ours+bias == marian trainable: {same}; marian - ours = {extra:,d} = attention biases "
        f"(4 per encoder layer, 8 per decoder layer, x d_model = {bias_count:,d}): {extra == bias_count}"
    )
    if not same:
        raise RuntimeError("ours+bias and Marian do not have the same trainable parameters: fix marian_config_like.")
    print(
        "  remaining differences: Marian always has biases in W_Q/W_K/W_V/W_O (ours only with attention_bias=True); "
        "Marian's sinusoids are not interleaved (all sines, then all cosines: a frozen table, the 'frozen' column; "
        "here it is overwritten with ours for the equivalence check, which changes values, not work); Marian adds "
        "final_logits_bias (a zero buffer) to the logits; in training ours computes the label-smoothed loss in "
        "float32, Marian the plain cross-entropy in the compute dtype; ours checks token ids and masks on CPU in "
        "eager mode."
    )


@torch.no_grad()
def check_equivalence(ours_bias, marian, batch: dict, gen_batch: dict, gen_config: GenerationConfig) -> None:
    """With copied weights and positional table, ours+bias and Marian must be the same function: same logits, same
    beam-search output. Otherwise the timings would compare different computations."""
    for model in (ours_bias, marian):
        model.eval()
    logits_ours = ours_bias(**batch).logits.float()
    logits_marian = marian(**batch).logits.float()
    diff = (logits_ours - logits_marian).abs().max().item()
    scale = logits_marian.abs().max().item()
    gen_ours = ours_bias.generate(**_gen_inputs(gen_batch), generation_config=gen_config)
    gen_marian = marian.generate(**_gen_inputs(gen_batch), generation_config=gen_config)
    same_tokens = gen_ours.shape == gen_marian.shape and bool((gen_ours == gen_marian).all())
    print(
        f"  equivalence ours+bias vs marian (copied weights, float32): max |logit diff| {diff:.2e} (max |logit| "
        f"{scale:.1f}); generated tokens identical: {same_tokens}; output shape {tuple(gen_ours.shape)}"
    )
    if diff > 1e-3 * max(scale, 1.0):
        raise RuntimeError("ours+bias and Marian compute different logits: the architectures do not match.")


# ----------------------------------------------------------------------------------------------------------------
# Variants: a model, a precision, eager or compiled.
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Variant:
    family: str  # "ours", "marian", "ours+bias"
    model: torch.nn.Module  # the module that is called (compiled or not)
    module: torch.nn.Module  # the module itself (its parameters, its generate)
    dtype: torch.dtype
    compiled: bool = False
    optimizer: torch.optim.Optimizer | None = None
    suffix: str = ""

    @property
    def name(self) -> str:
        return f"{self.family} {SHORT[self.dtype]}" + ("+compile" if self.compiled else "") + self.suffix


def as_shipped(models: dict, device: torch.device, dtype: torch.dtype) -> list:
    """Marian with its own default attention (SDPA), where the fast choice differs (bfloat16 on a CPU): what a Marian
    user gets under the same autocast, beside `marian bf16`, which gets this package's attention choice."""
    if fast_attention_implementation(device, dtype) is None:
        return []
    return [Variant("marian", copy.deepcopy(models["marian"]), None, dtype, suffix=" sdpa")]


def with_attention(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of `model` with the attention implementation for `dtype` on `device` (precision.py: eager for
    bfloat16 on a CPU, else the model's default, SDPA)."""
    model = copy.deepcopy(model)
    attention = fast_attention_implementation(device, dtype)
    if attention is not None:
        model.set_attn_implementation(attention)
    return model


def training_variants(models: dict, dtypes: list, compile_: bool, device: torch.device) -> dict[str, Variant]:
    variants = []
    for dtype in dtypes:
        for family in ("ours", "marian"):
            module = with_attention(models[family], device, dtype)
            variants.append(Variant(family, module, module, dtype))
        if dtype == torch.float32:
            variants.append(Variant("ours+bias", models["ours+bias"], models["ours+bias"], dtype))
        variants += as_shipped(models, device, dtype)
    if compile_:
        module = with_attention(models["ours"], device, dtypes[-1])
        variants.append(Variant("ours", torch.compile(module), module, dtypes[-1], compiled=True))
    for variant in variants:
        variant.module = variant.module or variant.model
        variant.module.train()  # the preset's dropout in every model
        variant.optimizer = torch.optim.Adam(
            variant.module.parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9, fused=True
        )
    return {variant.name: variant for variant in variants}


def generation_variants(models: dict, dtypes: list, device: torch.device) -> dict[str, Variant]:
    """Generation in `dtype` with the model cast whole to it, as `translate --dtype` does."""
    variants = []
    for dtype in dtypes:
        for family in ("ours", "marian"):
            module = with_attention(models[family], device, dtype).to(dtype).eval()
            variants.append(Variant(family, module, module, dtype))
        if dtype == torch.float32:
            variants.append(Variant("ours+bias", models["ours+bias"].eval(), models["ours+bias"], dtype))
        for variant in as_shipped(models, device, dtype):
            variant.model = variant.module = variant.model.to(dtype).eval()
            variants.append(variant)
    return {variant.name: variant for variant in variants}


# ----------------------------------------------------------------------------------------------------------------
# The two timed operations.
# ----------------------------------------------------------------------------------------------------------------


CLOCKS = ("wall", "cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _gen_inputs(batch: dict) -> dict:
    return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])


def train_step(variant: Variant, batch: dict) -> None:
    """Forward and loss, backward, fused Adam update. Marian: its forward with labels (its plain cross-entropy). Ours:
    as the trainer runs it, the decoder input shifted from the labels, then the trainer's label-smoothed loss from
    the logits. bfloat16 = autocast, float32 master weights and optimizer state, as the Trainer's `--bf16`."""
    device_type = batch["input_ids"].device.type
    with torch.autocast(device_type, dtype=variant.dtype, enabled=variant.dtype != torch.float32):
        if variant.family == "marian":
            loss = variant.model(**batch).loss
        else:
            labels, model = batch["labels"], variant.model
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            outputs = model(**inputs, decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels))
            loss = TRAINING_LOSS(outputs, labels)
    loss.backward()
    variant.optimizer.step()
    variant.optimizer.zero_grad(set_to_none=True)


@torch.no_grad()
def generate(variant: Variant, batch: dict, gen_config: GenerationConfig) -> torch.Tensor:
    return variant.module.generate(**_gen_inputs(batch), generation_config=gen_config)


def timed(fn, device: torch.device) -> dict[str, float]:
    """Wall time, and the CPU time of this process (all its threads). On a shared machine the CPU time leaves out
    the time the process waited for a core; with `--threads 1` it is the steadier figure."""
    _sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    _sync(device)
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def interleaved(variants: dict, run, batches: list, reps: int, warmup: int, device: torch.device) -> tuple[dict, dict]:
    """Warm up every variant (the first run of a compiled one compiles; its time is returned), then `reps` rounds in
    which every variant runs once on the same batch; the order rotates each round so that none always runs first
    (caches, frequency scaling, neighbours' load). Returns ({clock: {name: [seconds per repetition]}},
    {name: seconds of the first warm-up run})."""
    names = list(variants)
    first = {}
    for i in range(max(warmup, 1)):
        batch = batches[i % len(batches)]
        for name in names:
            seconds = timed(lambda v=variants[name], b=batch: run(v, b), device)["wall"]
            first.setdefault(name, seconds)
    times = {clock: {name: [] for name in names} for clock in CLOCKS}
    for rep in range(reps):
        batch = batches[rep % len(batches)]
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            for clock, seconds in timed(lambda v=variants[name], b=batch: run(v, b), device).items():
                times[clock][name].append(seconds)
    return times, first


def paired(times: dict, name: str, baseline: str) -> float:
    """Median over the rounds of time(baseline) / time(name): > 1 = `name` is faster."""
    return statistics.median(b / v for v, b in zip(times[name], times[baseline]))


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def count_training_flops(model: torch.nn.Module, batch: dict, device: torch.device) -> int:
    """FLOPs of one forward + backward of `model` (float32, eager attention: every FLOP is a visible matmul) on the
    padded batch, counted by `torch.utils.flop_counter`. The optimizer and elementwise work are not counted, as usual
    for MFU."""
    model = copy.deepcopy(model)
    model.set_attn_implementation("eager")
    model.train()
    with FlopCounterMode(display=False) as counter:
        model(**batch).loss.backward()
    return counter.get_total_flops()


# ----------------------------------------------------------------------------------------------------------------
# Where the time goes: torch.profiler with one label per kind of module.
# ----------------------------------------------------------------------------------------------------------------

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def module_category(name: str) -> str | None:
    """Category of a module by its qualified name; works for both models (Marian's FFN is fc1/fc2 directly in the
    layer, ours is an `ffn` sub-module). Inner labels win over outer ones."""
    last = name.rsplit(".", 1)[-1]
    if last in PROJECTIONS:
        return "attention: Q/K/V/O projections"
    if last in ("self_attn", "encoder_attn"):
        return "attention: QK^T, softmax, xV (sdpa), reshapes"
    if last in ("ffn", "fc1", "fc2"):
        return "FFN (fc1, ReLU, fc2)"
    if last.endswith("layer_norm"):
        return "LayerNorm"
    if last in ("shared", "embed_tokens"):
        return "embedding lookup"
    if last == "embed_positions":
        return "stack: positions, scaling, masks, dropout"
    if last == "lm_head":
        return "output projection (tied embedding)"
    if last.isdigit() and ".layers." in f".{name}":
        return "layer: residual adds + dropout"
    if last in ("encoder", "decoder"):
        return "stack: positions, scaling, masks, dropout"
    if name == "":
        return "top level: label shift, loss, logits bias"
    return None


class Labeller:
    """Forward hooks that open a `record_function` range per labelled module, plus, while profiling, ranges around
    the KV-cache updates / beam reordering and the logits processors (patched on the classes, restored on exit)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.handles = []
        self.patched = []

    def __enter__(self):
        for name, module in self.model.named_modules():
            category = module_category(name)
            if category is None:
                continue
            self.handles.append(module.register_forward_pre_hook(self._enter(f"cat::{category}")))
            self.handles.append(module.register_forward_hook(self._exit))
        from transformers.cache_utils import DynamicLayer
        from transformers.generation.logits_process import LogitsProcessorList

        self._patch(DynamicLayer, "update", "cat::KV cache: append")
        self._patch(DynamicLayer, "reorder_cache", "cat::KV cache: beam reorder")
        self._patch(LogitsProcessorList, "__call__", "cat::generation: logits processors")
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        for cls, attr, original, own in self.patched:
            if own:
                setattr(cls, attr, original)
            else:
                delattr(cls, attr)

    @staticmethod
    def _enter(label):
        def hook(module, args):
            ranges = module.__dict__.setdefault("_bench_ranges", [])
            ctx = record_function(label)
            ctx.__enter__()
            ranges.append(ctx)

        return hook

    @staticmethod
    def _exit(module, args, output):
        module.__dict__["_bench_ranges"].pop().__exit__(None, None, None)

    def _patch(self, cls, attr, label):
        original = getattr(cls, attr)
        own = attr in cls.__dict__

        def wrapper(*args, **kwargs):
            with record_function(label):
                return original(*args, **kwargs)

        self.patched.append((cls, attr, original, own))
        setattr(cls, attr, wrapper)


def _category_of(event) -> str:
    node = event
    while node is not None:
        if node.name.startswith("cat::"):
            return node.name[5:]
        node = node.cpu_parent
    return "unlabelled"


def categorize(events) -> tuple[dict[str, float], dict[str, int], float]:
    """Seconds and operator calls per category, and the Python time.

    Forward: every event's self time goes to its innermost label; a label's own self time is the Python that ran
    inside it between operators. Backward: each autograd node (`evaluate_function: XBackward`) is charged, with
    everything below it, to the label of the forward op that created it, found through the op's sequence number.
    Operator calls: aten ops called from Python or autograd, not those called by other ops; on a CPU each costs
    microseconds of dispatch whatever its size, so for small tensors the count matters as much as the FLOPs."""
    forward_category = {}
    for event in events:
        if event.sequence_nr >= 0 and not event.name.startswith("autograd::engine"):
            forward_category.setdefault((event.fwd_thread or event.thread, event.sequence_nr), _category_of(event))
    seconds, ops, python = defaultdict(float), defaultdict(int), 0.0
    for event in events:
        # The outermost autograd node and the outermost aten op this event sits in (on CPU the backward runs in
        # the calling thread, below the caller's labels: look for the node, not for the root).
        node, autograd_node, aten_parent = event.cpu_parent, None, None
        while node is not None:
            if node.name.startswith("autograd::engine::evaluate_function"):
                autograd_node = node
            elif node.name.startswith("aten::"):
                aten_parent = node
            node = node.cpu_parent
        if event.name.startswith("autograd::engine::evaluate_function") and autograd_node is None:
            autograd_node = event
        if autograd_node is not None:
            if "AccumulateGrad" in autograd_node.name:
                category = "backward: gradient accumulation"
            else:
                key = (autograd_node.fwd_thread or autograd_node.thread, autograd_node.sequence_nr)
                category = "backward of " + forward_category.get(key, "unlabelled")
            if event is autograd_node:
                seconds[category] += event.cpu_time_total / 1e6
        else:
            category = _category_of(event)
            seconds[category] += event.self_cpu_time_total / 1e6
            if event.name.startswith("cat::"):
                python += event.self_cpu_time_total / 1e6
        if event.name.startswith("aten::") and aten_parent is None:
            ops[category] += 1
    return seconds, ops, python


def merge_backward(totals: dict) -> dict:
    """Forward and backward of the same module kind added up (the table shows both in one line)."""
    merged = defaultdict(type(next(iter(totals.values()), 0)))
    for key, value in totals.items():
        merged[key.removeprefix("backward of ")] += value
    return merged


def profile_once(model, fn, top_ops: int, outer: str) -> dict:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with Labeller(model):
        fn()  # once outside the profiler, so that lazy initialisation is not profiled
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            with record_function(f"cat::{outer}"):
                fn()
            wall = time.perf_counter() - start
    events = prof.events()
    seconds, ops, python = categorize(events)
    # `.item()`, `bool(tensor)`, `int(tensor)`: each waits for the device on CUDA (free on CPU, costly on a GPU).
    # (The fused Adam's per-parameter step counters live on the CPU and are read there: counted apart.)
    scalar_reads = [_category_of(event) for event in events if event.name == "aten::_local_scalar_dense"]
    reads = sum(not category.startswith("optimizer") for category in scalar_reads)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top_ops, max_name_column_width=48)
    return dict(seconds=seconds, ops=ops, python=python, wall=wall, table=table, reads=reads)


def print_profile(title: str, results: dict, show_ops: bool) -> None:
    print(
        f"\n  where the time goes -- {title} (torch.profiler, one call each; wall-clock per op, so load on the "
        f"machine lands on whatever op was running: read shares and op counts, not single milliseconds)"
    )
    names = list(results)
    seconds = {name: merge_backward(results[name]["seconds"]) for name in names}
    ops = {name: merge_backward(results[name]["ops"]) for name in names}
    keys = sorted(set().union(*[set(m) for m in seconds.values()]), key=lambda k: -seconds[names[0]].get(k, 0.0))
    header = "".join(f"{name + ': ms    %   ops':>28s}" for name in names)
    print(f"    {'category (forward + its backward)':52s}{header}")
    for key in keys:
        cells = ""
        for name in names:
            value = seconds[name].get(key, 0.0)
            cells += f"{value * 1e3:>14.1f} {100 * value / results[name]['wall']:>5.1f}% {ops[name].get(key, 0):>6d}"
        print(f"    {key[:52]:52s}{cells}")
    cells = "".join(
        f"{results[n]['wall'] * 1e3:>14.1f} {100.0:>5.1f}% {sum(results[n]['ops'].values()):>6d}" for n in names
    )
    print(f"    {'total (wall time under the profiler; op calls)':52s}{cells}")
    cells = "".join(
        f"{results[n]['python'] * 1e3:>14.1f} {100 * results[n]['python'] / results[n]['wall']:>5.1f}%{'':7s}"
        for n in names
    )
    print(f"    {'  of which Python between ops (in the rows above)':52s}{cells}")
    backward = {n: sum(v for k, v in results[n]["seconds"].items() if k.startswith("backward")) for n in names}
    if any(backward.values()):
        cells = "".join(
            f"{backward[n] * 1e3:>14.1f} {100 * backward[n] / results[n]['wall']:>5.1f}%{'':7s}" for n in names
        )
        print(f"    {'  of which backward (in the rows above)':52s}{cells}")
    cells = "".join(f"{results[n]['reads']:>28d}" for n in names)
    print(f"    {'scalar reads to the host outside the optimizer (GPU syncs)':52s}{cells}")
    if show_ops:
        for name in names:
            print(f"\n    top ops by self CPU time -- {name}:")
            print("\n".join("    " + line for line in results[name]["table"].splitlines()))


# ----------------------------------------------------------------------------------------------------------------
# Main.
# ----------------------------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--presets", default="small,base", help="comma-separated presets (small, base, big)")
    parser.add_argument("--vocab_size", type=int, default=8000, help="shared BPE vocabulary (default 8000)")
    parser.add_argument(
        "--tokenizer_sentences", type=int, default=10000, help="training pairs the tokenizer learns from"
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads (default: all cores)"
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--dtype",
        default="float32",
        help="comma-separated precisions, each timed for ours and Marian (default float32):\n"
        "float32, bfloat16 (training under autocast, generation with bfloat16 weights), float16 (cuda)",
    )
    parser.add_argument(
        "--compile", action="store_true", help="also time ours under torch.compile in the last --dtype (training step)"
    )
    parser.add_argument("--train_batch", type=int, help="sentences per training batch (default per preset)")
    parser.add_argument("--gen_batch", type=int, help="sentences per generation batch, x4 beams (default per preset)")
    parser.add_argument("--new_tokens", type=int, help="tokens every beam generates (default per preset)")
    parser.add_argument("--reps", type=int, help="timed repetitions per variant (default per preset)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per variant before timing (default 1)")
    parser.add_argument(
        "--batches",
        type=int,
        default=1,
        help="distinct batches, cycled over the repetitions (default 1: then the IQR is timing noise only,\n"
        "not the spread of batch shapes)",
    )
    parser.add_argument("--no_peak", action="store_true", help="skip the machine-peak probe (no MFU)")
    parser.add_argument("--profile", action="store_true", help="also print where the time goes (torch.profiler)")
    parser.add_argument("--profile_ops", action="store_true", help="with --profile: also the top ops per model")
    parser.add_argument("--skip_train", action="store_true", help="time generation only")
    parser.add_argument("--skip_generate", action="store_true", help="time the training step only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data_dir", type=Path, default=MULTI30K, help="directory with Multi30k *.en.gz / *.de.gz")
    args = parser.parse_args(argv)

    args.presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    for preset in args.presets:
        if preset not in PRESET_DEFAULTS:
            parser.error(f"--presets: unknown preset {preset!r}; choose from {sorted(PRESET_DEFAULTS)}.")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here; use --device cpu.")
    if args.device not in ("cpu", "cuda"):
        parser.error(f"--device must be 'cpu' or 'cuda', got {args.device!r}.")
    names = [d.strip() for d in args.dtype.split(",") if d.strip()]
    if not names or any(d not in ("float32", "bfloat16", "float16") for d in names):
        parser.error(f"--dtype: comma-separated float32, bfloat16, float16; got {args.dtype!r}.")
    if "float16" in names and args.device != "cuda":
        parser.error("--dtype float16 is for --device cuda (CPU autocast is bfloat16).")
    args.dtypes = [getattr(torch, d) for d in names]
    for field in (
        "threads",
        "vocab_size",
        "tokenizer_sentences",
        "train_batch",
        "gen_batch",
        "new_tokens",
        "reps",
        "batches",
    ):
        value = getattr(args, field)
        if value is not None and value < 1:
            parser.error(f"--{field.replace('_', '-')} must be a positive integer, got {value}.")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}.")
    return args


def print_task(
    task: str,
    variants: dict,
    times: dict,
    first: dict,
    tokens: float,
    flops: int | None,
    peak_gflops: float | None,
    device: torch.device,
) -> dict:
    """The table of one task; returns {name: (tokens/s, speed-up vs ours fp32, ratio vs marian same dtype)}."""
    clock = "cpu" if device.type == "cpu" else "wall"  # the steadier clock on a shared CPU
    base = "ours fp32" if "ours fp32" in variants else next(iter(variants))
    print(
        f"\n  {task}: per variant, median (IQR) per clock; tokens/s and MFU from the {clock} clock; x = median of "
        f"the per-round ratios (> 1 = faster)"
    )
    header = (
        f"  {'variant':20s} {'wall ms':>17s} {'cpu ms':>17s} {'tgt tok/s':>10s} {'vs ' + base:>13s} {'vs marian':>10s}"
    )
    if flops:
        header += f" {'TFLOP/s':>8s} {'MFU':>6s}"
    print(header + f" {'first run':>10s}")
    summary = {}
    for name, variant in variants.items():
        cells = ""
        for c in CLOCKS:
            q1, median, q3 = _quartiles(times[c][name])
            cells += f" {median * 1e3:>9.1f} ({(q3 - q1) * 1e3:>5.1f})"
        median = statistics.median(times[clock][name])
        speedup = paired(times[clock], name, base)
        marian = f"marian {SHORT[variant.dtype]}"
        vs_marian = paired(times[clock], name, marian) if marian in times[clock] else float("nan")
        line = f"  {name:20s}{cells} {tokens / median:>10,.0f} {speedup:>12.2f}x {vs_marian:>9.2f}x"
        if flops:
            achieved = flops / median / 1e12
            line += (
                f" {achieved:>8.3f} {100 * achieved * 1e3 / peak_gflops:>5.1f}%"
                if peak_gflops
                else f" {achieved:>8.3f} {'-':>6s}"
            )
        print(line + f" {first[name]:>9.1f}s")
        summary[name] = (tokens / median, speedup, vs_marian)
    return summary


def bench_preset(preset: str, args, tokenizer, source: list[str], target: list[str], device, peak_gflops) -> dict:
    settings = {
        key: getattr(args, key) if getattr(args, key) is not None else value
        for key, value in PRESET_DEFAULTS[preset].items()
    }
    n_batches = args.batches
    train_batches = make_batches(tokenizer, source, target, settings["train_batch"], n_batches)
    gen_batches = make_batches(tokenizer, source, target, settings["gen_batch"], n_batches)
    to_device = lambda batch: {k: v.to(device) for k, v in batch.items()}  # noqa: E731
    train_batches = [to_device(b) for b in train_batches]
    gen_batches = [to_device(b) for b in gen_batches]
    max_positions = max(
        512, max(b["input_ids"].shape[1] for b in train_batches + gen_batches) + settings["new_tokens"] + 2
    )

    config, models = build_models(preset, len(tokenizer), max_positions, device, args.seed)
    # Random models end their hypotheses at different, arbitrary steps, which would make the amount of work differ
    # between models. min_new_tokens = max_new_tokens suppresses </s> until the last step, so every model runs
    # exactly `new_tokens` decoder steps on 4 x batch rows: the same work, whatever the weights.
    gen_config = GenerationConfig(
        num_beams=4,
        max_new_tokens=settings["new_tokens"],
        min_new_tokens=settings["new_tokens"],
        length_penalty=0.6,
        early_stopping=True,
        do_sample=False,
        use_cache=True,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
    )

    tgt_tokens = sum(int((b["labels"] != -100).sum()) for b in train_batches) / len(train_batches)
    src_tokens = sum(int(b["attention_mask"].sum()) for b in train_batches) / len(train_batches)
    print(
        f"\n=== preset {preset}: d_model {config.d_model}, layers {config.encoder_layers}+{config.decoder_layers}, "
        f"heads {config.encoder_attention_heads}, d_ff {config.encoder_ffn_dim}, dropout {config.dropout}, "
        f"vocab {config.vocab_size}"
    )
    print(
        f"  train batch: {settings['train_batch']} sentences (padded shapes "
        f"{', '.join(str(tuple(b['input_ids'].shape)) + '->' + str(tuple(b['labels'].shape)) for b in train_batches)}; "
        f"avg {src_tokens:.0f} source / {tgt_tokens:.0f} target tokens)"
    )
    print(
        f"  generation: {settings['gen_batch']} sentences x 4 beams, exactly {settings['new_tokens']} new tokens "
        f"(min_new_tokens = max_new_tokens), length_penalty 0.6, KV cache; {len(gen_batches)} batch(es) cycled"
    )
    print(f"  repetitions: {settings['reps']} timed (+{args.warmup} warm-up) per variant and task, interleaved")
    print_differences(config, models)
    check_equivalence(models["ours+bias"], models["marian"], train_batches[0], gen_batches[0], gen_config)
    attention = {SHORT[d]: fast_attention_implementation(device, d) or "sdpa" for d in args.dtypes}
    print(f"  attention implementation per precision (both models): {attention}")

    results = {}
    if not args.skip_train:
        flops = count_training_flops(models["ours"], train_batches[0], device) if n_batches == 1 else None
        if flops:
            print(f"  training step: {flops / 1e9:.1f} GFLOP (forward + backward, padded batch, matmuls)")
        variants = training_variants(models, args.dtypes, args.compile, device)
        compiles_before = _compile_count()
        times, first = interleaved(variants, train_step, train_batches, settings["reps"], args.warmup, device)
        if args.compile:
            print(
                f"  torch.compile: {_compile_count() - compiles_before} graph compilation(s) for "
                f"{len(train_batches)} batch shape(s)"
            )
        results["train"] = print_task(
            "training step (fwd + loss + bwd + fused Adam)",
            variants,
            times,
            first,
            tgt_tokens,
            flops,
            peak_gflops,
            device,
        )
    if not args.skip_generate:
        variants = generation_variants(models, args.dtypes, device)
        run = lambda variant, batch: generate(variant, batch, gen_config)  # noqa: E731
        times, first = interleaved(variants, run, gen_batches, settings["reps"], args.warmup, device)
        new_tokens = settings["gen_batch"] * settings["new_tokens"]
        results["generate"] = print_task(
            f"beam-4 generation ({new_tokens} target tokens)", variants, times, first, new_tokens, None, None, device
        )

    if args.profile:
        low = SHORT[args.dtypes[-1]]
        if not args.skip_train:
            profiled = training_variants(models, sorted({torch.float32, args.dtypes[-1]}, key=str), False, device)
            names = [n for n in (f"ours {low}", f"marian {low}", "ours fp32") if n in profiled]
            per_model = {
                name: profile_once(
                    profiled[name].module,
                    lambda v=profiled[name]: train_step(v, train_batches[0]),
                    20,
                    "optimizer step, zero_grad",
                )
                for name in dict.fromkeys(names)
            }
            print_profile(f"{preset}, training step", per_model, args.profile_ops)
        if not args.skip_generate:
            profiled = generation_variants(models, sorted({torch.float32, args.dtypes[-1]}, key=str), device)
            names = [n for n in (f"ours {low}", f"marian {low}", "ours fp32") if n in profiled]
            per_model = {
                name: profile_once(
                    profiled[name].module,
                    lambda v=profiled[name]: generate(v, gen_batches[0], gen_config),
                    20,
                    "generation: beam search loop, stopping, bookkeeping",
                )
                for name in dict.fromkeys(names)
            }
            print_profile(f"{preset}, beam-4 generation", per_model, args.profile_ops)
    return results


def _compile_count() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    print(
        f"bench_vs_marian: torch {torch.__version__}, transformers {transformers.__version__}, python "
        f"{platform.python_version()}, device {args.device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else f" ({cpu_flags()['model']})")
        + f", dtypes {[SHORT[d] for d in args.dtypes]}, threads {torch.get_num_threads()} of {os.cpu_count()} cores"
    )
    print(f"  bfloat16: {bf16_support(device)[1]}")
    if device.type == "cpu":
        flags = cpu_flags()
        print("  ISA (torch): " + ", ".join(f"{k}={v}" for k, v in flags.items() if isinstance(v, bool)))
        try:
            load = os.getloadavg()[0]
            print(f"  load average (1 min) at start: {load:.1f} on {os.cpu_count()} cores")
            if load > os.cpu_count() - 0.5:
                print(
                    "  the machine is busy: other processes compete for the cores, so wall times are noisy; with "
                    "several threads each parallel op also waits for its slowest thread. Trust the paired ratios, "
                    "and for steadier figures run with --threads 1 and read the cpu columns."
                )
        except OSError:
            pass
    started = time.perf_counter()
    peak = None
    if not args.no_peak:
        peaks, _ = measure_peaks(args.presets, tokens=2048, vocab_size=args.vocab_size, device=device, reps=3)
        # Against the fastest precision this hardware has: bfloat16 where it is native, float32 where bfloat16 is
        # emulated (an AVX2-only CPU: ~2 GFLOP/s, which would put every MFU far above 100%).
        peak_mode = max(peaks, key=peaks.get)
        peak = peaks[peak_mode]
        print(
            "  machine peak (machine_peak.py, GEMMs at the presets' shapes, same threads): "
            + ", ".join(f"{mode} {gflops:.0f} GFLOP/s" for mode, gflops in peaks.items())
            + f"; MFU below is against the {peak_mode} peak (the fastest here)"
        )
    tokenizer = build_tokenizer(args.data_dir, args.vocab_size, args.tokenizer_sentences)
    source = read_lines(args.data_dir / "val.en.gz")
    target = read_lines(args.data_dir / "val.de.gz")
    print(
        f"  tokenizer: shared EN+DE BPE, {len(tokenizer)} tokens, trained on {args.tokenizer_sentences} Multi30k "
        f"training pairs; batches from Multi30k val (EN->DE), unsorted (padded)"
    )

    all_results = {}
    for preset in args.presets:
        all_results[preset] = bench_preset(preset, args, tokenizer, source, target, device, peak)

    print("\nsummary (target tokens/s; x = paired speed ratio, > 1 = faster):")
    for preset, results in all_results.items():
        for task, rows in results.items():
            ours = {n: r for n, r in rows.items() if n.startswith("ours ")}
            best = max(ours, key=lambda n: ours[n][0])
            line = f"  {preset:6s} {task:9s} best ours = {best} ({rows[best][0]:,.0f} tok/s): {rows[best][1]:.2f}x ours fp32"
            if rows[best][2] == rows[best][2]:  # not NaN
                line += f", {rows[best][2]:.2f}x marian in the same precision"
            shipped = best.split("+")[0].replace("ours", "marian") + " sdpa"
            if shipped in rows:
                line += f", {rows[best][0] / rows[shipped][0]:.2f}x {shipped} (tok/s ratio)"
            if "marian fp32" in rows and best != "ours fp32":
                line += f", {rows[best][0] / rows['marian fp32'][0]:.2f}x marian fp32 (tok/s ratio)"
            print(line)
    print(f"total wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
