"""The real data the benchmarks read: Multi30k beside the repository (../shared/data/multi30k, never copied in)."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path


MULTI30K = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def read_lines(path: Path, limit: int | None = None) -> list[str]:
    """The first `limit` lines (all by default) of a gzipped text file, without their line ends."""
    if not path.exists():
        raise ValueError(f"Data file {str(path)!r} not found: pass `--data-dir` pointing at the multi30k directory.")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in itertools.islice(handle, limit)]
