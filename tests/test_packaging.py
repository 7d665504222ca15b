"""The package as users get it: a wheel, installed into a fresh environment, works away from this repository.

A checkout hides packaging mistakes: files beside the package (the repository's `model_cards/`, the metric script)
are found there through `__file__` paths even when the wheel leaves them out. So the wheel is built from a copy of
the sources, its file list is checked against the package directory, and it is installed with `--no-deps` into a new
virtual environment that borrows this environment's dependencies (a `.pth` file) but not its editable install of
this package; a script run from outside the repository then does what train.py does at the end of a run.
"""

import importlib.metadata
import json
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
from helpers import TINY_SIZES, shipped_results, subprocess_env, tiny_options


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "vanilla_transformer"


def package_files() -> set[str]:
    """Every file of the package directory, as wheel paths (`vanilla_transformer/...`), caches excluded."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the project's packaging inputs (a build in the checkout would leave `build/`
    there, whose stale files a later wheel would pick up), and of tests/ with its data, which a clone has beside the
    package and the wheel must leave out. No network: the build backend of this environment."""
    from packaging.version import Version

    version = importlib.metadata.version("setuptools")
    if Version(version) < Version("70.1"):  # bdist_wheel built in; the dev extra requires more
        pytest.skip(f"setuptools>=70.1 is needed to build the wheel offline, found {version}")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "vanilla_transformer_cli.py"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(PACKAGE, src / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(ROOT / "tests", src / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "artifacts"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "--disable-pip-version-check",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp,
    )
    (path,) = (tmp / "dist").glob("vanilla_transformer-*.whl")
    return path


def test_wheel_holds_every_file_the_package_needs(wheel):
    from vanilla_transformer.evaluation import bleu as metrics
    from vanilla_transformer.hub import model_card

    names = set(zipfile.ZipFile(wheel).namelist())
    in_package = {name for name in names if name.startswith(f"{PACKAGE.name}/")}
    assert in_package == package_files()
    # Nothing else but the command's module and the metadata: not tests/ (its Multi30k sample, support code).
    others = {name for name in names - in_package if ".dist-info/" not in name}
    assert others == {"vanilla_transformer_cli.py"}
    # The data files the code finds through `__file__` must be inside the package, hence in the wheel.
    for path in (model_card.DEFAULT_TEMPLATE, metrics.METRIC_SCRIPT):
        assert path.is_relative_to(PACKAGE), f"{path} is outside the package: a wheel install would not have it"
        assert path.relative_to(ROOT).as_posix() in names
    # The licence pyproject.toml declares travels with the package.
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    # The console command of the README, and its module beside the package (it imports the package without torch).
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert (
        "vanilla-transformer = vanilla_transformer_cli:main" in entry_points and "vanilla_transformer_cli.py" in names
    )
    assert {
        f"vanilla_transformer/training/recipes/{p.name}" for p in (PACKAGE / "training" / "recipes").glob("*.json")
    } <= names


def test_the_wheel_with_its_shipped_models_stays_under_40_mb(wheel):
    """The shipped models travel in the wheel while it stays under 40 MB (docs/sharing.md gives the sizes); past
    that, the models move to a distribution of their own."""
    size = wheel.stat().st_size
    models = sum(info.compress_size for info in zipfile.ZipFile(wheel).infolist() if "/pretrained/" in info.filename)
    assert size < 40e6, f"the wheel is {size / 1e6:.1f} MB, {models / 1e6:.1f} MB of it the shipped models"


def test_dependency_floors_are_versions_that_work():
    """Every dependency has a floor; this environment (the one the suite tests) satisfies it; and no floor is below
    a version known to lack what the code uses."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    needed = {"torch": "2.6"}  # torch.accelerator (train.py)
    for requirement in requirements:
        floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
        assert floors, f"{requirement} has no floor"
        installed = Version(importlib.metadata.version(requirement.name))
        assert installed >= floors[0], f"{requirement}: the suite runs with {installed}, below the floor"
        assert floors[0] >= Version(needed.get(requirement.name, "0")), f"{requirement}: the code needs more"


# Run by the fresh environment's interpreter, in an empty directory outside the repository: what train.py does after
# training (save the model with its remote code and tokenizer, translate, score BLEU, write results and the card).
# Its one argument is SCRIPT_SIZES as JSON.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    import vanilla_transformer
    from huggingface_hub import ModelCard
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.evaluation.bleu import compute_bleu
    from vanilla_transformer.hub.model_card import write_model_card
    from vanilla_transformer.data.tokenizer import train_tokenizer
    from vanilla_transformer.translation.translate import translate

    sources = ["a dog runs in the park", "a man rides a bike", "two children play"] * 20
    targets = ["ein hund rennt im park", "ein mann fährt rad", "zwei kinder spielen"] * 20
    tokenizer = train_tokenizer(sources + targets, vocab_size=300)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer), **json.loads(sys.argv[1]), pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    out = Path("run")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    hypotheses = translate(model, tokenizer, sources[:3], batch_size=3, max_new_tokens=5)
    bleu = compute_bleu(hypotheses, targets[:3])
    results = {"src_lang": "en", "tgt_lang": "de", "bleu": {"test": {"score": bleu["score"],
               "signature": bleu["signature"]}}, "dataset": {"name": "toy"}}
    (out / "results.json").write_text(json.dumps(results))
    card = write_model_card(out, config, results)
    print(json.dumps({
        "package": vanilla_transformer.__file__,
        "files": sorted(p.name for p in out.iterdir()),
        "card_bleu": ModelCard.load(card).data.eval_results[0].metric_value,
        "bleu": bleu["score"], "signature": bleu["signature"],
    }))
    """
)
SCRIPT_SIZES = dict(TINY_SIZES, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32)


@pytest.fixture(scope="module")
def fresh_env(wheel, tmp_path_factory) -> Path:
    """A new virtual environment with the wheel installed and this environment's dependencies visible."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Only the directories are added: .pth files in them (this environment's editable install of the package) are
    # not processed, so the package can only come from the wheel.
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site_packages / "borrowed_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--disable-pip-version-check",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return python


def test_installed_wheel_writes_a_model_card_outside_the_repository(fresh_env, tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = subprocess_env(PYTHONPATH="")  # nothing from the checkout on the path
    result = subprocess.run(
        [str(fresh_env), "-c", SCRIPT, json.dumps(SCRIPT_SIZES)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    venv_root = fresh_env.parent.parent
    assert Path(report["package"]).is_relative_to(venv_root), report["package"]  # the wheel's copy, not the checkout
    assert not Path(report["package"]).is_relative_to(ROOT)
    assert {
        "README.md",
        "model.safetensors",
        "tokenizer.json",
        "modeling_vanilla_transformer.py",
        "configuration_vanilla_transformer.py",
    } <= set(report["files"])
    assert report["card_bleu"] == report["bleu"] and "tok:13a" in report["signature"]


def test_installed_wheel_trains_with_a_shipped_recipe_from_any_directory(fresh_env, tmp_path):
    """`vanilla-transformer train --recipe multi30k_en_de_cpu` from the wheel, in a directory outside the checkout:
    the recipe is package data, the command trains, saves, and the model loads; the module form is the same command;
    a mistake is one line naming the flag, exit status 2."""
    from helpers import read_multi30k

    data = tmp_path / "multi30k"
    data.mkdir()
    for split, n in {"train": 400, "val": 20, "test_2016_flickr": 8}.items():
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_text(
                "".join(line + "\n" for line in read_multi30k(f"{split}.{lang}.gz", n))
            )
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = subprocess_env(PYTHONPATH="")
    command = fresh_env.parent / "vanilla-transformer"
    options = [
        "--recipe",
        "multi30k_en_de_cpu",
        "--dataset",
        str(data),
        "--max_steps",
        "5",
        "--max_train_minutes",
        "5",
    ]
    options += ["--vocab_size", "600", "--eval_strategy", "no", "--report_to", "none", "--bf16", "false"]
    options += [*tiny_options(), "--average_last", "2"]
    result = subprocess.run(
        [str(command), "train", *options, "--output_dir", "run", "--plots", "false"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = subprocess.run(
        [
            str(fresh_env),
            "-c",
            "import sys, json, vanilla_transformer as v; from transformers import AutoModelForSeq2SeqLM;"
            " m = AutoModelForSeq2SeqLM.from_pretrained('run'); print(json.dumps([type(m).__name__, v.__file__]))",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    name, package = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert name == "VanillaTransformerForConditionalGeneration" and Path(package).is_relative_to(
        fresh_env.parent.parent
    )
    results = json.loads((work / "run" / "results.json").read_text())
    assert results["training"]["steps"] == 5 and results["bleu"]["test"]["sentences"] == 8
    assert results["training"]["hyperparameters"]["label_smoothing_factor"] == 0.2  # the recipe's
    # The module form runs the same command; its errors are one line.
    bad = subprocess.run(
        [
            str(fresh_env),
            "-m",
            "vanilla_transformer.training.train",
            "--recipe",
            "multi30k_en_de_cpu",
            "--dataset",
            "./nowhere",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        bad.returncode == 2
        and bad.stderr.strip().count("\n") == 0
        and "--dataset './nowhere' does not exist" in bad.stderr
    )


# Words the translation of a model card's example sentence (`hub.model_card.EXAMPLES`, by the model's source
# language) holds, by the model's target language.
EXAMPLE_WORDS = {"de": ("Fahrrad", "Mann"), "en": ("bicycle", "bike", "man"), "fr": ("vélo", "homme")}


def test_installed_wheel_translates_with_each_shipped_model_offline(fresh_env, tmp_path):
    """After installing the wheel, with no network and no training: the README's translate command and its pipeline
    snippet use each model that ships in the wheel (not the checkout's copy), on its card's example sentence."""
    from vanilla_transformer.hub import model_card

    env = subprocess_env(PYTHONPATH="")
    command = fresh_env.parent / "vanilla-transformer"
    listed = subprocess.run(
        [
            str(fresh_env),
            "-c",
            "import json; from vanilla_transformer import shipped_models; print(json.dumps(shipped_models()))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    names = json.loads(listed.stdout.strip().splitlines()[-1])
    assert names == sorted(p.name for p in (PACKAGE / "pretrained").iterdir())
    directions = {name: shipped_results(name) for name in names}
    examples = {name: model_card.EXAMPLES[results["src_lang"]] for name, results in directions.items()}
    translated = {}
    for name, sentence in examples.items():
        done = subprocess.run(
            [str(command), "translate", "--model", name],
            input=sentence + "\n",
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        translated[name] = done.stdout.strip()
    script = (
        "import json, sys; from transformers import pipeline; from vanilla_transformer import shipped_model_path;"
        " examples = json.loads(sys.argv[1]); out = {}\n"
        "for name, sentence in examples.items():\n"
        "    path = shipped_model_path(name)\n"
        "    out[name] = [path, pipeline('translation', model=path, trust_remote_code=True)(sentence)[0]['translation_text']]\n"
        "print(json.dumps(out))"
    )
    piped = subprocess.run(
        [str(fresh_env), "-c", script, json.dumps(examples)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert piped.returncode == 0, piped.stderr[-3000:]
    for name, (path, text) in json.loads(piped.stdout.strip().splitlines()[-1]).items():
        assert Path(path).is_relative_to(fresh_env.parent.parent) and not Path(path).is_relative_to(ROOT)
        words = EXAMPLE_WORDS[directions[name]["tgt_lang"]]
        assert text == translated[name] and any(word in text for word in words), (name, text, translated[name])
