"""The trained models that ship in `vanilla_transformer/pretrained/`: complete Hub repositories whose code is the
package's, that translate by their short name from the command line, `from_pretrained` and `pipeline`, and load with
only transformers; their published BLEU is rescored by `scripts/rescore_shipped.py` (slow)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import BLOCK_PACKAGE, MULTI30K_CLONE, needs_multi30k_clone, read_multi30k, shipped_results, subprocess_env
from safetensors import safe_open

from vanilla_transformer.hub.push import files_to_push
from vanilla_transformer.translation.shipped import (
    DEFAULT_MODEL,
    PRETRAINED_DIR,
    resolve_model,
    shipped_model_path,
    shipped_models,
)


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vanilla_transformer"
SHIPPED = shipped_models()
SENTENCES = read_multi30k("val.en.gz", 4)


def test_the_readmes_model_ships():
    assert DEFAULT_MODEL in SHIPPED
    assert shipped_model_path(DEFAULT_MODEL) == str(PRETRAINED_DIR / DEFAULT_MODEL)
    with pytest.raises(ValueError, match=r"No shipped model is named 'multi30k-xx-yy': the package ships \['multi30k"):
        shipped_model_path("multi30k-xx-yy")


def test_a_local_directory_of_the_same_name_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_model(DEFAULT_MODEL) == str(PRETRAINED_DIR / DEFAULT_MODEL)
    (tmp_path / DEFAULT_MODEL).mkdir()
    assert resolve_model(DEFAULT_MODEL) == DEFAULT_MODEL
    assert resolve_model("someone/transformer-en-de") == "someone/transformer-en-de"


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_folder_is_the_hub_repository_push_uploads(name):
    """Every file `push` would upload is there, and nothing else but the card: config, bfloat16 safetensors weights
    that load as float32, generation config, tokenizer, remote code, results.json with both splits, figures."""
    folder = PRETRAINED_DIR / name
    published = set(files_to_push(folder)) | {"README.md"}
    assert {p.name for p in folder.iterdir()} == published
    assert {"generation_config.json", "tokenizer.json", "results.json", "attention.png"} <= published
    config = json.loads((folder / "config.json").read_text())
    assert config["dtype"] == "float32" and "translation" in config["custom_pipelines"]
    with safe_open(folder / "model.safetensors", "pt") as weights:
        assert {str(weights.get_slice(k).get_dtype()) for k in weights.keys()} == {"BF16"}  # noqa: SIM118
    results = json.loads((folder / "results.json").read_text())
    assert set(results["bleu"]) == {"validation", "test"} and results["shipping"]["chosen"] in ("final", "averaged")
    card = (folder / "README.md").read_text()
    assert f"--model {name}" in card and "split: test_2016_flickr" in card and "split: val\n" in card


@pytest.mark.parametrize("name", SHIPPED)
def test_the_remote_code_files_are_the_packages(name):
    """What a user with only transformers runs is this package's code, byte for byte (re-ship after a change:
    `python scripts/ship_model.py`, or copy the files)."""
    folder = PRETRAINED_DIR / name
    code = sorted(p.name for p in folder.glob("*.py"))
    assert code == sorted(n for n in files_to_push(folder) if n.endswith(".py"))  # what a remote-code load needs
    assert "modeling_vanilla_transformer.py" in code and "pipeline_vanilla_transformer.py" in code
    for file in code:
        assert (folder / file).read_bytes() == (PACKAGE / file).read_bytes(), (
            f"{name}/{file} differs from the package's"
        )


@pytest.fixture(scope="module")
def package_translations():
    """The default model's translations through the package: `load_model` by short name and `translate`."""
    from vanilla_transformer.translation.loading import load_model
    from vanilla_transformer.translation.translate import translate

    model, tokenizer = load_model(DEFAULT_MODEL, device="cpu")
    return translate(model, tokenizer, SENTENCES)


# Words that come out of a real translator of Multi30k's first validation sentences, by target language.
COMMON_WORDS = {
    "de": ("ein", "eine", "mann", "und"),
    "en": ("a", "the", "man", "is"),
    "fr": ("un", "une", "homme", "et"),
}


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_model_translates_into_its_language(name, package_translations):
    """A real translator, not a random one: the target language's words come out for the validation sentences of the
    source language its results.json names."""
    from vanilla_transformer.translation.loading import load_model
    from vanilla_transformer.translation.translate import translate

    results = shipped_results(name)
    if name == DEFAULT_MODEL:
        translations = package_translations
    else:
        model, tokenizer = load_model(name, device="cpu")
        translations = translate(model, tokenizer, read_multi30k(f"val.{results['src_lang']}.gz", 4))
    words = " ".join(translations).lower().split()
    assert all(translations) and sum(word in words for word in COMMON_WORDS[results["tgt_lang"]]) >= 2, translations
    assert name == f"multi30k-{results['src_lang']}-{results['tgt_lang']}"  # the name says the direction


def test_from_pretrained_and_pipeline_by_the_readmes_path(package_translations):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    from vanilla_transformer import shipped_model_path

    path = shipped_model_path(DEFAULT_MODEL)
    translator = pipeline("translation", model=path, trust_remote_code=True)  # the pipeline is the checkpoint's
    assert [out["translation_text"] for out in translator(SENTENCES)] == package_translations
    model = AutoModelForSeq2SeqLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert next(model.parameters()).dtype.is_floating_point and str(next(model.parameters()).dtype) == "torch.float32"
    inputs = tokenizer(SENTENCES[:1], return_tensors="pt")
    assert tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True) == package_translations[:1]


def test_the_shipped_model_loads_with_only_transformers(package_translations):
    """In a process that cannot import the package: AutoModelForSeq2SeqLM and the translation pipeline through the
    folder's own code (`trust_remote_code=True`) give the package's translations."""
    script = BLOCK_PACKAGE + (
        "import json, sys\n"
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline\n"
        "path, sentences = sys.argv[1], json.loads(sys.argv[2])\n"
        "translator = pipeline('translation', model=path, trust_remote_code=True)\n"
        "model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True)\n"
        "tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)\n"
        "ids = model.generate(**tokenizer(sentences[:1], return_tensors='pt'))\n"
        "print(json.dumps({'pipeline': [o['translation_text'] for o in translator(sentences)],\n"
        "                  'generate': tokenizer.batch_decode(ids, skip_special_tokens=True),\n"
        "                  'class': type(model).__module__}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(PRETRAINED_DIR / DEFAULT_MODEL), json.dumps(SENTENCES)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["class"].startswith("transformers_modules.")  # the folder's code, not the package's
    assert out["pipeline"] == package_translations and out["generate"] == package_translations[:1]


def test_the_readmes_translate_command(package_translations, tmp_path):
    """`echo SENTENCE | vanilla-transformer translate --model multi30k-en-de`, from another directory."""
    result = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer.commands", "translate", "--model", DEFAULT_MODEL],
        input="\n".join(SENTENCES) + "\n",
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == package_translations


def test_the_demo_serves_the_shipped_model_by_default():
    from vanilla_transformer.commands import build_parser

    assert build_parser().parse_args(["demo"]).model == str(PRETRAINED_DIR / DEFAULT_MODEL)


@pytest.mark.slow
@needs_multi30k_clone
def test_every_published_figure_is_the_shipped_models():
    """scripts/rescore_shipped.py: validation and test BLEU of every shipped folder, rescored now on all of Multi30k's
    validation and test sets (the README's clone), equal its results.json and its card within 0.05 BLEU."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "rescore_shipped.py"), "--data_dir", str(MULTI30K_CLONE)],
        cwd=ROOT / "scripts",
        env=subprocess_env(OMP_NUM_THREADS="2", MKL_NUM_THREADS="2"),
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert result.returncode == 0 and "every figure holds" in result.stdout, result.stdout + result.stderr[-3000:]
