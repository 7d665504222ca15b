"""Tests of vanilla_transformer.data.corpus: loading parallel corpora, tokenizing/filtering, token batching.

Expected values are computed independently here (reading the gzip files line by line, calling the
tokenizer directly, recomputing batch costs from the lengths), not taken from the code under test.
"""

import gzip
import json
import logging
import math
from collections import Counter

import datasets
import numpy as np
import pytest
import torch
from helpers import MULTI30K, TINY_SIZES, read_multi30k
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

from vanilla_transformer.data.batching import TokenBatchSampler, padding_stats
from vanilla_transformer.data.corpus import MODEL_INPUT_COLUMNS, iter_texts, load_parallel_corpus, tokenize_corpus


M30K_SPLITS = {"validation": "val", "test": "test_2016_flickr"}
EOS = 2


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hf_cache"))


def _make_tokenizer(texts, post_processor=True):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=800, special_tokens=["<pad>", "<s>", "</s>", "<unk>"], show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    if post_processor:
        tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", EOS)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_input_names=["input_ids", "attention_mask"],
    )


@pytest.fixture(scope="module")
def tokenizer():
    # A small shared BPE (the project's tokenizer has its own tests); it appends </s> like the real one.
    texts = read_multi30k("train.en.gz", 1500) + read_multi30k("train.de.gz", 1500)
    return _make_tokenizer(texts)


@pytest.fixture(scope="module")
def multi30k(cache):
    return load_parallel_corpus(MULTI30K, "en", "de", split_names=M30K_SPLITS, cache_dir=cache)


@pytest.fixture(scope="module")
def train_lengths(multi30k, tokenizer):
    """Real Multi30k EN->DE train lengths (the sample's 3,000 pairs), through tokenize_corpus."""
    tokenized = tokenize_corpus(datasets.DatasetDict({"train": multi30k["train"]}), tokenizer)["train"]
    return np.asarray(tokenized["src_len"]), np.asarray(tokenized["tgt_len"])


# ----------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------


def test_multi30k_gz_directory_matches_the_files(multi30k):
    for split, stem in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr")):
        en, de = read_multi30k(f"{stem}.en.gz"), read_multi30k(f"{stem}.de.gz")
        ds = multi30k[split]
        assert ds.column_names == ["source", "target"]
        assert len(ds) == len(en) == len(de)
        for i in (0, len(en) // 2, len(en) - 1):
            assert ds[i] == {"source": en[i], "target": de[i]}
    # The sample's sizes (tests/data/multi30k/README.md): every validation pair, the first train and test pairs.
    assert [len(multi30k[split]) for split in ("train", "validation", "test")] == [3000, 1014, 260]


def test_direction_swap(multi30k, cache):
    de_en = load_parallel_corpus(
        MULTI30K, "de", "en", splits=("validation",), split_names={"validation": "val"}, cache_dir=cache
    )
    assert de_en["validation"]["source"][:] == multi30k["validation"]["target"][:]
    assert de_en["validation"]["target"][:] == multi30k["validation"]["source"][:]
    fr = load_parallel_corpus(
        MULTI30K, "en", "fr", splits=("validation",), split_names={"validation": "val"}, cache_dir=cache
    )
    assert fr["validation"][3]["target"] == read_multi30k("val.fr.gz")[3]


def test_plain_directory_keeps_lines_aligned(tmp_path, cache):
    # CRLF line ends are removed; a lone "\r" inside a sentence does not start a new line.
    (tmp_path / "train.en").write_bytes(b"A dog runs.\r\nTwo\rcats.\r\nEnd\n")
    (tmp_path / "train.de").write_bytes(b"Ein Hund rennt.\nZwei Katzen.\nEnde")  # no final newline
    ds = load_parallel_corpus(tmp_path, "en", "de", splits=("train",), cache_dir=cache)["train"]
    assert ds["source"][:] == ["A dog runs.", "Two\rcats.", "End"]
    assert ds["target"][:] == ["Ein Hund rennt.", "Zwei Katzen.", "Ende"]


def _lines_one_by_one(path):
    """A line file's lines as Python's text reader gives them, one at a time: split at "\\n" only, without the line
    end and a CR before it (what the block reader must reproduce)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        return [line.removesuffix("\n").removesuffix("\r") for line in f]


@pytest.mark.parametrize("gz", [False, True])
def test_line_files_read_in_blocks_equal_line_by_line(tmp_path, monkeypatch, gz):
    # Tiny blocks and record batches: block ends fall inside multi-byte characters, between "\r" and "\n", on
    # "\n"; lines are empty, blank, only "\r", or hold a "\r", a BOM, U+2028; the last has no "\n".
    from vanilla_transformer.data import corpus, files

    monkeypatch.setattr(files, "READ_BYTES", 5)
    monkeypatch.setattr(corpus, "_ROWS_PER_BATCH", 3)
    en = "\ufeffÄpfel für ☃\r\n\n \n\r\nTwo\rcats.\r\n€€€€\nline\u2028sep\n\u00e9\r\nlast\r\n"
    de = "a\nb\nc\nd\ne\nf\ng\nh\ni\n"
    en += "".join(f"x{i} ü\r\n" for i in range(20)) + "z\r"
    de += "".join(f"y{i} ö\n" for i in range(20)) + "end"
    for name, text in (("train.en", en), ("train.de", de)):
        data = text.encode("utf-8")
        if gz:
            with gzip.open(tmp_path / f"{name}.gz", "wb") as f:
                f.write(data)
        else:
            (tmp_path / name).write_bytes(data)
    suffix = ".gz" if gz else ""
    ds = load_parallel_corpus(tmp_path, "en", "de", splits=("train",), cache_dir=tmp_path / "cache")["train"]
    assert ds["source"][:] == _lines_one_by_one(tmp_path / f"train.en{suffix}")
    assert ds["target"][:] == _lines_one_by_one(tmp_path / f"train.de{suffix}")
    assert len(ds) == 30 and ds["source"][3] == "" and ds["source"][8] == "last" and ds["source"][29] == "z"


def test_line_files_cache_follows_the_files(tmp_path):
    (tmp_path / "train.en").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("c\nd\n", encoding="utf-8")

    def load():
        return load_parallel_corpus(tmp_path, "en", "de", splits=("train",), cache_dir=tmp_path / "cache")

    first = load()["train"]
    assert load()["train"]._fingerprint == first._fingerprint  # read once, then memory-mapped from the cache
    (tmp_path / "train.en").write_text("a2\nb\n", encoding="utf-8")
    assert load()["train"]["source"][:] == ["a2", "b"]


def test_error_line_file_not_utf8(tmp_path, cache):
    (tmp_path / "train.en").write_bytes("a\nStra\u00dfe\n".encode("latin-1"))
    (tmp_path / "train.de").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.en' is not UTF-8: line 2 has the byte b'\\xdf'; convert the file"):
        load_parallel_corpus(tmp_path, "en", "de", splits=("train",), cache_dir=cache)


def test_plain_and_gz_give_the_same_rows(tmp_path, cache):
    en, de = read_multi30k("val.en.gz", 50), read_multi30k("val.de.gz", 50)
    (tmp_path / "dev.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "dev.de.gz", "wt", encoding="utf-8") as f:  # mixed plain / gz is fine
        f.write("\n".join(de) + "\n")
    ds = load_parallel_corpus(
        tmp_path, "en", "de", splits=("validation",), split_names={"validation": "dev"}, cache_dir=cache
    )
    assert ds["validation"]["source"][:] == en and ds["validation"]["target"][:] == de


TRICKY = [  # each one is silently changed by pandas' defaults
    ('A "quoted" word.', "Ein „zitiertes“ Wort."),
    ("NA", "null"),
    ("1984", "3.50"),
    ("'single' quotes", "N/A"),
]


def _write_tsv(path, header, rows, gz=False):
    text = "".join("\t".join(r) + "\n" for r in ([header] if header else []) + rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("gz", [False, True])
def test_tsv_file_keeps_text_verbatim(tmp_path, cache, gz):
    path = tmp_path / ("pairs.tsv.gz" if gz else "pairs.tsv")
    _write_tsv(path, ["id", "en", "de"], [(str(i), en, de) for i, (en, de) in enumerate(TRICKY)], gz=gz)
    ds = load_parallel_corpus(path, "en", "de", splits=("train",), cache_dir=cache)["train"]
    assert list(zip(ds["source"], ds["target"])) == TRICKY
    swapped = load_parallel_corpus(path, "de", "en", splits=("train",), cache_dir=cache)["train"]
    assert list(zip(swapped["target"], swapped["source"])) == TRICKY


def test_tsv_directory_named_and_headerless_columns(tmp_path, cache):
    _write_tsv(tmp_path / "train.tsv", ["english", "german"], TRICKY)
    _write_tsv(tmp_path / "validation.tsv", ["english", "german"], TRICKY[:2])
    dsd = load_parallel_corpus(
        tmp_path,
        "en",
        "de",
        splits=("train", "validation"),
        src_column="english",
        tgt_column="german",
        cache_dir=cache,
    )
    assert len(dsd["train"]) == 4 and dsd["validation"][1] == {"source": "NA", "target": "null"}

    headerless = tmp_path / "raw.tsv"
    _write_tsv(headerless, None, TRICKY)
    ds = load_parallel_corpus(headerless, "en", "de", splits=("train",), column_names=["en", "de"], cache_dir=cache)[
        "train"
    ]
    assert list(zip(ds["source"], ds["target"])) == TRICKY


def test_jsonl_columns_and_translation_rows(tmp_path, cache):
    (tmp_path / "train.jsonl").write_text(
        "".join(json.dumps({"en": en, "de": de}) + "\n" for en, de in TRICKY), encoding="utf-8"
    )
    (tmp_path / "test.jsonl").write_text(
        "".join(json.dumps({"translation": {"en": en, "de": de}}) + "\n" for en, de in TRICKY), encoding="utf-8"
    )
    dsd = load_parallel_corpus(tmp_path, "de", "en", splits=("train", "test"), cache_dir=cache)
    for split in ("train", "test"):
        assert list(zip(dsd[split]["target"], dsd[split]["source"])) == TRICKY


def _wmt_like():
    rows = {
        "train": [("A man.", "Ein Mann."), ("Two dogs.", "Zwei Hunde.")],
        "validation": [("A cat.", "Eine Katze.")],
        "test": [("Sun.", "Sonne.")],
    }
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {"translation": [{"en": en, "de": de} for en, de in pairs]}, features=features
            )
            for split, pairs in rows.items()
        }
    ), rows


def test_translation_column_save_to_disk_and_in_memory(tmp_path):
    dsd, rows = _wmt_like()
    dsd.save_to_disk(str(tmp_path / "wmt"))
    for source in (str(tmp_path / "wmt"), dsd):
        loaded = load_parallel_corpus(source, "en", "de")
        assert set(loaded) == {"train", "validation", "test"}
        for split, pairs in rows.items():
            assert list(zip(loaded[split]["source"], loaded[split]["target"])) == pairs
        reverse = load_parallel_corpus(source, "de", "en", splits=("test",))
        assert reverse["test"][0] == {"source": "Sonne.", "target": "Sun."}
    # A saved single Dataset is one split.
    dsd["train"].save_to_disk(str(tmp_path / "one"))
    assert len(load_parallel_corpus(tmp_path / "one", "en", "de", splits=("train",))["train"]) == 2


def test_hub_id_goes_through_load_dataset(monkeypatch):
    dsd, rows = _wmt_like()
    calls = []

    def fake_load_dataset(path, name=None, **kwargs):
        calls.append((path, name))
        return dsd

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    loaded = load_parallel_corpus("wmt14", "en", "de", config_name="de-en", splits=("train", "test"))
    assert calls == [("wmt14", "de-en")]
    assert loaded["train"]["target"][:] == [de for _, de in rows["train"]]
    with pytest.raises(ValueError, match=r"'fr'.*\['de', 'en'\]"):
        load_parallel_corpus("wmt14", "en", "fr", config_name="de-en")


def test_hub_id_unreachable_is_a_value_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="no-such-dataset-xyz"):
        load_parallel_corpus("no-such-dataset-xyz", "en", "de")


# --- errors -------------------------------------------------------------------------------------------


def _pair_dir(tmp_path, en_lines, de_lines, stem="train"):
    (tmp_path / f"{stem}.en").write_text("".join(line + "\n" for line in en_lines), encoding="utf-8")
    (tmp_path / f"{stem}.de").write_text("".join(line + "\n" for line in de_lines), encoding="utf-8")
    return tmp_path


def test_error_different_line_counts_names_both(tmp_path, cache):
    _pair_dir(tmp_path, ["a", "b", "c"], ["x", "y"])
    with pytest.raises(ValueError, match=r"train\.en.*3 lines.*train\.de.* 2"):
        load_parallel_corpus(tmp_path, "en", "de", splits=("train",), cache_dir=cache)


def test_error_empty_file(tmp_path, cache):
    _pair_dir(tmp_path, [], [])
    with pytest.raises(ValueError, match=r"train\.en.*empty"):
        load_parallel_corpus(tmp_path, "en", "de", splits=("train",), cache_dir=cache)
    (tmp_path / "x.tsv").write_text("en\tde\n")
    with pytest.raises(ValueError, match=r"x\.tsv.*header row and no pair"):
        load_parallel_corpus(tmp_path / "x.tsv", "en", "de", splits=("train",), cache_dir=cache)


def test_error_unknown_language_lists_available(cache):
    with pytest.raises(ValueError, match=r"tgt_lang.*'cs'.*\['de', 'en', 'fr'\]"):
        load_parallel_corpus(MULTI30K, "en", "cs", split_names=M30K_SPLITS, cache_dir=cache)
    with pytest.raises(ValueError, match=r"src_lang.*'xx'"):
        load_parallel_corpus(MULTI30K, "xx", "de", split_names=M30K_SPLITS, cache_dir=cache)


def test_error_missing_split_lists_available(cache):
    with pytest.raises(ValueError, match=r"'validation'.*\['test_2016_flickr', 'train', 'val'\]"):
        load_parallel_corpus(MULTI30K, "en", "de", cache_dir=cache)  # no split_names: there is no validation.en
    dsd, _ = _wmt_like()
    with pytest.raises(ValueError, match=r"'dev'.*\['test', 'train', 'validation'\]"):
        load_parallel_corpus(dsd, "en", "de", splits=("dev",))


def test_error_missing_source_and_bad_arguments(tmp_path, cache):
    with pytest.raises(ValueError, match="does not exist"):
        load_parallel_corpus(tmp_path / "nowhere", "en", "de")
    with pytest.raises(ValueError, match="src_lang.*tgt_lang.*'en'"):
        load_parallel_corpus(MULTI30K, "en", "en")
    with pytest.raises(ValueError, match="split_names.*'dev'"):
        load_parallel_corpus(MULTI30K, "en", "de", split_names={"dev": "val"})
    _write_tsv(tmp_path / "p.tsv", ["en", "de"], TRICKY)
    with pytest.raises(ValueError, match="single file.*splits"):
        load_parallel_corpus(tmp_path / "p.tsv", "en", "de", cache_dir=cache)
    with pytest.raises(ValueError, match=r"no column 'fr'.*\['en', 'de'\]"):
        load_parallel_corpus(tmp_path / "p.tsv", "en", "fr", splits=("train",), cache_dir=cache)


def test_error_malformed_tsv_row(tmp_path, cache):
    (tmp_path / "bad.tsv").write_text("en\tde\na\tb\nc\td\te\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"Line 3 .*3 tab-separated fields"):
        load_parallel_corpus(tmp_path / "bad.tsv", "en", "de", splits=("train",), cache_dir=cache)


@pytest.mark.parametrize(
    "bad_line, line, fields",
    [
        ("c", 3, 1),  # a field missing (pandas would fill it with "")
        ("", 3, 1),  # a blank line
        ("c\td\te", 2, 3),  # one too many in the first row (pandas would make the first column an index)
        ("c\td\te", 5000, 3),  # ... and far into the file
    ],
)
def test_error_malformed_tsv_row_wherever_it_is(tmp_path, cache, bad_line, line, fields):
    rows = [f"a{i}\tb{i}" for i in range(6000)]
    rows[line - 2] = bad_line  # rows start at line 2, after the header
    path = tmp_path / "bad.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("en\tde\n" + "\n".join(rows) + "\n")
    message = rf"Line {line} of .*bad\.tsv\.gz' has {fields} tab-separated fields, the header \['en', 'de'\] has 2:"
    with pytest.raises(ValueError, match=message):
        load_parallel_corpus(path, "en", "de", splits=("train",), cache_dir=cache)


def test_tsv_line_ends_and_spaces(tmp_path, cache):
    # CRLF line ends are removed (header included); a lone "\r" inside a sentence and outer spaces are kept.
    (tmp_path / "crlf.tsv").write_bytes(b"en\tde\r\n A dog. \tEin Hund.\r\nTwo\rcats.\tZwei\rKatzen.\r\nx\t\r\n")
    ds = load_parallel_corpus(tmp_path / "crlf.tsv", "en", "de", splits=("train",), cache_dir=cache)["train"]
    assert ds["source"][:] == [" A dog. ", "Two\rcats.", "x"]
    assert ds["target"][:] == ["Ein Hund.", "Zwei\rKatzen.", ""]


# ----------------------------------------------------------------------------------------------------
# Tokenizing and filtering
# ----------------------------------------------------------------------------------------------------


def test_tokenized_columns_match_the_tokenizer(multi30k, tokenizer):
    small = datasets.DatasetDict({"validation": multi30k["validation"].select(range(40))})
    out = tokenize_corpus(small, tokenizer)["validation"]
    assert set(out.column_names) == {"source", "target", "input_ids", "labels", "src_len", "tgt_len"}
    for row in out:
        expected_src = tokenizer(row["source"])["input_ids"]
        expected_tgt = tokenizer(text_target=row["target"])["input_ids"]
        assert row["input_ids"] == expected_src and row["labels"] == expected_tgt
        assert row["input_ids"][-1] == EOS and row["labels"][-1] == EOS and EOS not in row["input_ids"][:-1]
        assert row["src_len"] == len(expected_src) and row["tgt_len"] == len(expected_tgt)


def _expected_reason(src, tgt, tokenizer, max_length, ratio, is_train):
    """Independent statement of the filtering rules."""
    n_src = len(tokenizer.tokenize(src.strip()))
    n_tgt = len(tokenizer.tokenize(tgt.strip()))
    if is_train and (n_src == 0 or n_tgt == 0):
        return "empty"
    if n_src + 1 > max_length or n_tgt + 1 > max_length:
        return "too long"
    if is_train and max(n_src, n_tgt) / max(min(n_src, n_tgt), 1) > ratio:
        return "bad length ratio"
    return None


def test_filtering_counts_per_split(multi30k, tokenizer, caplog):
    base = list(zip(multi30k["train"]["source"][:30], multi30k["train"]["target"][:30]))
    odd = [
        ("", "Ein Hund."),  # empty source
        ("A dog.", "   "),  # blank target
        (" ".join(["dog"] * 80), " ".join(["Hund"] * 80)),  # too long for max_length=60
        ("Dog.", "Ein großer brauner Hund rennt schnell über eine grüne Wiese im Park."),  # bad ratio
        ("  Leading and trailing spaces.  ", "Leerzeichen am Rand."),  # kept: outer spaces are stripped
    ]
    pairs = base[:10] + odd + base[10:]
    corpus = datasets.Dataset.from_dict({"source": [s for s, _ in pairs], "target": [t for _, t in pairs]})
    dsd = datasets.DatasetDict({"train": corpus, "validation": corpus})
    with caplog.at_level(logging.INFO, logger="vanilla_transformer.data.corpus"):
        out = tokenize_corpus(dsd, tokenizer, max_length=60, max_length_ratio=2.5)

    for split in ("train", "validation"):
        is_train = split == "train"
        expected = [_expected_reason(s, t, tokenizer, 60, 2.5, is_train) for s, t in pairs]
        assert expected[10:15] == (
            ["empty", "empty", "too long", "bad length ratio", None]
            if is_train
            else [None, None, "too long", None, None]
        )
        counts = Counter(r for r in expected if r)
        assert out[split]["source"][:] == [s for (s, _), r in zip(pairs, expected) if r is None]
        record = next(r for r in caplog.records if f"'{split}'" in r.getMessage())
        message = record.getMessage()
        if is_train:
            assert f"kept {len(pairs) - sum(counts.values())} of {len(pairs)}" in message
            for name, n in counts.items():
                assert f"{n} {name}" in message
        else:  # only what the model cannot take is dropped, and loudly
            assert record.levelno == logging.WARNING and f"{counts['too long']} of its {len(pairs)}" in message


def test_tokenize_rejects_a_tokenizer_without_eos(multi30k):
    bare = _make_tokenizer(read_multi30k("val.en.gz", 200), post_processor=False)
    with pytest.raises(ValueError, match="post-processor"):
        tokenize_corpus(datasets.DatasetDict({"train": multi30k["validation"].select(range(5))}), bare)


def test_tokenize_argument_errors(multi30k, tokenizer):
    dsd = datasets.DatasetDict({"train": multi30k["validation"].select(range(5))})
    with pytest.raises(ValueError, match="max_length"):
        tokenize_corpus(dsd, tokenizer, max_length=1)
    with pytest.raises(ValueError, match="max_length_ratio"):
        tokenize_corpus(dsd, tokenizer, max_length_ratio=0.5)
    with pytest.raises(ValueError, match="lacks the column"):
        tokenize_corpus(datasets.DatasetDict({"train": dsd["train"].rename_column("target", "de")}), tokenizer)


def test_tokenize_num_proc_and_cache(tmp_path, tokenizer, cache):
    en, de = read_multi30k("val.en.gz", 300), read_multi30k("val.de.gz", 300)
    _pair_dir(tmp_path, en, de)
    dsd = load_parallel_corpus(tmp_path, "en", "de", splits=("train",), cache_dir=cache)
    first = tokenize_corpus(dsd, tokenizer)["train"]
    again = tokenize_corpus(dsd, tokenizer)["train"]
    # Disk-backed data: the second call reads the first one's cache file instead of re-tokenizing.
    assert first.cache_files and first.cache_files == again.cache_files
    parallel = tokenize_corpus(dsd, tokenizer, num_proc=2, max_length=20)["train"]
    serial = tokenize_corpus(dsd, tokenizer, max_length=20)["train"]
    assert parallel["input_ids"][:] == serial["input_ids"][:] and len(serial) < len(first)


def test_iter_texts_is_every_source_then_every_target(multi30k):
    # What the tokenizer is trained on: the same strings in the same order as iterating the columns row by row,
    # also through an index mapping (a selection, a filter).
    train = multi30k["train"]
    assert list(iter_texts(train)) == [*train["source"], *train["target"]]
    picked = train.select([7, 3, 2_000, 5])
    assert list(iter_texts(picked, ["target"])) == [train[i]["target"] for i in (7, 3, 2_000, 5)]


def test_project_tokenizer_works_if_present(multi30k):
    tokenization = pytest.importorskip("vanilla_transformer.data.tokenizer")
    tok = tokenization.train_tokenizer(read_multi30k("val.en.gz") + read_multi30k("val.de.gz"), vocab_size=1000)
    out = tokenize_corpus(datasets.DatasetDict({"train": multi30k["validation"].select(range(20))}), tok)["train"]
    assert all(ids[-1] == tok.eos_token_id for ids in out["labels"])


def test_columns_work_with_data_collator_for_seq2seq(multi30k, tokenizer):
    out = tokenize_corpus(datasets.DatasetDict({"train": multi30k["validation"].select(range(8))}), tokenizer)["train"]
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    rows = out.select_columns(list(MODEL_INPUT_COLUMNS))
    batch = collator([rows[i] for i in range(len(rows))])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    for i in range(len(rows)):
        n_src, n_tgt = out[i]["src_len"], out[i]["tgt_len"]
        assert batch["input_ids"][i, :n_src].tolist() == out[i]["input_ids"]
        assert (batch["input_ids"][i, n_src:] == tokenizer.pad_token_id).all()
        assert batch["attention_mask"][i].tolist() == [1] * n_src + [0] * (batch["input_ids"].shape[1] - n_src)
        assert (batch["labels"][i, n_tgt:] == -100).all()


def test_trainer_drops_the_extra_columns(multi30k, tokenizer, tmp_path):
    modeling = pytest.importorskip("vanilla_transformer")
    if not hasattr(modeling, "VanillaTransformerForConditionalGeneration"):
        pytest.skip("model not available yet")
    from transformers import Trainer, TrainingArguments

    config = modeling.VanillaTransformerConfig.from_preset(
        "small",
        vocab_size=len(tokenizer),
        **TINY_SIZES,
    )
    model = modeling.VanillaTransformerForConditionalGeneration(config)
    out = tokenize_corpus(datasets.DatasetDict({"train": multi30k["validation"].select(range(16))}), tokenizer)[
        "train"
    ]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, use_cpu=True, report_to=[])
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=out,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
    )
    batch = next(iter(trainer.get_train_dataloader()))
    assert set(batch) == {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
    assert model(**batch).loss.isfinite()


# ----------------------------------------------------------------------------------------------------
# Token-based batching
# ----------------------------------------------------------------------------------------------------


def _cost(batch, src, tgt):
    return len(batch) * max(max(src[i] for i in batch), max(tgt[i] for i in batch))


def test_sampler_respects_budget_and_covers_every_example(train_lengths):
    src, tgt = train_lengths
    sampler = TokenBatchSampler(src, tgt, max_tokens=1500, seed=3)
    batches = list(sampler)
    assert len(batches) == len(sampler) == sampler.num_batches
    assert max(_cost(b, src, tgt) for b in batches) <= 1500
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    # Greedy packing: a batch stops only when the next pair (in length order) would break the budget,
    # so batches are nearly full on average.
    costs = [_cost(b, src, tgt) for b in batches]
    assert np.mean(costs) > 0.9 * 1500


def test_sampler_groups_by_length(train_lengths):
    src, tgt = train_lengths
    sampler = TokenBatchSampler(src, tgt, max_tokens=1500)
    grouped = padding_stats(sampler, src, tgt)
    per_batch = round(grouped["sentences"] / grouped["batches"])
    random_batches = np.array_split(np.random.default_rng(0).permutation(len(src)), len(src) // per_batch)
    shuffled = padding_stats(random_batches, src, tgt)
    assert grouped["pad_fraction"] < 0.1 and shuffled["pad_fraction"] > 0.3
    assert grouped["pad_fraction"] < shuffled["pad_fraction"] / 4
    assert grouped["max_cost"] <= 1500


def test_sampler_deterministic_and_reshuffled_per_epoch(train_lengths):
    src, tgt = train_lengths
    a, b = TokenBatchSampler(src, tgt, 2000, seed=7), TokenBatchSampler(src, tgt, 2000, seed=7)
    assert list(a) == list(b)
    epoch0 = list(a)
    a.set_epoch(1)
    b.set_epoch(1)
    epoch1 = list(a)
    assert epoch1 == list(b) and epoch1 != epoch0
    # Same batches (composition fixed), other order, same length.
    assert sorted(map(tuple, epoch0)) == sorted(map(tuple, epoch1)) and len(a) == len(epoch0)
    a.set_epoch(0)
    assert list(a) == epoch0
    other_seed = TokenBatchSampler(src, tgt, 2000, seed=8)
    assert list(other_seed) != epoch0
    assert len(other_seed) == pytest.approx(len(a), rel=0.01)  # ties broken differently, same lengths


def test_sampler_without_shuffle_goes_short_to_long(train_lengths):
    src, tgt = train_lengths
    batches = list(TokenBatchSampler(src, tgt, 2000, shuffle=False))
    longest = [max(np.maximum(src, tgt)[b]) for b in batches]
    assert longest == sorted(longest)


@pytest.mark.parametrize("replicas", [2, 3])
def test_sampler_shards_equal_and_disjoint(train_lengths, replicas):
    src, tgt = train_lengths
    full = TokenBatchSampler(src, tgt, 1000, seed=1)
    total = len(full.batches)
    for epoch in (0, 1):
        shards = []
        for rank in range(replicas):
            s = TokenBatchSampler(src, tgt, 1000, seed=1, num_replicas=replicas, rank=rank)
            s.set_epoch(epoch)
            shards.append(list(s))
            assert len(s) == len(shards[-1]) == math.ceil(total / replicas)
        yielded = Counter(tuple(b) for shard in shards for b in shard)
        padding = math.ceil(total / replicas) * replicas - total
        assert 0 <= padding < replicas
        # Every batch appears; exactly `padding` of them twice (the epoch's first batches, repeated).
        assert len(yielded) == total and sum(yielded.values()) == total + padding
        full.set_epoch(epoch)
        first = [tuple(b) for b in list(full)[:padding]]
        assert sorted(b for b, n in yielded.items() if n == 2) == sorted(first)
        # Without the repeats, the ranks' indices are disjoint and cover everything once.
        seen = Counter(i for b, n in yielded.items() for i in b)
        assert sorted(seen) == list(range(len(src))) and set(seen.values()) == {1}


def test_sampler_fewer_batches_than_replicas():
    src = tgt = np.array([5, 5, 5, 5])
    lens = [len(TokenBatchSampler(src, tgt, 10, num_replicas=3, rank=r)) for r in range(3)]
    batches = [list(TokenBatchSampler(src, tgt, 10, num_replicas=3, rank=r)) for r in range(3)]
    assert lens == [1, 1, 1] and all(len(b) == 1 for b in batches)


def test_sampler_max_sentences_and_cost_uses_longer_side():
    src = np.array([2] * 10)
    tgt = np.array([2] * 9 + [6])  # one long target, last in length order
    batches = list(TokenBatchSampler(src, tgt, 12, shuffle=False))
    # 6 pairs of 2 fill the budget (6*2=12); the next 3 cannot take the long target (4*6=24 > 12),
    # which a cost counting only source tokens would allow.
    assert [len(b) for b in batches] == [6, 3, 1] and batches[-1] == [9]
    capped = list(TokenBatchSampler(src, src, 1000, max_sentences=3))
    assert sorted(map(len, capped)) == [1, 3, 3, 3] and sorted(i for b in capped for i in b) == list(range(10))


def test_sampler_budget_counts_padding_to_a_multiple(train_lengths):
    # The collator pads each side of a batch to a multiple of 8: the budget counts the lengths rounded up.
    src, tgt = train_lengths
    rounded = lambda lengths: -(-np.asarray(lengths) // 8) * 8  # noqa: E731
    plain = list(TokenBatchSampler(src, tgt, max_tokens=1500, seed=3))
    padded = list(TokenBatchSampler(src, tgt, max_tokens=1500, seed=3, pad_to_multiple_of=8))
    assert max(_cost(b, rounded(src), rounded(tgt)) for b in padded) <= 1500
    assert max(_cost(b, rounded(src), rounded(tgt)) for b in plain) > 1500  # which counting raw lengths allows
    assert sorted(i for b in padded for i in b) == list(range(len(src)))
    with pytest.raises(ValueError, match=r"padded to 24\) alone exceeds `max_tokens`=20"):
        TokenBatchSampler([5, 17], [5, 5], 20, pad_to_multiple_of=8)
    with pytest.raises(ValueError, match="pad_to_multiple_of"):
        TokenBatchSampler([5], [5], 20, pad_to_multiple_of=0)


def test_sampler_errors():
    with pytest.raises(ValueError, match=r"Example 2 .*source 30.*max_tokens`=20"):
        TokenBatchSampler([5, 5, 30], [5, 5, 5], 20)
    with pytest.raises(ValueError, match="same length"):
        TokenBatchSampler([5, 5], [5], 20)
    with pytest.raises(ValueError, match="max_tokens"):
        TokenBatchSampler([5], [5], 0)
    with pytest.raises(ValueError, match="rank"):
        TokenBatchSampler([5], [5], 20, num_replicas=2, rank=2)
    with pytest.raises(ValueError, match=">= 1"):
        TokenBatchSampler([5, 0], [5, 5], 20)


def test_sampler_from_dataset_and_dataloader(multi30k, tokenizer):
    out = tokenize_corpus(datasets.DatasetDict({"train": multi30k["validation"]}), tokenizer)["train"]
    by_columns = TokenBatchSampler.from_dataset(out, 600, seed=2)
    by_ids = TokenBatchSampler.from_dataset(out.select_columns(["input_ids", "labels"]), 600, seed=2)
    assert list(by_columns) == list(by_ids)
    # Through an indices mapping (what filtering leaves): the lengths of the rows in the dataset's order.
    picked = out.select(np.random.default_rng(0).permutation(len(out))[: len(out) // 2])
    sampler = TokenBatchSampler.from_dataset(picked, 600, seed=2)
    public = picked.with_format("arrow").select_columns(["src_len", "tgt_len"])[:]
    expected = TokenBatchSampler(public["src_len"].to_numpy(), public["tgt_len"].to_numpy(), 600, seed=2)
    assert list(sampler) == list(expected) and len(sampler.batches) > 1
    by_ids = TokenBatchSampler.from_dataset(picked.select_columns(["input_ids", "labels"]), 600, seed=2)
    assert list(by_ids) == list(expected)
    loader = torch.utils.data.DataLoader(
        out.select_columns(list(MODEL_INPUT_COLUMNS)),
        batch_sampler=by_columns,
        collate_fn=DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100),
    )
    shapes = [(b["input_ids"].shape, b["labels"].shape) for b in loader]
    assert len(shapes) == len(by_columns)
    assert all(s[0] * max(s[1], t[1]) <= 600 for s, t in shapes)


def test_padding_stats_by_hand():
    src, tgt = [3, 5, 2, 2], [4, 4, 1, 6]
    stats = padding_stats([[0, 1], [2, 3]], src, tgt)
    # batch 0: src padded 2*5=10 (real 8), tgt 2*4=8 (real 8); batch 1: src 2*2=4 (4), tgt 2*6=12 (7)
    assert (stats["src_padded"], stats["src_tokens"], stats["tgt_padded"], stats["tgt_tokens"]) == (14, 12, 20, 15)
    assert stats["pad_fraction"] == pytest.approx(1 - 27 / 34) and stats["max_cost"] == 12
