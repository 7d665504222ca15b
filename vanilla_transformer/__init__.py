"""The Transformer of "Attention Is All You Need" as a transformers 5.x model package.

Importing the package registers the config and the models with `AutoConfig`, `AutoModel` and
`AutoModelForSeq2SeqLM`, and marks them for `register_for_auto_class`, so that every `save_pretrained` /
`push_to_hub` writes `auto_map` and copies the modeling code: the checkpoint then loads with
`trust_remote_code=True` where this package is not installed.

One exception: when the process is this package's own command line (`vanilla-transformer`, `python -m
vanilla_transformer.cli` / `.training.command`, or the repository's `train.py`), registering (which imports torch and
transformers, seconds of start-up: `bench/cli_help_times.py`) waits until a command runs, so that `--help` and
argument errors answer at once. The classes are loaded on first use either way.
"""

import os
import sys
from importlib import import_module
from pathlib import Path


# Public name -> the module that defines it.
_EXPORTS = {
    "PRESETS": "configuration_vanilla_transformer",
    "VanillaTransformerConfig": "configuration_vanilla_transformer",
    "VanillaTransformerForConditionalGeneration": "modeling_vanilla_transformer",
    "VanillaTransformerModel": "modeling_vanilla_transformer",
    "VanillaTransformerPreTrainedModel": "modeling_vanilla_transformer",
    "shipped_model_path": "translation.shipped",
    "shipped_models": "translation.shipped",
}
COMMAND_LINE_MODULES = ("vanilla_transformer.cli", "vanilla_transformer.training.command", "vanilla_transformer")
_registered = False


def register() -> None:
    """Register the config and models with the Auto classes (and for `auto_map` on save); idempotent."""
    global _registered
    if _registered:
        return
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    from .configuration_vanilla_transformer import VanillaTransformerConfig
    from .modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel

    AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
    AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)
    VanillaTransformerConfig.register_for_auto_class()
    VanillaTransformerModel.register_for_auto_class("AutoModel")
    VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
    _registered = True


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    register()  # a class used before the deferred registration: register it first
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def _started_as_the_command_line() -> bool:
    """Whether this process's main program is the package's command line: the console script, `python -m` of one of
    `COMMAND_LINE_MODULES`, or the repository's `train.py` beside this package (and no other script)."""
    program = sys.argv[0] if sys.argv else ""
    if os.path.basename(program).removesuffix(".exe") == "vanilla-transformer":
        return True
    orig = list(getattr(sys, "orig_argv", []))
    if program == "-m" and "-m" in orig[:-1]:  # runpy imports the package while argv[0] is "-m"
        return orig[orig.index("-m") + 1] in COMMAND_LINE_MODULES
    here = Path(__file__).resolve().parent
    return bool(program) and Path(program).resolve() == here.parent / "train.py"


if not _started_as_the_command_line():
    register()

__all__ = [*_EXPORTS, "register"]
