"""How a corpus directory is laid out: a split is a table (`STEM.tsv`, `.jsonl`, ...) or one line file per language
(`STEM.LANG[.gz]`). Standard library only: `train`'s checks before torch (training/preflight.py) and the corpus
reader (corpus.py) share these rules."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path


TABLE_SUFFIXES = (".tsv", ".tsv.gz", ".jsonl", ".jsonl.gz", ".json")
READ_BYTES = 1 << 20  # bytes read at a time from a corpus file (tables and line files)


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


def count_lines(path: Path) -> int:
    """The lines of `path` (gzipped or not) as the readers split them: at "\\n", a last line without it counted.
    Counted in binary blocks, without decoding."""
    opener = gzip.open if path.name.endswith(".gz") else open
    lines, last = 0, b"\n"
    with opener(path, "rb") as f:
        while block := f.read(READ_BYTES):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def check_rows(path: Path) -> None:
    """ValueError naming `path` unless the table holds a pair: a TSV a header row and a line below it, a JSON Lines
    file a line (`.json`, an array, is the loader's to count)."""
    name = path.name.removesuffix(".gz")
    if name.endswith(".json"):
        return
    lines = count_lines(path)
    if name.endswith(".tsv") and lines == 1:
        raise ValueError(f"Data file {str(path)!r} holds a header row and no pair: add one pair per line below it.")
    if lines == 0:
        what = "a header row and one pair per line" if name.endswith(".tsv") else "one JSON object per line"
        raise ValueError(f"Data file {str(path)!r} is empty: it must hold {what}.")


def check_line_files(src_file: Path, tgt_file: Path, split: str) -> None:
    """ValueError naming the files unless the two line files of split `split` hold as many lines, at least one: line
    N of one translates line N of the other."""
    counts = {f: count_lines(f) for f in (src_file, tgt_file)}
    for f, n in counts.items():
        if n == 0:
            raise ValueError(f"Data file {str(f)!r} is empty: it must hold one sentence per line.")
    if counts[src_file] != counts[tgt_file]:
        raise ValueError(
            f"Source and target files of split {split!r} have different line counts: {str(src_file)!r} has "
            f"{counts[src_file]} lines, {str(tgt_file)!r} has {counts[tgt_file]}. Line N of one must translate "
            f"line N of the other: fix the files (a sentence with an embedded newline, a truncated download)."
        )


def check_table(path: Path, header: list[str] | None = None) -> None:
    """ValueError naming `path` and the line unless every line of the table is UTF-8 and, with `header` (a TSV's
    columns), has as many tab-separated fields: a corpus is checked whole before `datasets` reads it, whose errors
    would name a byte or come after its own ERROR log lines (a last line without "\\n" counts, a CR before "\\n" is
    no field's)."""
    number = 0  # lines before `lines`
    for lines in line_lists(path):
        if header is not None:
            for offset, line in enumerate(lines, start=number + 1):
                if line.count("\t") != len(header) - 1:
                    raise ValueError(
                        f"Line {offset} of {str(path)!r} has {line.count(chr(9)) + 1} tab-separated fields, the "
                        f"header {header} has {len(header)}: fix the line (a tab inside a sentence?)."
                    )
        number += len(lines)


def line_lists(path: Path) -> Iterator[list[str]]:
    """The lines of `path` (gzipped or not), split at "\\n" only, without the line end and a CR before it, in lists;
    else a ValueError naming the file, the line and the conversion. Read in binary blocks: cutting a block after its
    last "\\n" never splits a UTF-8 character, and `str.split` does the per-line work in C."""
    opener = gzip.open if path.name.endswith(".gz") else open
    rest, number = b"", 0  # `rest` starts at line `number + 1` of the (uncompressed) file
    with opener(path, "rb") as f:
        while block := f.read(READ_BYTES):
            end = block.rfind(b"\n")
            if end < 0:
                rest += block
                continue
            data, rest = rest + block[: end + 1], block[end + 1 :]
            text = decode_utf8(data, repr(str(path)), number)
            lines = text.split("\n")[:-1]
            number += len(lines)
            yield _strip_cr(lines, text)
    if rest:  # a last line without "\n"
        text = decode_utf8(rest, repr(str(path)), number)
        yield _strip_cr([text], text)


def _strip_cr(lines: list[str], text: str) -> list[str]:
    if "\r" not in text:
        return lines
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def not_utf8(what: str, line: int, byte: bytes) -> ValueError:
    """The error for a file that is not UTF-8 at `line` (counting from 1): `what` names it (the file, or the flag and
    the file), and the message says how to convert it."""
    return ValueError(
        f"{what} is not UTF-8: line {line} has the byte {byte!r}; convert the file to UTF-8 from its encoding, e.g. "
        f"`iconv -f latin1 -t utf-8 FILE > FILE.utf8` for Latin-1."
    )


def decode_utf8(data: bytes, what: str, lines_before: int) -> str:
    """`data` (whole lines of the file `what` names, the first its line `lines_before + 1`) decoded; else `not_utf8`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = lines_before + data.count(b"\n", 0, error.start) + 1
        raise not_utf8(what, line, data[error.start : error.start + 1]) from None
