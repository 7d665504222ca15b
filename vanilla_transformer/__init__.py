"""The Transformer of "Attention Is All You Need" as a transformers 5.x model package.

Importing the package registers the config and the models with `AutoConfig`, `AutoModel` and
`AutoModelForSeq2SeqLM`, and marks them for `register_for_auto_class`, so that every `save_pretrained` /
`push_to_hub` writes `auto_map` and copies the modeling code: the checkpoint then loads with
`trust_remote_code=True` where this package is not installed.

Registering imports torch and transformers (seconds). The one import that defers it is the console script's
(`vanilla_transformer_cli.py`, beside this package): it sets REGISTER_LATER while it imports the package, so that
`vanilla-transformer --help` and argument errors answer without them, and the command line registers once its options
are parsed (`registration.register`, which the modules that register import). The classes are loaded on first use
either way.
"""

import os
from importlib import import_module

from .registration import register


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
# The environment variable the console script sets to "1" while it imports the package (and removes after).
REGISTER_LATER = "VANILLA_TRANSFORMER_REGISTER_LATER"


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    register()  # a class used before the deferred registration: register it first
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


if os.environ.get(REGISTER_LATER) != "1":
    register()

__all__ = [*_EXPORTS, "register"]
