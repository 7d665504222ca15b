"""How long the web demo takes to answer one visitor: translate a 20-word sentence at beam 6 and build every view.

    python bench/demo_latency.py [--runs 5] [--beams 6] [--tokens 25] [--threads N]

A `small`-preset model (3 + 3 layers, d_model 256, 4 heads; random weights: no trained one is needed to time it) with
a tokenizer of 8,000 pieces trained on Multi30k; the output is forced to `--tokens` tokens (about 20 German words) with
`min_new_tokens` = `max_new_tokens`, so that an untrained model decodes as long as a trained one would. Timed, per
run: `run_translation` (generate with the step recorder, `attention_weights`' teacher-forced forward, the beam
steps) and the HTML of the five views (cross, encoder, decoder attention, steps, alignment): what the page's handler
does. Prints the median of the runs after one warm-up, and the CPU model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from _data import MULTI30K, read_lines  # noqa: E402


SENTENCE = "A young man in a blue jacket is riding his old bicycle down a busy street while two friends watch from the corner."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--beams", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=25, help="output length in tokens (forced)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()

    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.data.tokenizer import train_tokenizer
    from vanilla_transformer.demo.computation import Decoding, run_translation
    from vanilla_transformer.demo.views import alignment_html, attention_html, steps_html
    from vanilla_transformer.precision import cpu_model_name

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = read_lines(MULTI30K / "train.en.gz", 10000) + read_lines(MULTI30K / "train.de.gz", 10000)
    tokenizer = train_tokenizer(texts, vocab_size=8000)
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig.from_preset("small", vocab_size=len(tokenizer))
    )
    model.set_attn_implementation("eager")  # as build_demo does
    model.eval()
    decoding = Decoding("beam search", num_beams=args.beams, length_penalty=0.6)

    def answer():
        start = time.perf_counter()
        result = run_translation(
            model, tokenizer, SENTENCE, decoding, min_new_tokens=args.tokens, max_new_tokens=args.tokens
        )
        middle = time.perf_counter()
        pages = [attention_html(result.weights, kind) for kind in ("cross", "encoder", "decoder")]
        pages += [steps_html(result), alignment_html(result.weights)]
        end = time.perf_counter()
        return middle - start, end - middle, sum(len(p) for p in pages), result

    answer()  # warm-up
    runs = [answer() for _ in range(args.runs)]
    translate_s = statistics.median(r[0] for r in runs)
    views_s = statistics.median(r[1] for r in runs)
    total_s = statistics.median(r[0] + r[1] for r in runs)
    result = runs[-1][3]
    print(f"CPU: {cpu_model_name()} ({torch.get_num_threads()} torch threads), torch {torch.__version__}")
    print(
        f"small preset, random weights; source {len(result.weights.source_tokens)} tokens "
        f"({len(SENTENCE.split())} words), output {len(result.weights.target_tokens)} tokens, beam {args.beams}"
    )
    print(f"translate + attention + beam steps: {translate_s:.3f} s (median of {args.runs})")
    print(f"HTML of the five views:             {views_s:.3f} s ({runs[-1][2] / 1e6:.2f} MB)")
    print(f"total:                              {total_s:.3f} s")


if __name__ == "__main__":
    main()
