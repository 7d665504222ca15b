"""How a corpus directory is laid out: a split is a table (`STEM.tsv`, `.jsonl`, ...) or one line file per language
(`STEM.LANG[.gz]`). Standard library only: `train`'s checks before torch (training/preflight.py) and the corpus
reader (corpus.py) share these rules."""

from __future__ import annotations

import re
from pathlib import Path


TABLE_SUFFIXES = (".tsv", ".tsv.gz", ".jsonl", ".jsonl.gz", ".json")


def find_table(directory: Path, stem: str) -> Path | None:
    """The table file of split `stem`, or None."""
    return next((directory / f"{stem}{s}" for s in TABLE_SUFFIXES if (directory / f"{stem}{s}").is_file()), None)


def find_line_file(directory: Path, stem: str, lang: str) -> Path | None:
    """`STEM.LANG` or `STEM.LANG.gz`, or None."""
    for name in (f"{stem}.{lang}", f"{stem}.{lang}.gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def line_file_languages(directory: Path, stem: str) -> list[str]:
    """The languages of split `stem`'s line files (`STEM.LANG[.gz]`), sorted."""
    pattern = re.sub(r"([*?[])", r"[\1]", stem) + ".*"  # the stem as glob text, not as a pattern
    names = (p.name.removesuffix(".gz") for p in directory.glob(pattern) if p.is_file())
    return sorted({n[len(stem) + 1 :] for n in names if "." not in n[len(stem) + 1 :]} - {"tsv", "jsonl", "json"})


def split_stems(directory: Path) -> list[str]:
    """Names of the splits present: stems with a table file or with line files in two or more languages (so that
    README.md is not taken for a split)."""
    languages: dict[str, set[str]] = {}
    tables = set()
    for p in directory.iterdir():
        name = p.name.removesuffix(".gz")
        if p.is_file() and "." in name:
            stem, suffix = name.rsplit(".", 1)
            (tables.add(stem) if f".{suffix}" in TABLE_SUFFIXES else languages.setdefault(stem, set()).add(suffix))
    return sorted(tables | {stem for stem, langs in languages.items() if len(langs) >= 2})
