"""Benchmark: the model exported to CTranslate2 against `generate`, each engine in its own process.

Speed (default): for each preset (`small`, `base`; random weights, since speed does not depend on training) and each
decoding (beam 4 and greedy), the same Multi30k test2016 source sentences are translated end to end (tokenize,
decode, detokenize) by

- `generate-float32`, `generate-bfloat16`: `vanilla_transformer.translation.translate.translate` (batches of 32 sorted by length,
  `model.generate` with the model's generation config), weights and computation in that dtype;
- `ct2-float32`, `ct2-int8`, and `ct2-bfloat16` where CTranslate2 computes in bfloat16 on this CPU:
  `translate_ctranslate2` on the exported model (same tokens as `generate` in float32).

Each engine runs in its own worker process (torch and CTranslate2 are never timed in one process: with both loaded,
their OpenMP runtimes interfere); the CTranslate2 workers do not even import torch (they load
`vanilla_transformer/translation/ctranslate2.py` as a file, which translation needs nothing else of). The workers are
started once and then driven in interleaved rounds (each round runs every engine once, in a rotating order), so load
from other jobs on the machine falls on all engines alike. Printed per preset and decoding: the median wall and CPU
time of each engine, its speed-up over `generate-float32` (ratio of medians, CPU time: the steadier clock on a
shared machine; wall in brackets), and the best engine; also the CPU, its flags and the load average.

Random weights never emit `</s>`, so the output length is fixed: `--new_tokens` (default 30, about a Multi30k
German sentence), the same number of decoder steps for every engine. (`--new_tokens 0` uses the model's rule,
at most source length + 50 tokens: every random-weight translation then runs to that limit, which a trained model
rarely does, and CTranslate2 decodes beam-search batches of one source length only, to reproduce `generate`'s
per-sentence limit; see vanilla_transformer/translation/ctranslate2.py.) The `--bleu` run times a trained model end to
end.

BLEU (`--bleu CHECKPOINT`): test2016 BLEU (sacreBLEU, 13a) of a trained checkpoint translated by `generate`
(float32), and by its CTranslate2 export in float32 and int8, each in its own process, with the number of
translations identical to generate's.

    python bench/bench_ctranslate2.py                                  # ~5-10 min on 2 busy cores
    python bench/bench_ctranslate2.py --presets small --rounds 5 --threads 2
    python bench/bench_ctranslate2.py --bleu runs/multi30k-en-de

This is a benchmark, not a test: it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "multi30k"


def read_gz(path: Path, limit: int | None = None) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    return lines[:limit]


# ------------------------------------------------------------------------------------------------ workers


def worker(args) -> None:
    """One engine in this process: load, warm up, then translate once per line read on stdin ("beam" / "greedy"),
    answering with one JSON line (times and outputs' total length)."""
    sentences = json.loads(Path(args.sentences_file).read_text(encoding="utf-8"))
    engine, dtype = args.engine.split("-")
    if engine == "ct2":
        import ctranslate2  # noqa: F401  (first: its own OpenMP runtime)

        # The package without its registration with transformers' Auto classes (as the console script imports it);
        # the engine's tokenization helpers still import torch when first used.
        os.environ["VANILLA_TRANSFORMER_REGISTER_LATER"] = "1"
        sys.path.insert(0, str(ROOT))
        from vanilla_transformer.translation import ctranslate2 as module

        model = module.CTranslate2Model(args.model, compute_type=dtype, intra_threads=args.threads)

        def run(beams, lines):
            return module.translate_ctranslate2(model, lines, num_beams=beams, max_new_tokens=args.new_tokens)
    else:
        import torch

        sys.path.insert(0, str(ROOT))
        from vanilla_transformer.translation.loading import load_model
        from vanilla_transformer.translation.translate import translate

        torch.set_num_threads(args.threads)
        model, tokenizer = load_model(args.model, dtype=dtype, device="cpu")

        def run(beams, lines):
            kwargs = {"num_beams": beams}
            if args.new_tokens is not None:
                kwargs["max_new_tokens"] = args.new_tokens
            return translate(model, tokenizer, lines, **kwargs)

    run(4, sentences[:8])  # warm-up (allocations, first-call costs)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        beams = 4 if line.strip() == "beam" else 1
        wall, cpu = time.perf_counter(), time.process_time()
        out = run(beams, sentences)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(json.dumps({"wall": wall, "cpu": cpu, "chars": sum(map(len, out)), "outputs": out}), flush=True)


class Worker:
    def __init__(self, engine: str, model: Path, sentences: Path, threads: int, new_tokens: int | None):
        command = [
            sys.executable,
            __file__,
            "--worker",
            "--engine",
            engine,
            "--model",
            str(model),
            "--sentences_file",
            str(sentences),
            "--threads",
            str(threads),
            "--new_tokens",
            str(new_tokens or 0),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.engine = engine
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.engine} died (exit status {self.process.wait()})")
        return json.loads(line)

    def run(self, mode: str) -> dict:
        self.process.stdin.write(mode + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


# ------------------------------------------------------------------------------------------------ set-up


def cpu_description() -> str:
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not flags:
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "fma")
                flags = " ".join(f for f in line.split(":", 1)[1].split() if f in wanted)
                break
        return f"{name}, {os.cpu_count()} cores visible; flags: {flags}"
    except (OSError, UnboundLocalError):
        return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores visible"


def build_preset(preset: str, tokenizer_dir: Path, work: Path, ct2_types: list[str]) -> Path:
    """A random-weight model of `preset` with the tokenizer, and its CTranslate2 exports: work/preset/{hf,ct2-*}."""
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.data.tokenizer import load_tokenizer
    from vanilla_transformer.translation.ctranslate2 import export_ctranslate2

    tokenizer = load_tokenizer(str(tokenizer_dir))
    torch.manual_seed(0)
    config = VanillaTransformerConfig.from_preset(preset, vocab_size=len(tokenizer))
    model = VanillaTransformerForConditionalGeneration(config).eval()
    base = work / preset
    model.save_pretrained(base / "hf")
    tokenizer.save_pretrained(base / "hf")
    for dtype in ct2_types:
        export_ctranslate2(model, base / f"ct2-{dtype}", tokenizer=tokenizer, quantization=dtype)
    return base


def speed(args) -> None:
    from vanilla_transformer.translation.ctranslate2 import import_ctranslate2

    ctranslate2 = import_ctranslate2()
    import torch

    supported = ctranslate2.get_supported_compute_types("cpu")
    ct2_types = ["float32", "int8"] + (["bfloat16"] if "bfloat16" in supported else [])
    print(f"CPU: {cpu_description()}")
    print(
        f"torch {torch.__version__} (cpu capability {torch.backends.cpu.get_cpu_capability()}), "
        f"ctranslate2 {ctranslate2.__version__} (cpu compute types: {', '.join(sorted(supported))})"
    )
    if "bfloat16" not in supported:
        print("ct2-bfloat16 left out: CTranslate2 has no bfloat16 computation on this CPU.")
    print(
        f"threads per engine: {args.threads}; rounds: {args.rounds}; load average before: "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )

    with tempfile.TemporaryDirectory(prefix="bench_ct2_") as tmp:
        work = Path(tmp)
        tokenizer_dir = args.tokenizer
        if tokenizer_dir is None:
            from vanilla_transformer.data.tokenizer import train_tokenizer

            tokenizer = train_tokenizer(
                read_gz(args.data / "train.en.gz") + read_gz(args.data / "train.de.gz"), vocab_size=8000
            )
            tokenizer_dir = work / "tokenizer"
            tokenizer.save_pretrained(tokenizer_dir)
        summary = []
        for preset in args.presets:
            count = args.sentences if args.sentences else (64 if preset == "small" else 24)
            sentences_file = work / f"sentences-{preset}.json"
            sentences = read_gz(args.data / "test_2016_flickr.en.gz", count)
            sentences_file.write_text(json.dumps(sentences), encoding="utf-8")
            base = build_preset(preset, tokenizer_dir, work, ct2_types)
            engines = ["generate-float32", "generate-bfloat16"] + [f"ct2-{t}" for t in ct2_types]
            workers = []
            for engine in engines:
                model = base / ("hf" if engine.startswith("generate") else engine)
                workers.append(Worker(engine, model, sentences_file, args.threads, args.new_tokens))
            times = {(w.engine, mode): [] for w in workers for mode in ("beam", "greedy")}
            outputs = {}
            for r in range(args.rounds):
                for mode in ("beam", "greedy"):
                    shift = r % len(workers)
                    for w in workers[shift:] + workers[:shift]:
                        result = w.run(mode)
                        times[w.engine, mode].append((result["wall"], result["cpu"]))
                        outputs[w.engine, mode] = result["outputs"]
            for w in workers:
                w.close()
            print(
                f"\n== {preset}: {len(sentences)} test2016 sentences, "
                f"{'source length + 50' if args.new_tokens is None else args.new_tokens} tokens per translation"
            )
            for mode in ("beam", "greedy"):
                reference = outputs["generate-float32", mode]
                base_cpu = statistics.median(c for _, c in times["generate-float32", mode])
                base_wall = statistics.median(w for w, _ in times["generate-float32", mode])
                print(f"-- {'beam 4' if mode == 'beam' else 'greedy'}")
                print(
                    f"   {'engine':18s} {'wall s':>8s} {'cpu s':>8s} {'speed-up (cpu)':>15s} {'[wall]':>8s} "
                    f"{'same output as generate-float32':>32s}"
                )
                best = None
                for w in workers:
                    wall = statistics.median(x for x, _ in times[w.engine, mode])
                    cpu = statistics.median(c for _, c in times[w.engine, mode])
                    same = sum(a == b for a, b in zip(outputs[w.engine, mode], reference))
                    print(
                        f"   {w.engine:18s} {wall:8.2f} {cpu:8.2f} {base_cpu / cpu:14.2f}x {base_wall / wall:7.2f}x "
                        f"{same:>26d}/{len(reference)}"
                    )
                    if best is None or cpu < best[1]:
                        best = (w.engine, cpu)
                summary.append(
                    f"{preset} {'beam 4' if mode == 'beam' else 'greedy'}: fastest {best[0]} "
                    f"({base_cpu / best[1]:.2f}x generate-float32, cpu time)"
                )
        print("\n" + "\n".join(summary))
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def bleu(args) -> None:
    import sacrebleu

    from vanilla_transformer.translation.ctranslate2 import export_ctranslate2

    sources = read_gz(args.data / "test_2016_flickr.en.gz")
    references = read_gz(args.data / "test_2016_flickr.de.gz")
    with tempfile.TemporaryDirectory(prefix="bleu_ct2_") as tmp:
        work = Path(tmp)
        sentences_file = work / "sentences.json"
        sentences_file.write_text(json.dumps(sources), encoding="utf-8")
        for dtype in ("float32", "int8"):
            export_ctranslate2(args.bleu, work / f"ct2-{dtype}", quantization=dtype)
        results = {}
        for engine in ("generate-float32", "ct2-float32", "ct2-int8"):
            model = args.bleu if engine.startswith("generate") else work / engine
            w = Worker(engine, model, sentences_file, args.threads, None)
            result = w.run("beam")
            w.close()
            score = sacrebleu.corpus_bleu(result["outputs"], [references], tokenize="13a")
            results[engine] = (score.score, result["outputs"], result["wall"])
        reference = results["generate-float32"][1]
        print(f"test2016 ({len(sources)} sentences), beam 4, {args.bleu}")
        for engine, (score, outputs, wall) in results.items():
            same = sum(a == b for a, b in zip(outputs, reference))
            print(
                f"  {engine:18s} BLEU {score:6.2f} ({score - results['generate-float32'][0]:+.2f})  "
                f"identical to generate: {same}/{len(reference)}  wall {wall:.0f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["small", "base"], choices=["small", "base", "big"])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median over them; default 3)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads per engine (default 1: steadier on a machine shared with other jobs)",
    )
    parser.add_argument(
        "--sentences", type=int, default=None, help="test2016 sentences per run (default 64 for small, 24 for base)"
    )
    parser.add_argument(
        "--new_tokens",
        type=int,
        default=30,
        help="output length (default 30; 0: the model's rule, at most source length + 50)",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="tokenizer directory (default: one trained inline on Multi30k EN+DE, 8000 tokens)",
    )
    parser.add_argument("--data", type=Path, default=DATA, help=f"Multi30k directory (default {DATA})")
    parser.add_argument(
        "--bleu",
        type=Path,
        default=None,
        metavar="CHECKPOINT",
        help="instead of timing: test2016 BLEU of CHECKPOINT by generate and by its exports",
    )
    # Worker mode (internal).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--sentences_file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.new_tokens == 0:
        args.new_tokens = None
    if args.worker:
        worker(args)
        return
    sys.path.insert(0, str(ROOT))
    if args.bleu is not None:
        bleu(args)
    else:
        speed(args)


if __name__ == "__main__":
    main()
