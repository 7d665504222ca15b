"""Rescore every shipped model and compare with what its folder publishes: results.json and the card's model-index.

    python scripts/rescore_shipped.py [NAME ...] [--data_dir DIR] [--tolerance 0.05]

`--data_dir` is Multi30k's `data/task1/raw` directory; by default `multi30k/data/task1/raw` where the README clones
it (from the directory the command runs in), else `../shared/data/multi30k` beside the repository.

Each folder in `vanilla_transformer/pretrained/` is loaded as a user loads it (`from_pretrained`, float32), its
validation and test splits are translated with its own generation config, and the cased and lowercased sacreBLEU are
compared with `results.json` and with the model card's (README.md) model-index. Prints one line per figure; exits 1
when any differs by more than `--tolerance` BLEU (tests/test_shipped_models.py runs it, marked slow).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from huggingface_hub import ModelCard

from vanilla_transformer.evaluation.bleu import compute_bleu_with_lowercase
from vanilla_transformer.precision import cpu_model_name
from vanilla_transformer.translation.loading import load_model
from vanilla_transformer.translation.shipped import PRETRAINED_DIR, shipped_models
from vanilla_transformer.translation.translate import translate


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' Multi30k reader
from _data import MULTI30K, read_lines  # noqa: E402


def card_scores(folder: Path) -> dict[str, float]:
    """split -> BLEU in the card's model-index."""
    card = ModelCard.load(folder / "README.md")
    return {result.dataset_split: result.metric_value for result in card.data.eval_results or []}


def rescore(name: str, data_dir: Path, tolerance: float) -> list[tuple[str, float, float, bool]]:
    """(what, published, now, within tolerance) for each figure of the shipped model `name`."""
    folder = PRETRAINED_DIR / name
    results = json.loads((folder / "results.json").read_text())
    model, tokenizer = load_model(str(folder), device="cpu")
    assert next(model.parameters()).dtype == torch.float32
    card = card_scores(folder)
    rows = []
    for role, published in results["bleu"].items():
        split = published["split"]
        sources = read_lines(data_dir / f"{split}.{results['src_lang']}.gz")
        references = read_lines(data_dir / f"{split}.{results['tgt_lang']}.gz")
        started = time.perf_counter()
        now = compute_bleu_with_lowercase(translate(model, tokenizer, sources, batch_size=64), references)
        print(
            f"{name} {role} ({split}): {len(sources)} sentences in {time.perf_counter() - started:.0f} s", flush=True
        )
        for what, then, score in (
            (f"{role} results.json", published["score"], now["score"]),
            (f"{role} results.json lowercased", published["lowercase"]["score"], now["lowercase"]["score"]),
            (f"{role} model card", card.get(split), now["score"]),
        ):
            rows.append((what, then, score, then is not None and abs(then - score) <= tolerance))
    return rows


# Where the README's `git clone ... multi30k` puts the data, from the directory the command runs in.
README_CLONE = Path("multi30k") / "data" / "task1" / "raw"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"shipped models to rescore (default: all, {shipped_models()})")
    default = README_CLONE if README_CLONE.is_dir() else MULTI30K
    parser.add_argument(
        "--data_dir", type=Path, default=default, help=f"Multi30k's data/task1/raw (default {default})"
    )
    parser.add_argument("--tolerance", type=float, default=0.05, help="largest accepted difference in BLEU")
    args = parser.parse_args(argv)
    names = args.names or shipped_models()
    if not names:
        print("no shipped model to rescore", file=sys.stderr)
        return 1
    print(f"CPU: {cpu_model_name()}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    failed = 0
    for name in names:
        for what, then, now, ok in rescore(name, args.data_dir, args.tolerance):
            shown = "missing" if then is None else f"{then:.2f}"
            print(f"{'ok  ' if ok else 'DIFF'} {name} {what}: published {shown}, rescored {now:.2f}")
            failed += not ok
    print(f"{failed} figure(s) differ by more than {args.tolerance} BLEU" if failed else "every figure holds")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
