"""Make a finished `vanilla-transformer train` run into a shipped model: `vanilla_transformer/pretrained/NAME/`.

    python scripts/ship_model.py runs/multi30k_en_de_small multi30k-en-de

What it does, in order:

1. Chooses between the run's final model and its average of checkpoints (`averaged/`) on the **validation** split
   only: each is translated with its own generation config, and the higher cased sacreBLEU wins (the test split is
   not looked at to choose).
2. Writes the chosen model as the Hub repository it would be (the files `vanilla-transformer push` uploads:
   config, weights, generation config, tokenizer, the remote-code files, results.json, the figures), with the
   weights stored in bfloat16 (`--weights bfloat16`, the default: half the bytes) while `config.json` keeps
   `"dtype": "float32"`, so `from_pretrained` loads them as float32 and computes in float32. The remote-code files
   are the package's own (a test keeps them equal).
3. Scores the folder as a user loads it, on validation and test, and compares with the float32 weights it came from:
   the BLEU of both splits is recorded in `results.json` (`shipping.float32_weights_bleu`), so the cost of the
   smaller weights is measured, not assumed.
4. Writes `results.json` (the run's training record; BLEU of the shipped weights on both splits; the choice and its
   figures), the cross-attention figure of the shipped weights, the run's curves, and the model card (README.md),
   copied to `model_cards/NAME.md` (its row in `model_cards/README.md`'s table is written by hand: the test says it).

`scripts/rescore_shipped.py` checks every shipped folder's figures against a fresh scoring.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import vanilla_transformer  # registers the Auto classes
from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.evaluation.bleu import compute_bleu_with_lowercase
from vanilla_transformer.hub.model_card import write_attention_figure, write_model_card
from vanilla_transformer.hub.push import files_to_push
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.translation.shipped import PRETRAINED_DIR
from vanilla_transformer.translation.translate import translate


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the benchmarks' Multi30k reader
from _data import MULTI30K, read_lines  # noqa: E402


PACKAGE = Path(vanilla_transformer.__file__).resolve().parent
CURVES = ("loss.png", "learning_rate.png", "bleu.png")  # the run's plots (train.py's report)
MODEL_CARDS = Path(__file__).resolve().parents[1] / "model_cards"  # every shipped model's card, beside the package


def split_pairs(results: dict, data_dir: Path, role: str) -> tuple[str, list[str], list[str]]:
    """(split name, sources, references) of the run's `role` split ("validation" or "test")."""
    split = results["dataset"]["splits"][role]
    src, tgt = results["src_lang"], results["tgt_lang"]
    return split, read_lines(data_dir / f"{split}.{src}.gz"), read_lines(data_dir / f"{split}.{tgt}.gz")


def score(model, tokenizer, split: str, sources: list[str], references: list[str]) -> dict:
    """sacreBLEU (cased and lowercased) of `model`'s translations with its own generation config."""
    started = time.perf_counter()
    hypotheses = translate(model, tokenizer, sources, batch_size=64)
    result = compute_bleu_with_lowercase(hypotheses, references)
    result.update(sentences=len(hypotheses), seconds=round(time.perf_counter() - started, 1), split=split)
    return result


def load(directory: Path):
    from transformers import AutoTokenizer

    model = VanillaTransformerForConditionalGeneration.from_pretrained(directory, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(directory)


def choose(run_dir: Path, results: dict, data_dir: Path) -> tuple[Path, dict]:
    """The candidate (final or averaged) with the higher validation BLEU, and every candidate's figure."""
    candidates = {"final": run_dir}
    if (run_dir / "averaged" / "config.json").is_file():
        candidates["averaged"] = run_dir / "averaged"
    split, sources, references = split_pairs(results, data_dir, "validation")
    figures = {}
    for name, directory in candidates.items():
        model, tokenizer = load(directory)
        figures[name] = score(model, tokenizer, split, sources, references)["score"]
        print(f"validation BLEU of the {name} model ({directory}): {figures[name]:.2f}", flush=True)
    best = max(figures, key=lambda name: (figures[name], name == "final"))  # a tie keeps the final model
    return candidates[best], {
        "chosen": best,
        "on": f"validation ({split}), cased sacreBLEU",
        "validation_bleu": figures,
    }


def write_folder(chosen: Path, run_dir: Path, folder: Path, weights: str) -> None:
    """The publishable files of `chosen` in `folder` (replaced), weights in `weights` dtype, code from the package."""
    files = files_to_push(chosen)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, path in files.items():
        if name.endswith(".py"):
            shutil.copy2(PACKAGE / name, folder / name)  # the package's code, byte for byte
        elif name == "model.safetensors":
            state = load_file(path)
            dtype = getattr(torch, weights)
            save_file(
                {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()},
                folder / name,
                metadata={"format": "pt"},
            )
            (folder / name).chmod(0o644)  # safetensors writes 0600, which a wheel built from this tree would keep
        elif name not in ("results.json", "README.md") and not name.endswith(".png"):
            shutil.copy2(path, folder / name)
    for name in CURVES:  # the averaged model's directory holds copies of the run's curves; take the run's own
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, folder / name)
    config = json.loads((folder / "config.json").read_text())
    if config.get("dtype") != "float32":  # `from_pretrained`'s dtype="auto" reads it: compute in float32
        config["dtype"] = "float32"
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a finished `vanilla-transformer train` --output_dir")
    parser.add_argument("name", help="the shipped model's short name, e.g. multi30k-en-de")
    parser.add_argument("--data_dir", type=Path, default=MULTI30K, help=f"the Multi30k directory (default {MULTI30K})")
    parser.add_argument("--weights", default="bfloat16", choices=("bfloat16", "float32"), help="stored weight type")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    run_results = json.loads((args.run_dir / "results.json").read_text())
    chosen, choice = choose(args.run_dir, run_results, args.data_dir)
    folder = PRETRAINED_DIR / args.name
    write_folder(chosen, args.run_dir, folder, args.weights)

    model, tokenizer = load(folder)
    assert next(model.parameters()).dtype == torch.float32, "the shipped weights must load as float32"
    float32_model, _ = load(chosen)
    bleu, float32_bleu = {}, {}
    for role in ("validation", "test"):
        split, sources, references = split_pairs(run_results, args.data_dir, role)
        bleu[role] = score(model, tokenizer, split, sources, references)
        float32_bleu[role] = round(score(float32_model, tokenizer, split, sources, references)["score"], 4)
        print(
            f"{role} ({split}) BLEU, shipped {args.weights} weights: {bleu[role]['score']:.2f}; "
            f"float32 weights: {float32_bleu[role]:.2f}",
            flush=True,
        )

    chosen_results = json.loads((chosen / "results.json").read_text())  # the averaged model's lists its checkpoints
    train_split = chosen_results["dataset"]["splits"]["train"]
    generation = model.generation_config
    results = {
        **chosen_results,
        "name": args.name,
        # The developers' data path means nothing to a reader; the corpus' own size does (the length filter drops a few).
        "dataset": {
            **{k: v for k, v in chosen_results["dataset"].items() if k != "path"},
            "corpus_pairs": len(read_lines(args.data_dir / f"{train_split}.{chosen_results['src_lang']}.gz")),
        },
        "decoding": {
            "num_beams": generation.num_beams,
            "length_penalty": generation.length_penalty,
            "max_length": "source length + 50",
        },
        "bleu": bleu,
        "shipping": {
            **choice,
            "weights": args.weights,
            "float32_weights_bleu": float32_bleu,
            "from_run": args.run_dir.name,
        },
    }
    for key in ("averaged_model", "best_checkpoint", "hub_commit"):
        results.pop(key, None)
    _, sources, _ = split_pairs(run_results, args.data_dir, "validation")
    figure = write_attention_figure(
        model, tokenizer, sources[0].strip(), folder, split=run_results["dataset"]["splits"]["validation"]
    )
    results["attention_figure"] = figure
    results["plots"] = [name for name in CURVES if (folder / name).is_file()] + ([figure["file"]] if figure else [])
    (folder / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    config = VanillaTransformerConfig.from_pretrained(folder)
    write_model_card(folder, config, results, model_name=f"vanilla-transformer-{args.name}", shipped_name=args.name)
    shutil.copy2(folder / "README.md", MODEL_CARDS / f"{args.name}.md")  # the copy tests/test_model_cards.py compares
    size = sum(p.stat().st_size for p in folder.iterdir())
    print(f"{folder}: {size / 2**20:.1f} MiB ({', '.join(sorted(p.name for p in folder.iterdir()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
