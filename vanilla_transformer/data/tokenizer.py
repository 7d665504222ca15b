"""The shared source/target subword tokenizer (section 5.1 of the paper).

The paper encodes WMT14 EN-DE with byte-pair encoding (Sennrich et al., 2016) into one vocabulary of
about 37000 tokens *shared by source and target*, which is what lets the model tie its encoder input,
decoder input and pre-softmax embeddings (section 3.4). This module trains such a tokenizer with the
`tokenizers` library and wraps it as a transformers `PreTrainedTokenizerFast`, so that
`AutoTokenizer.from_pretrained(<dir>)` loads it anywhere, with or without this package.

Design (the choices, and why):

- **BPE with byte fallback**, SentencePiece/Llama style, rather than byte-level BPE (GPT-2 style).
  Byte-level BPE also never meets an unknown character, but it spells every non-ASCII character
  as two or more opaque byte symbols (`Ã¤` for `ä`), so German umlauts and French accents cost
  extra merges and the vocabulary is unreadable. Here the base alphabet is the *characters* of the
  corpus, and only a character the tokenizer has never seen falls back to its UTF-8 bytes, the 256
  tokens `<0x00>` ... `<0xFF>`. So `<unk>` exists (transformers expects one) but is never produced.
- **NFC normalizer** (then `Prepend("▁")`, see below): the same letter can be typed precomposed
  (`ä`, U+00E4) or decomposed (`a` + U+0308); NFC makes both the same tokens. It is the only
  normalization: no lower-casing, no accent stripping, no whitespace collapsing, so that cased,
  detokenized BLEU is computed on what the model really produces. (A decomposed input therefore
  decodes to its NFC form, which compares equal after NFC and renders the same.)
- **Metaspace pre-tokenizer** (`▁` marks a space, one is prepended to the text as in SentencePiece):
  spaces are part of the tokens, so decoding is the exact inverse of encoding -- no detokenizer
  (Moses or `clean_up_tokenization`) has to guess where spaces went around punctuation and quotes
  (`„Welcome Bikers“`, `l'homme`, `3,5 m`). Words are not split on punctuation beforehand; BPE
  learns from the data whether `.` or `“` stands alone. Outer whitespace is kept too (" A man" starts
  with a lone `▁`), so the package strips each sentence before encoding it: for training
  (`data.corpus.tokenize_corpus`) and translation (`translate`, the pipeline, the CTranslate2 engine) alike.
- **Decoder** `Replace(▁ -> space) + ByteFallback + Fuse + Strip(1 leading space)`, the one Llama's
  tokenizer.json uses. (`decoders.Metaspace` after `Fuse` drops every space in tokenizers 0.23,
  which is why it is not used here.)
- **Post-processor** appends `</s>` to every sequence, source and target alike (`$A </s>`); there is
  no `<s>` in the encoded text: the model prepends `decoder_start_token_id` (= `<s>`) itself when it
  shifts the labels right (section 3, "shifted right").
- **Special tokens** `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3 (the ids of `VanillaTransformerConfig`),
  then the 256 byte tokens (4..259), then the learned characters and merges.

Decoding therefore gives the text back: `decode(encode(line), skip_special_tokens=True) == line`, leading,
trailing and doubled spaces included, also in a language the vocabulary was not learned on
(tests/test_tokenization.py checks Multi30k's English, German and French validation sentences).

Too small a corpus for `vocab_size` is not an error: the trainer stops when no pair occurs
`min_frequency` times, the vocabulary is smaller (a warning says so), and `len(tokenizer)` is the
`vocab_size` the model must be built with (`check_tokenizer_fits_model` enforces it).

The saved tokenizer is plain transformers 5 (`tokenizer_class: "TokenizersBackend"`, the class that
`PreTrainedTokenizerFast` is an alias of, and a `tokenizer.json`); loading it needs no code from this
package.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ..generation_vanilla_transformer import check_positive_int


logger = logging.getLogger(__name__)

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]  # their ids are their positions: 0, 1, 2, 3
BYTE_TOKENS = [f"<0x{i:02X}>" for i in range(256)]  # the names byte_fallback looks up
METASPACE = "\u2581"  # "▁", SentencePiece's visible space
# Smallest useful vocabulary: the specials, the 256 bytes and at least one learned symbol.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(BYTE_TOKENS) + 1


def _normalizer():
    # NFC, then the "space" in front of the first word. It is prepended here rather than by the
    # pre-tokenizer (`prepend_scheme="always"`), which adds it only when the text does not already
    # start with a space, so that " text" and "text" would decode alike.
    return normalizers.Sequence([normalizers.NFC(), normalizers.Prepend(METASPACE)])


def _pre_tokenizer():
    # Spaces become "▁" and start a new piece: "▁Ein", "▁Mann", "▁" (for a second space).
    return pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="never", split=True)


def _decoder():
    return decoders.Sequence(
        [
            decoders.Replace(METASPACE, " "),
            decoders.ByteFallback(),  # <0xE2><0x98><0x83> -> "☃"
            decoders.Fuse(),
            decoders.Strip(content=" ", left=1, right=0),  # the space the pre-tokenizer prepended
        ]
    )


def _post_processor():
    eos_id = SPECIAL_TOKENS.index(EOS)
    return processors.TemplateProcessing(
        single=f"$A:0 {EOS}:0",
        pair=f"$A:0 {EOS}:0 $B:1 {EOS}:1",
        special_tokens=[(EOS, eos_id)],
    )


def _with_byte_fallback(trained: Tokenizer) -> Tokenizer:
    """Rebuild `trained` with the 256 byte tokens at ids 4..259 and `byte_fallback=True`.

    `BpeTrainer` knows nothing of byte fallback, and giving it the byte tokens as `special_tokens`
    would make them *special* added tokens, which `decode(skip_special_tokens=True)` drops. So the
    trainer learns the characters and merges with a budget 256 smaller, and the byte tokens are
    inserted into the model's vocabulary here, after the specials; merges are stored as strings and
    need no change.
    """
    spec = json.loads(trained.to_str())
    learned = sorted(spec["model"]["vocab"].items(), key=lambda item: item[1])
    byte_set = set(BYTE_TOKENS)
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + BYTE_TOKENS)}
    for token, _ in learned:
        if token not in vocab and token not in byte_set:
            vocab[token] = len(vocab)
    spec["model"]["vocab"] = vocab
    spec["model"]["byte_fallback"] = True
    # With byte fallback no piece is unknown; fusing consecutive <unk> would only hide bugs.
    spec["model"]["fuse_unk"] = False
    return Tokenizer.from_str(json.dumps(spec))


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    min_frequency: int = 2,
    model_max_length: int = 1024,
) -> PreTrainedTokenizerFast:
    """Train the shared BPE tokenizer on `texts` and wrap it for transformers.

    Args:
        texts: sentences of the source AND the target language (one shared vocabulary, section 5.1),
            e.g. `itertools.chain(english_lines, german_lines)`. A single `str` is rejected (it would
            be read as a sequence of one-character texts).
        vocab_size: the size of the final vocabulary, specials (4) and byte tokens (256) included.
            If the corpus is too small to learn `vocab_size - 260` characters and merges that occur
            at least `min_frequency` times, training stops early and the vocabulary is smaller (a
            warning says so); `len(tokenizer)` is always the number the model's `vocab_size` must be.
        min_frequency: a pair of symbols is merged only if it occurs at least this often.
        model_max_length: longest sequence (in tokens, `</s>` included) that `truncation=True`
            keeps; use the model's `max_position_embeddings`.

    Returns:
        A `PreTrainedTokenizerFast` with `<pad>`=0, `<s>`=1, `</s>`=2, `<unk>`=3 that appends `</s>`
        to every encoded sequence, so `tokenizer(src, text_target=tgt)` gives `input_ids` and
        `labels` both ending in `</s>`.
    """
    _check_train_args(texts, vocab_size, min_frequency, model_max_length)
    tokenizer, n_texts = _train_bpe(texts, vocab_size, min_frequency)
    wrapped = _wrap(tokenizer, model_max_length)
    size = len(wrapped)
    if size < vocab_size:
        logger.warning(
            "The corpus (%d texts) is too small to learn a vocabulary of %d tokens with min_frequency=%d: "
            "training stopped at %d tokens. Build the model with vocab_size=len(tokenizer)=%d.",
            n_texts,
            vocab_size,
            min_frequency,
            size,
            size,
        )
    else:
        logger.info("Trained a shared BPE vocabulary of %d tokens on %d texts.", size, n_texts)
    return wrapped


def _check_train_args(texts, vocab_size, min_frequency, model_max_length) -> None:
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            f"`texts` must be an iterable of sentences, got a single {type(texts).__name__} "
            f"({texts[:40]!r}...): pass a list of lines, e.g. `[sentence]` or `open(path).read().splitlines()`."
        )
    if not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"`vocab_size` must be an integer >= {MIN_VOCAB_SIZE} (4 specials + 256 byte tokens + learned "
            f"symbols), got {vocab_size!r}: raise it (the paper uses 37000 for WMT14 EN-DE; ~8000 suits Multi30k)."
        )
    check_positive_int("`min_frequency`", min_frequency)
    if not isinstance(model_max_length, int) or model_max_length < 2:
        raise ValueError(
            f"`model_max_length` must be an integer >= 2 (one token plus `</s>`), got {model_max_length!r}: "
            f"use the model's `max_position_embeddings`."
        )


def _train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int) -> tuple[Tokenizer, int]:
    """The BPE `Tokenizer` learned on `texts`, complete (byte fallback, decoder, `</s>` appended), and how many texts
    it was learned on."""
    n_texts = 0

    def counted(lines):
        nonlocal n_texts
        for line in lines:
            n_texts += 1
            yield line

    budget = vocab_size - len(BYTE_TOKENS)  # what the trainer may spend on specials + characters + merges
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = _normalizer()
    tokenizer.pre_tokenizer = _pre_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=budget,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        # Never let the characters alone exceed the budget: the rarest ones are left to byte fallback.
        limit_alphabet=budget - len(SPECIAL_TOKENS),
        show_progress=False,
    )
    tokenizer.train_from_iterator(counted(texts), trainer=trainer)
    if n_texts == 0:
        raise ValueError("`texts` is empty: pass the source and target sentences to learn the vocabulary from.")

    tokenizer = _with_byte_fallback(tokenizer)
    tokenizer.decoder = _decoder()
    tokenizer.post_processor = _post_processor()
    return tokenizer, n_texts


def _wrap(tokenizer: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    """`tokenizer` as the transformers tokenizer the model and the data collator use."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=model_max_length,
        padding_side="right",
        truncation_side="right",
        # The model takes no token_type_ids; the default names would make the tokenizer return them.
        model_input_names=["input_ids", "attention_mask"],
        # Decoding already gives the exact text back; the WordPiece-era clean-up would move spaces.
        clean_up_tokenization_spaces=False,
    )


def load_tokenizer(name_or_path: str, **kwargs: Any) -> PreTrainedTokenizerFast:
    """`AutoTokenizer.from_pretrained(name_or_path, **kwargs)`, with an error that says what to do.

    Also checks that what was loaded is a fast tokenizer with `<pad>`, `</s>` and `<s>` defined, the
    tokens the model and the data collator rely on.
    """
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"Could not load a tokenizer from `name_or_path`={str(name_or_path)!r} ({type(error).__name__}: {error}). "
            "Pass a directory written by `tokenizer.save_pretrained(...)` (it holds tokenizer.json and "
            "tokenizer_config.json) or a Hub repo id of a trained model; to make one, run "
            "`train_tokenizer(texts)` and save it."
        ) from error
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"The tokenizer loaded from {str(name_or_path)!r} is a slow {type(tokenizer).__name__}; this "
            "package needs a fast (tokenizers-backed) one: do not pass `use_fast=False`."
        )
    missing = [name for name in ("pad_token", "bos_token", "eos_token") if getattr(tokenizer, name) is None]
    if missing:
        raise ValueError(
            f"The tokenizer loaded from {str(name_or_path)!r} has no {', '.join(missing)}: the model needs "
            f"<pad>, <s> and </s> (ids 0, 1, 2); use a tokenizer made by `train_tokenizer`."
        )
    return tokenizer


def check_tokenizer_fits_model(tokenizer, config) -> None:
    """Raise `ValueError` if `tokenizer` cannot be used with a model built from `config`.

    Checks that `len(tokenizer) == config.vocab_size` (the shared embedding has one row per token,
    section 3.4) and that the tokenizer's `<pad>`, `<s>` and `</s>` ids are the config's
    `pad_token_id`, `bos_token_id` (= `decoder_start_token_id`, the first decoder input) and
    `eos_token_id` (the end of generation). All problems are reported at once.
    """
    problems = []
    if len(tokenizer) != config.vocab_size:
        problems.append(
            f"vocabulary mismatch: the tokenizer has len(tokenizer)={len(tokenizer)} tokens but "
            f"config.vocab_size={config.vocab_size}. For a new model, build the config with "
            f"vocab_size={len(tokenizer)}; for a trained model, use the tokenizer saved with it."
        )
    checks = [
        ("pad_token", tokenizer.pad_token_id, "pad_token_id", config.pad_token_id),
        ("bos_token", tokenizer.bos_token_id, "bos_token_id", config.bos_token_id),
        ("bos_token", tokenizer.bos_token_id, "decoder_start_token_id", config.decoder_start_token_id),
        ("eos_token", tokenizer.eos_token_id, "eos_token_id", config.eos_token_id),
    ]
    for token_name, token_id, field, config_id in checks:
        if token_id != config_id:
            problems.append(
                f"tokenizer.{token_name}_id={token_id} ({getattr(tokenizer, token_name)!r}) but "
                f"config.{field}={config_id}: set `{field}={token_id}` in the config or use the "
                f"matching tokenizer."
            )
    if problems:
        raise ValueError("The tokenizer does not fit the model config:\n- " + "\n- ".join(problems))


__all__ = [
    "SPECIAL_TOKENS",
    "train_tokenizer",
    "load_tokenizer",
    "check_tokenizer_fits_model",
]
