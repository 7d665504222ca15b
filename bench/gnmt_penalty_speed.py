"""Decoding speed with the GNMT length penalty (`length_penalty_form="gnmt"`, section 6.1's decoding) against
transformers' own beam search (the default form, |Y| ** alpha), on the same sentences in the same run.

The GNMT form runs the package's search (`gnmt_beam_search`, search_vanilla_transformer.py: transformers' beam
search operation for operation, with the GNMT rules, through `generate`'s `custom_generate` hook), so the target is
"within 5%" of the stock search. A randomly initialised model of
a preset (default `small`) translates the first `--sentences` Multi30k EN validation sentences in batches, beam 4,
alpha 0.6; the two forms are timed batch by batch one after the other, `--reps` times, and the sums over the batches of
each batch's fastest time are compared (robust to other jobs on the machine), in three settings:

- `--new_tokens` steps exactly (`</s>` suppressed until then): both forms do the same model work, so the ratio is
  the cost of the penalty's code alone;
- the model's length rule (source length + 50) with `early_stopping=True`, and with "never" (the WMT14 recipes'
  setting): a random model's sentences end at other steps with either form (with `gnmt` any `</s>` among the
  2 x beam candidates finishes a hypothesis), so the generated-token counts and the time per token are printed too.

    python bench/gnmt_penalty_speed.py [--preset small] [--sentences 32] [--batch_size 8] [--reps 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _data import MULTI30K, read_lines  # noqa: E402
from machine_peak import cpu_flags  # noqa: E402

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.data.tokenizer import train_tokenizer  # noqa: E402


def decode(model, batches, **options) -> tuple[float, int]:
    """Seconds to translate `batches`, and the tokens generated (all returned sequences, padding excluded)."""
    tokens = 0
    start = time.perf_counter()
    with torch.no_grad():
        for batch in batches:
            out = model.generate(**batch, num_beams=4, length_penalty=0.6, **options)
            tokens += int(out[:, 1:].ne(model.config.pad_token_id).sum())
    return time.perf_counter() - start, tokens


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--new_tokens", type=int, default=30, help="steps of the fixed-length setting")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--data_dir", type=Path, default=MULTI30K)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    print("# CPU:", ", ".join(f"{k}: {v}" for k, v in cpu_flags().items()))
    try:
        print(subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.strip())
    except OSError:
        print("(lscpu not available)")
    print(f"# torch {torch.__version__}, {args.threads} threads")

    english = read_lines(args.data_dir / "train.en.gz", 5000)
    german = read_lines(args.data_dir / "train.de.gz", 5000)
    tokenizer = train_tokenizer(english + german, vocab_size=4000)
    sentences = [s.strip() for s in read_lines(args.data_dir / "val.en.gz", args.sentences)]
    torch.manual_seed(args.seed)
    config = VanillaTransformerConfig.from_preset(args.preset, vocab_size=len(tokenizer))
    model = VanillaTransformerForConditionalGeneration(config).eval()
    batches = [
        dict(
            tokenizer.pad(
                {"input_ids": tokenizer(sentences[i : i + args.batch_size])["input_ids"]}, return_tensors="pt"
            )
        )
        for i in range(0, len(sentences), args.batch_size)
    ]
    print(
        f"# preset {args.preset} (random weights), {len(sentences)} Multi30k val sentences, batches of "
        f"{args.batch_size}, beam 4, alpha 0.6"
    )
    fixed = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
    settings = [
        (f"{args.new_tokens} steps, early_stopping=True", dict(early_stopping=True, **fixed)),
        ("model's rule (source + 50), early_stopping=True", dict(early_stopping=True)),
        ('model\'s rule (source + 50), early_stopping="never"', dict(early_stopping="never")),
    ]
    decode(model, batches[:1], **fixed)  # warm-up
    print(
        "| decoding | form | seconds (sum over batches of the fastest of the reps) | tokens | ms / token | "
        "gnmt / length: time, time per token |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, options in settings:
        # Batch by batch, the two forms one after the other (the order swapped each rep), so that what else the
        # machine runs hits both alike; each batch's fastest rep counts (the least disturbed).
        best = {form: [float("inf")] * len(batches) for form in ("length", "gnmt")}
        tokens = {"length": 0, "gnmt": 0}
        for rep in range(args.reps):
            for b, batch in enumerate(batches):
                for form in ("length", "gnmt") if rep % 2 == 0 else ("gnmt", "length"):
                    seconds, count = decode(model, [batch], length_penalty_form=form, **options)
                    best[form][b] = min(best[form][b], seconds)
                    if rep == 0:
                        tokens[form] += count
        stock = sum(best["length"])
        for form in ("length", "gnmt"):
            total = sum(best[form])
            per_token = total / tokens[form]
            ratio = f"{total / stock:.3f}, {per_token / (stock / tokens['length']):.3f}" if form == "gnmt" else ""
            print(f"| {name} | {form} | {total:.2f} | {tokens[form]} | {1000 * per_token:.2f} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
