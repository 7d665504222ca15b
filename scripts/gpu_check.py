"""The device check: one process that says whether this package computes correctly on a GPU, how fast it trains the
`base` model there against Marian, and what a few minutes of Multi30k training reach. Built for a short loan of
one GPU (minutes, no network): every figure is written and flushed as one JSON line the moment it is measured.

Parts (`--skip` any of them): `env` (versions, device, SDPA backends), `correct` (forward/backward against a CPU
float64 reference, which SDPA kernel runs, generation with and without the KV cache, torch.compile against eager),
`throughput` (the `wmt14_en_de_base` model on WMT-like token batches: ours eager, ours compiled, Marian; tokens/s,
MFU, memory, projected minutes for the paper's 100k updates), `train` (Multi30k EN->DE for ~3 minutes, test BLEU),
`table3` (the `table3` command: the base row and D1 of Table 3, `--table3_steps` updates each, two `train` processes
sharing the device).

    python scripts/gpu_check.py --output gpu_check.jsonl                            # on the GPU
    python scripts/gpu_check.py --device cpu --smoke --output /tmp/smoke.jsonl      # every part, tiny, < 1 minute
"""

from __future__ import annotations

import argparse
import copy
import gzip
import itertools
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402


REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]  # this checkout's package; Marian as our twin, from bench/

from bench_vs_marian import marian_config_like  # noqa: E402
from transformers import DataCollatorForSeq2Seq, MarianMTModel  # noqa: E402

import vanilla_transformer  # noqa: E402
from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.data.batching import TokenBatchSampler  # noqa: E402
from vanilla_transformer.data.tokenizer import train_tokenizer  # noqa: E402
from vanilla_transformer.precision import bf16_support, cpu_model_name  # noqa: E402
from vanilla_transformer.training.trainer import LabelSmoothedLoss  # noqa: E402


PARTS = ("env", "correct", "throughput", "train", "table3")
PEAK_TFLOPS = 989.4  # H100 SXM, dense bfloat16 (NVIDIA's datasheet figure without sparsity)
GOAL = {"goal_minutes": 60, "goal_tokens_per_s": 700_000, "goal_vs_marian": 1.3}
PAPER_UPDATES, PAPER_TOKENS = 100_000, 25_000  # section 5.1-5.2: base, 100k updates of ~25k target tokens
LABEL_SMOOTHING = 0.1  # section 5.4
MIN_ROUNDS = 3  # timed throughput rounds run even past the part's time box
# Nats: two tokens this close in log-probability are a near tie, which the cache's other summation order may flip.
TIE_GAP = {torch.float32: 1e-4, torch.bfloat16: 0.05}
SDPA_OPS = {  # aten op of F.scaled_dot_product_attention's kernel -> backend
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash_cpu",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
}


# ------------------------------------------------------------------------------------------------------------------
# Output: one JSON line per figure, flushed at once.
# ------------------------------------------------------------------------------------------------------------------


class Report:
    """Appends one JSON line per figure to `path`, written through at once (a killed run keeps what it measured)."""

    def __init__(self, path: Path, device: torch.device):
        self.path = path
        self.common = {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
        }

    def line(self, check: str, dtype: str = "n/a", **fields) -> dict:
        record = {"check": check, **self.common, "dtype": dtype, **fields}
        text = json.dumps(record, default=str)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        print(text, flush=True)
        return record


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sig(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits (MFU on a CPU is 1e-5, on a GPU 0.3)."""
    return float(f"{x:.{digits}g}")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def autocast(device: torch.device, dtype: torch.dtype):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


# ------------------------------------------------------------------------------------------------------------------
# Part 1: the machine.
# ------------------------------------------------------------------------------------------------------------------


def part_env(report: Report, device: torch.device, args) -> None:
    facts = {
        "python": platform.python_version(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "accelerate": _version("accelerate"),
        "tokenizers": _version("tokenizers"),
        "datasets": _version("datasets"),
        "vanilla_transformer": _version("vanilla-transformer") or "checkout",
        "package_path": str(Path(vanilla_transformer.__file__).parent),
        "cpu_model": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "bf16_native": bf16_support(device)[0],
        "bf16_reason": bf16_support(device)[1],
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts.update(
            capability=f"{props.major}.{props.minor}",
            memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
            sdpa_enabled={
                "flash": torch.backends.cuda.flash_sdp_enabled(),
                "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
                "cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)(),
                "math": torch.backends.cuda.math_sdp_enabled(),
            },
        )
    report.line("env", **facts)
    n = args.matmul_size
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    times = []
    for _ in range(args.matmul_reps):
        start = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - start)
    tflops = 2 * n**3 / min(times) / 1e12
    report.line(
        "matmul_peak",
        "bfloat16",
        shape=[n, n, n],
        tflops=sig(tflops),
        peak_tflops=PEAK_TFLOPS,
        fraction_of_peak=sig(tflops / PEAK_TFLOPS),
    )
    args.measured_tflops = tflops


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


# ------------------------------------------------------------------------------------------------------------------
# Part 2: correct on the device.
# ------------------------------------------------------------------------------------------------------------------


def small_config(args, **overrides) -> VanillaTransformerConfig:
    sizes = args.correct_sizes
    return VanillaTransformerConfig(
        vocab_size=sizes["vocab"],
        d_model=sizes["d_model"],
        encoder_layers=sizes["layers"],
        decoder_layers=sizes["layers"],
        encoder_attention_heads=sizes["heads"],
        decoder_attention_heads=sizes["heads"],
        encoder_ffn_dim=sizes["ffn"],
        decoder_ffn_dim=sizes["ffn"],
        dropout=0.0,
        **overrides,
    )


def padded_batch(vocab: int, src_lengths, tgt_lengths, seed: int, device: torch.device) -> dict:
    """Right-padded sources (pad 0, each ending in </s> = 2) and labels padded with -100, as the collator makes them."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(src_lengths), max(src_lengths), dtype=torch.long)
    labels = torch.full((len(tgt_lengths), max(tgt_lengths)), -100, dtype=torch.long)
    for i, (s, t) in enumerate(zip(src_lengths, tgt_lengths)):
        ids[i, : s - 1] = torch.randint(4, vocab, (s - 1,), generator=g)
        ids[i, s - 1] = 2
        labels[i, : t - 1] = torch.randint(4, vocab, (t - 1,), generator=g)
        labels[i, t - 1] = 2
    batch = {"input_ids": ids, "attention_mask": ids.ne(0).long(), "labels": labels}
    return {k: v.to(device) for k, v in batch.items()}


def training_loss(call, batch: dict, num_items_in_batch=None):
    """A training forward as the trainer runs it: the model's logits from the decoder input shifted from the labels
    (the model does not see the labels), then the trainer's label-smoothed loss (section 5.4) of them."""
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    out = call(**inputs, decoder_input_ids=call.prepare_decoder_input_ids_from_labels(labels))
    out.loss = LabelSmoothedLoss(LABEL_SMOOTHING)(out, labels, num_items_in_batch)
    return out


def forward_backward(model, batch: dict, device: torch.device, dtype: torch.dtype):
    model.zero_grad(set_to_none=True)
    with autocast(device, dtype):
        out = training_loss(model, batch)
    out.loss.backward()
    grads = {n: p.grad.detach().double().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach().double().cpu(), out.loss.detach().double().cpu(), grads


def grad_differences(grads: dict, ref_grads: dict) -> dict:
    """Per parameter, |g - ref| / |ref| (norms; the tolerance's measure) and max |g - ref| / max |ref|; the worst."""
    norm = {n: ((grads[n] - g).norm() / g.norm().clamp(min=1e-30)).item() for n, g in ref_grads.items() if n in grads}
    peak = {
        n: ((grads[n] - g).abs().max() / g.abs().max().clamp(min=1e-30)).item()
        for n, g in ref_grads.items()
        if n in grads
    }
    worst = max(norm, key=norm.get)
    return {
        "grad_rel_norm_diff": norm[worst],
        "grad_rel_norm_diff_param": worst,
        "grad_max_rel_diff": max(peak.values()),
        "grads_compared": len(norm),
        "grads_missing": sorted(set(ref_grads) - set(grads)),
    }


def differences(result, reference) -> dict:
    (logits, loss, grads), (ref_logits, ref_loss, ref_grads) = result, reference
    return {
        "logits_max_abs_diff": (logits - ref_logits).abs().max().item(),
        "logits_max_abs": ref_logits.abs().max().item(),
        "loss_abs_diff": (loss - ref_loss).abs().item(),
        "loss": ref_loss.item(),
        **grad_differences(grads, ref_grads),
    }


# Relative to the reference's magnitude: logits (max |diff| / max |logit|), loss, gradients (|g - ref| / |ref| per
# parameter). bfloat16 autocast on a random model: ~7% on the gradients of the noisiest parameters (CPU, float64
# reference), hence 15%.
TOLERANCE = {
    torch.float32: {"logits": 1e-4, "loss": 1e-4, "grad": 1e-4},
    torch.bfloat16: {"logits": 5e-2, "loss": 2e-2, "grad": 1.5e-1},
}


def within(diff: dict, dtype: torch.dtype) -> bool:
    tol = TOLERANCE[dtype]
    return (
        diff["logits_max_abs_diff"] <= tol["logits"] * max(diff["logits_max_abs"], 1.0)
        and diff["loss_abs_diff"] <= tol["loss"] * max(abs(diff["loss"]), 1.0)
        and diff["grad_rel_norm_diff"] <= tol["grad"]
        and not diff["grads_missing"]
    )


def sdpa_ops(fn) -> tuple[dict[str, int], object]:
    """The SDPA kernels (aten ops) that run in `fn()`, counted, by the profiler's op names; and what `fn` returned."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        result = fn()
    counts = {}
    for event in prof.events():
        if event.name in SDPA_OPS:
            counts[SDPA_OPS[event.name]] = counts.get(SDPA_OPS[event.name], 0) + 1
    return counts, result


def part_correct(report: Report, device: torch.device, args, deadline: float) -> None:
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(small_config(args)).to(device).train()
    vocab = args.correct_sizes["vocab"]
    batch = padded_batch(vocab, [23, 9, 31, 17], [27, 12, 30, 8], seed=1, device=device)
    reference_model = copy.deepcopy(model).to("cpu", torch.float64)
    reference_model.set_attn_implementation("eager")  # another code path than the device's SDPA
    reference = forward_backward(
        reference_model, {k: v.cpu() for k, v in batch.items()}, torch.device("cpu"), torch.float32
    )
    dtypes = [torch.float32, torch.bfloat16]
    for dtype in dtypes:
        used, result = sdpa_ops(lambda d=dtype: forward_backward(model, batch, device, d))
        diff = differences(result, reference)
        report.line(
            "forward_backward_vs_cpu_float64",
            dtype_name(dtype),
            ok=within(diff, dtype),
            sdpa_backend=sorted(used),
            sdpa_ops=used,
            tolerance=TOLERANCE[dtype],
            **diff,
        )

    # Which SDPA backends can run the model's masks (encoder padding, causal decoder, cross attention), forced one
    # at a time, in the training precision (flash needs 16-bit inputs).
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"]
    gen_inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    for name in backends:
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            report.line("sdpa_backend_forced", "bfloat16", backend=name, runs=False, error="not in this torch")
            continue
        fields = {}
        for what, fn in (
            ("train", lambda: forward_backward(model, batch, device, torch.bfloat16)),
            ("generate", lambda: _generate(model.eval(), gen_inputs, 1, True, 8, device, torch.bfloat16)),
        ):
            try:
                with sdpa_kernel([backend]):
                    result = fn()
                fields[f"{what}_runs"] = True
                if what == "train":
                    diff = differences(result, reference)
                    fields.update(train_ok=within(diff, torch.bfloat16), train_diff=diff)
            except RuntimeError as error:
                fields[f"{what}_runs"] = False
                fields[f"{what}_error"] = str(error).strip().splitlines()[0][:300]
            finally:
                model.train()
        report.line(
            "sdpa_backend_forced",
            "bfloat16",
            backend=name,
            sdpa_backend=name.lower(),
            ok=fields.get("train_ok"),
            **fields,
        )

    # Generation with and without the KV cache: the same tokens, greedy and beam 4, float32 and bfloat16 (the model
    # cast whole, as `translate --dtype`); a difference is accepted only at a near tie (TIE_GAP).
    eval_model = model.eval()
    for dtype, beams in itertools.product(dtypes, (1, 4)):
        if time.perf_counter() > deadline:
            report.line("generate_cache", dtype_name(dtype), num_beams=beams, skipped="part time box reached")
            continue
        cast = copy.deepcopy(eval_model).to(dtype)
        used, cached = sdpa_ops(
            lambda c=cast, b=beams: _generate(c, gen_inputs, b, True, args.new_tokens, device, None)
        )
        uncached = _generate(cast, gen_inputs, beams, False, args.new_tokens, device, None)
        same, ties = compare_generations(cast, gen_inputs, cached, uncached)
        exact = same == cached.shape[0]
        ok = exact or all(gap < TIE_GAP[dtype] for gap in ties)
        report.line(
            "generate_cache",
            dtype_name(dtype),
            num_beams=beams,
            ok=ok,
            identical=same,
            sequences=cached.shape[0],
            tie_gaps=[round(g, 4) for g in ties],
            tie_gap_limit=TIE_GAP[dtype],
            new_tokens=cached.shape[1],
            sdpa_backend=sorted(used),
            sdpa_ops=used,
        )
        del cast

    # torch.compile against eager: the same losses over a few Adam updates and the same first gradients.
    for dtype in dtypes:
        if dtype not in args.compile_dtypes:
            report.line("compile_vs_eager", dtype_name(dtype), skipped=args.compile_note)
            continue
        if time.perf_counter() > deadline:
            report.line("compile_vs_eager", dtype_name(dtype), skipped="part time box reached")
            continue
        report.line("compile_vs_eager", dtype_name(dtype), **compile_vs_eager(model, batch, device, dtype, args))


@torch.no_grad()
def _generate(model, inputs: dict, beams: int, use_cache: bool, new_tokens: int, device, dtype):
    with autocast(device, dtype) if dtype is not None else torch.autocast(device.type, enabled=False):
        return model.generate(
            **inputs,
            num_beams=beams,
            do_sample=False,
            use_cache=use_cache,
            max_new_tokens=new_tokens,
            early_stopping=True,
        )


@torch.no_grad()
def compare_generations(model, inputs: dict, a: torch.Tensor, b: torch.Tensor) -> tuple[int, list[float]]:
    """(identical rows, the log-probability gaps at the first differing token of each differing row), the gaps by
    the model itself (no cache) on the shared prefix."""
    width = max(a.shape[1], b.shape[1])
    pad = model.config.pad_token_id
    a = torch.nn.functional.pad(a, (0, width - a.shape[1]), value=pad)
    b = torch.nn.functional.pad(b, (0, width - b.shape[1]), value=pad)
    same, gaps = 0, []
    for i in range(a.shape[0]):
        differ = (a[i] != b[i]).nonzero()
        if len(differ) == 0:
            same += 1
            continue
        k = int(differ[0])
        logits = (
            model(
                input_ids=inputs["input_ids"][i : i + 1],
                attention_mask=inputs["attention_mask"][i : i + 1],
                decoder_input_ids=a[i : i + 1, :k],
                use_cache=False,
            )
            .logits[0, -1]
            .float()
        )
        logprobs = logits.log_softmax(-1)
        gaps.append(abs(logprobs[a[i, k]] - logprobs[b[i, k]]).item())
    return same, gaps


def compile_vs_eager(model, batch: dict, device, dtype, args) -> dict:
    start_state = copy.deepcopy(model.state_dict())
    # Other tokens, the same shapes: one compilation per precision.
    batches = [batch] + [
        padded_batch(args.correct_sizes["vocab"], [23, 9, 31, 17], [27, 12, 30, 8], seed=s, device=device)
        for s in (2, 3)
    ]
    runs = {}
    seconds = {}
    for compiled in (False, True):
        model.load_state_dict(start_state)
        model.zero_grad(set_to_none=True)  # gradients left by earlier checks would be added to the first step's
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
        call = torch.compile(model, backend=args.compile_backend) if compiled else model
        losses, first_grads = [], None
        start = time.perf_counter()
        for step_batch in batches:
            with autocast(device, dtype):
                loss = training_loss(call, step_batch).loss
            loss.backward()
            if first_grads is None:
                first_grads = {n: p.grad.detach().double().cpu() for n, p in model.named_parameters()}
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
        sync(device)
        seconds["compiled" if compiled else "eager"] = round(time.perf_counter() - start, 2)
        runs[compiled] = (losses, first_grads)
    model.load_state_dict(start_state)
    (eager_losses, eager_grads), (compiled_losses, compiled_grads) = runs[False], runs[True]
    loss_diff = max(abs(a - b) for a, b in zip(eager_losses, compiled_losses))
    grads = grad_differences(compiled_grads, eager_grads)
    tol = TOLERANCE[dtype]
    ok = (
        loss_diff <= tol["loss"] * max(abs(eager_losses[0]), 1.0)
        and grads["grad_rel_norm_diff"] <= tol["grad"]
        and not grads["grads_missing"]
    )
    return dict(
        ok=ok,
        steps=len(batches),
        eager_losses=eager_losses,
        compiled_losses=compiled_losses,
        loss_max_abs_diff=loss_diff,
        **grads,
        tolerance=tol,
        compile_backend=args.compile_backend,
        seconds_incl_compile=seconds,
        note=args.compile_note,
    )


# ------------------------------------------------------------------------------------------------------------------
# Part 3: throughput of the base model on WMT-like token batches.
# ------------------------------------------------------------------------------------------------------------------


def synthetic_corpus(pairs: int, vocab: int, seed: int):
    """Token ids of WMT14-like lengths: ~24 words a side, ~1.25 subwords per word, a long right tail (log-normal),
    the target's length near the source's. Lengths include </s>."""
    rng = np.random.default_rng(seed)
    src = np.clip(np.round(rng.lognormal(math.log(28), 0.5, pairs)), 3, 200).astype(np.int64)
    tgt = np.clip(np.round(src * rng.lognormal(0.05, 0.15, pairs)), 3, 200).astype(np.int64)
    return src, tgt, rng


def build_updates(args, vocab: int, tokenizer, device: torch.device) -> list[dict]:
    """Updates of ~`tokens_per_update` target tokens, each a list of micro-batches made by the package's
    TokenBatchSampler (budget `max_tokens`, padded to multiples of 8) and the Trainer's collator, on the device."""
    updates_needed = args.warmup + args.steps + 1
    accumulation = max(1, round(args.tokens_per_update / args.max_tokens))
    pairs = int(updates_needed * accumulation * args.max_tokens / 24 * 1.3) + 64
    src, tgt, rng = synthetic_corpus(pairs, vocab, seed=0)
    sampler = TokenBatchSampler(src, tgt, args.max_tokens, shuffle=True, seed=0, pad_to_multiple_of=8)
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100, pad_to_multiple_of=8)
    order = list(iter(sampler))
    micro, updates = [], []
    for indices in order[: updates_needed * accumulation]:
        features = []
        for i in indices:
            source = rng.integers(4, vocab, src[i]).tolist()
            target = rng.integers(4, vocab, tgt[i]).tolist()
            source[-1] = target[-1] = 2
            features.append({"input_ids": source, "attention_mask": [1] * len(source), "labels": target})
        batch = collator(features)
        batch = {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "labels")}
        micro.append((batch, src[indices].tolist(), tgt[indices].tolist()))
        if len(micro) == accumulation:
            updates.append(micro)
            micro = []
    if len(updates) < updates_needed:
        raise ValueError(f"only {len(updates)} synthetic updates were made, {updates_needed} are needed")
    return updates


def update_flops(update, config) -> tuple[float, int, int]:
    """(FLOPs, source tokens, target tokens) of one update on its real (unpadded) tokens: 6 x parameters x tokens for
    the matrices (encoder weights x source tokens, decoder weights and the output projection x target tokens), plus
    3 x 4 x d_model x length products per layer for attention (QK^T and AV, forward and backward; causal not halved)."""
    d, vocab = config.d_model, config.vocab_size
    enc_layer = 4 * d * d + 2 * d * config.encoder_ffn_dim
    dec_layer = 8 * d * d + 2 * d * config.decoder_ffn_dim
    flops = s_tokens = t_tokens = 0
    for _, src, tgt in update:
        s, t = np.asarray(src, dtype=np.float64), np.asarray(tgt, dtype=np.float64)
        s_tokens, t_tokens = s_tokens + int(s.sum()), t_tokens + int(t.sum())
        dense = 6 * (
            config.encoder_layers * enc_layer * s.sum() + (config.decoder_layers * dec_layer + vocab * d) * t.sum()
        )
        attention = (
            3 * 4 * d * (config.encoder_layers * (s**2).sum() + config.decoder_layers * ((t**2).sum() + (t * s).sum()))
        )
        flops += dense + attention
    return flops, s_tokens, t_tokens


def run_update(variant: dict, update, device: torch.device) -> None:
    model, optimizer = variant["call"], variant["optimizer"]
    total = sum(sum(t) for _, _, t in update)  # the update's target tokens (labels that are not -100), host-side
    n_items = torch.tensor(total, device=device)
    for batch, _, tgt in update:
        if variant["compiled"]:
            for tensor in batch.values():  # as the Trainer does under torch_compile: any batch size and length
                torch._dynamo.maybe_mark_dynamic(tensor, 0)
                torch._dynamo.maybe_mark_dynamic(tensor, 1)
        with autocast(device, torch.bfloat16 if variant["bf16"] else torch.float32):
            if variant["marian"]:  # its plain mean cross-entropy, weighted to the update's target tokens
                loss = model(**batch).loss * (sum(tgt) / total)
            else:
                loss = training_loss(model, batch, n_items).loss
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def part_throughput(report: Report, device: torch.device, args, deadline: float) -> None:
    tokenizer = train_tokenizer(["a b c d e f g h"] * 4, vocab_size=300)  # the package's specials and padding
    config = VanillaTransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size, **args.preset_overrides)
    bf16 = bf16_support(device)[0] or args.smoke
    torch.manual_seed(0)
    ours = VanillaTransformerForConditionalGeneration(config).to(device)
    marian = MarianMTModel(marian_config_like(config, max_positions=1024)).to(device)
    variants = {"ours eager": {"module": ours, "call": ours, "compiled": False, "marian": False}}
    if "compile" in args.skip_variants:
        report.line(
            "throughput",
            "bfloat16 autocast" if bf16 else "float32",
            variant="ours compile",
            model="ours",
            skipped=args.compile_note or "--skip_variants compile",
        )
    else:
        twin = copy.deepcopy(ours)  # the same weights as `ours eager`
        variants["ours compile"] = {
            "module": twin,
            "call": torch.compile(twin, backend=args.compile_backend),
            "compiled": True,
            "marian": False,
        }
    variants["marian eager"] = {"module": marian, "call": marian, "compiled": False, "marian": True}
    for v in variants.values():
        v["module"].train()
        v["bf16"] = bf16
        v["optimizer"] = torch.optim.Adam(
            v["module"].parameters(), lr=1e-5, betas=(0.9, 0.98), eps=1e-9, fused=device.type == "cuda" or None
        )
        v["params"] = sum(p.numel() for p in v["module"].parameters())
    updates = build_updates(args, config.vocab_size, tokenizer, device)
    counts = [update_flops(u, config) for u in updates]
    dtype = "bfloat16 autocast" if bf16 else "float32"

    def timed(v, u):
        sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        start = time.perf_counter()
        run_update(v, u, device)
        sync(device)
        seconds = time.perf_counter() - start
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device)
            v["peak"] = max(v.get("peak", 0), peak)
            v["step_peak"] = max(v.get("step_peak", 0), peak - before)
        return seconds

    # Warm-up (a compiled variant compiles in its first updates: timed apart), then interleaved timed rounds.
    names = list(variants)
    for name in names:
        v = variants[name]
        v["warmup_s"] = [timed(v, updates[i]) for i in range(args.warmup)]
        v["sdpa_ops"] = sdpa_ops(lambda v=v: run_update(v, updates[-1], device))[0]  # which attention kernels ran
    times = {name: [] for name in names}
    for step in range(args.steps):
        if step >= MIN_ROUNDS and time.perf_counter() > deadline:  # a slow compilation still leaves a few rounds
            break
        u = updates[args.warmup + step]
        shift = step % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append((timed(variants[name], u), args.warmup + step))
    results = {  # target tokens per second of each variant timed
        name: sum(counts[i][2] for _, i in times[name]) / sum(s for s, _ in times[name])
        for name in names
        if times[name]
    }
    for name in names:
        v = variants[name]
        if not times[name]:
            report.line("throughput", dtype, variant=name, skipped="part time box reached before timed updates")
            continue
        seconds = sum(s for s, _ in times[name])
        flops = sum(counts[i][0] for _, i in times[name])
        tgt_tokens = sum(counts[i][2] for _, i in times[name])
        src_tokens = sum(counts[i][1] for _, i in times[name])
        tokens_per_s = results[name]
        med = statistics.median(s for s, _ in times[name])
        fields = dict(
            variant=name,
            model="marian" if v["marian"] else "ours",
            preset=args.preset,
            vocab_size=config.vocab_size,
            parameters=v["params"],
            sdpa_backend=sorted(v["sdpa_ops"]),
            sdpa_ops=v["sdpa_ops"],
            attn_implementation=getattr(v["module"].config, "_attn_implementation", None),
            updates_timed=len(times[name]),
            warmup_updates=args.warmup,
            warmup_s=[round(s, 3) for s in v["warmup_s"]],
            first_update_s_incl_compile=round(v["warmup_s"][0], 2) if v["compiled"] and v["warmup_s"] else None,
            median_update_s=round(med, 4),
            target_tokens_per_update=round(tgt_tokens / len(times[name])),
            source_tokens_per_update=round(src_tokens / len(times[name])),
            micro_batches_per_update=len(updates[0]),
            max_tokens=args.max_tokens,
            tokens_per_s=round(tokens_per_s),
            model_tflops_per_s=sig(flops / seconds / 1e12),
            mfu=sig(flops / seconds / (PEAK_TFLOPS * 1e12)),
            peak_tflops=PEAK_TFLOPS,
            mfu_vs_measured_matmul=sig(flops / seconds / (args.measured_tflops * 1e12))
            if args.measured_tflops
            else None,
            measured_matmul_tflops=round(args.measured_tflops, 1) if args.measured_tflops else None,
            flops_formula="6*params*tokens (encoder x source, decoder+output x target, real tokens) + attention",
            peak_mem_gib=round(v["peak"] / 2**30, 2) if "peak" in v else None,
            step_mem_gib=round(v["step_peak"] / 2**30, 2) if "step_peak" in v else None,
            mem_note="peak_mem_gib includes every variant's resident weights and Adam state",
            projected_paper_base_minutes=round(PAPER_UPDATES * PAPER_TOKENS / tokens_per_s / 60, 1),
            **GOAL,
            optimizer="Adam fused" if device.type == "cuda" else "Adam (foreach)",
            compile_backend=args.compile_backend if v["compiled"] else None,
        )
        if "marian eager" in results and name != "marian eager":
            fields["vs_marian"] = round(tokens_per_s / results["marian eager"], 3)
        report.line("throughput_marian" if v["marian"] else "throughput", dtype, **fields)
    for name in names:  # the ratios to Marian in one place
        if name != "marian eager" and "marian eager" in results and name in results:
            report.line(
                "throughput_vs_marian",
                dtype,
                variant=name,
                model="ours",
                vs_marian=round(results[name] / results["marian eager"], 3),
                tokens_per_s=round(results[name]),
                marian_tokens_per_s=round(results["marian eager"]),
                goal_vs_marian=GOAL["goal_vs_marian"],
            )
    ours_best = max((r, n) for n, r in results.items() if n != "marian eager") if results else None
    if ours_best and (ours_best[0] < GOAL["goal_tokens_per_s"] or args.smoke) and time.perf_counter() < deadline:
        name = ours_best[1]
        report.line(
            "profile",
            dtype,
            variant=name,
            tokens_per_s=round(ours_best[0]),
            **profile_update(variants[name], updates[-1], device, args),
        )


def profile_update(variant: dict, update, device: torch.device, args) -> dict:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        run_update(variant, update, device)
        sync(device)
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0)
        rows.append(
            {
                "op": event.key,
                "calls": event.count,
                "self_device_ms": round(device_us / 1e3, 3),
                "device_ms": round(getattr(event, "device_time_total", 0) / 1e3, 3),
                "self_cpu_ms": round(event.self_cpu_time_total / 1e3, 3),
            }
        )
    key = "self_device_ms" if device.type == "cuda" else "self_cpu_ms"
    rows.sort(key=lambda r: r[key], reverse=True)
    total = sum(r[key] for r in rows)
    if args.trace:
        prof.export_chrome_trace(str(args.trace))
    return {
        "sorted_by": key,
        "total_ms": round(total, 2),
        "top_ops": rows[: args.profile_rows],
        "trace": str(args.trace) if args.trace else None,
    }


# ------------------------------------------------------------------------------------------------------------------
# Part 4: Multi30k EN->DE on the device for a few minutes.
# ------------------------------------------------------------------------------------------------------------------


def smoke_data(data_dir: Path, target: Path) -> Path:
    """A small slice of Multi30k (gzipped like the real files) for the CPU smoke run."""
    target.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 1500), ("val", 40), ("test_2016_flickr", 40)):
        for lang in ("en", "de"):
            with gzip.open(data_dir / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = list(itertools.islice(f, n))
            with gzip.open(target / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.writelines(lines)
    return target


def part_train(report: Report, device: torch.device, args, deadline: float) -> None:
    from vanilla_transformer.training.train import train

    minutes = min(args.train_minutes, max(0.05, (deadline - time.perf_counter() - args.train_overhead_s) / 60))
    work = Path(tempfile.mkdtemp(prefix="gpu_check_train_"))
    data = smoke_data(args.data_dir, work / "data") if args.smoke else args.data_dir
    argv = [
        "--recipe",
        "multi30k_en_de_cpu",
        "--dataset",
        str(data),
        "--output_dir",
        str(work / "run"),
        "--overwrite_output_dir",
        "--max_train_minutes",
        f"{minutes:.3f}",
        "--max_tokens",
        str(args.train_max_tokens),
        "--report_to",
        "none",
        "--plots",
        "false",
        "--eval_strategy",
        "no",
        "--use_cpu",
        "true" if device.type == "cpu" else "false",
        "--bf16",
        "true" if bf16_support(device)[0] else "false",
        "--test_batch_size",
        str(args.train_test_batch),
    ]
    if device.type == "cuda":
        argv += ["--pad_to_multiple_of", "8"]
    if args.smoke:
        argv += [
            "--layers",
            "1",
            "--d_model",
            "32",
            "--heads",
            "2",
            "--ffn_dim",
            "64",
            "--vocab_size",
            "400",
            "--num_beams",
            "2",
            "--average_last",
            "0",
            "--save_steps",
            "100000",
            "--warmup_steps",
            "20",
            "--subword_split",
            "0",
        ]
    started = time.perf_counter()
    results = train(argv)
    wall = time.perf_counter() - started
    test, training = results["bleu"]["test"], results["training"]
    averaged = (results.get("averaged_model") or {}).get("bleu_test") or {}
    precision = training["precision"]
    report.line(
        "train_multi30k",
        {"bf16": "bfloat16 autocast", "fp16": "float16 autocast"}.get(precision["mixed_precision"], "float32"),
        recipe="multi30k_en_de_cpu",
        options=argv[4:],
        max_train_minutes=round(minutes, 2),
        train_minutes=round(training["train_runtime_s"] / 60, 2),
        wall_minutes_incl_data_and_test=round(wall / 60, 2),
        updates=training["steps"],
        epochs=training["epochs"],
        final_train_loss=training["final_train_loss"],
        source_plus_target_tokens_per_s=training["tokens_per_second"],
        sdpa_backend=precision["attention"],
        test_split="test_2016_flickr" + (" (first 40 sentences)" if args.smoke else ""),
        test_sentences=test.get("sentences"),
        bleu=test["score"],
        bleu_lowercase=test["lowercase"]["score"],
        bleu_signature=test.get("signature"),
        averaged_bleu=averaged.get("score"),
        averaged_bleu_lowercase=(averaged.get("lowercase") or {}).get("score"),
        output_dir=str(work / "run"),
    )


# ------------------------------------------------------------------------------------------------------------------
# Part 5: Table 3 on the device, the rows sharing it.
# ------------------------------------------------------------------------------------------------------------------


def part_table3(report: Report, device: torch.device, args) -> None:
    """`vanilla-transformer table3` as a user runs it on a GPU: the Multi30k recipe's base row and D1 (dropout 0), one
    seed, the same `--table3_steps` updates each, both at once (`--jobs 2`: two `train` processes on one device), then
    the table it writes, a line per row."""
    from vanilla_transformer.commands import main as command

    work = Path(tempfile.mkdtemp(prefix="gpu_check_table3_"))
    data = smoke_data(args.data_dir, work / "data") if args.smoke else args.data_dir
    recipe = json.loads(
        (REPO / "vanilla_transformer" / "training" / "recipes" / "multi30k_en_de_cpu.json").read_text()
    )
    recipe.update(dataset=str(data), report_to=["none"], plots=False, average_last=0, save_steps=100_000)
    recipe.update(use_cpu=device.type == "cpu", per_device_eval_batch_size=args.train_test_batch)
    if device.type == "cuda":
        recipe.update(pad_to_multiple_of=8, max_tokens=args.train_max_tokens)
    if args.smoke:
        recipe.update(d_model=32, layers=1, heads=2, ffn_dim=64, vocab_size=400, num_beams=2, subword_split=0.0)
        recipe.update(max_tokens=512, bf16="false")
        del recipe["cpu_float32"]
    (work / "recipe.json").write_text(json.dumps(recipe))
    # The rows' `train` processes import this checkout's package, as this process does.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    started = time.perf_counter()
    argv = ["table3", "--recipe", str(work / "recipe.json"), "--rows", "D1", "--seeds", "1"]
    argv += ["--max_steps", str(args.table3_steps), "--jobs", "2", "--output_dir", str(work / "table")]
    status = command(argv)
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (work / "table" / "table3.jsonl").read_text().splitlines()]
    for row in rows:
        seed = row["seeds"][0]
        measures = ("params", "updates", "minutes", "validation_perplexity", "validation_bleu", "test_bleu", "machine")
        report.line(
            "table3_row", seed["precision"], row=row["row"], changed=row["changed"], **{k: seed[k] for k in measures}
        )
    report.line(
        "table3",
        status=status,
        rows=[row["row"] for row in rows],
        jobs=2,
        max_steps=args.table3_steps,
        wall_minutes=round(wall / 60, 2),
        table=str(work / "table" / "table3.md"),
    )


# ------------------------------------------------------------------------------------------------------------------
# Main.
# ------------------------------------------------------------------------------------------------------------------


def default_data_dir() -> Path:
    """The README's clone of Multi30k, else the copy beside the repository, else the one carried to a GPU machine."""
    candidates = [REPO / "multi30k" / "data" / "task1" / "raw", REPO.parent / "shared" / "data" / "multi30k"]
    return next((path for path in candidates if path.exists()), REPO / ".data" / "multi30k")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--output", type=Path, required=True, help="JSON-lines file the figures are appended to.")
    p.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cuda (default where there is one) or cpu.",
    )
    p.add_argument("--smoke", action="store_true", help="Tiny sizes, every part, for a CPU check (< 1 minute).")
    p.add_argument("--skip", default="", help=f"Comma-separated parts to skip, of {','.join(PARTS)}.")
    p.add_argument(
        "--budget_s",
        type=float,
        default=540.0,
        help="Whole-run time box: env 3%%, correct 22%%, throughput 25%%, train 33%%, table3 the rest.",
    )
    p.add_argument("--data_dir", type=Path, default=default_data_dir(), help="Multi30k directory ({split}.{lang}.gz).")
    p.add_argument("--preset", default="base", help="Throughput model preset (the wmt14_en_de_base recipe's).")
    p.add_argument("--vocab_size", type=int, default=37000, help="Throughput model vocabulary (the recipe's 37,000).")
    p.add_argument("--tokens_per_update", type=int, default=25000, help="Padded token budget of an update.")
    p.add_argument("--max_tokens", type=int, default=12500, help="Token budget of a micro-batch (TokenBatchSampler).")
    p.add_argument("--warmup", type=int, default=10, help="Untimed updates per throughput variant.")
    p.add_argument("--steps", type=int, default=20, help="Timed updates per throughput variant (interleaved).")
    p.add_argument(
        "--skip_variants",
        default=None,
        help="'compile' drops the compiled throughput variant (the default of a CPU smoke run).",
    )
    p.add_argument("--compile_backend", default="inductor", help="torch.compile backend (the CPU smoke: eager).")
    p.add_argument("--train_minutes", type=float, default=3.0, help="Multi30k training time (part `train`).")
    p.add_argument("--train_max_tokens", type=int, default=8192, help="Multi30k token budget per batch.")
    p.add_argument("--table3_steps", type=int, default=300, help="Updates of each Table 3 row (part `table3`).")
    p.add_argument("--trace", type=Path, default=None, help="Also write the profiled update as a Chrome trace.")
    p.add_argument("--profile_rows", type=int, default=25, help="Ops listed in the `profile` line.")
    args = p.parse_args(argv)
    for name in (
        "budget_s",
        "tokens_per_update",
        "max_tokens",
        "steps",
        "train_minutes",
        "train_max_tokens",
        "table3_steps",
    ):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be 0 or more, got {args.warmup}")
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = args.skip - set(PARTS)
    if unknown:
        p.error(f"--skip: unknown part(s) {sorted(unknown)}; the parts are {', '.join(PARTS)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device here; use --device cpu (with --smoke for tiny sizes)")
    if not {"train", "table3"} <= args.skip and not (args.data_dir / "train.en.gz").exists():
        p.error(f"--data_dir {args.data_dir}: no train.en.gz there; point it at Multi30k or add --skip train")
    smoke_cpu = args.smoke and args.device == "cpu"
    if args.skip_variants is None:
        args.skip_variants = "compile" if smoke_cpu else ""
    args.skip_variants = {s.strip() for s in args.skip_variants.split(",") if s.strip()}
    args.measured_tflops = None
    args.compile_note = None
    args.compile_dtypes = (torch.float32, torch.bfloat16)
    args.correct_sizes = dict(vocab=1000, d_model=256, layers=2, heads=4, ffn=1024)
    args.preset_overrides = {}
    args.new_tokens = 24
    args.matmul_size, args.matmul_reps = 8192, 10
    args.train_overhead_s = 75  # tokenizer, tokenization, test translation, averaging around the timed training
    args.train_test_batch = 200
    if args.smoke:
        args.correct_sizes = dict(vocab=97, d_model=32, layers=2, heads=2, ffn=64)
        args.preset_overrides = dict(
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
        )
        args.vocab_size, args.tokens_per_update, args.max_tokens = 500, 1200, 600
        args.warmup, args.steps = 1, 2
        args.new_tokens = 8
        args.matmul_size, args.matmul_reps = 256, 3
        args.train_minutes, args.train_overhead_s, args.train_test_batch = 0.05, 0, 40
        args.table3_steps = 3
        if smoke_cpu:
            # Inductor's C++ build of the kernels takes minutes on a small CPU, and even tracing costs ~15 s a graph
            # on 2 cores: the smoke compares one precision, captured by dynamo and run without code generation.
            args.compile_backend = "eager" if args.compile_backend == "inductor" else args.compile_backend
            args.compile_dtypes = (torch.float32,)
            args.compile_note = (
                f"CPU smoke: backend {args.compile_backend} (inductor's code generation is checked on the GPU), "
                f"float32 only; the compiled throughput variant is left out unless --skip_variants ''"
            )
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = Report(args.output, device)
    start = time.perf_counter()
    # Of --budget_s, in order: at the default 540 s, env 18 s, correct 117 s, throughput 135 s, train 180 s, table3 90 s.
    shares = {"env": 0.033, "correct": 0.217, "throughput": 0.25, "train": 0.333, "table3": 0.167}
    print(
        f"gpu_check: {report.common} cpus={os.cpu_count()} python={platform.python_version()} "
        f"budget={args.budget_s:.0f}s output={args.output}",
        flush=True,
    )
    used = 0.0
    for part in PARTS:
        used += shares[part]
        if part in args.skip:
            report.line("part", part=part, skipped="--skip")
            continue
        deadline = start + used * args.budget_s
        if part != "env" and time.perf_counter() > start + args.budget_s - 20:
            report.line("part", part=part, skipped="--budget_s spent")
            continue
        began = time.perf_counter()
        try:
            if part == "env":
                part_env(report, device, args)
            elif part == "correct":
                part_correct(report, device, args, deadline)
            elif part == "throughput":
                part_throughput(report, device, args, deadline)
            elif part == "train":
                part_train(report, device, args, deadline)
            else:
                part_table3(report, device, args)
            report.line("part", part=part, ok=True, seconds=round(time.perf_counter() - began, 1))
        except Exception as error:  # a failed part is a finding: record it and go on with the next
            report.line(
                "part",
                part=part,
                ok=False,
                seconds=round(time.perf_counter() - began, 1),
                error=f"{type(error).__name__}: {error}"[:2000],
                traceback=traceback.format_exc()[-4000:],
            )
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    report.line("done", seconds=round(time.perf_counter() - start, 1), budget_s=args.budget_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
