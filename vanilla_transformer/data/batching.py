"""Token-based batching (section 5.1): batches of sentence pairs of similar length, each of at most `max_tokens`
padded tokens, instead of a fixed number of sentences; and the padding statistics of a list of batches.

The lengths come from `data.corpus.tokenize_corpus` (its `src_len` / `tgt_len` columns).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import datasets
import numpy as np
import torch

from ..generation_vanilla_transformer import check_positive_int


class TokenBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of sentence pairs of similar length, each of at most `max_tokens` padded tokens.

    Section 5.1: "Sentence pairs were batched together by approximate sequence length. Each training
    batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000
    target tokens." As fairseq's `--max-tokens`, the budget bounds the *padded* size: a batch's cost is
    `n_sentences * max(longest source, longest target)`, which is what its tensors and memory grow with;
    the real tokens in it are fewer by the padding (small, because lengths in a batch are close).

    How batches are made (as fairseq does, but for the sort key):
    - composition, once, at construction: the pairs are shuffled with `seed` (so that equal lengths are
      in random order), stably sorted by `max(source length, target length)`, ties by source length,
      and cut greedily into batches whose cost stays within `max_tokens` (and at most
      `max_sentences` pairs);
    - order, per epoch: the list of batches is shuffled with `(seed, epoch)`; `set_epoch(epoch)` (the
      Trainer calls it) gives another order of the same batches.
    Because the composition never changes, the number of batches per epoch is a constant, which the
    Trainer's epoch and `max_steps` arithmetic relies on. Every pair is in exactly one batch.

    Data parallelism: each of `num_replicas` processes builds the same batches (same lengths, same
    `seed`) and takes every `num_replicas`-th batch of the epoch's order, starting at `rank`. When the
    number of batches is not a multiple of `num_replicas`, the epoch's order is extended by repeating
    its first batches (as `torch.utils.data.DistributedSampler` repeats samples), so that every rank
    gets the same number of batches (`len(self)`) and no rank waits for another at the last step; those
    few pairs are seen twice in that epoch. Under the Trainer/accelerate, build it with
    `num_replicas=world_size, rank=process_index` and keep accelerate from sharding it again
    (`trainer.VanillaTransformerTrainer.get_train_dataloader` prepares its loader as one process's).

    Args:
        src_lengths, tgt_lengths: tokens per source / target sequence (with `</s>`), one per example
            (the `src_len` / `tgt_len` columns of `tokenize_corpus`; see `from_dataset`).
        max_tokens: the budget of padded tokens per batch (the paper: ~25000 per side).
        shuffle: shuffle the order of batches each epoch (False: shortest first, e.g. for evaluation).
        seed: seeds the tie-breaking and the epoch shuffles; must be equal on all ranks.
        num_replicas, rank: data-parallel world size and this process's index.
        max_sentences: optional cap on pairs per batch (fairseq's `--batch-size`).
        pad_to_multiple_of: the collator pads each batch to a multiple of this many tokens (e.g. 8, which
            bfloat16/float16 matrix kernels like); the budget then counts the lengths rounded up to it.
    """

    def __init__(
        self,
        src_lengths: Sequence[int] | np.ndarray,
        tgt_lengths: Sequence[int] | np.ndarray,
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        max_sentences: int | None = None,
        pad_to_multiple_of: int | None = None,
    ) -> None:
        src, tgt = np.asarray(src_lengths), np.asarray(tgt_lengths)
        if src.ndim != 1 or tgt.ndim != 1 or len(src) != len(tgt) or len(src) == 0:
            raise ValueError(
                f"`src_lengths` and `tgt_lengths` must be two non-empty 1-D sequences of the same length, got shapes "
                f"{src.shape} and {tgt.shape}: pass the `src_len` and `tgt_len` columns of one tokenized split."
            )
        if not (np.issubdtype(src.dtype, np.integer) and np.issubdtype(tgt.dtype, np.integer)):
            raise ValueError(
                f"`src_lengths`/`tgt_lengths` must be integers (token counts), got dtypes {src.dtype} and {tgt.dtype}."
            )
        src, tgt = src.astype(np.int64), tgt.astype(np.int64)
        bad = np.flatnonzero((src < 1) | (tgt < 1))
        if len(bad):
            i = int(bad[0])
            raise ValueError(
                f"Example {i} has lengths (source {src[i]}, target {tgt[i]}); every sequence has at least `</s>`, so lengths must be >= 1: pass token counts from `tokenize_corpus`."
            )
        if not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
            raise ValueError(
                f"`max_tokens` must be a positive integer, got {max_tokens!r}: e.g. 25000 as in the paper (section 5.1), or what fits your memory."
            )
        check_positive_int("`num_replicas` (the data-parallel world size)", num_replicas)
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"`rank` must be in [0, {num_replicas}) for num_replicas={num_replicas}, got {rank!r}.")
        check_positive_int("`max_sentences`", max_sentences, none="no limit")
        check_positive_int("`pad_to_multiple_of`", pad_to_multiple_of, none="no padding to a multiple")
        sizes = np.maximum(src, tgt)
        if pad_to_multiple_of:
            sizes = -(-sizes // pad_to_multiple_of) * pad_to_multiple_of  # what the collator pads a batch to
        too_long = np.flatnonzero(sizes > max_tokens)
        if len(too_long):
            i = int(too_long[0])
            raise ValueError(
                f"Example {i} (source {src[i]} tokens, target {tgt[i]} tokens"
                f"{f', padded to {sizes[i]}' if pad_to_multiple_of else ''}) alone exceeds `max_tokens`={max_tokens}"
                f"{f', as do {len(too_long) - 1} more' if len(too_long) > 1 else ''}: raise `max_tokens` to at least "
                f"{int(sizes.max())}, or drop long pairs with `tokenize_corpus(max_length=...)` <= max_tokens."
            )

        self.max_tokens = int(max_tokens)
        self.max_sentences = max_sentences
        self.pad_to_multiple_of = pad_to_multiple_of
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.batches: list[np.ndarray] = self._compose(src, tgt, sizes)

    @classmethod
    def from_dataset(cls, dataset: datasets.Dataset, max_tokens: int, **kwargs: Any) -> TokenBatchSampler:
        """Build from a tokenized split: its `src_len`/`tgt_len` columns, else the lengths of
        `input_ids`/`labels`. Call it on the dataset *before* the Trainer removes unused columns."""
        if {"src_len", "tgt_len"} <= set(dataset.column_names):
            lengths = _arrow_columns(dataset, ["src_len", "tgt_len"])
            src, tgt = lengths.column("src_len").to_numpy(), lengths.column("tgt_len").to_numpy()
            return cls(src, tgt, max_tokens, **kwargs)
        if {"input_ids", "labels"} <= set(dataset.column_names):
            lengths = _arrow_columns(dataset, ["input_ids", "labels"])
            src = lengths.column("input_ids").combine_chunks().value_lengths().to_numpy()
            tgt = lengths.column("labels").combine_chunks().value_lengths().to_numpy()
            return cls(src, tgt, max_tokens, **kwargs)
        raise ValueError(
            f"`dataset` has neither src_len/tgt_len nor input_ids/labels columns (it has {dataset.column_names}): pass a split from `tokenize_corpus`."
        )

    def _compose(self, src: np.ndarray, tgt: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
        # Random order first, then two stable sorts: by `sizes` = max(src, tgt), the quantity the budget
        # is counted in, ties by source length. Pairs of equal lengths stay in random order, so which
        # of them share a batch depends on the seed, not on their position in the corpus. The key is the
        # budget's own quantity: sorting by source then target length, as fairseq does, leaves less source
        # padding but fills the budget worse (docs/performance.md, "What a training step does").
        order = np.random.default_rng(self.seed).permutation(len(src))
        order = order[np.argsort(src[order], kind="stable")]
        order = order[np.argsort(sizes[order], kind="stable")]
        cap = self.max_sentences or len(order)
        bounds, start, longest = [0], 0, 0
        for i, size in enumerate(sizes[order].tolist()):
            longest_with_i = max(longest, size)
            n = i - start + 1
            if n * longest_with_i > self.max_tokens or n > cap:
                bounds.append(i)
                start, longest = i, size
            else:
                longest = longest_with_i
        bounds.append(len(order))
        return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose batch order `__iter__` yields (the composition does not change)."""
        self.epoch = int(epoch)

    @property
    def num_batches(self) -> int:
        """Batches this rank yields per epoch; the same on every rank and every epoch."""
        return math.ceil(len(self.batches) / self.num_replicas)

    def __len__(self) -> int:
        return self.num_batches

    def epoch_order(self) -> np.ndarray:
        """Indices into `self.batches` that this rank takes this epoch, in order."""
        total = len(self.batches)
        order = np.random.default_rng([self.seed, self.epoch]).permutation(total) if self.shuffle else np.arange(total)
        # Extend cyclically to a multiple of num_replicas (np.resize repeats from the start, also when
        # there are fewer batches than replicas).
        order = np.resize(order, self.num_batches * self.num_replicas)
        return order[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        for b in self.epoch_order():
            yield self.batches[b].tolist()


def _arrow_columns(dataset: datasets.Dataset, columns: list[str]):
    """`columns` of `dataset` as an Arrow table, in the dataset's row order: a filtered split keeps its rows through
    an indices mapping, which Arrow's `take` applies at once (`dataset[:]` builds a Python list of the indices
    first, seconds per million rows)."""
    if not hasattr(dataset, "_indices"):  # not public in `datasets`: its public path otherwise
        return dataset.with_format("arrow").select_columns(columns)[:]
    table = dataset.data.table.select(columns)
    return table if dataset._indices is None else table.take(dataset._indices.column(0))


def longest_first(dataset: datasets.Dataset) -> datasets.Dataset:
    """`dataset` sorted by source length (`input_ids`), longest first, ties in their order: an evaluation split read
    in order then batches sentences of similar length, and beam search pads little (its scores are per sentence
    pair, so the order changes no score). A dataset without `input_ids` comes back as it is."""
    if not isinstance(dataset, datasets.Dataset) or "input_ids" not in dataset.column_names:
        return dataset
    lengths = _arrow_columns(dataset, ["input_ids"]).column("input_ids").combine_chunks().value_lengths()
    return dataset.select(np.argsort(-lengths.to_numpy(), kind="stable"))


def padding_stats(batches: Iterable[Sequence[int]], src_lengths, tgt_lengths) -> dict[str, float]:
    """Real and padded token counts of `batches` (lists of example indices), padding each side of a
    batch to its longest sequence, as `DataCollatorForSeq2Seq` does.

    Returns a dict with `batches`, `sentences`, `src_tokens`, `tgt_tokens` (real tokens),
    `src_padded`, `tgt_padded` (tensor sizes), `src_pad_fraction`, `tgt_pad_fraction`,
    `pad_fraction` (both sides), and `max_cost` (the largest `n * max(longest src, longest tgt)`).
    """
    src, tgt = np.asarray(src_lengths, dtype=np.int64), np.asarray(tgt_lengths, dtype=np.int64)
    stats = dict.fromkeys(
        ("batches", "sentences", "src_tokens", "tgt_tokens", "src_padded", "tgt_padded", "max_cost"), 0
    )
    for batch in batches:
        s, t = src[np.asarray(batch)], tgt[np.asarray(batch)]
        stats["batches"] += 1
        stats["sentences"] += len(batch)
        stats["src_tokens"] += int(s.sum())
        stats["tgt_tokens"] += int(t.sum())
        stats["src_padded"] += len(batch) * int(s.max())
        stats["tgt_padded"] += len(batch) * int(t.max())
        stats["max_cost"] = max(stats["max_cost"], len(batch) * int(max(s.max(), t.max())))
    for side in ("src", "tgt"):
        stats[f"{side}_pad_fraction"] = 1 - stats[f"{side}_tokens"] / max(stats[f"{side}_padded"], 1)
    stats["pad_fraction"] = 1 - (stats["src_tokens"] + stats["tgt_tokens"]) / max(
        stats["src_padded"] + stats["tgt_padded"], 1
    )
    return stats


__all__ = ["TokenBatchSampler", "longest_first", "padding_stats"]
