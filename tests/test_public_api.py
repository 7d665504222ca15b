"""The package and its remote code build on transformers' public API only: no private transformers method overridden or
called, no private transformers attribute read, and one place that knows transformers' versions.

A private name (one leading underscore) belongs to transformers when a transformers class that a package class derives
from defines it. The exceptions are transformers' documented hooks for subclasses: a model's `_init_weights`
("Adding a model"), a pipeline's `_sanitize_parameters` and `_forward` ("Adding a new pipeline"), and the config's
`_attn_implementation`, which transformers' own models read.
"""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import transformers

import vanilla_transformer


PACKAGE = Path(vanilla_transformer.__file__).resolve().parent
DOCUMENTED_HOOKS = {"_init_weights", "_sanitize_parameters", "_forward", "_attn_implementation"}


def package_modules():
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="vanilla_transformer."):
        if ".pretrained." in info.name or info.name.endswith(".__main__"):
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError:  # an optional extra (gradio, ctranslate2) that this environment lacks
            continue


def transformers_bases() -> set[type]:
    """Every transformers class in the ancestry of a class the package defines."""
    bases = set()
    for module in package_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith("vanilla_transformer"):
                bases |= {base for base in cls.__mro__ if base.__module__.startswith("transformers")}
    return bases


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def transformers_private_names() -> set[str]:
    """transformers' private methods (a model's or a pipeline's private class attributes, such as
    `_tied_weights_keys` or `_supports_sdpa`, are declarations every model makes), and the two private marks transformers
    sets on classes and tensors at run time."""
    names = {"_auto_class", "_is_hf_initialized"}
    for base in transformers_bases():
        names |= {name for name, value in vars(base).items() if private(name) and callable(getattr(base, name))}
    return names - DOCUMENTED_HOOKS


def source_files() -> list[Path]:
    files = [p for p in PACKAGE.rglob("*.py") if "pretrained" not in p.parts]
    files += list((PACKAGE / "pretrained").glob("*/*.py"))  # the shipped folders' own copies
    return files + [PACKAGE.parent / "vanilla_transformer_cli.py", PACKAGE.parent / "train.py"]


def test_no_private_transformers_method_is_overridden():
    theirs = transformers_private_names()
    found = []
    for module in package_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                found += [
                    f"{cls.__qualname__}.{name}"
                    for name, value in vars(cls).items()
                    if name in theirs and callable(getattr(cls, name))
                ]
    assert not found, f"private transformers methods overridden: {found}"


def test_no_private_transformers_name_is_used():
    theirs = transformers_private_names()
    found = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Attribute) and private(node.attr):
                name = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in theirs:
                name = node.value  # getattr(obj, "_name")
            if name in theirs:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}")
    assert not found, "private transformers names used:\n" + "\n".join(found)


def test_the_check_sees_what_it_must_refuse():
    """The two checks above would catch what the package used to do."""
    from transformers import GenerationMixin, Pipeline, Trainer

    theirs = transformers_private_names()
    used = [(GenerationMixin, "_update_finished_beams"), (GenerationMixin, "_check_early_stop_heuristic")]
    used += [(Pipeline, "_prepare_generate_kwargs"), (Trainer, "_get_grad_norm")]  # (not in every release)
    for owner, name in used:
        assert name in theirs or not hasattr(owner, name), name
    assert "_update_finished_beams" in theirs and "_auto_class" in theirs
    assert "_is_hf_initialized" in theirs


def test_transformers_versions_are_known_in_one_place():
    """Only the search file's compatibility section (the model imports it) tells transformers releases apart, and it
    reads an output class's fields, not a version number."""
    tells_versions = []
    for path in source_files():
        text = path.read_text()
        for needle in ("transformers.__version__", "version.parse", "Version(", "is_transformers_version"):
            for number, line in enumerate(text.splitlines(), 1):
                if needle in line and "results" not in line and "report" not in path.name:
                    tells_versions.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}")
    assert not tells_versions, "\n".join(tells_versions)
    assert transformers.__version__  # (the report of a run records the version it ran with; that is not a branch)


def test_both_sides_of_the_cache_rename(monkeypatch, recwarn):
    """The one version difference, `past_key_values` (before 5.24) and `cache` (from 5.24), each side exercised
    whichever transformers runs this test; the running one's side runs for real in every generation test, and `.ci/run`
    runs the remote-code contract on 5.17's side."""
    from dataclasses import dataclass

    from transformers.modeling_outputs import Seq2SeqLMOutput

    from vanilla_transformer import search_vanilla_transformer as bridge

    @dataclass
    class Before:  # an output class of 5.17-5.23
        logits: object = None
        past_key_values: object = None

    @dataclass
    class Since:  # of 5.24
        logits: object = None
        cache: object = None

    assert (bridge.cache_field(Before), bridge.cache_field(Since)) == ("past_key_values", "cache")
    assert bridge.cache_field(Seq2SeqLMOutput) == bridge.CACHE_NAME
    for side, output_class in (("past_key_values", Before), ("cache", Since)):
        monkeypatch.setattr(bridge, "CACHE_NAME", side)
        assert getattr(bridge.with_cache(output_class, "kv", logits=1), side) == "kv"

    def forward(self, cache=None):
        return cache

    for side in ("past_key_values", "cache"):
        monkeypatch.setattr(bridge, "CACHE_NAME", side)
        method = bridge.takes_cache("9.0.0")(forward)
        recwarn.clear()
        assert method(object(), cache="kv") == "kv" and not recwarn.list
        assert method(object(), past_key_values="kv") == "kv"
        # Before 5.24 transformers itself passes `past_key_values`: no warning. From 5.24 it is the deprecated alias.
        warned = any("past_key_values" in str(w.message) for w in recwarn.list)
        assert warned == (side == "cache"), side
