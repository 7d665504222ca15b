"""Each shipped folder's own code (its remote-code files), in a process where the package cannot be imported, on the
transformers that runs this script: loading through the Auto classes, `generate` in every decoding mode, and the
translation pipeline. It writes every output to one safetensors file, and compares them with another run's file.

The maintainers run it on each transformers minor the package declares (pyproject.toml), against the newest one's
file, and against the outputs of an earlier commit's folders: docs/sharing.md ("Which transformers") gives the
commands. `tests/test_remote_code.py` is the suite's short form of the same contract.

    python scripts/remote_code_matrix.py --data_dir multi30k/data/task1/raw --output out-5.24.safetensors
    python scripts/remote_code_matrix.py --data_dir ... --output out-5.17.safetensors --compare out-5.24.safetensors

`--models_dir` reads the shipped folders from elsewhere (e.g. a worktree of an earlier commit).
"""

import argparse
import gzip
import importlib.abc
import json
import sys
import time
from itertools import islice
from pathlib import Path


class _Block(importlib.abc.MetaPathFinder):
    """The package cannot be imported: only the folders' own code runs (as with only transformers installed)."""

    def find_spec(self, name, path=None, target=None):
        if name == "vanilla_transformer" or name.startswith("vanilla_transformer."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: remote code only)")


sys.meta_path.insert(0, _Block())

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
MODELS = ("multi30k-en-de", "multi30k-de-en", "multi30k-en-fr")
# The settings whose tokens (and, for beam search, scores) must be the same on every transformers.
EXACT = ("greedy", "beam", "length_nbest", "gnmt_never", "gnmt_true", "gnmt_false", "gnmt_nocache")


def settings(n: int) -> dict[str, tuple[int, dict]]:
    """name -> (sentences, generate keywords)."""
    scored = dict(output_scores=True, return_dict_in_generate=True)
    gnmt = dict(num_beams=4, length_penalty=0.6, length_penalty_form="gnmt", num_return_sequences=3, **scored)
    return {
        "greedy": (n, dict(num_beams=1)),
        "beam": (n, dict(scored)),  # the folder's generation config: beam 6, length ** 1.3
        "length_nbest": (n, dict(num_return_sequences=3, **scored)),
        "gnmt_never": (n, dict(early_stopping="never", **gnmt)),
        "gnmt_true": (n, dict(early_stopping=True, **gnmt)),
        "gnmt_false": (n, dict(early_stopping=False, **gnmt)),
        "gnmt_nocache": (min(n, 24), dict(early_stopping="never", use_cache=False, **gnmt)),
        "sample": (min(n, 48), dict(do_sample=True, num_beams=1, top_k=20, num_return_sequences=2)),
    }


def read_lines(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in islice(handle, n)]


def run(folder: Path, sentences: list[str], batch_size: int) -> dict[str, torch.Tensor]:
    out = {}
    AutoConfig.from_pretrained(folder, trust_remote_code=True)
    AutoModel.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    for name, (n, options) in settings(len(sentences)).items():
        torch.manual_seed(0)
        rows, scores = [], []
        for start in range(0, n, batch_size):
            batch = tokenizer(sentences[start : min(n, start + batch_size)], return_tensors="pt", padding=True)
            result = model.generate(**batch, **options)
            sequences = result.sequences if options.get("return_dict_in_generate") else result
            rows += [row[row.ne(model.config.pad_token_id)] for row in sequences]
            if options.get("output_scores"):
                scores.append(result.sequences_scores)
        width = max(len(r) for r in rows)
        out[f"{name}.sequences"] = torch.stack(
            [torch.cat([r, r.new_full((width - len(r),), model.config.pad_token_id)]) for r in rows]
        )
        if scores:
            out[f"{name}.scores"] = torch.cat(scores)
    # Attention weights (eager attention): one per layer, shapes as the model's.
    eager = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True, attn_implementation="eager").eval()
    batch = tokenizer(sentences[:4], return_tensors="pt", padding=True)
    result = eager.generate(**batch, output_attentions=True, return_dict_in_generate=True)
    layers = eager.config.decoder_layers
    assert len(result.cross_attentions[0]) == layers and len(result.encoder_attentions) == layers, "attentions"
    out["attentions.first_cross"] = result.cross_attentions[0][0].float().contiguous()
    translator = pipeline("translation", model=str(folder), trust_remote_code=True)
    texts = [t["translation_text"] for t in translator(sentences[:8])]
    out["pipeline.utf8"] = torch.tensor(list("\n".join(texts).encode()), dtype=torch.uint8)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", type=Path, default=ROOT / "multi30k" / "data" / "task1" / "raw")
    parser.add_argument("--models_dir", type=Path, default=ROOT / "vanilla_transformer" / "pretrained")
    parser.add_argument("--sentences", type=int, default=200, help="test2016 sentences per model")
    parser.add_argument("--batch_size", type=int, default=50)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--compare", type=Path, help="another run's --output file")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the same sums as the file compared with, on any machine's thread count
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {args.models_dir}", flush=True)
    results = {}
    for name in MODELS:
        src = json.loads((args.models_dir / name / "results.json").read_text())["src_lang"]
        sentences = read_lines(args.data_dir / f"test_2016_flickr.{src}.gz", args.sentences)
        began = time.perf_counter()
        results |= {
            f"{name}.{key}": value for key, value in run(args.models_dir / name, sentences, args.batch_size).items()
        }
        print(f"{name}: {time.perf_counter() - began:.0f} s", flush=True)
    save_file(results, str(args.output), metadata={"transformers": transformers.__version__})
    if args.compare is None:
        return
    reference = load_file(str(args.compare))
    failed = []
    for key, want in reference.items():
        got = results.get(key)
        same = got is not None and got.shape == want.shape and torch.equal(got, want)
        exact = key.split(".")[1] in EXACT
        if not same:
            detail = "missing" if got is None else f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
            if got is not None and got.shape == want.shape:
                detail = f"max difference {(got.double() - want.double()).abs().max().item():.3g}"
            (failed if exact else []).append(key)
            print(f"{'DIFFERS' if exact else 'differs (not required)'}: {key}: {detail}")
    print(f"{len(reference) - len(failed)}/{len(reference)} outputs equal, {len(failed)} required ones differ")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
