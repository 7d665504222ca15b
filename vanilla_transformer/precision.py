"""Which precision, and which attention kernel, this machine runs fastest: asked of torch, not of /proc/cpuinfo.

bfloat16 is "native" where the hardware multiplies bfloat16 matrices itself:
- a CUDA GPU that reports bfloat16 support without emulation (Ampere and later);
- a CPU with AVX512_BF16 (e.g. AMD Zen 4, Intel Cooper Lake) or AMX tiles (Intel Sapphire Rapids and later): oneDNN's
  bfloat16 GEMMs there run several times as fast as the float32 ones (docs/performance.md, "Machines";
  bench/machine_peak.py measures a machine). Without either, torch emulates bfloat16 by converting to float32, which
  is slower than float32 itself.
Used by the trainer (`bf16="auto"`), by `vanilla-transformer translate --dtype auto` and by the benchmarks; the
switch of a loaded model's attention implementation (`use_attention`) is here too, for the trainer and the demo.
"""

from __future__ import annotations

import platform

import torch


def bf16_support(device: str | torch.device) -> tuple[bool, str]:
    """(native, reason): whether `device` computes in bfloat16 natively, and a sentence saying why (for logs)."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return False, "no CUDA device"
        name = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return True, f"{name} (compute capability {major}.{minor}) has native bfloat16"
        return False, f"{name} (compute capability {major}.{minor}) has no native bfloat16 (needs 8.0+)"
    if device.type == "cpu":
        capability, units = torch.backends.cpu.get_cpu_capability(), cpu_bfloat16_units()
        if "AMX" in units:
            return True, f"CPU with AMX tiles ({capability}): native bfloat16 matrix multiplication"
        if "AVX512_BF16" in units:
            return True, f"CPU with AVX512_BF16 ({capability}): native bfloat16 dot products"
        return False, f"CPU without AVX512_BF16 or AMX ({capability}): bfloat16 would be emulated, slower than float32"
    return False, f"{device.type}: bfloat16 is not known to be native there; float32"


def cpu_bfloat16_units() -> list[str]:
    """The CPU's bfloat16 units as torch sees them: "AVX512_BF16" and / or "AMX" (tiles), or none."""
    units = []
    for label, name in (("AVX512_BF16", "_is_avx512_bf16_supported"), ("AMX", "_is_amx_tile_supported")):
        check = getattr(torch.cpu, name, None)  # private torch helpers (cpuinfo); absent in some builds
        if check is not None and check():
            units.append(label)
    return units


def cpu_model_name() -> str:
    """The CPU's marketing name (/proc/cpuinfo's "model name" on Linux), for the record: decisions come from torch."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def resolve_dtype(name: str, device: str | torch.device) -> tuple[torch.dtype, str]:
    """`name` ("auto", "float32", "bfloat16", "float16") as a torch dtype for `device`, and the reason for it.
    "auto" is bfloat16 where it is native (`bf16_support`), float32 elsewhere."""
    if name == "auto":
        native, reason = bf16_support(device)
        return (torch.bfloat16 if native else torch.float32), reason
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(
            f"dtype {name!r} is not a torch floating-point dtype: use auto, float32, bfloat16 or float16."
        )
    return dtype, "asked for"


def fast_attention_implementation(device: str | torch.device, dtype: torch.dtype) -> str | None:
    """The attention implementation to use for bfloat16 on `device` when it differs from the default (sdpa), else None.

    On a CPU, torch's SDPA kernel in bfloat16 is slower at translation lengths than the eager attention (two bfloat16
    matmuls and a float32 softmax), in both training and generation (docs/performance.md, "What a training step
    does", has the timings). On a GPU, SDPA's fused kernels are the fast path."""
    if torch.device(device).type == "cpu" and dtype == torch.bfloat16:
        return "eager"
    return None


def use_attention(model, implementation: str) -> str | None:
    """Switch `model` to the attention `implementation` ("eager", "sdpa", ...) in memory: its config as saved keeps
    the implementation it was given. Returns the implementation it used before, or None when it used this one."""
    previous = model.config._attn_implementation  # transformers keeps the resolved implementation only there
    if previous == implementation:
        return None
    model.set_attn_implementation(implementation)
    return previous


__all__ = ["bf16_support", "fast_attention_implementation", "resolve_dtype", "use_attention"]
