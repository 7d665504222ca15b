"""Translate a list of sentences with a trained model: batches sorted by length, order restored.

Used by the training report (test-set BLEU of the final and the averaged model) and by the `vanilla-transformer
translate` command. `generate` does the decoding (by default the model's generation config: its beam
size and length penalty, maximum output length = source length + 50, section 6.1).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from tqdm.auto import tqdm

from ..generation_vanilla_transformer import check_decoding
from ..pipeline_vanilla_transformer import fit_source


logger = logging.getLogger(__name__)


def encode_sources(
    sentences: Sequence[str], encode: Callable[[list[str]], list[list[int]]], limit: int | None, start: int = 0
) -> dict[int, list[int]]:
    """The token ids of each sentence that is not blank, by its index: what `translate` and the CTranslate2 engine
    (`ctranslate2.translate_ctranslate2`) give the model. `encode` maps texts to ids (`</s>` appended).

    Each sentence is encoded without its outer whitespace, as the training command trains on it (`data.corpus.tokenize_corpus`
    strips it). One longer than `limit` tokens (None: no limit) is truncated to that many, its closing `</s>` kept
    (`fit_source`, the pipeline's and the demo's rule too), with a warning naming its line (counting from 1, as in
    the input file; `start`: the index of `sentences[0]` in it, for a window of a longer input).
    """
    todo = [i for i, s in enumerate(sentences) if s.strip()]
    encoded = {}
    for i, ids in zip(todo, encode([sentences[i].strip() for i in todo]) if todo else []):
        encoded[i], message = fit_source(ids, limit, subject=f"Line {start + i + 1}")
        if message:
            logger.warning("%s", message)
    return encoded


def translate(
    model,
    tokenizer,
    sentences: Sequence[str],
    *,
    batch_size: int = 32,
    progress=False,
    n_best: int | None = None,
    start: int = 0,
    **generate_kwargs,
) -> list[str] | list[list[tuple[float, str]]]:
    """Translate `sentences` (one string each) and return one translation per sentence, in input order; with
    `n_best=N`, for each sentence its N best distinct translations as (score, text), best first (`hypothesis_scores`
    says which score): beam search returns its whole beam and the first N different texts are kept, fewer where the
    beam holds fewer (sampling: the distinct ones of N samples); an empty sentence has one, empty, with score 0.

    Sentences are sorted by tokenized length so that a batch holds sentences of similar length (little
    padding); the output order is the input order. Each sentence is translated without its leading and trailing
    whitespace, as the training command trains on it (`data.corpus.tokenize_corpus` strips it): the tokenizer keeps spaces (" A man"
    gets a lone `▁` token first), and a model that never saw one translates such input differently. An empty (or
    all-whitespace) sentence gives an empty translation without calling the model. A sentence longer than the
    model takes (the config's `input_length_limit`, the translation pipeline's rule too) is truncated to that many tokens (its
    last one kept `</s>`), with a warning naming its line (counting from 1, as in the input file): it is never
    dropped.

    `progress`: True draws a progress bar on stderr; a tqdm bar (`translate_stream`'s) is updated instead, by every
    sentence, blank ones included. `start`: the index of `sentences[0]` in the input, for the warnings' line numbers.
    """
    check_translation(model, batch_size=batch_size, n_best=n_best, generate_kwargs=generate_kwargs)
    options = dict(batch_size=batch_size, progress=progress, n_best=n_best, start=start)
    return _translate(model, tokenizer, sentences, **options, **generate_kwargs)


def check_translation(model, *, batch_size: int, n_best: int | None, generate_kwargs: dict, names=None) -> None:
    """The options of a translation, checked once for the whole input (`translate`, `translate_stream`): the batch
    size, and `n_best` against the beam the model will search with (its generation config's, unless the call sets
    one). `names`: how the errors spell the options (`check_decoding`'s), e.g. the command line's flags."""
    check_decoding(batch_size=batch_size, n_best=n_best, num_beams=_beams(model, generate_kwargs), names=names)


def _beams(model, generate_kwargs: dict) -> int | None:
    """The beam the call searches with (None: sampling)."""
    if generate_kwargs.get("do_sample", model.generation_config.do_sample):
        return None
    return generate_kwargs.get("num_beams", model.generation_config.num_beams or 1)


@torch.no_grad()
def _translate(model, tokenizer, sentences, *, batch_size, progress, n_best, start, **generate_kwargs):
    """`translate` once its options are checked (`check_translation`): `translate_stream` calls it per window."""
    beams = _beams(model, generate_kwargs)
    results = [""] * len(sentences) if n_best is None else [[(0.0, "")] for _ in sentences]
    # Beam search returns every hypothesis of its beam, the first `n_best` distinct texts kept: two token sequences
    # can detokenize alike (another segmentation of a word), and n-best lists are read as different translations.
    returned = None if n_best is None else (beams or n_best)
    limit = model.config.input_length_limit(tokenizer)
    # verbose=False: no "indexing errors" warning from the tokenizer for a long line; encode_sources warns once.
    encoded = encode_sources(sentences, lambda texts: tokenizer(texts, verbose=False)["input_ids"], limit, start)
    shared_bar = hasattr(progress, "update")
    if shared_bar:
        progress.update(len(sentences) - len(encoded))  # the blank lines, done without the model
    if not encoded:
        return results
    order = sorted(encoded, key=lambda i: -len(encoded[i]))
    model.eval()
    bar = progress if shared_bar else tqdm(total=len(order), desc="translate", unit="sent", disable=not progress)
    for offset in range(0, len(order), batch_size):  # `start` is the window's first line
        chunk = order[offset : offset + batch_size]
        batch = tokenizer.pad({"input_ids": [encoded[i] for i in chunk]}, return_tensors="pt").to(model.device)
        if n_best is None:
            out = model.generate(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **generate_kwargs
            )
            for i, text in zip(chunk, tokenizer.batch_decode(out, skip_special_tokens=True)):
                results[i] = text.strip()
        else:
            out = model.generate(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                num_return_sequences=returned,
                output_scores=True,
                return_dict_in_generate=True,
                **generate_kwargs,
            )
            texts = tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
            scores = hypothesis_scores(model, out)
            for j, i in enumerate(chunk):
                rows = range(j * returned, (j + 1) * returned)
                results[i] = distinct([(scores[r], texts[r].strip()) for r in rows], n_best)
        bar.update(len(chunk))
    if not shared_bar:
        bar.close()
    return results


def distinct(hypotheses: list[tuple[float, str]], n: int) -> list[tuple[float, str]]:
    """The first `n` hypotheses (score, text) whose texts differ, in their order (best first)."""
    seen, kept = set(), []
    for score, text in hypotheses:
        if text not in seen and len(kept) < n:
            seen.add(text)
            kept.append((score, text))
    return kept


def windows(lines: Iterable[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """`lines` as consecutive lists of at most `size` (the last one shorter), each with the index of its first line:
    what `translate_stream` holds at a time, read only when the previous window is done."""
    if size < 1:
        raise ValueError(f"`window` must be at least 1, got {size}.")
    lines, start = iter(lines), 0
    while window := list(itertools.islice(lines, size)):
        yield start, window
        start += len(window)


def translate_stream(
    model,
    tokenizer,
    lines: Iterable[str],
    *,
    window: int = 1024,
    progress: bool = False,
    total: int | None = None,
    batch_size: int = 32,
    n_best: int | None = None,
    names: dict[str, str] | None = None,
    **generate_kwargs,
) -> Iterator[tuple[int, list]]:
    """Translate `lines` (any iterable, read lazily) window by window: each `window` lines are read, sorted by length
    into batches, translated as `translate` does (`batch_size`, `n_best`, the `generate` options in `generate_kwargs`),
    and yielded in input order as (index of the window's first line, its translations) before the next window is
    read. Memory holds one window whatever the input's size, and a consumer that writes each window keeps every
    finished one if the run stops. A bigger window sorts more sentences together (less padding); a smaller one gives
    its first output sooner. The progress bar (stderr) counts sentences, with `total` lines if known, and shows
    sentences per second. The options are checked once, before the first line is read (`check_translation`, its
    errors spelling the options as `names` gives them), not again per window."""
    check_translation(model, batch_size=batch_size, n_best=n_best, generate_kwargs=generate_kwargs, names=names)
    bar = tqdm(total=total, desc="translate", unit="sent", disable=not progress)
    options = dict(batch_size=batch_size, n_best=n_best, progress=bar, **generate_kwargs)
    try:
        for start, chunk in windows(lines, window):
            yield start, _translate(model, tokenizer, chunk, start=start, **options)
    finally:
        bar.close()


def hypothesis_scores(model, out) -> list[float]:
    """The score of each sequence of a `generate` output (`output_scores=True, return_dict_in_generate=True`): beam
    search's `sequences_scores` (log-probability / length penalty, the penalty's form and alpha the generation
    config's), else (greedy search, sampling) the sum of the log-probabilities of the tokens up to the first `</s>`,
    under the distribution they were chosen from (after temperature, top-k, top-p)."""
    if getattr(out, "sequences_scores", None) is not None:
        return out.sequences_scores.tolist()
    steps = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)  # [rows, steps]
    tokens = out.sequences[:, -steps.shape[1] :]
    eos = model.generation_config.eos_token_id
    ends = torch.isin(tokens, torch.tensor(eos if isinstance(eos, list) else [eos], device=tokens.device))
    after_end = (ends.long().cumsum(dim=1) - ends.long()) > 0  # positions after the first </s> (padding)
    return steps.masked_fill(after_end, 0.0).sum(dim=1).tolist()
