"""The registration of the config and the models with transformers' Auto classes (and for `auto_map` on save).

A module of its own, so that what registers (the command line, `train`, `translation.loading`) imports it alone: the
package's `__init__` loads its public names, `translation.shipped` among them, on first use, and a module that took
`register` from the package would close a loop with it. `import vanilla_transformer` registers (unless the console
script defers it: the package's docstring); registering imports torch and transformers, here in the function, so that
importing this module costs nothing.
"""

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
