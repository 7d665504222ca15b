"""The input side of the `wmt14_en_de_base` recipe: preprocessing before the first update, and the loader's speed.

1. Generates WMT14-sized line files (`train.en` / `train.de`, `--pairs` pairs, about 24 words a side with a long
   tail, plus a 3000-pair validation split) from Multi30k's real sentences: each pair concatenates 1 + Poisson(1)
   aligned Multi30k pairs, some words are fused with another word of the same language (compounds, so that the
   vocabulary is large enough for a 37k BPE to spend its budget, as on WMT14), 1% of the pairs are misaligned (a
   target from another pair, for the ratio filter) and 0.1% are empty.
2. Runs the preprocessing as `vanilla-transformer train` runs it (training/steps.py: `load_data`,
   `get_tokenizer`, `tokenize`, then the trainer's `TokenBatchSampler`), timing each stage -- reading the line
   files, training the 37k BPE, tokenization, length filtering, composing the token batches -- with the peak
   memory (psutil, the process and its children summed, sampled every 0.2 s; and `ru_maxrss` of the process and of
   its largest child) and the processes each stage uses.
3. Times the loader: ready batches of the recipe's `max_tokens` (the trainer's `TokenBatchSampler` + the command's
   `DataCollatorForSeq2Seq`, through a `torch.utils.data.DataLoader` as `get_train_dataloader` builds it), source +
   target tokens per second, in this process (`--loader_workers 0`: one core) and with DataLoader workers.

Prints the CPU (model, cores, flags) first; writes one JSON object per measurement to `--output`.

    python bench/input_pipeline.py --pairs 500000 --num_proc 2 --output /tmp/input_pipeline.jsonl
    python bench/input_pipeline.py --output input_4.5M.jsonl        # 4.5M pairs, num_proc = the cores
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import json
import os
import platform
import resource
import shutil
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package of this checkout

MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
RECIPE = Path(__file__).resolve().parents[1] / "vanilla_transformer" / "training" / "recipes" / "wmt14_en_de_base.json"


def parse_args() -> argparse.Namespace:
    recipe = json.loads(RECIPE.read_text())
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--pairs", type=int, default=4_500_000, help="training pairs to generate")
    p.add_argument("--valid_pairs", type=int, default=3000)
    p.add_argument("--scratch", default="/tmp/input_pipeline", help="directory for the files and the datasets cache")
    p.add_argument("--keep_files", action="store_true", help="reuse line files already in --scratch (same --pairs)")
    p.add_argument("--multi30k", default=str(MULTI30K), help="directory with train.{en,de}.gz")
    p.add_argument("--vocab_size", type=int, default=recipe["vocab_size"])
    p.add_argument("--max_length", type=int, default=recipe["max_length"])
    p.add_argument("--max_length_ratio", type=float, default=recipe["max_length_ratio"])
    p.add_argument("--max_tokens", type=int, default=recipe["max_tokens"], help="tokens per micro-batch")
    p.add_argument("--pad_to_multiple_of", type=int, default=recipe["pad_to_multiple_of"])
    p.add_argument("--seed", type=int, default=recipe["seed"])
    p.add_argument(
        "--num_proc",
        type=int,
        default=None,
        help="--preprocessing_num_workers: processes for tokenization and filtering (default: the command's, one "
        "per available core for 50k+ pairs)",
    )
    p.add_argument(
        "--stages", default="generate,preprocess,loader", help="comma-separated: generate, preprocess, loader"
    )
    p.add_argument("--loader_workers", default="0,1,2", help="DataLoader num_workers values to time")
    p.add_argument("--loader_seconds", type=float, default=20.0, help="time per loader measurement")
    p.add_argument("--output", default=None, help="JSON lines file to append the results to")
    p.add_argument("--label", default="", help="free text stored with every result (e.g. 'before', 'after')")
    args = p.parse_args()
    if args.pairs < 1000 or args.valid_pairs < 1 or (args.num_proc or 1) < 1 or args.loader_seconds <= 0:
        p.error("--pairs must be >= 1000, --valid_pairs and --num_proc >= 1, --loader_seconds > 0")
    return args


# ---- machine ----


def cpu_info() -> dict:
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "flags": []}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info["cpu"] = value.strip()
        elif key.strip() == "flags":
            flags = value.split()
            wanted = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")
            info["flags"] = [f for f in wanted if f in flags]
            break
    if hasattr(os, "sched_getaffinity"):
        info["affinity"] = len(os.sched_getaffinity(0))
    return info


class PeakMemory:
    """Peak RSS of this process and its children summed, sampled in a thread (forked workers count their shared
    pages again: an upper bound), and the kernel's `ru_maxrss` peaks."""

    def __init__(self, interval: float = 0.2):
        import psutil

        self.psutil = psutil
        self.process, self.interval, self.peak = psutil.Process(), interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        for p in [self.process, *self.process.children(recursive=True)]:
            with contextlib.suppress(self.psutil.Error):  # a worker that just exited
                total += p.memory_info().rss
        return total

    def _run(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._sample())

    def __enter__(self):
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def max_rss_mb() -> dict:
    # ru_maxrss is in KiB on Linux; RUSAGE_CHILDREN is the largest waited-for child.
    return {
        "self_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "children_maxrss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
    }


# ---- 1. the line files ----


def generate(args, data_dir: Path) -> dict:
    import numpy as np

    stamp = data_dir / "pairs.json"
    if args.keep_files and stamp.is_file() and json.loads(stamp.read_text()) == [args.pairs, args.valid_pairs]:
        return {"reused": True}
    data_dir.mkdir(parents=True, exist_ok=True)
    src_dir = Path(args.multi30k)
    with gzip.open(src_dir / "train.en.gz", "rt", encoding="utf-8") as f:
        en = [line.strip() for line in f]
    with gzip.open(src_dir / "train.de.gz", "rt", encoding="utf-8") as f:
        de = [line.strip() for line in f]
    rng = np.random.default_rng(args.seed)

    def pool(sentences: list[str], copies: int) -> list[str]:
        # Each Multi30k sentence `copies` times, some words fused with a random word of the language (a compound):
        # Multi30k alone has ~28k word types, WMT14 millions; a 37k BPE needs the long tail to spend its budget.
        words = sorted({w for s in sentences for w in s.split() if w.isalpha() and len(w) > 3})
        out = []
        for copy in range(copies):
            draws = iter(rng.random(sum(len(s.split()) for s in sentences)).tolist())
            picks = iter(rng.integers(0, len(words), 10 * len(sentences)).tolist())
            for s in sentences:
                out.append(
                    " ".join(
                        w + words[next(picks)].lower() if copy and next(draws) < 0.15 and w.isalpha() else w
                        for w in s.split()
                    )
                )
        return out

    copies = 8
    en_pool, de_pool = pool(en, copies), pool(de, copies)
    n_pool = len(en_pool)  # en_pool[i] translates de_pool[i] up to the fused words

    def write(split: str, n: int) -> None:
        with (
            open(data_dir / f"{split}.en", "w", encoding="utf-8") as fe,
            open(data_dir / f"{split}.de", "w", encoding="utf-8") as fd,
        ):
            for start in range(0, n, 100_000):
                m = min(100_000, n - start)
                parts = 1 + rng.poisson(1.0, m)
                first = rng.integers(0, n_pool, parts.sum()).tolist()
                other = rng.integers(0, n_pool, m).tolist()
                kind = rng.random(m).tolist()
                en_lines, de_lines, at = [], [], 0
                for i, k in enumerate(parts.tolist()):
                    idx = first[at : at + k]
                    at += k
                    e = " ".join(en_pool[j] for j in idx)
                    d = " ".join(de_pool[j] for j in idx)
                    if kind[i] < 0.001:
                        e = ""
                    elif kind[i] < 0.011:
                        d = de_pool[other[i]]
                    en_lines.append(e)
                    de_lines.append(d)
                fe.write("\n".join(en_lines) + "\n")
                fd.write("\n".join(de_lines) + "\n")

    write("train", args.pairs)
    write("valid", args.valid_pairs)
    stamp.write_text(json.dumps([args.pairs, args.valid_pairs]))
    with open(data_dir / "train.en", encoding="utf-8") as f:
        words = [len(line.split()) for line in itertools.islice(f, 100_000)]
    return {
        "reused": False,
        "mean_words_en": round(float(np.mean(words)), 1),
        "p99_words_en": int(np.percentile(words, 99)),
        "bytes": sum((data_dir / f"train.{lang}").stat().st_size for lang in ("en", "de")),
    }


# ---- 2. preprocessing as the train command runs it ----


class MapTimer:
    """Wall time of the outermost `Dataset.map` / `Dataset.filter` calls, by their `desc` (filter runs map inside)."""

    def __init__(self):
        import datasets

        self.times: dict[str, float] = {}
        self.depth = 0
        for name in ("map", "filter"):
            original = getattr(datasets.Dataset, name)
            setattr(datasets.Dataset, name, self._wrap(original))

    def _wrap(self, original):
        timer = self

        def timed(ds, *a, **kw):
            timer.depth += 1
            start = time.perf_counter()
            try:
                return original(ds, *a, **kw)
            finally:
                timer.depth -= 1
                if timer.depth == 0:
                    key = (kw.get("desc") or original.__name__).split()[0]
                    timer.times[key] = timer.times.get(key, 0.0) + time.perf_counter() - start

        return timed


def preprocess(args, data_dir: Path, emit) -> tuple:
    import datasets
    from transformers import set_seed

    from vanilla_transformer.data.batching import TokenBatchSampler
    from vanilla_transformer.training import steps
    from vanilla_transformer.training.options import DataArguments, TokenizerArguments
    from vanilla_transformer.training.steps import get_tokenizer, load_data, tokenize

    datasets.disable_progress_bars()
    set_seed(args.seed)
    timer = MapTimer()
    data_args = DataArguments(
        dataset=str(data_dir),
        src_lang="en",
        tgt_lang="de",
        validation_split="valid",
        test_split=None,
        max_length=args.max_length,
        max_length_ratio=args.max_length_ratio,
        preprocessing_num_workers=args.num_proc,
        max_eval_samples=1000,
    )
    tok_args = TokenizerArguments(vocab_size=args.vocab_size)

    class Args:  # the two members of TrainingArguments that load_data / get_tokenizer / tokenize use
        output_dir = str(Path(args.scratch) / "run")
        process_index = 0

        @staticmethod
        def main_process_first(desc=""):
            import contextlib

            return contextlib.nullcontext()

    shutil.rmtree(Args.output_dir, ignore_errors=True)
    cores = os.cpu_count()

    def stage(name, processes, fn):
        with PeakMemory() as mem:
            start = time.perf_counter()
            cpu0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            result = fn()
            seconds = time.perf_counter() - start
            cpu1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(cpu0, cpu1))
        record = {
            "stage": name,
            "seconds": round(seconds, 2),
            "cpu_seconds": round(cpu, 2),
            "processes": processes,
            "peak_rss_mb": round(mem.peak / 2**20),
            **max_rss_mb(),
        }
        emit(record)
        return result

    raw = stage("read", 1, lambda: load_data(data_args))
    # When the BPE trainer has consumed the last sentence: before, it reads and counts words (in parallel);
    # after, it computes the merges.
    from vanilla_transformer.data import corpus

    fed = {}
    iter_texts = getattr(corpus, "iter_texts", None)

    def timed_texts(*a, **kw):
        start = time.perf_counter()
        yield from iter_texts(*a, **kw)
        fed["seconds"] = time.perf_counter() - start

    if iter_texts is not None:
        corpus.iter_texts = timed_texts
    start = time.perf_counter()
    tokenizer = stage("bpe", f"1 ({cores} Rust threads)", lambda: get_tokenizer(tok_args, data_args, raw, Args))
    if iter_texts is not None:
        corpus.iter_texts = iter_texts
    if "seconds" in fed:
        total = time.perf_counter() - start
        emit(
            {
                "stage": "bpe split",
                "reading_and_counting_seconds": round(fed["seconds"], 2),
                "merges_seconds": round(total - fed["seconds"], 2),
                "vocab_size": len(tokenizer),
            }
        )
    timer.times.clear()
    processes = steps.tokenization_processes(args.num_proc, len(raw["train"]))
    tokenized = stage("tokenize+filter", processes, lambda: tokenize(raw, tokenizer, data_args, Args))
    emit(
        {
            "stage": "tokenize+filter split",
            **{k: round(v, 2) for k, v in timer.times.items()},
            "train_pairs_kept": len(tokenized["train"]),
        }
    )
    sampler = stage(
        "token batches",
        1,
        lambda: TokenBatchSampler.from_dataset(
            tokenized["train"],
            args.max_tokens,
            shuffle=True,
            seed=args.seed,
            pad_to_multiple_of=args.pad_to_multiple_of,
        ),
    )
    return tokenizer, tokenized["train"], sampler


# ---- 3. the loader ----


def time_loader(args, tokenizer, train, sampler, workers: int) -> dict:
    import torch
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForSeq2Seq

    from vanilla_transformer.data.corpus import MODEL_INPUT_COLUMNS

    # As trainer.py's build_trainer (its collator) and get_train_dataloader build them (CPU: no pinned memory).
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100, pad_to_multiple_of=args.pad_to_multiple_of)
    dataset = train.select_columns([c for c in train.column_names if c in MODEL_INPUT_COLUMNS])
    loader = DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=collator,
        num_workers=workers,
        prefetch_factor=None if workers == 0 else 2,
        persistent_workers=False,
    )
    torch.set_num_threads(1)
    batches = src = tgt = padded = 0
    sampler.set_epoch(0)
    it = iter(loader)
    next(it)  # the workers' start-up is not the steady state
    workers_cpu0 = _workers_cpu()
    cpu0 = time.process_time()
    start = time.perf_counter()
    epoch = 0
    while time.perf_counter() - start < args.loader_seconds:
        try:
            batch = next(it)
        except StopIteration:  # a small corpus: the next epoch, as the Trainer does (set_epoch, a new iterator)
            epoch += 1
            sampler.set_epoch(epoch)
            it = iter(loader)
            continue
        batches += 1
        src += int(batch["attention_mask"].sum())
        tgt += int((batch["labels"] != -100).sum())
        padded += batch["input_ids"].numel() + batch["labels"].numel()
    seconds = time.perf_counter() - start
    main_cpu = time.process_time() - cpu0
    workers_cpu = _workers_cpu() - workers_cpu0 if epoch == 0 else None  # a new epoch starts new workers
    del it
    # Per core: the tokens per CPU second of the process(es) that make the batches (this one with 0 workers, the
    # workers otherwise), which a machine shared with other jobs does not change as much as the wall clock.
    making_cpu = main_cpu if workers == 0 else workers_cpu
    return {
        "stage": "loader",
        "workers": workers,
        "batches": batches,
        "seconds": round(seconds, 2),
        "main_process_cpu_seconds": round(main_cpu, 2),
        "batches_per_s": round(batches / seconds, 1),
        "src_tokens_per_s": round(src / seconds),
        "tgt_tokens_per_s": round(tgt / seconds),
        "src_tgt_tokens_per_s": round((src + tgt) / seconds),
        "padded_tokens_per_s": round(padded / seconds),
        "tgt_tokens_per_batch": round(tgt / max(batches, 1)),
        "workers_cpu_seconds": None if workers_cpu is None else round(workers_cpu, 2),
        "main_process_ms_per_batch": round(1000 * main_cpu / max(batches, 1), 3),
        "tgt_tokens_per_core_second": round(tgt / making_cpu) if making_cpu else None,
        "src_tgt_tokens_per_core_second": round((src + tgt) / making_cpu) if making_cpu else None,
    }


def _workers_cpu() -> float:
    """User + system CPU seconds of this process's children so far (the DataLoader's workers)."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            total += times.user + times.system
    return total


def main() -> None:
    args = parse_args()
    stages = set(args.stages.split(","))
    unknown = stages - {"generate", "preprocess", "loader"}
    if unknown:
        sys.exit(f"--stages: unknown {sorted(unknown)}; choose from generate, preprocess, loader")
    scratch = Path(args.scratch)
    data_dir = scratch / "data"
    cache = scratch / "hf_datasets_cache"
    shutil.rmtree(cache, ignore_errors=True)  # every run reads and tokenizes from scratch
    os.environ["HF_DATASETS_CACHE"] = str(cache)

    machine = cpu_info()
    common = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "cpu": machine["cpu"],
        "cores": machine["cores"],
        "pairs": args.pairs,
        "num_proc": args.num_proc,
        "label": args.label,
    }
    print(
        f"CPU: {machine['cpu']}, {machine['cores']} cores ({machine.get('affinity')} usable), flags: "
        f"{' '.join(machine['flags']) or 'none of avx2/avx512/amx'}",
        flush=True,
    )
    out = open(args.output, "a") if args.output else None  # noqa: SIM115 (closed at the end of main)

    def emit(record: dict) -> None:
        record = {**common, **record}
        print(json.dumps(record), flush=True)
        if out:
            out.write(json.dumps(record) + "\n")
            out.flush()

    emit({"stage": "machine", **machine})
    if "generate" in stages or not (data_dir / "pairs.json").is_file():
        start = time.perf_counter()
        info = generate(args, data_dir)
        emit({"stage": "generate", "seconds": round(time.perf_counter() - start, 1), **info})
    if "preprocess" in stages or "loader" in stages:
        tokenizer, train, sampler = preprocess(args, data_dir, emit)
        if "loader" in stages:
            for workers in (int(w) for w in args.loader_workers.split(",")):
                emit(time_loader(args, tokenizer, train, sampler, workers))
    if out:
        out.close()


if __name__ == "__main__":
    main()
