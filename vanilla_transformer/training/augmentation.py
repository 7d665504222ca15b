"""Per-update augmentation of training batches: subword splitting and bidirectional reversal (neither in the paper;
both off by default).

- Subword splitting (`subword_split`), a regulariser in the family of BPE-dropout (Provilkov et al., ACL 2020, "BPE-
  Dropout: Simple and Effective Subword Regularization"), which encodes each training sentence with merges randomly
  skipped, so that the model also sees words spelled in smaller pieces; it gains most on small corpora. `tokenizers`
  has it (`BPE(dropout=p)`), but draws from an unseeded random generator (Rust's `thread_rng`): a run with it could be
  neither reproduced nor resumed exactly, and it needs the text of every batch encoded again. `split_batch` works on
  the token ids of the deterministic encoding instead (written here because no library does this): each token that
  BPE made by a merge is undone into the two tokens it was merged from with probability `p`, and each part in turn
  with probability `p`, down to tokens that are no merge. The text is unchanged (the parts spell the token; checked on
  Multi30k in tests/test_subword_split.py). What differs from BPE-dropout: only segmentations that refine the
  deterministic one come out, since a skipped merge is never replaced by another path through the merge table.
- Bidirectional training (`bidirectional_steps`, BiT, Ding et al. 2021): during the first updates, half of the
  batches reversed (target -> source), `maybe_reverse`.

Both draw from `update_seed`, a seed derived from the update's position (seed, update, micro-batch, process) rather
than from the global generator: the Trainer fetches a resumed run's first batches before it restores the random state,
and accelerate's loader prefetches a batch, so only a positional seed makes a resumed run augment the same batches as
the uninterrupted one. `VanillaTransformerTrainer.get_batch_samples` applies them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import torch


def update_seed(seed: int, global_step: int, micro_batch: int, process_index: int, *stream: int) -> int:
    """The seed of a per-update random choice: one per (run seed, update, micro-batch, process, stream)."""
    key = [seed, global_step, micro_batch, process_index, *stream]
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def sentence_pairs(batch: dict[str, torch.Tensor], pad_token_id: int) -> list[dict[str, list[int]]]:
    """The sentence pairs of a collated batch without their padding, as the collator's features: `input_ids` (the
    tokens `attention_mask` keeps, or those that are not `pad_token_id`) and `labels` (those that are not -100). An
    augmentation changes them and hands them to the trainer's collator again, which pads them and, given the model,
    makes the decoder input from the new labels. Keys it cannot rebuild are refused."""
    unknown = set(batch) - {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
    if unknown:
        raise ValueError(
            f"An augmentation re-collates `input_ids`, `attention_mask` and `labels` (and the decoder input the "
            f"collator makes from them), but the batch also holds {sorted(unknown)}, which it cannot rebuild: collate "
            f"without them (the training command's DataCollatorForSeq2Seq)."
        )
    input_ids, labels = batch["input_ids"].cpu(), batch["labels"].cpu()
    mask = batch["attention_mask"].cpu().bool() if "attention_mask" in batch else input_ids != pad_token_id
    return [
        {"input_ids": source[keep].tolist(), "labels": target[target != -100].tolist()}
        for source, keep, target in zip(input_ids, mask, labels)
    ]


def maybe_reverse(batch: dict[str, torch.Tensor], seed: int, pad_token_id: int) -> list[dict[str, list[int]]] | None:
    """With probability 1/2 (drawn from `seed`), the collated micro-batch's pairs (`sentence_pairs`) as target ->
    source pairs, for the collator; None otherwise. Both sides end in `</s>` and share one vocabulary (sections 5.1,
    3.4), so the swap is of the token ids."""
    if np.random.default_rng(seed).random() >= 0.5:
        return None
    return [{"input_ids": pair["labels"], "labels": pair["input_ids"]} for pair in sentence_pairs(batch, pad_token_id)]


def merge_tree(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """`(left, right)`: for each token id that a BPE merge made, the ids of the two tokens it was made from, -1
    elsewhere (special tokens, byte-fallback tokens, the base alphabet). Read from a fast tokenizer's BPE model;
    where several merges spell the same token, the first (highest-priority) one is its parts."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(
            f"Subword splitting needs a fast tokenizer with a BPE model (train_tokenizer's); got "
            f"{type(tokenizer).__name__}, which has no `backend_tokenizer`."
        )
    model = json.loads(backend.to_str())["model"]
    if model.get("type") != "BPE":
        raise ValueError(
            f"Subword splitting undoes BPE merges, but this tokenizer's model is {model.get('type')!r}, not 'BPE': "
            f"train the tokenizer with vanilla_transformer.data.tokenizer.train_tokenizer, or leave `subword_split` at 0."
        )
    vocab = model["vocab"]
    prefix = model.get("continuing_subword_prefix") or ""
    size = max(len(tokenizer), max(vocab.values()) + 1)
    left, right = [-1] * size, [-1] * size
    for merge in model["merges"]:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge  # both serialisations of tokenizers
        token = a + (b[len(prefix) :] if prefix and b.startswith(prefix) else b)
        i = vocab.get(token)
        if i is not None and left[i] < 0 and a in vocab and b in vocab:
            left[i], right[i] = vocab[a], vocab[b]
    return torch.tensor(left), torch.tensor(right)


def split_subwords(
    sequences: Sequence[Sequence[int]],
    left: torch.Tensor,
    right: torch.Tensor,
    p: float,
    max_length: int | Sequence[int] | None = None,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Each sequence with every merged token undone into its two parts with probability `p`, recursively (the parts
    are drawn again, each with probability `p`; a token drawn and kept is final). All sequences are handled at
    once, a few tensor operations per level of the merge tree. A sequence that would come out longer than
    `max_length` (one limit for all, or one per sequence) is returned as it was."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"The splitting probability must be in [0, 1), got {p!r}.")
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    ids = torch.tensor([t for s in sequences for t in s], dtype=torch.long)
    if p == 0.0 or ids.numel() == 0:
        return [list(s) for s in sequences]
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= left.numel():
        raise ValueError(
            f"Token id {low if low < 0 else high} is outside the tokenizer's vocabulary of {left.numel()} ids: the "
            f"sequences to split must be token ids from the same tokenizer, before padding (no -100)."
        )
    row = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    active = left[ids] >= 0  # tokens still to be drawn: at first every merged token
    while bool(active.any()):
        split = active & (torch.rand(ids.shape, generator=generator) < p)
        if not bool(split.any()):
            break
        counts = 1 + split.long()
        first = torch.cumsum(counts, 0) - counts  # where each token (or its left part) lands
        at = first[split]
        parents = ids[split]
        ids = ids.repeat_interleave(counts)
        row = row.repeat_interleave(counts)
        ids[at], ids[at + 1] = left[parents], right[parents]
        active = torch.zeros_like(ids, dtype=torch.bool)
        active[at], active[at + 1] = left[ids[at]] >= 0, left[ids[at + 1]] >= 0
    pieces = ids.split(torch.bincount(row, minlength=len(lengths)).tolist())
    limits = [max_length] * len(pieces) if max_length is None or isinstance(max_length, int) else max_length
    return [
        list(original) if limit is not None and len(piece) > limit else piece.tolist()
        for original, piece, limit in zip(sequences, pieces, limits)
    ]


def split_batch(
    pairs: list[dict[str, list[int]]],
    left: torch.Tensor,
    right: torch.Tensor,
    p: float,
    *,
    generator: torch.Generator | None = None,
    max_length: int | None = None,
) -> list[dict[str, list[int]]]:
    """A micro-batch's `pairs` (`sentence_pairs`) with every sentence, source and target (as BPE-dropout does), split
    by `split_subwords`, for the collator to pad again. A sentence whose split would be longer than (1 + p) times its
    side's longest sentence in the batch, or than `max_length`, stays whole, so the padded width grows by at most a
    fraction p."""
    sources, targets = [pair["input_ids"] for pair in pairs], [pair["labels"] for pair in pairs]
    # A batch's sentences have nearly the same length (batching.TokenBatchSampler groups them, section 5.1): split
    # freely, the longest split of them would set the padded width of the whole batch. So a sentence whose split is
    # longer than (1 + p) x the batch's width on its side stays whole, and the padded width grows by at most a
    # fraction p (docs/model.md, `--subword_split`, has the cost on Multi30k).
    limits = []
    for side in (sources, targets):
        width = math.ceil(max(map(len, side), default=0) * (1 + p))
        limits += [width if max_length is None else min(width, max_length)] * len(side)
    split = split_subwords(sources + targets, left, right, p, max_length=limits, generator=generator)
    return [
        {"input_ids": source, "labels": target} for source, target in zip(split[: len(pairs)], split[len(pairs) :])
    ]


__all__ = ["maybe_reverse", "merge_tree", "sentence_pairs", "split_batch", "split_subwords"]
