"""The Transformer of "Attention Is All You Need" as a transformers 5.x model package.

Importing the package registers the config and models with the Auto classes.
"""

from .configuration_vanilla_transformer import PRESETS, VanillaTransformerConfig

__all__ = ["PRESETS", "VanillaTransformerConfig"]
