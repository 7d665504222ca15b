"""The trained models that ship inside the package, by short name: `vanilla_transformer/pretrained/NAME/`.

Each folder is a complete model repository, laid out as its Hugging Face Hub repository is (config, safetensors
weights, tokenizer, generation config, the remote-code files, the model card as README.md, results.json, figures):
`from_pretrained(shipped_model_path(NAME))` loads it, and `vanilla-transformer push` uploads it as it is. The
commands take the short name wherever they take a model (`--model multi30k-en-de`); a local directory of the same
name wins. `scripts/ship_model.py` writes a folder from a training run, `scripts/rescore_shipped.py` checks its figures.

Only the standard library is imported here: the command line resolves names before torch is loaded.
"""

from __future__ import annotations

import difflib
from pathlib import Path


PRETRAINED_DIR = Path(__file__).resolve().parents[1] / "pretrained"
DEFAULT_MODEL = "multi30k-en-de"  # the demo's default, and the README's first translation


def shipped_models() -> list[str]:
    """The short names of the models in this installation, sorted."""
    if not PRETRAINED_DIR.is_dir():
        return []
    return sorted(path.name for path in PRETRAINED_DIR.iterdir() if (path / "config.json").is_file())


def shipped_model_path(name: str = DEFAULT_MODEL) -> str:
    """The directory of the shipped model `name`, for `from_pretrained` and `pipeline` (ValueError naming the
    shipped models when there is none of that name)."""
    if name not in shipped_models():
        raise ValueError(f"No shipped model is named {name!r}: the package ships {shipped_models() or 'none'}.")
    return str(PRETRAINED_DIR / name)


def resolve_model(model: str) -> str:
    """`model` with a shipped model's short name replaced by its directory; anything else (a directory, a Hub repo
    id, a name that is also a local directory) unchanged."""
    if model in shipped_models() and not Path(model).exists():
        return str(PRETRAINED_DIR / model)
    return model


def closest_shipped(name: str) -> str | None:
    """The shipped model's name closest to `name` (difflib's ratio of at least 0.6), or None: the "did you mean" of
    a mistyped `--model multi30k-en-dee`."""
    close = difflib.get_close_matches(name, shipped_models(), n=1)
    return close[0] if close else None


__all__ = [
    "DEFAULT_MODEL",
    "PRETRAINED_DIR",
    "closest_shipped",
    "resolve_model",
    "shipped_model_path",
    "shipped_models",
]
