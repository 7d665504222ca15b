"""Machine-peak probe: what this machine's matrix multiplications reach, per dtype, at the model's own shapes.

A benchmark's MFU (model FLOP/s / peak FLOP/s) is only meaningful against a peak measured on the same machine, with
the same threads: a datasheet number assumes every core at full clock with its best instructions, which a shared
2-core VM never sees. This probe times `torch.matmul` at the GEMM shapes of a training step (tokens x d_model x
d_model for the attention projections, x d_ff for the FFN, x vocab for the output layer) in

- float32;
- float32 with `torch.set_float32_matmul_precision("medium")` (oneDNN may then compute float32 GEMMs in bfloat16,
  where the CPU has it);
- bfloat16 (native with AVX512_BF16 or AMX on a CPU, Ampere or later on a GPU; emulated, slow, elsewhere);

and prints the CPU's instruction-set support as torch sees it (the flags that decide the bfloat16 path) next to the
`/proc/cpuinfo` flags, for the record. The peak per dtype is the best GFLOP/s over the shapes, from the fastest of
the repetitions (load from other processes only ever adds time).

    python bench/machine_peak.py                     # all cores
    python bench/machine_peak.py --threads 1         # what bench_vs_marian.py --threads 1 compares against
    python bench/machine_peak.py --device cuda

`bench_vs_marian.py` runs the same probe (`measure_peaks`) at its start and reports MFU against its bfloat16 peak.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vanilla_transformer import PRESETS  # noqa: E402
from vanilla_transformer.precision import bf16_support, cpu_model_name  # noqa: E402


MODES = ("float32", "float32-medium", "bfloat16")


def model_shapes(preset: str, tokens: int, vocab_size: int) -> dict[str, tuple[int, int, int]]:
    """(M, K, N) of the GEMMs of one forward of `preset` on `tokens` tokens: activations [M, K] x weights [K, N]."""
    p = PRESETS[preset]
    d, ff = p["d_model"], p["encoder_ffn_dim"]
    return {
        f"{preset} Q/K/V/O projection": (tokens, d, d),
        f"{preset} FFN in": (tokens, d, ff),
        f"{preset} FFN out": (tokens, ff, d),
        f"{preset} output layer": (tokens, d, vocab_size),
    }


def cpu_flags() -> dict[str, object]:
    """The CPU's instruction-set support as torch sees it (what decides the kernels), and its model name."""
    flags = {"torch capability": torch.backends.cpu.get_cpu_capability()}
    for name in ("avx2", "avx512", "vnni", "avx512_bf16", "amx_tile", "amx_fp16"):
        check = getattr(torch.cpu, f"_is_{name}_supported", None)
        if check is not None:
            flags[name] = bool(check())
    flags["mkldnn (oneDNN)"] = torch.backends.mkldnn.is_available()
    flags["model"] = cpu_model_name()
    try:  # for the record only: the decisions above come from torch
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx2", "fma", "avx512", "amx", "vnni", "bf16")
                flags["/proc/cpuinfo flags"] = " ".join(
                    sorted(f for f in line.split(":", 1)[1].split() if any(w in f for w in wanted))
                )
                break
    except OSError:
        pass
    return flags


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_gflops(
    shape: tuple[int, int, int], mode: str, device: torch.device, reps: int = 5, min_seconds: float = 0.05
) -> float:
    """GFLOP/s of `a @ b` for `a` [M, K], `b` [K, N] in `mode`, from the fastest of `reps` timed batches of calls."""
    m, k, n = shape
    dtype = torch.bfloat16 if mode == "bfloat16" else torch.float32
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium" if mode == "float32-medium" else "highest")
    try:
        torch.matmul(a, b)  # warm-up: kernel selection, first-touch of the output
        _sync(device)
        calls, elapsed = 1, 0.0
        while elapsed < min_seconds:  # enough calls per timing that the clock's resolution does not matter
            calls *= 2
            start = time.perf_counter()
            for _ in range(calls):
                torch.matmul(a, b)
            _sync(device)
            elapsed = time.perf_counter() - start
        best = elapsed
        for _ in range(reps - 1):
            start = time.perf_counter()
            for _ in range(calls):
                torch.matmul(a, b)
            _sync(device)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_float32_matmul_precision(previous)
    return 2 * m * k * n * calls / best / 1e9


def measure_peaks(
    presets=("small",), tokens: int = 2048, vocab_size: int = 8000, device="cpu", modes=MODES, reps: int = 5
) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """({mode: peak GFLOP/s}, {(shape name, mode): GFLOP/s}) at the GEMM shapes of `presets`."""
    device = torch.device(device)
    table = {}
    for preset in presets:
        for name, shape in model_shapes(preset, tokens, vocab_size).items():
            for mode in modes:
                table[(name, mode)] = gemm_gflops(shape, mode, device, reps=reps)
    peaks = {mode: max(v for (_, m), v in table.items() if m == mode) for mode in modes}
    return peaks, table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--presets", default="small,base", help="presets whose GEMM shapes are timed (default small,base)"
    )
    parser.add_argument("--tokens", type=int, default=2048, help="rows of the activations (tokens in a batch)")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: all cores)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(
        f"machine_peak: torch {torch.__version__}, device {device}, threads {torch.get_num_threads()} of "
        f"{os.cpu_count()} cores" + (f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
    )
    if device.type == "cpu":
        for key, value in cpu_flags().items():
            print(f"  {key:22s} {value}")
        with contextlib.suppress(OSError):  # no load average on some platforms
            print(f"  load average (1 min) {os.getloadavg()[0]:.1f}: other processes lower what is measured here")
    print(f"  bfloat16: {bf16_support(device)[1]}")
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    peaks, table = measure_peaks(presets, args.tokens, args.vocab_size, device, reps=args.reps)
    header = "".join(f"{mode:>16s}" for mode in MODES)
    print(f"\n  GFLOP/s of [M, K] x [K, N]{'':28s}{header}")
    names = list(dict.fromkeys(name for name, _ in table))
    for name in names:
        m, k, n = next(
            model_shapes(p, args.tokens, args.vocab_size)[name] for p in presets if name.startswith(p + " ")
        )
        cells = "".join(f"{table[(name, mode)]:>16.0f}" for mode in MODES)
        print(f"  {name:32s} {m:>5d}x{k:<4d}x{n:<5d}{cells}")
    print(f"  {'peak (best shape)':51s}" + "".join(f"{peaks[mode]:>16.0f}" for mode in MODES))
    print(f"  bfloat16 / float32: {peaks['bfloat16'] / peaks['float32']:.2f}x")


if __name__ == "__main__":
    main()
