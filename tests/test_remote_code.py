"""The contract of each shipped folder's own code, with only transformers installed: what a Hub user runs, on whatever
transformers 5 release they have (pyproject.toml declares the range; `.ci/run` runs this file on the oldest one too).

In a process where the package cannot be imported, each folder loads through AutoConfig, AutoTokenizer, AutoModel and
AutoModelForSeq2SeqLM with `trust_remote_code=True`, and its `generate` gives the tokens stored in
tests/data/remote_code_expected.json (written on transformers 5.24 from the folders as shipped) for greedy search,
beam search with the generation config, n-best lists with both length penalty forms, and the paper's GNMT search with
each stopping rule; scores within 1e-5 (exact sums hold only on one CPU and thread count: the exact comparison across
releases is scripts/remote_code_matrix.py). Sampling, attention weights and the translation pipeline work too.

`VANILLA_TRANSFORMER_UPDATE_EXPECTED=1 pytest tests/test_remote_code.py` rewrites the file from the running
transformers (after a deliberate change of the shipped models' outputs).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import BLOCK_PACKAGE, subprocess_env


PRETRAINED = Path(__file__).resolve().parents[1] / "vanilla_transformer" / "pretrained"
EXPECTED = Path(__file__).resolve().parent / "data" / "remote_code_expected.json"
MODELS = sorted(p.name for p in PRETRAINED.iterdir() if (p / "config.json").exists())

# name -> `generate` keywords; each setting's tokens must equal the stored ones on every transformers.
SETTINGS = {
    "greedy": dict(num_beams=1),
    "beam": dict(),  # the folder's generation config
    "length_nbest": dict(num_return_sequences=3),
    "gnmt_never": dict(num_beams=4, length_penalty=0.6, length_penalty_form="gnmt", early_stopping="never"),
    "gnmt_true": dict(num_beams=4, length_penalty=0.6, length_penalty_form="gnmt", early_stopping=True),
    "gnmt_false": dict(
        num_beams=4, length_penalty=0.6, length_penalty_form="gnmt", early_stopping=False, num_return_sequences=3
    ),
}

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    torch.set_num_threads(1)
    folder, sentences, settings = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    assert type(config).__module__.startswith("transformers_modules"), type(config).__module__
    assert type(AutoModel.from_pretrained(folder, trust_remote_code=True)).__name__ == "VanillaTransformerModel"
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    out = {"transformers": transformers.__version__}
    for name, options in settings.items():
        result = model.generate(**batch, **options, output_scores=True, return_dict_in_generate=True)
        beams = options.get("num_beams", model.generation_config.num_beams)
        out[name] = {
            "tokens": [[t for t in row.tolist() if t != config.pad_token_id] for row in result.sequences],
            "scores": result.sequences_scores.tolist() if beams > 1 else None,
        }
    # Sampling: reproducible under a seed, and n samples per sentence.
    samples = []
    for _ in range(2):
        torch.manual_seed(0)
        samples.append(model.generate(**batch, do_sample=True, num_beams=1, top_k=20, num_return_sequences=2))
    assert torch.equal(samples[0], samples[1]) and samples[0].shape[0] == 2 * len(sentences)
    # Attention weights, eager attention: every layer's, for every step.
    eager = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True, attn_implementation="eager").eval()
    for options in ({"num_beams": 1}, {"num_beams": 4, "length_penalty_form": "gnmt"}):
        result = eager.generate(**batch, **options, output_attentions=True, return_dict_in_generate=True)
        layers = config.decoder_layers
        assert len(result.encoder_attentions) == layers and len(result.cross_attentions[0]) == layers, options
        weights = result.cross_attentions[-1][-1]
        assert torch.allclose(weights.sum(-1), torch.ones_like(weights.sum(-1)), atol=1e-4), options
    translator = pipeline("translation", model=folder, trust_remote_code=True)
    out["pipeline"] = [r["translation_text"] for r in translator(sentences)]
    out["pipeline_gnmt"] = translator(sentences[0], num_beams=4, length_penalty_form="gnmt")[0]["translation_text"]
    print("RESULT" + json.dumps(out))
    """
)


def run_folder(folder: Path, sentences: list[str], tmp_path: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE + SCRIPT, str(folder), json.dumps(sentences), json.dumps(SETTINGS)],
        cwd=tmp_path,
        env=subprocess_env(HF_MODULES_CACHE=str(tmp_path / "modules")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
    return json.loads(line[len("RESULT") :])


@pytest.mark.parametrize("name", MODELS)
def test_a_shipped_folder_s_own_code_gives_the_stored_outputs(name, tmp_path):
    expected = json.loads(EXPECTED.read_text())
    if os.environ.get("VANILLA_TRANSFORMER_UPDATE_EXPECTED"):
        got = run_folder(PRETRAINED / name, expected[name]["sentences"], tmp_path)
        expected[name] = {"sentences": expected[name]["sentences"], **got}
        EXPECTED.write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
        pytest.skip("expected outputs rewritten")
    want = expected[name]
    got = run_folder(PRETRAINED / name, want["sentences"], tmp_path)
    for setting in SETTINGS:
        assert got[setting]["tokens"] == want[setting]["tokens"], (setting, got["transformers"])
        if want[setting]["scores"] is not None:
            assert got[setting]["scores"] == pytest.approx(want[setting]["scores"], abs=1e-5), setting
    assert got["pipeline"] == want["pipeline"]
    assert got["pipeline_gnmt"] == want["pipeline_gnmt"]
    # The GNMT settings are real searches with their own results, not copies of transformers' length form.
    assert got["gnmt_never"]["scores"] != got["beam"]["scores"][: len(got["gnmt_never"]["scores"])]
