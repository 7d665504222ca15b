"""Parallel corpora through `datasets`, and their tokenization.

The data path of the package, in the order a sentence pair travels:

1. `load_parallel_corpus` reads a parallel corpus -- `{split}.{lang}[.gz]` line files (Multi30k,
   Moses/fairseq layout), TSV or JSON Lines files, a `save_to_disk` directory, or a Hub dataset with
   a `translation` column (the WMT14 layout) -- into a `DatasetDict` with two string columns,
   `"source"` and `"target"`, in the direction the caller asks for.
2. `tokenize_corpus` encodes both sides with the shared subword tokenizer (`Dataset.map`: batched,
   cached on disk, `num_proc` processes) and drops the pairs a model should not be trained on,
   logging how many and why.
3. `batching.TokenBatchSampler` groups pairs of similar length into batches of at most `max_tokens`
   padded tokens, the paper's "batched together by approximate sequence length ... approximately 25000
   source tokens and 25000 target tokens" (section 5.1), instead of a fixed number of sentences.

Padding is not done here: `transformers.DataCollatorForSeq2Seq(tokenizer, model,
label_pad_token_id=-100)` pads `input_ids` (and builds `attention_mask`) and pads `labels` with -100.
"""

from __future__ import annotations

import csv
import gzip
import logging
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.arrow_writer import ArrowWriter
from datasets.fingerprint import Hasher

from ..generation_vanilla_transformer import check_positive_int
from .files import (
    check_line_files,
    check_pair_args,
    check_rows,
    check_table,
    count_lines,
    find_line_file,
    find_table,
    line_file_languages,
    line_lists,
    split_stems,
)


logger = logging.getLogger(__name__)

DEFAULT_SPLITS = ("train", "validation", "test")

# Columns the model consumes. `tokenize_corpus` also keeps "source"/"target" (the raw text: references
# for BLEU, aligned with the tokenized rows even after filtering) and "src_len"/"tgt_len" (for
# `TokenBatchSampler`). The Trainer's default `remove_unused_columns=True` drops all four before
# collation because the model's forward takes none of them; without it, use
# `dataset.select_columns(MODEL_INPUT_COLUMNS)`.
MODEL_INPUT_COLUMNS = ("input_ids", "labels")

_PAIR_FEATURES = datasets.Features({"source": datasets.Value("string"), "target": datasets.Value("string")})
_STRING_DTYPES = ("string", "large_string")
# Bumped when `_write_line_pairs` writes other rows for the same files: part of its cache key.
_LINE_FILES_FORMAT = 1


# ----------------------------------------------------------------------------------------------------
# 1. Loading
# ----------------------------------------------------------------------------------------------------


def load_parallel_corpus(
    source: str | os.PathLike | datasets.DatasetDict | datasets.Dataset,
    src_lang: str,
    tgt_lang: str,
    splits: Sequence[str] = DEFAULT_SPLITS,
    split_names: Mapping[str, str] | None = None,
    *,
    config_name: str | None = None,
    src_column: str | None = None,
    tgt_column: str | None = None,
    column_names: Sequence[str] | None = None,
    cache_dir: str | os.PathLike | None = None,
    flags: Mapping[str, str] | None = None,
) -> datasets.DatasetDict:
    """Load a parallel corpus as a `DatasetDict` of `{"source": str, "target": str}` rows.

    Args:
        source: where the pairs are:
            - a directory of line files `{split}.{lang}` or `{split}.{lang}.gz` (one sentence per line,
              line N of one language translating line N of the other), e.g. Multi30k's `data/task1/raw`;
            - a directory with one table file per split, `{split}.tsv[.gz]` or `{split}.jsonl[.gz]`;
            - a single `.tsv[.gz]`, `.jsonl[.gz]` or `.json` file (one split: pass one name in `splits`);
            - a directory written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`;
            - a `datasets.Dataset` / `DatasetDict` object already in memory;
            - otherwise a Hub dataset id, loaded with `datasets.load_dataset(source, config_name)`.
            Tables and datasets either have a `translation` column of `{lang: text}` dicts (the WMT14
            layout) or one column per side (see `src_column`).
        src_lang, tgt_lang: language codes, e.g. "en" and "de". They pick the files
            (`train.en`), the keys of the `translation` dicts, and by default the table columns;
            swapping them swaps the direction.
        splits: the splits to return, under these names.
        split_names: where a returned split is found in `source` when its name there differs, e.g.
            Multi30k: `{"validation": "val", "test": "test_2016_flickr"}`. Unlisted splits keep their name.
        config_name: the Hub dataset's configuration, e.g. `"de-en"` for `"wmt14"`.
        src_column, tgt_column: table/dataset columns holding each side, when there is no
            `translation` column or you want other columns than those named `src_lang` / `tgt_lang`.
        column_names: names of the columns of a TSV file WITHOUT a header row, in order; by default
            the first row of a TSV file is its header.
        cache_dir: where `datasets` writes its Arrow cache (default `HF_DATASETS_CACHE`).
        flags: for a command line's errors, the flags that set these arguments: by parameter name (`source`,
            `config_name`, ...) and by split (the flag that sets its `split_names` entry), e.g. `{"source": "--dataset",
            "validation": "--validation_split"}`. Errors name the others as the Python arguments, in backticks.

    Raises:
        ValueError: before any training, naming the file or argument and the fix, for a missing or
            empty data file, source and target files with different line counts, a language or column
            that is not in the data (listing those that are), or a split that does not exist.
    """
    splits, split_names = _check_split_args(splits, split_names)
    check_pair_args(src_lang, tgt_lang, src_column, tgt_column)
    cache_dir = None if cache_dir is None else str(cache_dir)
    flags = dict(flags or {})
    pair = dict(src_lang=src_lang, tgt_lang=tgt_lang, src_column=src_column, tgt_column=tgt_column)

    if isinstance(source, (datasets.Dataset, datasets.DatasetDict)):
        raw = _pick_splits(source, splits, split_names, "the in-memory dataset", flags)
        return datasets.DatasetDict({s: _to_pair(ds, origin=f"split {s!r}", **pair) for s, ds in raw.items()})

    path = Path(source).expanduser()
    if path.is_file():
        return _load_file(source, path, splits, column_names, cache_dir, flags, pair)
    if path.is_dir():
        return _load_directory(path, splits, split_names, column_names, cache_dir, flags, pair)
    if _looks_like_local_path(str(source)):
        raise ValueError(
            f"{_named('source', flags)}={str(source)!r} does not exist: pass an existing directory of "
            f"`{{split}}.{{lang}}[.gz]` files, a .tsv/.jsonl file, a `save_to_disk` directory, or a Hub dataset id "
            f"such as 'wmt14'."
        )
    return _load_hub_dataset(str(source), config_name, splits, split_names, cache_dir, flags, **pair)


def _load_file(source, path: Path, splits, column_names, cache_dir, flags, pair) -> datasets.DatasetDict:
    """`load_parallel_corpus` of a single `.tsv[.gz]`/`.jsonl[.gz]`/`.json` file (`source`, found at `path`): one
    split."""
    if len(splits) != 1:
        raise ValueError(
            f"{_named('source', flags)}={str(source)!r} is a single file, which holds one split, but "
            f"`splits`={list(splits)} asks for {len(splits)}: pass e.g. `splits=('train',)`, or a directory with "
            f"one file per split (`train.tsv`, `validation.tsv`, ...)."
        )
    if not path.name.removesuffix(".gz").endswith((".tsv", ".jsonl", ".json")):
        raise ValueError(
            f"{_named('source', flags)}={str(path)!r} is a file of unknown format: use `.tsv[.gz]` (a header row, "
            f"then one tab-separated pair per line), `.jsonl[.gz]`, or a directory of `{{split}}.{{lang}}[.gz]` "
            f"line files."
        )
    ds = _load_table_file(path, splits[0], column_names, cache_dir)
    return datasets.DatasetDict({splits[0]: _to_pair(ds, origin=f"file {str(path)!r}", **pair)})


def _load_directory(path: Path, splits, split_names, column_names, cache_dir, flags, pair) -> datasets.DatasetDict:
    """`load_parallel_corpus` of a directory: one written by `save_to_disk`, else one of files per split."""
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        saved = datasets.load_from_disk(str(path))
        raw = _pick_splits(saved, splits, split_names, f"the saved dataset {str(path)!r}", flags)
        return datasets.DatasetDict(
            {s: _to_pair(ds, origin=f"split {s!r} of {str(path)!r}", **pair) for s, ds in raw.items()}
        )
    return _load_split_files(path, splits, split_names, column_names, cache_dir, flags, **pair)


def _named(argument: str, flags: Mapping[str, str]) -> str:
    """How an error names `argument`: the command line's flag for it, or the Python argument in backticks."""
    return flags.get(argument, f"`{argument}`")


def _missing_split(split: str, name: str, where: str, found: list[str], flags: Mapping[str, str]) -> ValueError:
    """The error for a split `name` (asked for as `split`) that is not in the data, `where` saying where it was looked
    for, `found` the splits there are."""
    flag = flags.get(split)
    if flag:
        asked, fix = flag, f"pass {flag} <one of those>"
    else:
        asked = f"for `splits` entry {split!r}"
        fix = f"pass `split_names={{{split!r}: <one of those>}}` or leave {split!r} out of `splits`"
    return ValueError(f"Split {name!r} ({asked}) does not exist in {where}; it has the splits {found}: {fix}.")


def _check_split_args(splits, split_names) -> tuple[tuple[str, ...], dict[str, str]]:
    if isinstance(splits, str):
        splits = (splits,)  # a lone "train" is unambiguous; iterating it would give "t", "r", ...
    splits = tuple(splits)
    if not splits or not all(isinstance(s, str) and s for s in splits) or len(set(splits)) != len(splits):
        raise ValueError(
            f"`splits` must be distinct non-empty split names, got {list(splits)!r}: e.g. ('train', 'validation')."
        )
    split_names = dict(split_names or {})
    unknown = sorted(set(split_names) - set(splits))
    if unknown:
        raise ValueError(
            f"`split_names` maps {unknown} but `splits`={list(splits)} does not ask for them: its keys are the "
            f"names you want back (e.g. 'validation'), its values the names in the data (e.g. 'val')."
        )
    return splits, split_names


def _looks_like_local_path(source: str) -> bool:
    # A Hub id is `name` or `owner/name`. Something that starts like a path, has more than one "/",
    # or ends like a data file is a local path that does not exist, and gets that error rather than
    # a failed Hub lookup.
    return (
        source.startswith(("/", ".", "~"))
        or source.count("/") > 1
        or (os.sep != "/" and os.sep in source)
        or source.endswith((".gz", ".tsv", ".jsonl", ".json", ".txt"))
    )


def iter_texts(ds: datasets.Dataset, columns: Sequence[str] = ("source", "target")) -> Iterator[str]:
    """The strings of `columns` of `ds`, all of the first column, then all of the next: the text a shared tokenizer
    is trained on (`train_tokenizer(iter_texts(dsd["train"]))`). Read from Arrow in record batches: iterating
    `ds["source"]` formats one row at a time, which made that iteration, not the BPE, the bulk of training a
    tokenizer on a large corpus."""
    for column in columns:
        for batch in ds.select_columns([column]).with_format("arrow").iter(batch_size=_ROWS_PER_BATCH // 10):
            yield from batch.column(0).to_pylist()


def _pick_splits(found, splits, split_names, origin: str, flags) -> dict[str, datasets.Dataset]:
    if isinstance(found, datasets.Dataset):
        if len(splits) != 1:
            raise ValueError(
                f"{origin} is a single `Dataset` (one split) but `splits`={list(splits)} asks for {len(splits)}: "
                f"pass one split name, e.g. `splits=('train',)`, or save a `DatasetDict`."
            )
        return {splits[0]: found}
    picked = {}
    for split in splits:
        name = split_names.get(split, split)
        if name not in found:
            raise _missing_split(split, name, origin, sorted(found), flags)
        picked[split] = found[name]
    return picked


def _to_pair(ds: datasets.Dataset, src_lang, tgt_lang, src_column, tgt_column, origin: str) -> datasets.Dataset:
    """Reduce a table/dataset to the two string columns "source" and "target"."""
    if src_column is None and tgt_column is None and "translation" in ds.column_names:
        feature = ds.features["translation"]
        languages = list(feature.languages) if isinstance(feature, datasets.Translation) else list(feature)
        for arg, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
            if lang not in languages:
                raise ValueError(
                    f"`{arg}`={lang!r} is not a language of the `translation` column of {origin}; it has "
                    f"{sorted(languages)}: pass one of those."
                )
        # Flattening a struct column is an Arrow operation: no copy of the text.
        ds = ds.select_columns(["translation"]).flatten()
        columns = (f"translation.{src_lang}", f"translation.{tgt_lang}")
    else:
        columns = (src_column or src_lang, tgt_column or tgt_lang)
        args = ("src_column" if src_column else "src_lang", "tgt_column" if tgt_column else "tgt_lang")
        for arg, column in zip(args, columns):
            if column not in ds.column_names:
                raise ValueError(
                    f"{origin} has no column {column!r} (from `{arg}`); its columns are {ds.column_names}: pass "
                    f"`src_column`/`tgt_column` naming the source and target columns, or a dataset with a "
                    f"`translation` column."
                )
    for column in columns:
        dtype = getattr(ds.features[column], "dtype", None)
        if dtype not in _STRING_DTYPES:
            raise ValueError(
                f"Column {column!r} of {origin} holds {ds.features[column]}, not text: name a column of strings."
            )
    ds = ds.select_columns(list(columns))
    # Via temporary names, so that a dataset whose columns are already called "source"/"target" can be
    # loaded in the swapped direction.
    ds = ds.rename_columns({columns[0]: "__source__", columns[1]: "__target__"})
    ds = ds.rename_columns({"__source__": "source", "__target__": "target"})
    if len(ds) == 0:
        raise ValueError(f"{origin} has no rows: check the data, or leave that split out of `splits`.")
    return ds


def _load_hub_dataset(dataset_id, config_name, splits, split_names, cache_dir, flags, **pair) -> datasets.DatasetDict:
    try:
        found = datasets.load_dataset(dataset_id, config_name, cache_dir=cache_dir)
    except (ConnectionError, FileNotFoundError) as error:
        source, config = _named("source", flags), _named("config_name", flags)
        raise ValueError(
            f"Could not load the Hub dataset {source}={dataset_id!r} (config {config_name!r}): {error}. Check the id "
            f"and {config} (WMT14 EN-DE: {source}='wmt14', {config}='de-en'), the network or HF_HUB_OFFLINE, or "
            f"pass a local directory."
        ) from error
    raw = _pick_splits(found, splits, split_names, f"the Hub dataset {dataset_id!r}", flags)
    return datasets.DatasetDict(
        {s: _to_pair(ds, origin=f"split {s!r} of {dataset_id!r}", **pair) for s, ds in raw.items()}
    )


def _load_split_files(
    directory: Path, splits, split_names, column_names, cache_dir, flags, src_lang, tgt_lang, **columns
):
    # Every split's files are found before any is loaded: a missing split or language is reported before the
    # (possibly long) loading of the others.
    found = {
        split: _split_files(directory, split, split_names.get(split, split), src_lang, tgt_lang, flags)
        for split in splits
    }
    loaded = {}
    for split, (src_file, tgt_file, table) in found.items():
        if src_file and tgt_file:
            loaded[split] = _load_line_files(src_file, tgt_file, split, cache_dir)
        else:
            ds = _load_table_file(table, split, column_names, cache_dir)
            loaded[split] = _to_pair(ds, src_lang, tgt_lang, origin=f"file {str(table)!r}", **columns)
        logger.info("Loaded %d pairs for split %r from %s.", len(loaded[split]), split, directory)
    return datasets.DatasetDict(loaded)


def _split_files(directory: Path, split: str, stem: str, src_lang, tgt_lang, flags) -> tuple:
    """(source file, target file, table file) of a split, the line files or the table being None where absent; a
    ValueError naming what to pass when the split has neither."""
    src_file, tgt_file = find_line_file(directory, stem, src_lang), find_line_file(directory, stem, tgt_lang)
    table = find_table(directory, stem)
    if (src_file and tgt_file) or table is not None:
        return src_file, tgt_file, table
    languages = line_file_languages(directory, stem)
    if languages:  # the split exists, a language does not
        missing, arg = (src_lang, "src_lang") if src_file is None else (tgt_lang, "tgt_lang")
        raise ValueError(
            f"{_named(arg, flags)}={missing!r}: there is no {stem}.{missing} or {stem}.{missing}.gz in "
            f"{str(directory)!r}; split {stem!r} has the languages {languages}: pass one of those."
        )
    where = f"{str(directory)!r} (no {stem}.{{lang}}[.gz], no {stem}.tsv/.jsonl file)"
    raise _missing_split(split, stem, where, split_stems(directory), flags)


def _open_text(path: Path):
    # newline="\n": a line ends at "\n" only. Python's default (universal newlines, also what the
    # `datasets` "text" builder uses) would also end one at a stray "\r" inside a sentence -- web-crawled
    # corpora have them -- and shift every later line of that file out of alignment with the other.
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="\n")
    return open(path, encoding="utf-8", newline="\n")


def _strip_eol(line: str) -> str:
    line = line[:-1] if line.endswith("\n") else line
    return line[:-1] if line.endswith("\r") else line  # CRLF files


def _file_stamp(path: Path) -> tuple[str, int, int]:
    # Part of the cache key of the Arrow file: an edited file is read again.
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


_ROWS_PER_BATCH = 100_000  # pairs per Arrow record batch written


def _line_batches(path: Path, size: int = _ROWS_PER_BATCH) -> Iterator[list[str]]:
    """The lines of `path` in lists of `size` (the last one shorter): two files with as many lines give aligned
    lists."""
    pending: list[str] = []
    for lines in line_lists(path):
        pending.extend(lines)
        while len(pending) >= size:
            yield pending[:size]
            del pending[:size]
    if pending:
        yield pending


def _write_line_pairs(src_file: Path, tgt_file: Path, path: Path) -> None:
    """The pairs of two line files (with as many lines) into the Arrow file `path`, a record batch at a time."""
    part = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.incomplete")
    try:
        with ArrowWriter(features=_PAIR_FEATURES, path=str(part)) as writer:
            for src, tgt in zip(_line_batches(src_file), _line_batches(tgt_file)):
                writer.write_table(
                    pa.table({"source": pa.array(src, pa.string()), "target": pa.array(tgt, pa.string())})
                )
            writer.finalize()
        os.replace(part, path)  # atomic: a concurrent process reads a whole file or writes its own
    finally:
        part.unlink(missing_ok=True)


def _load_line_files(src_file: Path, tgt_file: Path, split: str, cache_dir) -> datasets.Dataset:
    # Counted before anything is built so that a bad corpus fails at once, with both numbers (`train` checks it
    # before torch loads, with the same rule).
    check_line_files(src_file, tgt_file, split)
    # Written once to an Arrow file in the cache, keyed by both files' path, size and modification time, and
    # memory-mapped from there: the corpus is not held in RAM (WMT14 has 4.5M pairs), and `Dataset.map` on it
    # caches its results beside it. Written a record batch at a time, not row by row through
    # `Dataset.from_generator`, whose per-row encoding made this the slowest step before tokenization (11.4 CPU s
    # per million pairs then, 2.3-2.9 now on CPU-B of docs/performance.md; bench/input_pipeline.py measures it).
    key = Hasher.hash([_file_stamp(src_file), _file_stamp(tgt_file), _LINE_FILES_FORMAT])
    directory = Path(cache_dir or datasets.config.HF_DATASETS_CACHE).expanduser() / "line_files" / key
    path = directory / f"{split}.arrow"
    if not path.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        _write_line_pairs(src_file, tgt_file, path)
    return datasets.Dataset.from_file(str(path), split=datasets.NamedSplit(split))


def _strip_cr_batch(batch: dict[str, list], column: str) -> dict[str, list]:
    return {column: [value[:-1] if value.endswith("\r") else value for value in batch[column]]}


def _load_tsv(path: Path, split: str, column_names, cache_dir) -> datasets.Dataset:
    if column_names and count_lines(path) == 0:
        raise ValueError(f"Data file {str(path)!r} is empty: it must hold one pair per line.")
    if not column_names:
        check_rows(path)
    with _open_text(path) as f:
        header = list(column_names) if column_names else _strip_eol(f.readline()).split("\t")
    if len(set(header)) != len(header) or not all(header):
        raise ValueError(f"The columns of {str(path)!r} are {header}: they must be distinct, non-empty names.")
    # Every row is checked here, not by pandas: it takes a first row with one field too many as an index column,
    # silently fills missing fields with "", and reports a long row after two ERROR log lines of `datasets`.
    check_table(path, header)
    features = datasets.Features({column: datasets.Value("string") for column in header})
    # The "csv" builder (pandas) with its conversions off, each of which silently changes a sentence: no quoting, no
    # "NA"/"null" as missing values, text columns ("1984" stays a string), lines ending at "\n" only (see
    # `_open_text`). The header row is skipped and named here, so that CRLF cannot rename a column.
    ds = datasets.load_dataset(
        "csv",
        data_files={split: str(path)},
        split=split,
        cache_dir=cache_dir,
        sep="\t",
        quoting=csv.QUOTE_NONE,
        keep_default_na=False,
        lineterminator="\n",
        skip_blank_lines=False,
        index_col=False,
        column_names=header,
        skiprows=0 if column_names else 1,
        features=features,
    )
    last = ds.data.column(header[-1])
    if pc.any(pc.ends_with(last, "\r")).as_py():  # CRLF line ends
        ds = ds.map(_strip_cr_batch, batched=True, fn_kwargs={"column": header[-1]}, desc="Removing CR")
    return ds


def _load_table_file(path: Path, split: str, column_names, cache_dir) -> datasets.Dataset:
    """A `.tsv[.gz]` or `.jsonl[.gz]`/`.json` file (its callers checked the suffix) as the split `split`."""
    if path.name.removesuffix(".gz").endswith(".tsv"):
        return _load_tsv(path, split, column_names, cache_dir)
    check_rows(path)
    return datasets.load_dataset("json", data_files={split: str(path)}, cache_dir=cache_dir)[split]


# ----------------------------------------------------------------------------------------------------
# 2. Tokenization and filtering
# ----------------------------------------------------------------------------------------------------

# Why a pair is dropped, in the order the reasons are checked (a pair counts under the first that applies).
KEEP, EMPTY, TOO_LONG, BAD_RATIO = 0, 1, 2, 3
_REASONS = {EMPTY: "empty", TOO_LONG: "too long", BAD_RATIO: "bad length ratio"}


def drop_reasons(
    src_len, tgt_len, max_length: int, max_length_ratio: float | None, check_empty: bool = True
) -> np.ndarray:
    """Per pair: `KEEP`, `EMPTY`, `TOO_LONG` or `BAD_RATIO` (lengths counted with the final `</s>`).

    - EMPTY: a side is only `</s>` (an empty or blank sentence).
    - TOO_LONG: a side has more than `max_length` tokens.
    - BAD_RATIO: the longer side has more than `max_length_ratio` times the tokens of the shorter one,
      counting subword tokens without `</s>` as Moses' clean-corpus-n.perl counts the (BPE) tokens of
      its input (it drops a pair if `len(e)/len(f) > ratio` or `len(f)/len(e) > ratio`).
    """
    src_len, tgt_len = np.asarray(src_len, dtype=np.int64), np.asarray(tgt_len, dtype=np.int64)
    reasons = np.full(src_len.shape, KEEP, dtype=np.int8)
    if max_length_ratio is not None:
        text_src, text_tgt = np.maximum(src_len - 1, 1), np.maximum(tgt_len - 1, 1)
        ratio = np.maximum(text_src, text_tgt) / np.minimum(text_src, text_tgt)
        reasons[ratio > max_length_ratio] = BAD_RATIO
    reasons[(src_len > max_length) | (tgt_len > max_length)] = TOO_LONG
    if check_empty:
        reasons[(src_len <= 1) | (tgt_len <= 1)] = EMPTY
    return reasons


def _tokenize_batch(batch: dict[str, list], tokenizer) -> dict[str, list]:
    # Outer whitespace is not part of a sentence; stripping it also makes a blank line "empty".
    # None (a JSON row without that key) reads as empty and is then counted, not crashed on.
    src = [(s or "").strip() for s in batch["source"]]
    tgt = [(t or "").strip() for t in batch["target"]]
    encoded = tokenizer(src, text_target=tgt, truncation=False, return_attention_mask=False)
    return {
        "input_ids": encoded["input_ids"],
        "labels": encoded["labels"],
        "src_len": [len(ids) for ids in encoded["input_ids"]],
        "tgt_len": [len(ids) for ids in encoded["labels"]],
    }


def _keep_batch(src_len, tgt_len, max_length, max_length_ratio, check_empty) -> list[bool]:
    return (drop_reasons(src_len, tgt_len, max_length, max_length_ratio, check_empty) == KEEP).tolist()


def _check_tokenizer(tokenizer) -> None:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ValueError(
            f"`tokenizer` ({type(tokenizer).__name__}) has no eos_token: use one made by `train_tokenizer`, whose `</s>` ends every sequence."
        )
    probe = tokenizer(["a"], text_target=["a"])
    if "labels" not in probe or probe["input_ids"][0][-1:] != [eos] or probe["labels"][0][-1:] != [eos]:
        raise ValueError(
            f"`tokenizer` ({type(tokenizer).__name__}) does not end encoded sequences with `</s>` (id {eos}): "
            f"got {probe['input_ids'][0]} for 'a'. The model learns to stop from that token; give the tokenizer "
            f"a post-processor that appends it (`TemplateProcessing(single='$A </s>')`, as `train_tokenizer` does)."
        )


def tokenize_corpus(
    dsd: datasets.DatasetDict,
    tokenizer,
    max_length: int = 256,
    max_length_ratio: float | None = 2.5,
    num_proc: int | None = None,
    *,
    train_splits: Sequence[str] = ("train",),
    batch_size: int = 1000,
) -> datasets.DatasetDict:
    """Encode a corpus from `load_parallel_corpus` and drop the pairs unfit for training.

    Each row gains `input_ids` and `labels` (`tokenizer(source, text_target=target)`, both ending in
    `</s>`, no `<s>`: the model prepends the start token itself) and `src_len` / `tgt_len`, their
    lengths; `source` and `target` are kept (references for BLEU that stay aligned after filtering).
    Trainer's `remove_unused_columns=True` (its default) drops all but `MODEL_INPUT_COLUMNS` before
    `DataCollatorForSeq2Seq`; otherwise select them yourself.

    Filtering (counts per split and reason are logged):
    - training splits (`train_splits`): pairs with an empty side, a side longer than `max_length`
      tokens, or a length ratio above `max_length_ratio` are dropped (`drop_reasons`);
    - other splits (validation, test): only pairs longer than `max_length` are dropped, since the model
      cannot take them, and with a WARNING, since the score is then not on the full set: raise
      `max_length` to keep them. Empty and unbalanced pairs are kept: the references are what they are.

    The ratio filter removes misaligned pairs (a sentence against a paragraph, or against a fragment),
    which web-crawled corpora such as WMT's CommonCrawl hold. Moses' clean-corpus-n.perl defaults to a
    ratio of 9; fairseq's WMT14 EN-DE recipe (prepare-wmt14en2de.sh) runs it with `-ratio 1.5` on BPE
    tokens, and with 1 to 250 tokens per side. 1.5 drops many clean but short pairs (3 tokens
    against 5 is a ratio of 1.67); the default 2.5 still removes gross misalignments and drops almost
    nothing of a clean corpus (Multi30k). Pass 1.5 and `max_length=250` to follow fairseq, None to
    disable the ratio filter.

    Args:
        dsd: splits with string columns "source" and "target".
        tokenizer: the shared subword tokenizer; must append `</s>` (checked).
        max_length: longest side kept, in tokens with `</s>`; at most the model's
            `max_position_embeddings`.
        max_length_ratio: longest accepted ratio of the longer to the shorter side (>= 1), or None.
        num_proc: processes for `Dataset.map` (None: this one).
        train_splits: the splits filtered as training data; names not in `dsd` are ignored.
        batch_size: rows per tokenizer call in `Dataset.map`.
    """
    _check_tokenize_args(dsd, max_length, max_length_ratio, num_proc)
    _check_tokenizer(tokenizer)
    return datasets.DatasetDict(
        {
            split: _tokenize_split(
                split, ds, tokenizer, split in train_splits, max_length, max_length_ratio, num_proc, batch_size
            )
            for split, ds in dsd.items()
        }
    )


def _check_tokenize_args(dsd, max_length, max_length_ratio, num_proc) -> None:
    if not isinstance(dsd, datasets.DatasetDict):
        raise ValueError(
            f"`dsd` must be a `datasets.DatasetDict` (from `load_parallel_corpus`), got {type(dsd).__name__}: wrap a single split as `DatasetDict({{'train': ds}})`."
        )
    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(
            f"`max_length` must be an integer >= 2 (a token and `</s>`), got {max_length!r}: use e.g. 256, at most the model's max_position_embeddings."
        )
    if max_length_ratio is not None and (not isinstance(max_length_ratio, (int, float)) or not max_length_ratio >= 1):
        raise ValueError(
            f"`max_length_ratio` must be a number >= 1 or None (no ratio filter), got {max_length_ratio!r}: e.g. 2.5, or 1.5 as fairseq's WMT14 recipe."
        )
    check_positive_int("`num_proc`", num_proc, none="one process")
    for split, ds in dsd.items():
        missing = [c for c in ("source", "target") if c not in ds.column_names]
        if missing:
            raise ValueError(
                f"Split {split!r} of `dsd` lacks the column(s) {missing} (it has {ds.column_names}): load it with `load_parallel_corpus`."
            )


def _tokenize_split(split, ds, tokenizer, is_train, max_length, max_length_ratio, num_proc, batch_size):
    """One split of `tokenize_corpus`: encoded, filtered (training splits by all rules, others by length only), the
    counts logged."""
    tokenized = ds.map(
        _tokenize_batch,
        batched=True,
        batch_size=batch_size,
        fn_kwargs={"tokenizer": tokenizer},
        num_proc=num_proc,
        desc=f"Tokenizing {split}",
    )
    ratio, check_empty = (max_length_ratio, True) if is_train else (None, False)
    reasons = drop_reasons(
        _column(tokenized, "src_len"), _column(tokenized, "tgt_len"), max_length, ratio, check_empty
    )
    counts = {name: int((reasons == code).sum()) for code, name in _REASONS.items()}
    dropped = len(reasons) - int((reasons == KEEP).sum())
    if dropped:
        tokenized = tokenized.filter(
            _keep_batch,
            batched=True,
            batch_size=batch_size,
            input_columns=["src_len", "tgt_len"],
            fn_kwargs={"max_length": max_length, "max_length_ratio": ratio, "check_empty": check_empty},
            num_proc=num_proc,
            desc=f"Filtering {split}",
        )
    detail = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
    if is_train:
        logger.info(
            "Split %r: kept %d of %d pairs; dropped %d (%s) [max_length=%d, max_length_ratio=%s].",
            split,
            len(tokenized),
            len(reasons),
            dropped,
            detail or "none",
            max_length,
            max_length_ratio,
        )
    elif dropped:
        logger.warning(
            "Split %r is not training data, yet %d of its %d pairs are longer than max_length=%d tokens and "
            "were dropped: scores on it are not on the full set. Raise `max_length` to keep them.",
            split,
            dropped,
            len(reasons),
            max_length,
        )
    else:
        logger.info("Split %r: kept all %d pairs.", split, len(reasons))
    return tokenized


def _column(ds: datasets.Dataset, name: str) -> np.ndarray:
    # Through Arrow (honours a filter's index mapping), without building a Python list per row.
    return np.asarray(ds.with_format("arrow")[name].to_numpy())


__all__ = [
    "DEFAULT_SPLITS",
    "MODEL_INPUT_COLUMNS",
    "drop_reasons",
    "iter_texts",
    "load_parallel_corpus",
    "tokenize_corpus",
]
