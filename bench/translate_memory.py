"""Peak memory of `vanilla-transformer translate` against the input's size: a tiny model, greedy, N lines.

    python bench/translate_memory.py [--lines 10000 200000] [--repo .] [--data_dir DIR]

A tiny model (1 layer each side, d_model 32, untrained: the figure is about the command, not the model) and its
tokenizer (trained on Multi30k's English and German) are saved to a temporary directory; an input of N lines cycles
through Multi30k's English training sentences. Each size runs the console script in its own process (`python -m
vanilla_transformer_cli translate ... --num_beams 1 --max_new_tokens 4`, from `--repo`: another checkout gives the
figures of its version), and its peak resident memory is the child's own (VmHWM of /proc/self/status, read as it
exits). Prints one line per size: lines, seconds, peak RSS in MB, output lines.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _data import MULTI30K, read_lines


def make_model(directory: Path, data_dir: Path) -> None:
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.data.tokenizer import train_tokenizer

    texts = read_lines(data_dir / "train.en.gz", 5000) + read_lines(data_dir / "train.de.gz", 5000)
    tokenizer = train_tokenizer(texts, vocab_size=1000, model_max_length=128)
    torch.manual_seed(0)
    sizes = dict(encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, **sizes
    )
    VanillaTransformerForConditionalGeneration(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


# The child's own peak: VmHWM of its address space, read as it exits. Not `wait4`'s ru_maxrss: Linux folds the
# address space the child had before `exec` (the forked parent, with torch and the input's text) into that figure.
PEAK = (
    "import atexit, re, runpy, sys; path = sys.argv.pop(1); "
    "atexit.register(lambda: open(path, 'w').write(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])); "
    "sys.argv[0] = 'vanilla-transformer'; runpy.run_module('vanilla_transformer_cli', run_name='__main__')"
)


def run(repo: Path, model: Path, source: Path, target: Path, options: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one `translate` process."""
    peak_file = target.with_name("peak_kb")
    command = [sys.executable, "-c", PEAK, str(peak_file), "translate", "--model", str(model)]
    command += ["--input", str(source), "--output", str(target), "--device", "cpu", *options]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(repo),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    with tempfile.TemporaryFile() as log:  # stderr in a file: a pipe left unread could fill and stall the child
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=log)
        status = process.wait()
        seconds = time.perf_counter() - start
        if status != 0:
            log.seek(0)
            raise SystemExit(f"translate failed ({status}): {log.read().decode()[-2000:]}")
    return seconds, int(peak_file.read_text()) / 1024  # VmHWM: kilobytes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[10_000, 200_000], help="input sizes")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1], help="checkout to run")
    parser.add_argument("--data_dir", type=Path, default=MULTI30K, help=f"Multi30k (default {MULTI30K})")
    parser.add_argument(
        "--options",
        default="--num_beams 1 --max_new_tokens 4 --batch_size 128",
        help="translate's options (default: greedy, 4 tokens, 128 sentences per batch)",
    )
    args = parser.parse_args(argv)
    english = read_lines(args.data_dir / "train.en.gz")
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        make_model(work / "model", args.data_dir)
        print(f"repo {args.repo.resolve()}, translate {args.options}")
        for count in args.lines:
            source = work / f"in.{count}.en"
            source.write_text("".join(line + "\n" for line in itertools.islice(itertools.cycle(english), count)))
            seconds, peak = run(args.repo, work / "model", source, work / "out.de", args.options.split())
            written = (work / "out.de").read_bytes().count(b"\n")
            print(f"{count:>9,} lines  {seconds:7.1f} s  peak RSS {peak:7.1f} MB  {written:,} lines written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
