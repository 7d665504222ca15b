"""What subword splitting (`--subword_split P`, vanilla_transformer/training/augmentation.py) costs in tokens and padding.

Builds one epoch of Multi30k EN->DE training batches the way train.py does (shared BPE trained on the training split,
`TokenBatchSampler` with `--max_tokens`, `DataCollatorForSeq2Seq`), splits each batch as the trainer does
(`split_batch`, seeded per batch), and prints, per P, the real (non-pad) tokens and the padded tokens (what the model
computes on) relative to the unsplit epoch, and the padding fraction. No model is run: this is the data-side cost;
the training speed follows the padded tokens. Seconds on 2 CPU cores.

    python bench/subword_split_cost.py [--p 0.05 0.1 0.2] [--max_tokens 2048] [--vocab_size 8000]
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import datasets  # noqa: E402
import torch  # noqa: E402
from _data import MULTI30K, read_lines  # noqa: E402  (bench/, the script's directory)
from transformers import DataCollatorForSeq2Seq  # noqa: E402

from vanilla_transformer.data.batching import TokenBatchSampler  # noqa: E402
from vanilla_transformer.data.corpus import tokenize_corpus  # noqa: E402
from vanilla_transformer.data.tokenizer import train_tokenizer  # noqa: E402
from vanilla_transformer.training.augmentation import merge_tree, split_batch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--p", type=float, nargs="+", default=[0.05, 0.1, 0.2])
    parser.add_argument("--max_tokens", type=int, default=2048)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--data_dir", default=str(MULTI30K))
    args = parser.parse_args()

    source = read_lines(Path(args.data_dir) / "train.en.gz")
    target = read_lines(Path(args.data_dir) / "train.de.gz")
    tokenizer = train_tokenizer(source + target, vocab_size=args.vocab_size)
    pairs = datasets.DatasetDict(train=datasets.Dataset.from_dict({"source": source, "target": target}))
    train = tokenize_corpus(pairs, tokenizer, max_length=100)["train"]
    sampler = TokenBatchSampler.from_dataset(train, args.max_tokens, shuffle=True, seed=1)
    collate = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    rows = train.select_columns(["input_ids", "labels"])
    batches = [collate([rows[i] for i in indices]) for indices in sampler]
    left, right = merge_tree(tokenizer)

    def cost(batch) -> tuple[int, int]:
        real = int(batch["attention_mask"].sum()) + int((batch["labels"] != -100).sum())
        return real, batch["input_ids"].numel() + batch["labels"].numel()

    real0, padded0 = map(sum, zip(*map(cost, batches)))
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"Multi30k EN->DE train: {len(train)} pairs, {len(batches)} batches of <= {args.max_tokens} tokens")
    print("| P | real tokens | padded tokens | padding |")
    print("| --- | --- | --- | --- |")
    print(f"| 0 (unsplit) | 1.000 ({real0:,}) | 1.000 ({padded0:,}) | {1 - real0 / padded0:.1%} |")
    for p in args.p:
        split = [
            split_batch(
                b, left, right, p, pad_token_id=tokenizer.pad_token_id, generator=torch.Generator().manual_seed(i)
            )
            for i, b in enumerate(batches)
        ]
        real, padded = map(sum, zip(*map(cost, split)))
        print(f"| {p} | {real / real0:.3f} | {padded / padded0:.3f} | {1 - real / padded:.1%} |")


if __name__ == "__main__":
    main()
