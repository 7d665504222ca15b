"""The race: this package against the toolkits a researcher picks for the paper's model, on the same CPU, data, model
and minutes.

The peers: fairseq (fairseq-fixed 0.12.3.1), OpenNMT-py 3.5.1, JoeyNMT 2.3.0 and Sockeye 3.1.34. Each peer is
installed from the package index into its own virtual environment under `--work` (once; reused by later runs), trains
the `small` model of the Multi30k recipe (post-norm, d_model 256, 3+3 layers, 4 heads, FFN 1024, dropout 0.15, tied
embeddings, label smoothing 0.2, Adam(0.9, 0.98, 1e-9), the paper's warm-up schedule with peak 1.55e-3 after 800
updates, batches of 2,048 tokens: the larger side, padding included) for `--minutes` of wall-clock time from launch,
then translates test2016 with beam 6. Every translation is scored here, by one sacreBLEU call (cased,
13a, as `vanilla-transformer score`). The peers share one sentencepiece unigram vocabulary of 8,000 pieces trained on
the training split; this package uses its own tokenizer, as its users do.

This package runs twice: its `train` command with the direction's recipe and `--max_train_minutes` (what a user gets;
bfloat16 where the CPU has it), and at the peers' settings in float32 (equal work: no subword splitting, no cool-down,
warm-up 800 from the start). Each toolkit's forced differences are written beside its figures.

    python bench/race.py --data ../shared/data/multi30k --minutes 10 --work ../shared/race

writes one JSON line per toolkit to `<work>/race-<src>-<tgt>-<minutes>min.jsonl` and prints the table. `--toolkits`
picks some (`package`, `package_equal`, `fairseq`, `opennmt`, `joeynmt`, `sockeye`); a toolkit whose line is already
in the file is not run again (delete the line to rerun it). Nothing else should run on the machine meanwhile: the race
is wall-clock.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


HERE = Path(__file__).resolve().parent
SEED = 1
# The model and recipe every toolkit trains: the `small` preset and the Multi30k recipe's training values.
D_MODEL, LAYERS, HEADS, FFN, DROPOUT, SMOOTHING = 256, 3, 4, 1024, 0.15, 0.2
WARMUP, LR_FACTOR, MAX_TOKENS, VOCAB, BEAM = 800, 0.7, 2048, 8000, 6
PEAK_LR = LR_FACTOR * (D_MODEL * WARMUP) ** -0.5  # eq. 3 at the end of the warm-up: 1.547e-3
TEST_SPLIT = "test_2016_flickr"


def machine() -> dict:
    """The CPU as the figures depend on it: model name, cores, and the vector flags that decide the kernels."""
    flags, model = set(), platform.processor()
    if Path("/proc/cpuinfo").exists():
        text = Path("/proc/cpuinfo").read_text()
        model = next(
            (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), ""
        )
        line = next((line for line in text.splitlines() if line.startswith("flags")), "")
        flags = {f for f in line.split() if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")}
    return {"cpu": model, "cores": os.cpu_count(), "flags": sorted(flags)}


def read_lines(data: Path, split: str, lang: str) -> list[str]:
    for name in (f"{split}.{lang}.gz", f"{split}.{lang}"):
        if (data / name).exists():
            opener = gzip.open if name.endswith(".gz") else open
            with opener(data / name, "rt", encoding="utf-8") as f:
                return [line.rstrip("\n") for line in f]
    raise SystemExit(f"race.py: error: --data {data} has no {split}.{lang}[.gz]")


def run(argv: list[str], log: Path, env: dict | None = None, timeout: float | None = None) -> float:
    """Run `argv` with its output in `log`; the seconds it took. A failure names the log."""
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, timeout=timeout
        )
    if process.returncode:
        raise SystemExit(f"race.py: {argv[0]} failed (exit {process.returncode}): see {log}")
    return time.perf_counter() - start


def venv(work: Path, name: str, packages: list[str], torch_spec: str) -> Path:
    """`<work>/venv-<name>` with torch (`torch_spec`, installed first, so the toolkit keeps it) and `packages`; built
    once, rebuilt when the pins change. Returns its bin directory."""
    root = work / f"venv-{name}"
    pins = json.dumps([torch_spec, *packages])
    marker = root / "race-pins.json"
    if marker.exists() and marker.read_text() == pins:
        return root / "bin"
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    pip = [str(root / "bin" / "python"), "-m", "pip", "install", "-q"]
    print(f"installing {name}: {torch_spec} {' '.join(packages)}", flush=True)
    subprocess.run([*pip, *torch_spec.split()], check=True)
    subprocess.run([*pip, *packages], check=True)
    marker.write_text(pins)
    return root / "bin"


def shared_vocabulary(work: Path, data: Path, src: str, tgt: str, torch_spec: str) -> Path:
    """The peers' one sentencepiece unigram vocabulary of `VOCAB` pieces, trained on both sides of the training split,
    and every split encoded with it: `<work>/spm-<src>-<tgt>/{split}.{lang}` (pieces separated by spaces)."""
    out = work / f"spm-{src}-{tgt}"
    if (out / "done").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tools = venv(work, "tools", ["sentencepiece==0.2.1"], torch_spec)
    script = f"""
import sentencepiece as spm, gzip, sys
data, out = sys.argv[1], sys.argv[2]
def lines(split, lang):
    import os
    path = f"{{data}}/{{split}}.{{lang}}.gz"
    opener = gzip.open if os.path.exists(path) else open
    with opener(path if os.path.exists(path) else path[:-3], "rt", encoding="utf-8") as f:
        return [l.rstrip("\\n") for l in f]
with open(f"{{out}}/corpus.txt", "w") as f:
    for lang in ("{src}", "{tgt}"):
        f.write("\\n".join(lines("train", lang)) + "\\n")
spm.SentencePieceTrainer.train(input=f"{{out}}/corpus.txt", model_prefix=f"{{out}}/spm", vocab_size={VOCAB},
    model_type="unigram", character_coverage=1.0, seed_sentencepiece_size=1000000, num_threads=2)
sp = spm.SentencePieceProcessor(model_file=f"{{out}}/spm.model")
for split in ("train", "val", "{TEST_SPLIT}"):
    for lang in ("{src}", "{tgt}"):
        with open(f"{{out}}/{{split}}.{{lang}}", "w") as f:
            f.write("\\n".join(" ".join(sp.encode(l, out_type=str)) for l in lines(split, lang)) + "\\n")
"""
    run([str(tools / "python"), "-c", script, str(data), str(out)], out / "spm.log")
    (out / "done").write_text("")
    return out


def decode_pieces(work: Path, spm_dir: Path, lines: list[str]) -> list[str]:
    """Sentencepiece pieces back to text, with the shared model."""
    tools = work / "venv-tools" / "bin" / "python"
    script = (
        "import sentencepiece as spm, sys; sp = spm.SentencePieceProcessor(model_file=sys.argv[1]); "
        "print('\\n'.join(sp.decode(l.split()) for l in sys.stdin.read().split('\\n')))"
    )
    out = subprocess.run(
        [str(tools), "-c", script, str(spm_dir / "spm.model")],
        input="\n".join(lines),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split("\n")[: len(lines)]


def bleu(hypotheses: list[str], references: list[str]) -> float:
    import sacrebleu  # the package's own dependency: the one scorer of every toolkit

    if len(hypotheses) != len(references):
        raise SystemExit(f"race.py: {len(hypotheses)} translations for {len(references)} references")
    return round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)


# ---- The toolkits ------------------------------------------------------------------------------------------------


def timings(updates: int, tokens: int, train_seconds: float, seconds: float, decode_seconds: float) -> dict:
    """The figures of a peer's line: its updates, training and whole wall-clock seconds, its real target tokens per
    update and per second of training, and its decoding seconds."""
    return {
        "updates": updates,
        "train_seconds": round(train_seconds, 1),
        "wall_seconds": round(seconds, 1),
        "target_tokens_per_update": round(tokens / max(updates, 1)),
        "target_tokens_per_second": round(tokens / train_seconds) if train_seconds else None,
        "decode_seconds": round(decode_seconds, 1),
    }


def fairseq(ctx) -> dict:
    """fairseq 0.12.3 (the fairseq-fixed release, which installs on Python 3.11): its `transformer` architecture at
    the small sizes, `inverse_sqrt` with warm-up from 0 (eq. 3 with the same peak), `--stop-time-hours`."""
    bin_dir = venv(ctx.work, "fairseq", ["fairseq-fixed==0.12.3.1"], ctx.torch)
    spm_dir, out = ctx.spm, ctx.run_dir("fairseq")
    env = {"OMP_NUM_THREADS": str(ctx.threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    s, t = ctx.src, ctx.tgt
    if not (out / "bin" / f"dict.{s}.txt").exists():
        run(
            [
                str(bin_dir / "fairseq-preprocess"),
                "--source-lang",
                s,
                "--target-lang",
                t,
                "--trainpref",
                f"{spm_dir}/train",
                "--validpref",
                f"{spm_dir}/val",
                "--testpref",
                f"{spm_dir}/{TEST_SPLIT}",
                "--joined-dictionary",
                "--destdir",
                str(out / "bin"),
                "--workers",
                "2",
            ],
            out / "preprocess.log",
            env,
        )
    seconds = run(
        [
            str(bin_dir / "fairseq-train"),
            str(out / "bin"),
            "--arch",
            "transformer",
            "--share-all-embeddings",
            "--encoder-layers",
            str(LAYERS),
            "--decoder-layers",
            str(LAYERS),
            "--encoder-embed-dim",
            str(D_MODEL),
            "--decoder-embed-dim",
            str(D_MODEL),
            "--encoder-ffn-embed-dim",
            str(FFN),
            "--decoder-ffn-embed-dim",
            str(FFN),
            "--encoder-attention-heads",
            str(HEADS),
            "--decoder-attention-heads",
            str(HEADS),
            "--dropout",
            str(DROPOUT),
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            str(SMOOTHING),
            "--optimizer",
            "adam",
            "--adam-betas",
            "(0.9, 0.98)",
            "--adam-eps",
            "1e-9",
            "--lr",
            f"{PEAK_LR:.6g}",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            str(WARMUP),
            "--warmup-init-lr",
            "0",
            "--max-tokens",
            str(MAX_TOKENS),
            "--stop-time-hours",
            f"{ctx.minutes / 60:.6f}",
            "--seed",
            str(SEED),
            "--log-interval",
            "10",
            "--log-format",
            "json",
            "--disable-validation",
            "--save-dir",
            str(out / "checkpoints"),
            "--no-epoch-checkpoints",
            "--cpu",
            "--num-workers",
            "0",
        ],
        out / "train.log",
        env,
    )
    # The epoch summaries ("train" lines) hold each epoch's mean target tokens per update (wpb); together they give
    # every update's real target tokens, the last, stopped epoch included.
    updates, tokens, train_wall = 0, 0.0, 0.0
    for line in (out / "train.log").read_text().splitlines():
        if "| INFO | train |" in line:
            stats = json.loads(line.split("| INFO | train |", 1)[1])
            done = int(stats["train_num_updates"]) - updates
            updates, tokens = updates + done, tokens + done * float(stats["train_wpb"])
            train_wall = float(stats["train_wall"])
    decode_seconds = run(
        [
            str(bin_dir / "fairseq-generate"),
            str(out / "bin"),
            "--path",
            str(out / "checkpoints" / "checkpoint_last.pt"),
            "--gen-subset",
            "test",
            "--beam",
            str(BEAM),
            "--batch-size",
            "100",
            "--remove-bpe",
            "sentencepiece",
            "--cpu",
            "--num-workers",
            "0",
        ],
        out / "generate.log",
        env,
    )
    hypotheses = {}
    for line in (out / "generate.log").read_text().splitlines():
        if line.startswith("D-"):
            head, _score, text = (line.split("\t") + [""])[:3]
            hypotheses[int(head[2:])] = text
    return {
        "version": "fairseq-fixed 0.12.3.1",
        "precision": "float32",
        "forced": "none: every setting as this package's equal-work run (its positions are sin/cos halves, not interleaved)",
        **timings(updates, tokens, train_wall, seconds, decode_seconds),
        "hypotheses": [hypotheses.get(i, "") for i in range(len(ctx.references))],
    }


def run_for(argv: list[str], log: Path, env: dict, seconds: float) -> float:
    """Run `argv` with its output in `log`, for a toolkit without a time limit of its own, and interrupt it (SIGINT, to
    its process group) `seconds` after launch; the seconds it ran. An exit with an error before then fails. SIGINT is
    restored in the child: a shell's background job (`&`) starts with it ignored, and Python's KeyboardInterrupt with
    it."""
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            if process.wait(timeout=seconds):
                raise SystemExit(f"race.py: {argv[0]} failed (exit {process.returncode}): see {log}")
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=600)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        finally:
            if process.poll() is None:  # race.py itself interrupted
                os.killpg(process.pid, signal.SIGKILL)
    return time.perf_counter() - start


def opennmt(ctx) -> dict:
    """OpenNMT-py 3.5.1 (its last release): the `transformer` encoder and decoder at the small sizes, `noam` decay
    (0.7 * 256^-0.5 * min(step^-0.5, step * 800^-1.5): 1.547e-3 at update 800), batches of 2,048 tokens (the
    larger side, padding included), no gradient clipping, no attention dropout, beam 6 with its `avg` length penalty.
    Forced: pre-norm (its only layer order), Adam's epsilon 1e-8 (fixed in its code), the feed-forward's inner dropout
    equal to `dropout`. It has no time limit: it saves a checkpoint every few updates and is interrupted `minutes`
    after launch; the newest whole checkpoint is translated.

    Its wheel requires torch >= 2.1, < 2.3 (pip would replace this race's torch with 2.2.2), and no release lifts that
    pin, so it is installed with `--no-deps` over the peers' one torch (`--torch`), its declared dependencies beside
    it; numpy < 2, as the issue found it needs."""
    bin_dir = venv(
        ctx.work,
        "opennmt",
        [
            "numpy<2",
            "configargparse",
            "ctranslate2>=4,<5",
            "tensorboard>=2.3",
            "flask",
            "waitress",
            "pyonmttok>=1.37,<2",
            "pyyaml",
            "sacrebleu",
            "rapidfuzz",
            "pyahocorasick",
            "fasttext-wheel",
            "spacy",
            "six",
        ],
        ctx.torch,
    )
    if not (bin_dir / "onmt_train").exists():
        subprocess.run(
            [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", "OpenNMT-py==3.5.1"], check=True
        )
    spm_dir, out, s, t = ctx.spm, ctx.run_dir("opennmt"), ctx.src, ctx.tgt
    env = {"OMP_NUM_THREADS": str(ctx.threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    every = max(5, round(ctx.minutes * 2))  # updates between checkpoints: about 30 a run, each ~90 MB, 3 kept
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    # One length-sorted bucket per epoch, as fairseq batches an epoch: its default bucket (262,144 pairs) would cycle
    # a small corpus into it several times over, with copies of a sentence side by side in a batch.
    bucket = len((spm_dir / f"train.{t}").read_text().splitlines())
    config = {  # JSON is YAML
        "save_data": str(out / "data"),
        "src_vocab": str(out / "vocab.shared"),
        "share_vocab": True,
        "overwrite": True,
        "data": {"corpus_1": {"path_src": f"{spm_dir}/train.{s}", "path_tgt": f"{spm_dir}/train.{t}"}},
        "save_model": str(out / "checkpoints" / "model"),
        "save_checkpoint_steps": every,
        "keep_checkpoint": 3,
        "train_steps": 10**7,
        "seed": SEED,
        "report_every": 5,
        "num_workers": 0,
        "bucket_size": bucket,
        "model_dtype": "fp32",
        "model_task": "seq2seq",
        "encoder_type": "transformer",
        "decoder_type": "transformer",
        "enc_layers": LAYERS,
        "dec_layers": LAYERS,
        "hidden_size": D_MODEL,
        "word_vec_size": D_MODEL,
        "heads": HEADS,
        "transformer_ff": FFN,
        "dropout": [DROPOUT],
        "attention_dropout": [0.0],
        "position_encoding": True,
        "share_embeddings": True,
        "share_decoder_embeddings": True,
        "param_init": 0.0,
        "param_init_glorot": True,
        "optim": "adam",
        "adam_beta1": 0.9,
        "adam_beta2": 0.98,
        "learning_rate": LR_FACTOR,
        "decay_method": "noam",
        "warmup_steps": WARMUP,
        "max_grad_norm": 0.0,
        "label_smoothing": SMOOTHING,
        "batch_type": "tokens",
        "batch_size": MAX_TOKENS,
        "normalization": "tokens",
        "accum_count": [1],
    }
    (out / "config.yaml").write_text(json.dumps(config, indent=1))
    if not (out / "vocab.shared").exists():
        run(
            [str(bin_dir / "onmt_build_vocab"), "-config", str(out / "config.yaml"), "-n_sample", "-1"],
            out / "vocab.log",
            env,
        )
    seconds = run_for(
        [str(bin_dir / "onmt_train"), "-config", str(out / "config.yaml")], out / "train.log", env, ctx.minutes * 60
    )
    # "Step 25/10000000; acc: ...; bsz: <source>/<target>/<sentences>; ...; <seconds since the start> sec;": the mean
    # real target tokens per update of the last `report_every` updates.
    log = (out / "train.log").read_text().splitlines()
    updates, tokens, train_seconds = 0, 0.0, 0.0
    for line in log:
        if match := re.search(r"Step (\d+)/ *\d+;.* bsz: *\d+/ *(\d+)/ *\d+;.*; +(\d+) sec;", line):
            step = int(match[1])
            updates, tokens, train_seconds = step, tokens + (step - updates) * int(match[2]), float(match[3])
    # The newest checkpoint that was written whole: one being written when the run was stopped is skipped.
    saved = [int(m[1]) for line in log if (m := re.search(r"Saving checkpoint .*_step_(\d+)\.pt", line))]
    if saved and "Saving checkpoint" in next((line for line in reversed(log) if line.strip()), ""):
        saved.pop()
    steps = [n for n in saved if (out / "checkpoints" / f"model_step_{n}.pt").exists()]
    if not steps:
        raise SystemExit(
            f"race.py: OpenNMT-py saved no checkpoint in {ctx.minutes:g} minutes: see {out / 'train.log'}"
        )
    decode_seconds = run(
        [
            str(bin_dir / "onmt_translate"),
            "-model",
            str(out / "checkpoints" / f"model_step_{steps[-1]}.pt"),
            "-src",
            f"{spm_dir}/{TEST_SPLIT}.{s}",
            "-output",
            str(out / f"hyp.{t}"),
            "-beam_size",
            str(BEAM),
            "-gpu",
            "-1",
            "-seed",
            str(SEED),
        ],
        out / "translate.log",
        env,
    )
    return {
        "version": "OpenNMT-py 3.5.1",
        "precision": "float32",
        "forced": f"pre-norm (its only order); Adam epsilon 1e-8 (fixed in its code); feed-forward inner dropout "
        f"{DROPOUT} (tied to dropout); no time limit: interrupted {ctx.minutes:g} min after launch, "
        f"checkpoint every {every} updates, update {steps[-1]} translated of {updates} logged; "
        f"installed --no-deps over {ctx.torch} (it pins torch<2.3)",
        **timings(updates, tokens, train_seconds, seconds, decode_seconds),
        "updates": steps[-1],  # the checkpoint translated; tokens per update are over every update logged
        "hypotheses": (out / f"hyp.{t}").read_text().split("\n")[: len(ctx.references)],
    }


def joeynmt(ctx) -> dict:
    """JoeyNMT 2.3.0: its transformer at the small sizes, post-norm, `noam` scheduling (factor 0.7, warm-up 800, model
    size 256: 1.547e-3 at update 800), beam 6 with its length penalty ((5 + n) / 6)^1. Forced: no length bucketing
    (batches of 4,096 tokens counted with padding, to reach about 1,800 real ones), Adam's epsilon 1e-8 (PyTorch's
    default; no option), attention and feed-forward inner dropout equal to `dropout`. It has no time limit: it is
    interrupted `minutes` after launch, and saves its weights on the interrupt. `importlib_metadata`: imported, not
    declared."""
    bin_dir = venv(ctx.work, "joeynmt", ["joeynmt==2.3.0", "importlib_metadata"], ctx.torch)
    spm_dir, out, s, t = ctx.spm, ctx.run_dir("joeynmt"), ctx.src, ctx.tgt
    env = {"OMP_NUM_THREADS": str(ctx.threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    vocab = out / "vocab.txt"  # one joint vocabulary (tied embeddings need it), most frequent first
    if not vocab.exists():
        counts = {}
        for lang in (s, t):
            for line in (spm_dir / f"train.{lang}").read_text().splitlines():
                for piece in line.split():
                    counts[piece] = counts.get(piece, 0) + 1
        vocab.write_text("\n".join(sorted(counts, key=lambda p: (-counts[p], p))) + "\n")
    side = {"level": "word", "voc_file": str(vocab), "lowercase": False, "normalize": False}
    layers = {
        "type": "transformer",
        "num_layers": LAYERS,
        "num_heads": HEADS,
        "hidden_size": D_MODEL,
        "ff_size": FFN,
        "dropout": DROPOUT,
        "layer_norm": "post",
        "embeddings": {"embedding_dim": D_MODEL, "scale": True},
    }
    config = {  # JSON is YAML
        "name": "race",
        "joeynmt_version": "2.3.0",
        "model_dir": str(out / "model"),
        "use_cuda": False,
        "random_seed": SEED,
        "data": {
            "train": f"{spm_dir}/train",
            "dev": f"{spm_dir}/val",
            "test": f"{spm_dir}/{TEST_SPLIT}",
            "dataset_type": "plain",
            "src": {"lang": s, **side},
            "trg": {"lang": t, **side},
        },
        "training": {
            "optimizer": "adam",
            "adam_betas": [0.9, 0.98],
            "scheduling": "noam",
            "learning_rate_factor": LR_FACTOR,
            "learning_rate_warmup": WARMUP,
            "learning_rate_min": 1e-12,
            "loss": "crossentropy",
            "label_smoothing": SMOOTHING,
            "normalization": "tokens",
            "batch_type": "token",
            "batch_size": 2 * MAX_TOKENS,
            "epochs": 100000,
            "validation_freq": 10**9,
            "logging_freq": 10,
            "shuffle": True,
            "overwrite": True,
            "num_workers": 0,
            "use_cuda": False,
        },
        "testing": {"beam_size": BEAM, "beam_alpha": 1.0, "batch_size": 64, "batch_type": "sentence"},
        "model": {
            "initializer": "xavier_uniform",
            "embed_initializer": "xavier_uniform",
            "bias_initializer": "zeros",
            "tied_embeddings": True,
            "tied_softmax": True,
            "encoder": layers,
            "decoder": layers,
        },
    }
    (out / "train.yaml").write_text(json.dumps(config, indent=1))
    checkpoint = out / "model" / "latest.ckpt"  # written on the interrupt
    del config["data"]["dev"]  # the test run translates the test split alone, with that checkpoint
    config["testing"]["load_model"] = str(checkpoint)
    (out / "test.yaml").write_text(json.dumps(config, indent=1))
    python = str(bin_dir / "python")
    seconds = run_for(
        [python, "-m", "joeynmt", "train", str(out / "train.yaml"), "--skip-test"],
        out / "train.log",
        env,
        ctx.minutes * 60,
    )
    if not checkpoint.exists():
        raise SystemExit(f"race.py: JoeyNMT saved no checkpoint in {ctx.minutes:g} minutes: see {out / 'train.log'}")
    stats = json.loads(
        subprocess.run(
            [
                python,
                "-c",
                "import json, sys, torch; "
                "print(json.dumps(torch.load(sys.argv[1], weights_only=False)['stats_state']))",
                str(checkpoint),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
        ).stdout
    )
    # Training seconds: from the first epoch's start to the interrupt, by the log's clock.
    stamps = [
        datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
        for line in (out / "train.log").read_text().splitlines()
        if re.search(r" - INFO - .* - (EPOCH 1$|Interrupt at)", line)
    ]
    train_seconds = (stamps[-1] - stamps[0]).total_seconds() if len(stamps) > 1 else seconds
    decode_seconds = run(
        [python, "-m", "joeynmt", "test", str(out / "test.yaml"), "--output-path", str(out / "hyp")],
        out / "test.log",
        env,
    )
    updates, tokens = int(stats["steps"]), int(stats["total_tokens"])
    return {
        "version": "JoeyNMT 2.3.0",
        "precision": "float32",
        "forced": "no length bucketing: 4,096 tokens a batch counted with padding; Adam epsilon 1e-8 (no option); "
        f"attention and feed-forward inner dropout {DROPOUT} (tied to dropout); length penalty "
        f"((5+n)/6)^1; no time limit: interrupted {ctx.minutes:g} min after launch, its weights saved then",
        **timings(updates, tokens, train_seconds, seconds, decode_seconds),
        "hypotheses": (out / "hyp.test").read_text().split("\n")[: len(ctx.references)],
    }


def sockeye(ctx) -> dict:
    """Sockeye 3.1.34 (its last release): its transformer at the small sizes, post-norm (`--transformer-preprocess ''
    --transformer-postprocess drn`), `inv-sqrt-decay` with warm-up 800 (eq. 3 with the same peak), fairseq's label
    smoothing, batches of `max-word` 2,048 (the larger side, padding included), `--max-seconds` (checked at each
    checkpoint, every few updates, each of which also scores 200 validation sentences), beam 6.

    Its wheel requires torch >= 1.10, < 1.14 (pip would replace this race's torch with 1.13.1), and no release lifts
    that pin, so it is installed with `--no-deps` over the peers' one torch (`--torch`), its declared dependencies
    beside it (numpy < 2 among them)."""
    bin_dir = venv(ctx.work, "sockeye", ["numpy<2", "pyyaml>=5.1", "sacrebleu>=2.3.0"], ctx.torch)
    if not (bin_dir / "sockeye-train").exists():
        subprocess.run(
            [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", "sockeye==3.1.34"], check=True
        )
    spm_dir, out, s, t = ctx.spm, ctx.run_dir("sockeye"), ctx.src, ctx.tgt
    env = {"OMP_NUM_THREADS": str(ctx.threads), "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    every = max(5, round(ctx.minutes * 2.5))  # updates between checkpoints: about 25 a run
    if not (out / "prepared" / "data.version").exists():
        run(
            [
                str(bin_dir / "sockeye-prepare-data"),
                "-s",
                f"{spm_dir}/train.{s}",
                "-t",
                f"{spm_dir}/train.{t}",
                "--shared-vocab",
                "--max-seq-len",
                "256:256",
                "--seed",
                str(SEED),
                "-o",
                str(out / "prepared"),
            ],
            out / "prepare.log",
            env,
        )
        for lang in (s, t):
            lines = (spm_dir / f"val.{lang}").read_text().splitlines()[:200]
            (out / f"valid.{lang}").write_text("\n".join(lines) + "\n")
    shutil.rmtree(out / "model", ignore_errors=True)
    seconds = run(
        [
            str(bin_dir / "sockeye-train"),
            "--prepared-data",
            str(out / "prepared"),
            "--validation-source",
            str(out / f"valid.{s}"),
            "--validation-target",
            str(out / f"valid.{t}"),
            "-o",
            str(out / "model"),
            "--encoder",
            "transformer",
            "--decoder",
            "transformer",
            "--num-layers",
            f"{LAYERS}:{LAYERS}",
            "--transformer-model-size",
            str(D_MODEL),
            "--num-embed",
            f"{D_MODEL}:{D_MODEL}",
            "--transformer-attention-heads",
            str(HEADS),
            "--transformer-feed-forward-num-hidden",
            str(FFN),
            "--transformer-preprocess",
            "",
            "--transformer-postprocess",
            "drn",
            "--weight-tying-type",
            "src_trg_softmax",
            "--embed-dropout",
            str(DROPOUT),
            "--transformer-dropout-prepost",
            str(DROPOUT),
            "--transformer-dropout-attention",
            "0",
            "--transformer-dropout-act",
            "0",
            "--label-smoothing",
            str(SMOOTHING),
            "--label-smoothing-impl",
            "fairseq",
            "--optimizer",
            "adam",
            "--optimizer-betas",
            "0.9:0.98",
            "--optimizer-eps",
            "1e-9",
            "--initial-learning-rate",
            f"{LR_FACTOR * D_MODEL**-0.5:.6g}",
            "--learning-rate-scheduler-type",
            "inv-sqrt-decay",
            "--learning-rate-warmup",
            str(WARMUP),
            "--gradient-clipping-type",
            "none",
            "--batch-type",
            "max-word",
            "--batch-size",
            str(MAX_TOKENS),
            "--batch-sentences-multiple-of",
            "1",
            "--max-seconds",
            str(round(ctx.minutes * 60)),
            "--checkpoint-interval",
            str(every),
            "--keep-last-params",
            "2",
            "--decode-and-evaluate",
            "0",
            "--seed",
            str(SEED),
            "--use-cpu",
        ],
        out / "train.log",
        env,
    )
    log = (out / "train.log").read_text()
    checkpoints = re.findall(r"Checkpoint \[(\d+)\]\tUpdates=(\d+) Epoch=\d+ Samples=(\d+)", log)
    if not checkpoints:
        raise SystemExit(f"race.py: Sockeye made no checkpoint: see {out / 'train.log'}")
    checkpoint, updates, samples = map(int, checkpoints[-1])
    ran = re.search(r"Training ran for (\d+) seconds", log)
    train_seconds = float(ran[1]) if ran else seconds
    # Real target tokens: the sentences trained on times a training sentence's mean pieces with </s>.
    lengths = [len(line.split()) + 1 for line in (spm_dir / f"train.{t}").read_text().splitlines() if line.strip()]
    tokens = samples * sum(lengths) / len(lengths)
    decode_seconds = run(
        [
            str(bin_dir / "sockeye-translate"),
            "-m",
            str(out / "model"),
            "--checkpoints",
            str(checkpoint),
            "-i",
            f"{spm_dir}/{TEST_SPLIT}.{s}",
            "-o",
            str(out / f"hyp.{t}"),
            "--beam-size",
            str(BEAM),
            "--batch-size",
            "64",
            "--use-cpu",
            "--seed",
            str(SEED),
        ],
        out / "translate.log",
        env,
    )
    return {
        "version": "Sockeye 3.1.34",
        "precision": "float32",
        "forced": f"time limit checked at checkpoints (every {every} updates, each scoring 200 validation "
        f"sentences); installed --no-deps over {ctx.torch} (it pins torch<1.14)",
        **timings(updates, tokens, train_seconds, seconds, decode_seconds),
        "hypotheses": (out / f"hyp.{t}").read_text().split("\n")[: len(ctx.references)],
    }


def package(ctx, equal: bool) -> dict:
    """This package's `train` command: with the direction's recipe (what a user gets), or at the peers' settings in
    float32 (`equal`). Its test split is translated by the command itself (the final model, its generation config)."""
    name = "package_equal" if equal else "package"
    out = ctx.run_dir(name)
    recipe = f"multi30k_{ctx.src}_{ctx.tgt}_cpu"
    argv = [
        "vanilla-transformer",
        "train",
        "--recipe",
        recipe,
        "--dataset",
        str(ctx.data),
        "--output_dir",
        str(out),
        "--max_train_minutes",
        str(ctx.minutes),
        "--overwrite_output_dir",
        "true",
        "--disable_tqdm",
        "true",
        "--report_to",
        "none",
    ]
    if equal:
        argv += [
            "--bf16",
            "false",
            "--max_tokens",
            str(MAX_TOKENS),
            "--dropout",
            str(DROPOUT),
            "--warmup_steps",
            str(WARMUP),
            "--lr_factor",
            str(LR_FACTOR),
            "--lr_cooldown",
            "0",
            "--subword_split",
            "0",
            "--label_smoothing_factor",
            str(SMOOTHING),
            "--num_beams",
            str(BEAM),
            "--length_penalty",
            "1.0",
            "--eval_strategy",
            "no",
            "--average_last",
            "0",
        ]
    seconds = run(argv, ctx.work / f"{name}.log", {"OMP_NUM_THREADS": str(ctx.threads), "HF_HUB_OFFLINE": "1"})
    results = json.loads((out / "results.json").read_text())
    training, test = results["training"], results["bleu"]["test"]
    from transformers import AutoTokenizer

    # Real target tokens (with </s>) of the training pairs the run kept, times the epochs it made.
    tokenizer = AutoTokenizer.from_pretrained(out)
    kept = [
        line
        for line, source in zip(read_lines(ctx.data, "train", ctx.tgt), read_lines(ctx.data, "train", ctx.src))
        if line.strip() and source.strip()
    ]
    tokens = sum(len(ids) for ids in tokenizer(kept)["input_ids"]) * training["epochs"]
    hypotheses = (out / f"{TEST_SPLIT}.hyp.{ctx.tgt}").read_text().split("\n")[: len(ctx.references)]
    precision = training["precision"]["mixed_precision"]
    return {
        "version": "this package "
        + subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "precision": "bfloat16" if precision == "bf16" else "float32",
        "forced": "peers' settings, float32" if equal else f"recipe {recipe} (its own tokenizer, warm-up, cool-down)",
        "updates": training["steps"],
        "train_seconds": training["train_runtime_s"],
        "wall_seconds": round(seconds, 1),
        "target_tokens_per_update": round(tokens / max(training["steps"], 1)),
        "target_tokens_per_second": round(tokens / training["train_runtime_s"]),
        "decode_seconds": test["seconds"],
        "hypotheses": hypotheses,
        "reported_bleu": round(test["score"], 2),
    }


TOOLKITS = {
    "package": lambda ctx: package(ctx, equal=False),
    "package_equal": lambda ctx: package(ctx, equal=True),
    "fairseq": fairseq,
    "opennmt": opennmt,
    "joeynmt": joeynmt,
    "sockeye": sockeye,
}
PEERS = {"fairseq", "opennmt", "joeynmt", "sockeye"}  # the toolkits that read the shared sentencepiece vocabulary


class Context:
    def __init__(self, args):
        self.work, self.data, self.src, self.tgt = args.work.resolve(), args.data.resolve(), args.src, args.tgt
        self.minutes, self.threads, self.torch = args.minutes, args.threads, args.torch
        self.references = read_lines(self.data, TEST_SPLIT, self.tgt)
        self.spm = None

    def run_dir(self, name: str) -> Path:
        path = self.work / f"{name}-{self.src}-{self.tgt}-{self.minutes:g}min"
        path.mkdir(parents=True, exist_ok=True)
        return path


def table(lines: list[dict]) -> str:
    rows = [
        "| toolkit | precision | updates | real target tokens per update | target tokens/s | test BLEU (beam 6) "
        "| decode s | forced differences |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in sorted(lines, key=lambda r: -r["bleu"]):
        rows.append(
            f"| {r['toolkit']} ({r['version']}) | {r['precision']} | {r['updates']:,} | "
            f"{r['target_tokens_per_update']:,} | {r['target_tokens_per_second']:,} | **{r['bleu']:.2f}** | "
            f"{r['decode_seconds']} | {r['forced']} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument(
        "--data",
        type=Path,
        default=HERE.parent.parent / "shared" / "data" / "multi30k",
        help="Multi30k's data/task1/raw (train, val, test_2016_flickr as {split}.{lang}.gz)",
    )
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--minutes", type=float, default=10.0, help="training minutes per toolkit, from launch")
    parser.add_argument("--toolkits", default=",".join(TOOLKITS), help=f"comma-separated, of {', '.join(TOOLKITS)}")
    parser.add_argument("--work", type=Path, default=Path("runs/race"), help="venvs, data and runs (reused)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="OMP_NUM_THREADS of every toolkit")
    parser.add_argument("--torch", default="torch==2.13.0", help="the pip requirement of torch in the peers' venvs")
    args = parser.parse_args()
    names = [n for n in args.toolkits.split(",") if n]
    unknown = [n for n in names if n not in TOOLKITS]
    if unknown:
        parser.error(f"--toolkits: unknown {unknown}; choose from {list(TOOLKITS)}")
    ctx = Context(args)
    ctx.work.mkdir(parents=True, exist_ok=True)
    results = ctx.work / f"race-{args.src}-{args.tgt}-{args.minutes:g}min.jsonl"
    done = (
        {json.loads(line)["toolkit"]: json.loads(line) for line in results.read_text().splitlines()}
        if results.exists()
        else {}
    )
    print(f"machine: {machine()}", flush=True)
    for name in names:
        if name in done:
            print(f"{name}: already in {results}", flush=True)
            continue
        if name in PEERS and ctx.spm is None:
            ctx.spm = shared_vocabulary(ctx.work, ctx.data, args.src, args.tgt, args.torch)
        print(f"{name}: training {args.minutes:g} minutes", flush=True)
        line = TOOLKITS[name](ctx)
        hypotheses = line.pop("hypotheses")
        if name in PEERS and any("▁" in h for h in hypotheses):
            hypotheses = decode_pieces(ctx.work, ctx.spm, hypotheses)
        line = {
            "toolkit": name,
            "direction": f"{args.src}-{args.tgt}",
            "minutes": args.minutes,
            "bleu": bleu(hypotheses, ctx.references),
            **line,
            "machine": machine(),
            "threads": args.threads,
        }
        done[name] = line
        with open(results, "a") as f:
            f.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)
    print(f"\n{args.src}->{args.tgt}, {args.minutes:g} minutes of training, {machine()}\n")
    print(table([done[n] for n in names if n in done]))


if __name__ == "__main__":
    main()
