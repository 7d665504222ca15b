"""Beam size and length penalty of a trained model, chosen on the validation split (as the paper chose its beam 4
and alpha 0.6, section 6.1: "chosen after experimentation on the development set").

Translates the whole validation split once per (beam, length penalty) pair with the final model of `RUN_DIR` (or
the average of its last `--average` checkpoints) and prints cased and lowercased sacreBLEU and the mean output
length for each. The test split is refused: it is scored once, with the settings chosen here.

    python bench/decode_sweep.py runs/multi30k_en_de_small --beams 4 6 --length_penalties 0.6 1.0 1.5

`--forms length gnmt` compares the two length penalty forms: transformers' score / length ** alpha (fairseq's
`--lenpen`, the default) and the paper's GNMT score / ((5 + length) / 6) ** alpha (docs/model.md).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import torch
from _data import MULTI30K, load_run_average, read_run_split
from machine_peak import cpu_flags

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.evaluation.bleu import compute_bleu_with_lowercase
from vanilla_transformer.generation_vanilla_transformer import LENGTH_PENALTY_FORMS
from vanilla_transformer.translation.translate import translate


def load(run_dir: Path, average: int, tmp: str):
    if not average:
        return VanillaTransformerForConditionalGeneration.from_pretrained(run_dir), "final model"
    loaded = load_run_average(run_dir, average, tmp)
    if loaded is None:
        raise SystemExit(f"{run_dir} has fewer than 2 complete checkpoints: nothing to average.")
    return loaded[0], f"average of {loaded[1]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--beams", type=int, nargs="+", default=[4])
    parser.add_argument("--length_penalties", type=float, nargs="+", default=[0.6, 1.0])
    parser.add_argument(
        "--forms",
        nargs="+",
        default=["length"],
        choices=tuple(LENGTH_PENALTY_FORMS),
        help="length penalty forms: " + "; ".join(f"{name}: {what}" for name, what in LENGTH_PENALTY_FORMS.items()),
    )
    parser.add_argument("--average", type=int, default=0, help="Average the last K checkpoints (0: the final model).")
    parser.add_argument("--data_dir", type=Path, default=MULTI30K)
    parser.add_argument("--split", default="val", help="Never the test split.")
    args = parser.parse_args(argv)
    if args.split.startswith("test"):
        parser.error("decoding settings are chosen on validation data; the test split is scored once, by train.py.")
    if any(beam < 1 for beam in args.beams):
        parser.error(f"--beams must be >= 1, got {args.beams}.")

    torch.set_num_threads(2)
    results, sources, targets, tokenizer = read_run_split(args.run_dir, args.data_dir, args.split)
    flags = cpu_flags()
    print(f"# {args.run_dir} on {args.split} ({len(sources)} pairs), CPU: {flags['torch capability']}")
    print("| model | beam | length penalty | form | BLEU | lowercased | mean length (words) | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        model, name = load(args.run_dir, args.average, tmp)
        for beam, alpha, form in itertools.product(args.beams, args.length_penalties, args.forms):
            started = time.perf_counter()
            hypotheses = translate(
                model,
                tokenizer,
                sources,
                batch_size=64,
                num_beams=beam,
                length_penalty=alpha,
                length_penalty_form=form,
            )
            bleu = compute_bleu_with_lowercase(hypotheses, targets)
            length = sum(len(h.split()) for h in hypotheses) / len(hypotheses)
            print(
                f"| {name} | {beam} | {alpha:g} | {form} | {bleu['score']:.2f} | {bleu['lowercase']['score']:.2f} | "
                f"{length:.2f} | {time.perf_counter() - started:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
