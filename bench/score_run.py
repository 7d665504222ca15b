"""Score a finished `train.py` run on the whole validation split: the recipe search's one number per run.

The Multi30k recipe (issue 9) was chosen on validation data only. Each proxy run trains with `--test_split ""`
(so the test set is never translated), then this script scores, on all 1,014 validation pairs:

- the final model (`RUN_DIR`) and the average of the last `--average` complete checkpoints (section 6.1);
- cased detokenized sacreBLEU (13a) of translations with the run's generation config (beam 4, length penalty 1.0
  for the runs before the decoding sweep; beam 6, 1.3 since), and lowercased;
- the validation NLL per target token (teacher forcing, no label smoothing, padding excluded).

It appends one JSON line per run to `--table` (default `bench/multi30k_search.jsonl`) holding the run's settings
(from its `results.json` and `config.json`), its training speed and the machine (CPU flags as torch sees them, and
the precision the run trained in), and prints the markdown row that `bench/multi30k_search.md` lists.

    python bench/score_run.py runs/search/p01 --average 10 --note "tiny, dropout 0.3"
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from _data import MULTI30K, load_run_average, make_batches, read_run_split
from machine_peak import cpu_flags

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.evaluation.bleu import compute_bleu_with_lowercase
from vanilla_transformer.translation.translate import translate


def cpu_summary() -> str:
    flags = cpu_flags()  # what torch sees: the capability that decides the kernels, and the bf16 / AMX units
    extras = [name for name in ("avx512_bf16", "amx_tile") if flags.get(name)]
    return ", ".join([flags["torch capability"], *extras])


@torch.no_grad()
def validation_nll(model, tokenizer, sources: list[str], targets: list[str], batch_size: int = 100) -> float:
    """Mean NLL per target token (natural log) under teacher forcing, without label smoothing."""
    model.eval()
    total, tokens = 0.0, 0
    for start in range(0, len(sources), batch_size):
        batch = make_batches(tokenizer, sources[start:], targets[start:], min(batch_size, len(sources) - start), 1)[0]
        out = model(**batch)
        n = int(out.num_target_tokens)
        total += float(out.nll_loss) * n
        tokens += n
    return total / tokens


def score(model, tokenizer, sources, targets) -> dict:
    started = time.perf_counter()
    hypotheses = translate(model, tokenizer, sources, batch_size=64)
    bleu = compute_bleu_with_lowercase(hypotheses, targets)
    return {
        "bleu": round(bleu["score"], 2),
        "bleu_lc": round(bleu["lowercase"]["score"], 2),
        "nll": round(validation_nll(model, tokenizer, sources, targets), 4),
        "signature": bleu["signature"],
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, nargs="?", help="Without it: print the table's rows as markdown.")
    parser.add_argument("--average", type=int, default=10, help="Average the last K complete checkpoints (0 = no).")
    parser.add_argument("--data_dir", type=Path, default=MULTI30K)
    parser.add_argument("--split", default="val", help="Never the test split: the search tunes on validation data.")
    parser.add_argument("--table", type=Path, default=Path(__file__).with_name("multi30k_search.jsonl"))
    parser.add_argument("--note", default="", help="What the run changed, for the table.")
    args = parser.parse_args(argv)
    if args.split.startswith("test"):
        parser.error("the search is scored on validation data only; the test split is scored once, by train.py.")

    if args.run_dir is None:
        print(HEADER)
        for line in args.table.read_text(encoding="utf-8").splitlines():
            print(markdown_row(json.loads(line)))
        return 0
    torch.set_num_threads(2)
    results, sources, targets, tokenizer = read_run_split(args.run_dir, args.data_dir, args.split)

    model = VanillaTransformerForConditionalGeneration.from_pretrained(args.run_dir)
    config = model.config
    final = score(model, tokenizer, sources, targets)
    averaged = None
    with tempfile.TemporaryDirectory() as tmp:
        loaded = load_run_average(args.run_dir, args.average, tmp)
        if loaded is not None:
            model, count = loaded
            averaged = {**score(model, tokenizer, sources, targets), "checkpoints": count}

    training = results["training"]
    hp = training["hyperparameters"]
    layers = config.encoder_layers
    if config.decoder_layers != layers:
        layers = f"{layers}/{config.decoder_layers}"  # encoder / decoder
    row = {
        "run": args.run_dir.name,
        "pair": f"{results['src_lang']}-{results['tgt_lang']}",
        "note": args.note,
        "model": f"N={layers} d={config.d_model} h={config.encoder_attention_heads} ff={config.encoder_ffn_dim}",
        "parameters": results["num_parameters"],
        "vocab": results["tokenizer"]["vocab_size"],
        "dropout": config.dropout,
        "attention_dropout": config.attention_dropout,
        "activation_dropout": config.activation_dropout,
        "max_tokens": hp["max_tokens"],
        "warmup": hp["warmup_steps"],
        "lr_factor": hp["lr_factor"],
        "lr_cooldown": hp.get("lr_cooldown", 0.0),  # runs from before the cool-down existed had none
        "label_smoothing": hp["label_smoothing"],
        "subword_split": hp.get("subword_split", 0.0),  # runs from before the option existed had none
        "minutes": round(training["train_runtime_s"] / 60, 1),
        "updates": training["steps"],
        "epochs": training["epochs"],
        "tokens_per_second": training["tokens_per_second"],
        "precision": training["precision"]["mixed_precision"],
        "cpu": cpu_summary(),
        "split": args.split,
        "final": final,
        "averaged": averaged,
    }
    with args.table.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
    print(markdown_row(row))
    return 0


HEADER = (
    "| run | pair | model | vocab | dropout | tokens/batch | warmup | lr factor | cool-down | minutes | updates | epochs | "
    "tokens/s | CPU, precision | val BLEU / NLL, final | val BLEU / NLL, average (K) | what changed |\n"
    + "| --- " * 17
    + "|"
)


def markdown_row(row: dict) -> str:
    final, averaged = row["final"], row["averaged"]
    avg = f"{averaged['bleu']:.2f} / {averaged['nll']:.3f} ({averaged['checkpoints']})" if averaged else "-"
    return (
        f"| {row['run']} | {row['pair']} | {row['model']} | {row['vocab']} | {row['dropout']} | {row['max_tokens']} | "
        f"{row['warmup']:g} | {row['lr_factor']} | {row.get('lr_cooldown', 0.0):g} | {row['minutes']} | {row['updates']} | {row['epochs']:.1f} | "
        f"{row['tokens_per_second']:,.0f} | {row['cpu']}, {row['precision']} | {final['bleu']:.2f} / "
        f"{final['nll']:.3f} | {avg} | {row['note']} |"
    )


if __name__ == "__main__":
    sys.exit(main())
