"""How a corpus directory is laid out: a split is a table (`STEM.tsv`, `.jsonl`, ...) or one line file per language
(`STEM.LANG[.gz]`). Standard library only: `train`'s checks before torch (training/preflight.py) and the corpus
reader (corpus.py) share these rules."""

from __future__ import annotations

import gzip
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


def check_pair_args(src_lang, tgt_lang, src_column=None, tgt_column=None) -> None:
    """ValueError unless the two languages are codes and differ, and the two columns (when named) differ: the corpus
    reader's rule, which `train` also checks before torch (messages name the arguments in backticks, the flags at the
    command line)."""
    for name, value in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"`{name}` must be a language code such as 'en' or 'de', got {value!r}.")
    if src_lang == tgt_lang:
        raise ValueError(
            f"`src_lang` and `tgt_lang` are both {src_lang!r}: pass two different languages, e.g. 'en' and 'de'."
        )
    if src_column is not None and src_column == tgt_column:
        raise ValueError(f"`src_column` and `tgt_column` are both {src_column!r}: name the two columns of the pair.")


def check_table(path: Path, header: list[str] | None = None) -> None:
    """ValueError naming `path` and the line unless every line of the table is UTF-8 and, with `header` (a TSV's
    columns), has as many tab-separated fields: a corpus is checked whole before `datasets` reads it, whose errors
    would name a byte or come after its own ERROR log lines. Read in binary blocks, cut after their last "\\n" so
    that no character is split; a last line without "\\n" counts, a CR before "\\n" is no field's."""
    opener = gzip.open if path.name.endswith(".gz") else open
    number, rest = 0, b""  # lines before `rest`
    with opener(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            data = rest + block
            end = len(data) if not block else data.rfind(b"\n") + 1
            lines = _table_lines(data[:end], path, number)
            if header is not None:
                for offset, line in enumerate(lines, start=number + 1):
                    if line.count("\t") != len(header) - 1:
                        raise ValueError(
                            f"Line {offset} of {str(path)!r} has {line.count(chr(9)) + 1} tab-separated fields, the "
                            f"header {header} has {len(header)}: fix the line (a tab inside a sentence?)."
                        )
            number, rest = number + len(lines), data[end:]
            if not block:
                return


def _table_lines(data: bytes, path: Path, number: int) -> list[str]:
    """The lines of `data` (whole lines; line `number + 1` of `path` first), decoded, without their line ends."""
    text = decode_utf8(data, path, number)
    lines = text.split("\n")
    if lines[-1] == "":  # after the last "\n"
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def decode_utf8(data: bytes, path: Path, lines_before: int) -> str:
    """`data` (whole lines of `path`, the first its line `lines_before + 1`) decoded; else a ValueError naming the
    file, the line and the conversion."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = lines_before + data.count(b"\n", 0, error.start) + 1
        raise ValueError(
            f"{str(path)!r} is not UTF-8: line {line} has the byte {data[error.start : error.start + 1]!r}; convert "
            f"the file to UTF-8 from its encoding, e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8` for Latin-1."
        ) from None
