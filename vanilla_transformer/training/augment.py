"""Per-update augmentation of training batches (not in the paper, off by default).

- subword splitting (`subword_split`): the sentences of a batch re-segmented into smaller subwords at random, a seeded
  variant of BPE-dropout (Provilkov et al. 2020); the splitting itself is `subword_split.split_batch`;
- bidirectional training (`bidirectional_steps`, BiT, Ding et al. 2021): during the first updates, half of the batches
  reversed (target -> source).

Both draw from `update_seed`, a seed derived from the update's position rather than from the global generator: the
Trainer fetches a resumed run's first batches before it restores the random state, and accelerate's loader prefetches
a batch, so only a positional seed makes a resumed run augment the same batches as the uninterrupted one.
`VanillaTransformerTrainer.get_batch_samples` applies them.
"""

from __future__ import annotations

import numpy as np


def update_seed(seed: int, global_step: int, micro_batch: int, process_index: int, *stream: int) -> int:
    """The seed of a per-update random choice: one per (run seed, update, micro-batch, process, stream)."""
    key = [seed, global_step, micro_batch, process_index, *stream]
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def maybe_reverse(batch: dict, seed: int, pad_token_id: int) -> dict:
    """The whole micro-batch, with probability 1/2 (drawn from `seed`), as target -> source pairs. Both sides end in
    `</s>` and share one vocabulary (sections 5.1, 3.4), so the swap is of the padded tensors: the labels' -100 become
    the pad id of the new source, the source's padding the new labels' -100."""
    if np.random.default_rng(seed).random() >= 0.5:
        return batch
    labels, input_ids = batch["labels"], batch["input_ids"]
    source_mask = batch.get("attention_mask")
    if source_mask is None:
        source_mask = input_ids != pad_token_id
    target_mask = labels != -100
    # The decoder's inputs (a collator given `model=` makes them) belonged to the old labels: the model shifts the
    # new labels itself.
    replaced = ("input_ids", "labels", "attention_mask", "decoder_input_ids", "decoder_attention_mask")
    reversed_batch = {k: v for k, v in batch.items() if k not in replaced}
    reversed_batch["input_ids"] = labels.masked_fill(~target_mask, pad_token_id)
    reversed_batch["attention_mask"] = target_mask.to(source_mask.dtype)
    reversed_batch["labels"] = input_ids.masked_fill(~source_mask.bool(), -100)
    return reversed_batch
