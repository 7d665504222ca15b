"""BLEU for evaluation: sacreBLEU through `evaluate`, offline.

The paper's scores (27.3 base / 28.4 big on newstest2014 EN-DE, section 6.1) are *tokenized* BLEU: computed on
tokenized text with compound words split (tensor2tensor's `get_ende_bleu.sh`, multi-bleu.perl), which scores higher
than BLEU of the detokenized output and is not comparable with it (Post, 2018). Here BLEU is the reproducible
standard instead: sacreBLEU on the detokenized, cased output with its default `13a` tokenizer, whose *signature*
string records the settings (`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`).
`evaluate.load("sacrebleu")` would fetch its script from the Hub at run time and fail offline; the package ships the
metric module instead (`metrics_sacrebleu/metrics_sacrebleu.py`) and loads it by path.

- `compute_bleu(predictions, references)` scores detokenized strings.
- `paper_style_bleu(predictions, references, lang)` scores them the way the paper's Table 2 was scored (tokenized BLEU
  with compound words split), to compare with 27.3 / 28.4 (`vanilla-transformer score`).
- `make_compute_metrics(tokenizer)` gives the `compute_metrics` of a `Seq2SeqTrainer` run with
  `predict_with_generate=True`: it decodes the generated ids and the labels and returns `{"bleu": ...}`
  (the key `metric_for_best_model="bleu"` refers to), logging the signature.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np


logger = logging.getLogger(__name__)

METRIC_SCRIPT = Path(__file__).resolve().parent / "metrics_sacrebleu" / "metrics_sacrebleu.py"


@lru_cache(maxsize=1)
def load_sacrebleu():
    """The bundled sacreBLEU `evaluate` module, loaded by path (no Hub access). Kept in memory rather than
    in an Arrow cache file, so that several processes (data-parallel ranks) can compute it at once."""
    import evaluate

    return evaluate.load(str(METRIC_SCRIPT), keep_in_memory=True)


def _check_texts(name: str, texts) -> None:
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise ValueError(
            f"`{name}` must be a list of detokenized sentences, got {type(texts).__name__}: pass e.g. "
            f"`[sentence]` rather than `sentence`."
        )


def compute_bleu(predictions: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], **kwargs) -> dict:
    """Corpus BLEU of detokenized `predictions` against `references` (one string per prediction, or one
    list of strings per prediction for several references), cased, tokenized by sacreBLEU's `13a`.

    Returns a dict with `score` (0-100), `signature` (sacreBLEU's settings string) and the statistics
    `counts`, `totals`, `precisions`, `bp`, `sys_len`, `ref_len`. `kwargs` go to the metric (`tokenize`,
    `lowercase`, `smooth_method`, ...), e.g. `tokenize="intl"`.
    """
    _check_texts("predictions", predictions)
    _check_texts("references", references)
    if len(predictions) != len(references):
        raise ValueError(
            f"`predictions` has {len(predictions)} sentences but `references` has {len(references)}: "
            f"give one reference (or one list of references) per prediction, in the same order."
        )
    if len(predictions) == 0:
        raise ValueError("`predictions` is empty: BLEU needs at least one sentence.")
    return load_sacrebleu().compute(predictions=list(predictions), references=list(references), **kwargs)


def compute_bleu_with_lowercase(predictions: Sequence[str], references: Sequence[str]) -> dict:
    """`compute_bleu` (cased), plus `lowercase`: the `score` and `signature` of the same translations scored
    lowercased (13a), the case-insensitive figure that Multi30k papers often report."""
    result = compute_bleu(predictions, references)
    lower = compute_bleu(predictions, references, lowercase=True)
    result["lowercase"] = {"score": lower["score"], "signature": lower["signature"]}
    return result


# tensor2tensor's get_ende_bleu.sh, after Moses' tokenizer.perl: `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`
# ("for historical reasons, we split compound words", as GNMT and ConvS2S scored). Left to right, non-overlapping,
# as Perl's /g: "a-b-c" -> "a ##AT##-##AT## b-c".
_COMPOUND = re.compile(r"(\S)-(\S)")


def paper_style_tokenize(text: str, lang: str) -> str:
    """`text` as the paper scored it: Moses' tokenizer.perl `-l lang` (with its default escaping of & < > " ' | [ ]),
    then compound words split: "rich-text" -> "rich ##AT##-##AT## text"."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", _moses(lang).tokenize(text, return_str=True, escape=True))


# The language codes Moses' tokenizer has nonbreaking prefixes for (sacremoses' NonbreakingPrefixes; any other code
# is tokenized as English without a word). Copied here because importing sacremoses takes half a second, which
# `score --lang` would spend before refusing a code; tests/test_metrics.py checks the copy against sacremoses.
MOSES_LANGUAGES = [
    "as",
    "bn",
    "ca",
    "cs",
    "de",
    "el",
    "en",
    "es",
    "et",
    "fi",
    "fr",
    "ga",
    "gu",
    "hi",
    "hu",
    "is",
    "it",
    "kn",
    "lt",
    "lv",
    "ml",
    "mni",
    "mr",
    "nl",
    "or",
    "pa",
    "pl",
    "pt",
    "ro",
    "ru",
    "sk",
    "sl",
    "sv",
    "ta",
    "tdt",
    "te",
    "yue",
    "zh",
]


@lru_cache(maxsize=8)
def _moses(lang: str):
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def paper_style_bleu(predictions: Sequence[str], references: Sequence[str], lang: str) -> dict:
    """Corpus BLEU of detokenized `predictions` the way the paper's Table 2 was computed, tokenized BLEU (tensor2tensor's
    get_ende_bleu.sh): both sides tokenized by Moses' tokenizer for `lang` with compound words split
    (`paper_style_tokenize`), then multi-bleu.perl's BLEU (cased, no smoothing: 0 when an n-gram order has no
    match). It scores higher than sacreBLEU on the same output and is not comparable with it (Post, 2018); use it
    only to compare with the paper's 27.3 (base) / 28.4 (big) on newstest2014 EN-DE. Returns `score`, `counts`,
    `totals`, `precisions`, `bp`, `sys_len`, `ref_len` and `method`."""
    import sacrebleu

    _check_texts("predictions", predictions)
    _check_texts("references", references)
    if len(predictions) != len(references) or not predictions:
        raise ValueError(
            f"`predictions` has {len(predictions)} sentences and `references` {len(references)}: give one reference "
            f"per prediction, in the same order (at least one)."
        )
    if lang not in MOSES_LANGUAGES:
        raise ValueError(
            f"lang={lang!r} is not a language code Moses' tokenizer knows ({', '.join(MOSES_LANGUAGES)})."
        )
    hypotheses = [paper_style_tokenize(text, lang) for text in predictions]
    targets = [paper_style_tokenize(text, lang) for text in references]
    bleu = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hypotheses, [targets])
    return {
        "score": bleu.score,
        "counts": list(bleu.counts),
        "totals": list(bleu.totals),
        "precisions": list(bleu.precisions),
        "bp": bleu.bp,
        "sys_len": bleu.sys_len,
        "ref_len": bleu.ref_len,
        "method": f"Moses tokenizer -l {lang}, compounds split (##AT##-##AT##), multi-bleu.perl (cased, no smoothing)",
    }


def _token_array(ids) -> np.ndarray:
    """The ids the Trainer gathered, as an array with `-100` (the padding of labels, and of predictions
    gathered across batches of different widths) still in it."""
    if isinstance(ids, tuple):  # outputs given as (sequences, ...)
        ids = ids[0]
    return np.asarray(ids)


def decode_ids(ids, tokenizer) -> list[str]:
    """Detokenized text of a batch of token ids as the Trainer gathers them: `-100` becomes `<pad>`, and
    special tokens (`<pad>`, `<s>`, `</s>`) are dropped."""
    ids = _token_array(ids)
    ids = np.where(ids == -100, tokenizer.pad_token_id, ids)
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def make_compute_metrics(
    tokenizer, references: Sequence[str] | None = None, **bleu_kwargs
) -> Callable[[object], dict[str, float]]:
    """`compute_metrics` for `Seq2SeqTrainer(..., compute_metrics=...)` with `predict_with_generate=True`.

    Args:
        tokenizer: the shared tokenizer, used to decode predictions and labels.
        references: the raw reference sentences of the evaluation set, in its order. By default the
            references are the decoded labels; with a lossless tokenizer (this package's) that is the same
            text up to Unicode NFC. Pass the raw text to score against the untouched references.
        bleu_kwargs: passed to `compute_bleu` (e.g. `tokenize="intl"`).

    Returns:
        A function of an `EvalPrediction` returning `{"bleu": score, "gen_len": mean generated tokens}`;
        it logs the BLEU signature (metrics must be numbers for the Trainer's loggers, so the signature
        string is logged rather than returned).
    """
    if tokenizer is None or getattr(tokenizer, "pad_token_id", None) is None:
        raise ValueError(
            f"`tokenizer` must be a tokenizer with a pad token to decode predictions, got {tokenizer!r}: pass "
            f"the tokenizer the model was trained with."
        )
    refs = None if references is None else list(references)

    def compute_metrics(eval_prediction) -> dict[str, float]:
        predictions = decode_ids(eval_prediction.predictions, tokenizer)
        if refs is not None:
            if len(refs) != len(predictions):
                raise ValueError(
                    f"`references` has {len(refs)} sentences but the evaluation produced {len(predictions)} "
                    f"predictions: pass the references of the evaluation dataset as it is after filtering."
                )
            targets = refs
        else:
            targets = decode_ids(eval_prediction.label_ids, tokenizer)
        result = compute_bleu(predictions, targets, **bleu_kwargs)
        logger.info("BLEU = %.2f (%s, %d sentences)", result["score"], result["signature"], len(predictions))
        # Generated length in tokens, `</s>` included; not counting padding and the decoder start token.
        not_counted = [t for t in (-100, tokenizer.pad_token_id, tokenizer.bos_token_id) if t is not None]
        gen_len = np.isin(_token_array(eval_prediction.predictions), not_counted, invert=True).sum(-1).mean()
        return {"bleu": float(result["score"]), "gen_len": float(gen_len)}

    return compute_metrics


__all__ = ["METRIC_SCRIPT", "compute_bleu", "decode_ids", "load_sacrebleu", "make_compute_metrics"]
