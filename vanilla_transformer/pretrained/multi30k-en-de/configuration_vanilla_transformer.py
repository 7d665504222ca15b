"""Configuration of the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Field names follow transformers' seq2seq models (BART, Marian) so that generic tooling (the cache,
`get_text_config`, the Trainer, generation) works unchanged; the paper's names are given beside each
field. The defaults are the paper's *base* model (Table 3). Every departure from the paper is a flag
whose default is the paper's choice.

This file imports only transformers and huggingface_hub: it is copied into every saved checkpoint as
remote code (see `register_for_auto_class`), where this package may not be installed.
"""

from dataclasses import field

from huggingface_hub.dataclasses import strict
from transformers import PretrainedConfig

from .generation_vanilla_transformer import check_positive_int


# Table 3 of the paper. `vocab_size=37000` is the shared BPE vocabulary of the WMT14 EN-DE runs
# (section 5.1); the parameter counts of Table 3 (65M / 213M) include that embedding once.
PRESETS = {
    "base": dict(
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        dropout=0.1,
    ),
    "big": dict(
        d_model=1024,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_ffn_dim=4096,
        decoder_ffn_dim=4096,
        dropout=0.3,
    ),
    # Not in the paper: a model that trains on a 2-core CPU in about an hour (Multi30k). Same
    # architecture, smaller sizes (d_k = d_v = 64 as in the paper).
    "small": dict(
        d_model=256,
        encoder_layers=3,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=1024,
        decoder_ffn_dim=1024,
        dropout=0.1,
    ),
}

# Table 3's rows, each the paper's change to `base` in config fields (`from_table3`): (A) the number of heads h with
# d_k = d_v = d_model / h; (B) the key width d_k alone (d_v stays 64); (C) N, d_model (d_k = d_v = d_model / h) and
# d_ff; (D) P_drop and, in the training loss rather than the model, epsilon_ls (`TABLE3_LABEL_SMOOTHING`); (E)
# learned positions; `big` the big model. The parameter counts with `vocab_size=37000` are in docs/model.md.
TABLE3_ROWS = {
    "base": {},
    "A1": dict(encoder_attention_heads=1, decoder_attention_heads=1),
    "A2": dict(encoder_attention_heads=4, decoder_attention_heads=4),
    "A3": dict(encoder_attention_heads=16, decoder_attention_heads=16),
    "A4": dict(encoder_attention_heads=32, decoder_attention_heads=32),
    "B1": dict(qk_head_dim=16),
    "B2": dict(qk_head_dim=32),
    "C1": dict(encoder_layers=2, decoder_layers=2),
    "C2": dict(encoder_layers=4, decoder_layers=4),
    "C3": dict(encoder_layers=8, decoder_layers=8),
    "C4": dict(d_model=256),
    "C5": dict(d_model=1024),
    "C6": dict(encoder_ffn_dim=1024, decoder_ffn_dim=1024),
    "C7": dict(encoder_ffn_dim=4096, decoder_ffn_dim=4096),
    "D1": dict(dropout=0.0),
    "D2": dict(dropout=0.2),
    "D3": {},
    "D4": {},
    "E": dict(position_embedding_type="learned"),
    "big": PRESETS["big"],
}
# Rows (D)'s label smoothing epsilon_ls (section 5.4; base 0.1) is the trainer's loss's, not the model's.
TABLE3_LABEL_SMOOTHING = {"D3": 0.0, "D4": 0.2}


@strict(accept_kwargs=True)
class VanillaTransformerConfig(PretrainedConfig):
    r"""Configuration of [`VanillaTransformerModel`] and [`VanillaTransformerForConditionalGeneration`].

    Args:
        vocab_size: size of the *shared* source/target subword vocabulary (section 3.4: one embedding
            matrix for encoder input, decoder input and the pre-softmax projection).
        d_model: model width, the paper's d_model (512 base, 1024 big).
        encoder_layers / decoder_layers: the paper's N (6).
        encoder_attention_heads / decoder_attention_heads: the paper's h (8 base, 16 big).
        qk_head_dim: the paper's d_k, the width of each head's queries and keys (section 3.2.2); None (default) is
            d_model / h, the paper's choice for its models. Table 3 row (B) sets it alone (16, 32).
        v_head_dim: the paper's d_v, the width of each head's values; None (default) is d_model / h. The names are
            transformers' own for a key width apart from the value width (DeepSeek-V3's configs).
        encoder_ffn_dim / decoder_ffn_dim: the paper's d_ff (2048 base, 4096 big), section 3.3.
        dropout: the paper's P_drop (0.1 base, 0.3 big): residual dropout on each sub-layer output
            and on the sum of embeddings and positional encodings (section 5.4).
        attention_dropout: dropout on the attention weights. Not in the paper's text (tensor2tensor
            has it); default 0.0.
        activation_dropout: dropout after the ReLU inside the FFN. Not in the paper's text; default 0.0.
        activation_function: the FFN non-linearity; the paper's is "relu" (section 3.3).
        max_position_embeddings: size of the position table. The sinusoidal encoding (section 3.5) is
            computed for any length, so this only bounds the *learned* variant and is used as the
            default maximum for tooling; sinusoidal models accept longer inputs.
        position_embedding_type: "sinusoidal" (paper, section 3.5) or "learned" (Table 3 row E).
        normalize_before: False = post-norm `LayerNorm(x + Dropout(Sublayer(x)))` (paper, section 3.1);
            True = pre-norm with a final LayerNorm after each stack (later tensor2tensor default).
        attention_bias: biases in W_Q, W_K, W_V, W_O. The paper does not say; tensor2tensor, the
            authors' code, has none, so default False.
        scale_embedding: multiply embeddings by sqrt(d_model) (section 3.4). Default True.
        tie_word_embeddings: three-way weight tying (section 3.4). Default True.
        init_std: std of the normal init of the embedding, N(0, d_model^-0.5) when None (tensor2tensor /
            fairseq); Linear layers use Xavier-uniform.
    """

    model_type = "vanilla-transformer"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]  # the cache's name before and since transformers 5.24
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    qk_head_dim: int | None = None
    v_head_dim: int | None = None
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    normalize_before: bool = False
    attention_bias: bool = False
    scale_embedding: bool = True
    init_std: float | None = None
    use_cache: bool = True
    is_encoder_decoder: bool = True
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1
    # `pipeline("translation", model=<checkpoint>, trust_remote_code=True)` reads this (transformers 5 has no
    # translation pipeline of its own): the class is in pipeline_vanilla_transformer.py, shipped with the model code.
    custom_pipelines: dict = field(
        default_factory=lambda: {
            "translation": {
                "impl": "pipeline_vanilla_transformer.TranslationPipeline",
                "pt": ["AutoModelForSeq2SeqLM"],
                "type": "text",
            }
        }
    )

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        # `@strict` runs every `validate_*` method after construction and `save_pretrained` runs them again, but wraps
        # their ValueError in huggingface_hub's StrictDataclassClassValidationError; run here first, a bad value is
        # refused with the ValueError that callers (and the command line's one-line errors) catch.
        self.validate_values()

    def to_dict(self):
        output = super().to_dict()
        # `pipeline()` turns the names under "pt" into classes, in place (transformers' `clean_custom_task`): write
        # the names back, so that a config that went through `pipeline(..., config=config)` still saves as JSON.
        for info in output.get("custom_pipelines", {}).values():
            info["pt"] = [c if isinstance(c, str) else c.__name__ for c in info.get("pt", ())]
        return output

    def input_length_limit(self, tokenizer=None) -> int:
        """The longest input, in tokens with `</s>`, that translation gives the model (`translate.translate`, the
        translation pipeline, the CTranslate2 export and the attention figures alike): the smaller of
        `max_position_embeddings` and the tokenizer's `model_max_length` (when set).

        Learned positions have no row past the table. Sinusoidal ones (section 3.5) are defined at any length, but
        `max_position_embeddings` is still the longest input the model is configured for: longer ones are given to it
        only when asked (the pipeline's `max_input_length=` or `truncation=False`). A method of the config, which
        every checkpoint ships, so that the pipeline file (remote code importing nothing of this package) and the
        package's modules read the one rule. What is done with a longer input is the pipeline file's `fit_source`.
        """
        limits = [self.max_position_embeddings]
        tokenizer_limit = getattr(tokenizer, "model_max_length", None)
        if tokenizer_limit is not None and tokenizer_limit < 10**9:  # "unset" is a huge int
            limits.append(tokenizer_limit)
        return min(limits)

    def head_dims(self, num_heads: int) -> tuple[int, int]:
        """(d_k, d_v) of an attention of `num_heads` heads (section 3.2.2): `qk_head_dim` and `v_head_dim`, each
        d_model / h where None."""
        derived = self.d_model // num_heads
        return self.qk_head_dim or derived, self.v_head_dim or derived

    @classmethod
    def from_table3(cls, row: str, **overrides) -> "VanillaTransformerConfig":
        """The model of Table 3's row `row` ("base", "A1".."A4", "B1", "B2", "C1".."C7", "D1".."D4", "E", "big"):
        the `base` preset with the row's change (`TABLE3_ROWS`), then `overrides` (the paper's `vocab_size=37000`)."""
        if row not in TABLE3_ROWS:
            raise ValueError(f"Unknown Table 3 row {row!r}: choose one of {list(TABLE3_ROWS)}.")
        return cls(**{**PRESETS["base"], **TABLE3_ROWS[row], **overrides})

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "VanillaTransformerConfig":
        """`base` / `big` (Table 3) or `small` (CPU), with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}: choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[name], **overrides})

    def validate_values(self):
        """The values the paper's model can be built with, each error naming the field and the fix: a class
        validator of transformers' strict configs, run at construction and again before `save_pretrained` writes (a
        config changed after construction is checked there)."""
        for name in (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ):
            check_positive_int(f"`{name}`", getattr(self, name))
        for name in ("qk_head_dim", "v_head_dim"):
            check_positive_int(f"`{name}`", getattr(self, name), none="None = d_model / h")
        derived = [name for name in ("qk_head_dim", "v_head_dim") if getattr(self, name) is None]
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, name)
            if derived and self.d_model % heads:
                raise ValueError(
                    f"`d_model` ({self.d_model}) must be divisible by `{name}` ({heads}) so that "
                    f"{' and '.join(derived)} = d_model / h is an integer (section 3.2.2): change one of them."
                )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"`{name}` must be in [0, 1), got {value!r}.")
        if self.position_embedding_type not in ("sinusoidal", "learned"):
            raise ValueError(
                f"`position_embedding_type` must be 'sinusoidal' (paper) or 'learned', got {self.position_embedding_type!r}."
            )
        if self.activation_function not in ("relu", "gelu", "silu", "swish", "gelu_new"):
            raise ValueError(
                f"`activation_function` {self.activation_function!r} is not supported; the paper's is 'relu'."
            )
        if self.init_std is not None and self.init_std <= 0:
            raise ValueError(f"`init_std` must be positive or None (None = d_model**-0.5), got {self.init_std!r}.")
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and 0 <= value < self.vocab_size):
                raise ValueError(
                    f"`{name}` ({value!r}) must be a token id inside the vocabulary [0, {self.vocab_size}): "
                    f"set it to the tokenizer's id or raise `vocab_size`."
                )
        if self.pad_token_id is None:
            raise ValueError("`pad_token_id` must be set: padding is masked in every attention (section 3.2.3).")
        if self.decoder_start_token_id is None:
            raise ValueError(
                "`decoder_start_token_id` must be set: the decoder input is the target shifted right, "
                "starting with a start token (section 3)."
            )


__all__ = ["VanillaTransformerConfig", "PRESETS", "TABLE3_ROWS", "TABLE3_LABEL_SMOOTHING"]
