"""The shared BPE tokenizer on real Multi30k text: special ids, `</s>` handling, exact detokenized
round trips (umlauts, accents, quotes, numbers, spaces), byte fallback, saving and loading with
`AutoTokenizer` in a process that cannot import this package, and the tokenizer/config check."""

import json
import logging
import subprocess
import sys
import textwrap
import unicodedata

import pytest
from helpers import BLOCK_PACKAGE, read_multi30k, subprocess_env

from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.data.tokenizer import (
    SPECIAL_TOKENS,
    check_tokenizer_fits_model,
    load_tokenizer,
    train_tokenizer,
)


VOCAB_SIZE = 2000


@pytest.fixture(scope="module")
def tokenizer():
    # One shared vocabulary over source AND target text (section 5.1).
    texts = read_multi30k("train.en.gz", 2000) + read_multi30k("train.de.gz", 2000)
    return train_tokenizer(texts, vocab_size=VOCAB_SIZE)


@pytest.fixture(scope="module")
def held_out():
    """Validation sentences (not seen in training) in the three languages; French was not in the
    tokenizer's training text at all, so it exercises byte fallback."""
    return read_multi30k("val.en.gz") + read_multi30k("val.de.gz") + read_multi30k("val.fr.gz")


# --- vocabulary and special tokens ---------------------------------------------------------------------------------


def test_special_token_ids_match_the_config(tokenizer):
    config = VanillaTransformerConfig()
    assert tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3]
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token) == tuple(
        SPECIAL_TOKENS
    )
    assert tokenizer.pad_token_id == config.pad_token_id == 0
    assert tokenizer.bos_token_id == config.bos_token_id == config.decoder_start_token_id == 1
    assert tokenizer.eos_token_id == config.eos_token_id == 2
    assert tokenizer.unk_token_id == 3
    assert tokenizer.is_fast


def test_vocabulary_has_the_requested_size_and_contiguous_ids(tokenizer):
    assert len(tokenizer) == VOCAB_SIZE  # 4000 sentences are enough to learn 2000 - 260 symbols
    assert sorted(tokenizer.get_vocab().values()) == list(range(VOCAB_SIZE))
    # The 256 byte-fallback tokens sit right after the specials.
    assert tokenizer.convert_ids_to_tokens(list(range(4, 260))) == [f"<0x{b:02X}>" for b in range(256)]


def test_too_small_corpus_gives_a_smaller_vocabulary_and_a_warning(caplog):
    texts = read_multi30k("train.en.gz", 20)
    with caplog.at_level(logging.WARNING, logger="vanilla_transformer.data.tokenizer"):
        small = train_tokenizer(texts, vocab_size=8000)
    assert 260 < len(small) < 8000
    assert sorted(small.get_vocab().values()) == list(range(len(small)))
    assert f"training stopped at {len(small)} tokens" in caplog.text
    assert f"vocab_size=len(tokenizer)={len(small)}" in caplog.text


# --- encoding ------------------------------------------------------------------------------------------------------


def test_source_and_target_end_with_eos_and_have_no_bos_or_pad(tokenizer):
    src = ["Two young, White males are outside near many bushes.", "A man."]
    tgt = ["Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.", "Ein Mann."]
    batch = tokenizer(src, text_target=tgt)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}  # no token_type_ids for the model
    for texts, rows in ((src, batch["input_ids"]), (tgt, batch["labels"])):
        for text, ids in zip(texts, rows):
            # The subword ids of the backend (no post-processing) followed by exactly one </s>.
            plain = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
            assert ids == plain + [2]
            assert 0 not in ids and 1 not in ids and 3 not in ids


def test_truncation_keeps_eos(tokenizer):
    text = "Ein kleines Mädchen klettert in ein Spielhaus aus Holz."
    full = tokenizer(text)["input_ids"]
    assert len(full) > 6
    batch = tokenizer([text], text_target=[text], truncation=True, max_length=6)
    assert batch["input_ids"][0] == full[:5] + [2]
    assert batch["labels"][0] == full[:5] + [2]


def test_padding_uses_pad_id_on_the_right(tokenizer):
    batch = tokenizer(["Ein Mann.", "Zwei Hunde spielen im Schnee."], padding=True)
    short, long = batch["input_ids"]
    n = len(tokenizer("Ein Mann.")["input_ids"])
    assert short[n:] == [0] * (len(long) - n) and len(short) == len(long)
    assert batch["attention_mask"][0] == [1] * n + [0] * (len(long) - n)


# --- decoding gives the text back ----------------------------------------------------------------------------------


def test_decode_gives_back_real_sentences_exactly(tokenizer, held_out):
    # The sample really contains what the test claims to cover.
    joined = "".join(held_out)
    for chars in ("äöüß", "éèàçô", "„“", "0123456789", ",.!?'"):
        assert any(c in joined for c in chars), chars
    ids = tokenizer(held_out)["input_ids"]
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    mismatches = [(a, b) for a, b in zip(held_out, decoded) if a != b]
    assert not mismatches, mismatches[:5]
    # Byte fallback was exercised (French characters unseen in the English/German training text).
    assert any(4 <= i < 260 for row in ids for i in row)


def test_ids_round_trip(tokenizer, held_out):
    ids = tokenizer(held_out)["input_ids"]
    again = tokenizer(tokenizer.batch_decode(ids, skip_special_tokens=True))["input_ids"]
    assert again == ids


@pytest.mark.parametrize(
    "text",
    [
        "  Zwei  Leerzeichen ",  # leading, doubled and trailing spaces
        "Tab\tund\nZeilenumbruch",
        "Ein Schneemann ☃ und 日本",  # characters never seen in training
        "",
    ],
)
def test_decode_is_exact_for_spaces_and_unseen_characters(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert 3 not in ids  # never <unk>: byte fallback
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_unseen_character_is_spelled_in_utf8_bytes(tokenizer):
    ids = tokenizer("☃", add_special_tokens=False)["input_ids"]
    # Independent computation: the UTF-8 bytes of U+2603, each byte b as token id 4 + b.
    assert ids[-3:] == [4 + b for b in "☃".encode()]


def test_nfc_normalization(tokenizer):
    composed = "Mädchen und Café"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    assert tokenizer(decomposed)["input_ids"] == tokenizer(composed)["input_ids"]


# --- saving and loading --------------------------------------------------------------------------------------------


def test_save_and_load_with_autotokenizer_in_a_process_without_the_package(tokenizer, held_out, tmp_path):
    save_dir = tmp_path / "tok"
    tokenizer.save_pretrained(save_dir)
    config = json.loads((save_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "TokenizersBackend"  # transformers 5's name for PreTrainedTokenizerFast
    sample = held_out[::50]
    (tmp_path / "sample.json").write_text(json.dumps(sample))
    script = BLOCK_PACKAGE + textwrap.dedent(
        f"""
        import json
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained({str(save_dir)!r})
        sample = json.load(open({str(tmp_path / "sample.json")!r}, encoding="utf-8"))
        ids = tok(sample)["input_ids"]
        print(json.dumps({{
            "class": type(tok).__name__, "is_fast": tok.is_fast, "len": len(tok),
            "specials": [tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token],
            "special_ids": [tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id],
            "model_max_length": tok.model_max_length, "ids": ids,
            "decoded": tok.batch_decode(ids, skip_special_tokens=True),
            "loaded_modules": [m for m in sys.modules if m.startswith("vanilla_transformer")],
        }}))
        """
    )
    env = subprocess_env()
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["class"] == "TokenizersBackend" and loaded["is_fast"]
    assert loaded["len"] == len(tokenizer)
    assert loaded["specials"] == SPECIAL_TOKENS and loaded["special_ids"] == [0, 1, 2, 3]
    assert loaded["model_max_length"] == tokenizer.model_max_length == 1024
    assert loaded["ids"] == tokenizer(sample)["input_ids"]
    assert loaded["decoded"] == sample
    assert loaded["loaded_modules"] == []


def test_load_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "tok")
    loaded = load_tokenizer(str(tmp_path / "tok"))
    assert len(loaded) == len(tokenizer) and loaded.pad_token_id == 0
    missing = tmp_path / "no-such-dir"
    with pytest.raises(ValueError, match="name_or_path.*no-such-dir.*train_tokenizer"):
        load_tokenizer(str(missing))


# --- bad input -----------------------------------------------------------------------------------------------------


def test_train_tokenizer_rejects_bad_arguments():
    with pytest.raises(ValueError, match="`texts` must be an iterable of sentences"):
        train_tokenizer("Ein Mann.")
    with pytest.raises(ValueError, match="`texts` is empty"):
        train_tokenizer([])
    with pytest.raises(ValueError, match="`vocab_size` must be an integer >= 261.*got 100"):
        train_tokenizer(["Ein Mann."], vocab_size=100)
    with pytest.raises(ValueError, match="`min_frequency`"):
        train_tokenizer(["Ein Mann."], min_frequency=0)
    with pytest.raises(ValueError, match="`model_max_length`"):
        train_tokenizer(["Ein Mann."], model_max_length=1)


def test_check_tokenizer_fits_model(tokenizer):
    size = len(tokenizer)
    check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig(vocab_size=size))  # fits: no error

    mismatch = rf"vocabulary mismatch.*len\(tokenizer\)={size}.*config.vocab_size={size + 8}.*vocab_size={size}"
    with pytest.raises(ValueError, match=mismatch):
        check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig(vocab_size=size + 8))
    with pytest.raises(ValueError, match=r"pad_token_id=0 .*config.pad_token_id=3"):
        check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig(vocab_size=size, pad_token_id=3))
    with pytest.raises(ValueError, match=r"config.decoder_start_token_id=0") as error:
        check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig(vocab_size=size, decoder_start_token_id=0))
    assert "bos_token_id=1" in str(error.value) and "config.bos_token_id" not in str(error.value)
    with pytest.raises(ValueError, match=r"config.bos_token_id=2"):
        check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig(vocab_size=size, bos_token_id=2))
    with pytest.raises(ValueError, match=r"eos_token_id=2 .*config.eos_token_id=1"):
        check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig(vocab_size=size, eos_token_id=1))
    # Several problems are reported together.
    with pytest.raises(ValueError) as error:
        check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig(vocab_size=size + 1, eos_token_id=5))
    assert "vocabulary mismatch" in str(error.value) and "config.eos_token_id=5" in str(error.value)
