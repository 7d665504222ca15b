"""Token-based batching against fixed-size batches: padding and training speed.

The paper batches "sentence pairs ... together by approximate sequence length", about 25000 source and
25000 target tokens per batch (section 5.1). This script measures what that buys on Multi30k EN->DE
(train split, one shared subword vocabulary), against the usual alternative: shuffled batches of a
fixed number of sentences, that number being the average of the token batches (so both make about
as many batches per epoch and differ only in how pairs are grouped).

It reports, per scheme:
- the padding fraction over a whole epoch (pad tokens / all tokens, source, target, both), with each
  side padded to its longest sequence, as `DataCollatorForSeq2Seq` does;
- training speed: forward + backward of a small VanillaTransformerForConditionalGeneration over
  `--batches` batches per scheme, interleaved A, B, A, B... (so that load on the machine hits both
  alike), after `--warmup` untimed batches each; real (non-pad) tokens per second is the figure that
  matters, padded tokens per second shows the raw speed of the model.

Default run: a few minutes on 2 CPU cores. `--help` for more (bigger budget, more batches, --device cuda).

    python bench/batching.py
    python bench/batching.py --max_tokens 4000 --batches 60 --device cuda
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import time


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import numpy as np  # noqa: E402
import torch  # noqa: E402
from _data import MULTI30K  # noqa: E402  (bench/, the script's directory)
from transformers import DataCollatorForSeq2Seq  # noqa: E402

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.data.batching import TokenBatchSampler, padding_stats  # noqa: E402
from vanilla_transformer.data.corpus import MODEL_INPUT_COLUMNS, load_parallel_corpus, tokenize_corpus  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--data", default=str(MULTI30K), help="directory with train.{en,de}.gz")
    p.add_argument("--src_lang", default="en")
    p.add_argument("--tgt_lang", default="de")
    p.add_argument("--max_tokens", type=int, default=1000, help="token budget per batch (padded, max of both sides)")
    p.add_argument("--batches", type=int, default=30, help="timed batches per scheme")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches per scheme before timing")
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--d_model", type=int, default=128, help="model width (preset 'small' otherwise)")
    p.add_argument("--layers", type=int, default=2, help="encoder and decoder layers")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache_dir", default=None, help="datasets cache (default HF_DATASETS_CACHE)")
    return p.parse_args()


def shared_tokenizer(train, vocab_size: int):
    texts = itertools.chain(train["source"], train["target"])
    try:
        from vanilla_transformer.data.tokenizer import train_tokenizer
    except ImportError:  # the package's tokenizer module is missing: a plain BPE does for this measurement
        return _inline_bpe(texts, vocab_size)
    return train_tokenizer(texts, vocab_size=vocab_size)


def _inline_bpe(texts, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=["<pad>", "<s>", "</s>", "<unk>"], show_progress=False
        ),
    )
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def fixed_size_batches(n: int, batch_size: int, seed: int) -> list[list[int]]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i : i + batch_size].tolist() for i in range(0, n, batch_size)]


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("datasets", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    corpus = load_parallel_corpus(args.data, args.src_lang, args.tgt_lang, splits=("train",), cache_dir=args.cache_dir)
    tokenizer = shared_tokenizer(corpus["train"], args.vocab_size)
    train = tokenize_corpus(corpus, tokenizer)["train"]
    src, tgt = np.asarray(train["src_len"]), np.asarray(train["tgt_len"])
    print(
        f"data: {len(train)} pairs, vocab {len(tokenizer)}, mean length src {src.mean():.1f} / tgt {tgt.mean():.1f} "
        f"tokens (max {src.max()} / {tgt.max()}); prepared in {time.perf_counter() - t0:.0f} s"
    )

    # Scheme A: the paper's token batches. Scheme B: shuffled batches of the same mean sentence count.
    sampler = TokenBatchSampler(src, tgt, args.max_tokens, seed=args.seed)
    token_batches = list(sampler)
    batch_size = round(len(src) / len(token_batches))
    fixed = fixed_size_batches(len(src), batch_size, args.seed)
    schemes = {f"token (max {args.max_tokens})": token_batches, f"fixed ({batch_size} sent.)": fixed}
    epoch_stats = {name: padding_stats(batches, src, tgt) for name, batches in schemes.items()}

    config = VanillaTransformerConfig.from_preset(
        "small",
        vocab_size=len(tokenizer),
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_ffn_dim=4 * args.d_model,
        decoder_ffn_dim=4 * args.d_model,
    )
    model = VanillaTransformerForConditionalGeneration(config).to(args.device).train()
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    rows = train.select_columns(list(MODEL_INPUT_COLUMNS))
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: d_model {args.d_model}, {args.layers}+{args.layers} layers, {n_params / 1e6:.1f}M parameters, "
        f"device {args.device}, torch threads {torch.get_num_threads()}"
    )

    def step(batch_indices):
        batch = {k: v.to(args.device) for k, v in collator([rows[i] for i in batch_indices]).items()}
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start, start_cpu = time.perf_counter(), time.process_time()
        loss = model(**batch).loss
        loss.backward()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        model.zero_grad(set_to_none=True)
        return elapsed, cpu

    timed = {name: [] for name in schemes}
    for i in range(args.warmup + args.batches):
        for name, batches in schemes.items():  # interleaved: A, B, A, B, ...
            elapsed, cpu = step(batches[i % len(batches)])
            if i >= args.warmup:
                timed[name].append((batches[i % len(batches)], elapsed, cpu))

    # Wall-clock speed is what a run takes; CPU-seconds (this process, all its threads) are less
    # disturbed by other jobs on a shared machine, so both are shown.
    header = (
        f"{'scheme':<20}{'batches':>8}{'sent/b':>8}{'pad src':>9}{'pad tgt':>9}{'pad all':>9}{'max cost':>9}"
        f"{'s/batch':>9}{'real tok/s':>12}{'padded tok/s':>14}{'real tok/cpu-s':>16}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    speed = {}
    for name, runs in timed.items():
        e = epoch_stats[name]
        t = padding_stats([b for b, _, _ in runs], src, tgt)
        seconds, cpu_seconds = sum(r[1] for r in runs), sum(r[2] for r in runs)
        real, padded = t["src_tokens"] + t["tgt_tokens"], t["src_padded"] + t["tgt_padded"]
        speed[name] = (real / seconds, padded / seconds, real / cpu_seconds, e)
        print(
            f"{name:<20}{e['batches']:>8}{e['sentences'] / e['batches']:>8.1f}{e['src_pad_fraction']:>9.1%}"
            f"{e['tgt_pad_fraction']:>9.1%}{e['pad_fraction']:>9.1%}{e['max_cost']:>9}"
            f"{statistics.median(r[1] for r in runs):>9.3f}{real / seconds:>12.0f}{padded / seconds:>14.0f}"
            f"{real / cpu_seconds:>16.0f}"
        )
    (a_real, a_padded, a_cpu, a_e), (b_real, b_padded, b_cpu, b_e) = speed.values()
    print(
        f"\npadding fraction (epoch, both sides): {a_e['pad_fraction']:.1%} token-based vs {b_e['pad_fraction']:.1%} "
        f"fixed-size ({b_e['pad_fraction'] / max(a_e['pad_fraction'], 1e-9):.1f}x); padded tokens per epoch "
        f"{(a_e['src_padded'] + a_e['tgt_padded']) / (b_e['src_padded'] + b_e['tgt_padded']):.2f}x"
    )
    print(
        f"real tokens/s, token-based / fixed-size: {a_real / b_real:.2f}x wall-clock, {a_cpu / b_cpu:.2f}x per CPU-second; "
        f"padded tokens/s ratio {a_padded / b_padded:.2f}x ({args.batches} timed batches each, interleaved, "
        f"after {args.warmup} warm-up)"
    )
    print(
        f"largest batch cost (n * longest side): token-based {a_e['max_cost']} (budget {args.max_tokens}), "
        f"fixed-size {b_e['max_cost']}"
    )


if __name__ == "__main__":
    main()
