"""The real data the benchmarks read: Multi30k beside the repository (../shared/data/multi30k, never copied in)."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path


MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def read_lines(path: Path, limit: int | None = None) -> list[str]:
    """The first `limit` lines (all by default) of a gzipped text file, without their line ends."""
    if not path.exists():
        raise ValueError(f"Data file {str(path)!r} not found: pass `--data_dir` pointing at the multi30k directory.")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in itertools.islice(handle, limit)]


def make_batches(tokenizer, source: list[str], target: list[str], batch_size: int, count: int) -> list[dict]:
    """`count` consecutive (unsorted, hence padded) batches of `batch_size` sentence pairs (stripped of outer
    whitespace, as train.py's data pipeline does): `input_ids`, `attention_mask` and `labels` (padding -100), as the
    package's collator produces them."""
    needed = batch_size * count
    if needed > len(source):
        raise ValueError(
            f"{count} batches of {batch_size} sentences need {needed} pairs but the evaluation file has "
            f"{len(source)}: lower `--train_batch` / `--gen_batch` / `--batches`."
        )
    batches = []
    for start in range(0, needed, batch_size):
        # Without outer whitespace, as train.py's data pipeline (data.tokenize_corpus) gives sentences to the model:
        # 10 of the 1,014 French validation references start with a space, which the tokenizer would keep as a lone
        # "▁" token the model never saw (it raised EN->FR validation NLL from 1.369 to 1.380).
        encoded = tokenizer(
            [s.strip() for s in source[start : start + batch_size]],
            text_target=[t.strip() for t in target[start : start + batch_size]],
            padding=True,
            return_tensors="pt",
        )
        labels = encoded["labels"].masked_fill(encoded["labels"] == tokenizer.pad_token_id, -100)
        batches.append(dict(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], labels=labels))
    return batches
