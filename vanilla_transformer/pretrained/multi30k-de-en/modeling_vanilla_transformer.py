"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017, arXiv:1706.03762).

One self-contained modeling file in the style of transformers' `modeling_marian.py` / `modeling_bart.py`:
it imports only torch, transformers and its sibling `*_vanilla_transformer.py` files (relative imports), so that
`save_pretrained` after `register_for_auto_class` copies them into a checkpoint that loads with
`trust_remote_code=True` where this package is not installed.

Section numbers in comments are the paper's. The paper's choices are the defaults; every departure is a
config flag (see `VanillaTransformerConfig`).
"""

import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationConfig, GenerationMixin, LogitsProcessorList
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, is_torchdynamo_compiling
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vanilla_transformer import VanillaTransformerConfig

# Section 6.1's length penalty form and the decoding options' check, in a torch-free file beside this one (the command
# line imports it before torch is loaded; a relative import, so `save_pretrained` copies it with this file).
from .generation_vanilla_transformer import length_penalty_form

# The section 5.4 loss lives beside this file and ships with it (a relative import, copied by `save_pretrained`).
from .loss_vanilla_transformer import label_smoothed_cross_entropy, per_target_token

# Unused here: the import makes `save_pretrained` copy the translation pipeline next to this file (it copies the
# relative imports of the model code), for `pipeline("translation", model=<checkpoint>, trust_remote_code=True)`.
from .pipeline_vanilla_transformer import TranslationPipeline  # noqa: F401

# What `generate` hands off (section 6.1: the maximum output length, the GNMT beam search), beside this file as
# transformers keeps its search beside its models; with it, the cache's name in the running transformers release
# (5.24 renamed `past_key_values` to `cache`), which this file's inputs and outputs follow.
from .search_vanilla_transformer import (
    CACHE_NAME,
    SourceLengthLimit,
    cache_of,
    gnmt_beam_search,
    takes_cache,
    with_cache,
)


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder input = the target shifted right by one, starting with the start token (section 3, Fig. 1:
    "outputs (shifted right)"). Label positions ignored by the loss (-100) become padding."""
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    shifted.masked_fill_(shifted == -100, pad_token_id)
    return shifted


def sinusoidal_position_encoding(
    positions: torch.Tensor, d_model: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
    sin and cos interleaved. Computed on the fly for the positions asked for, so there is no maximum length
    (the paper's argument for the sinusoid: it "may allow the model to extrapolate to sequence lengths longer
    than the ones encountered during training") and no buffer for `from_pretrained` to leave uninitialised (it
    builds models on the meta device and restores only saved tensors). Returns `dtype` [len(positions), d_model]:
    the model asks for float32, or float64 when its embeddings are float64 (not float32 values there)."""
    two_i = torch.arange(0, d_model, 2, device=positions.device, dtype=dtype)
    inv_freq = torch.exp(two_i * (-math.log(10000.0) / d_model))  # 1 / 10000^(2i/d_model)
    angles = positions.to(dtype)[:, None] * inv_freq[None, :]  # [len, d_model / 2]
    # [len, d_model / 2, 2] -> [len, d_model]: sin at even features, cos at odd ones.
    return torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(1)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Unpack[TransformersKwargs],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Section 3.2.1: softmax(Q K^T / sqrt(d_k)) V. Masked positions get the dtype's most negative value before the
    softmax, so they get weight 0: `attention_mask` is transformers' additive float mask (0 / most negative, from
    `masking_utils`), or a boolean mask (True = may attend) for callers that pass one to a layer directly."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # [batch, heads, q, k]
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # [batch, q, heads, d_k]
    return output, weights


class VanillaTransformerAttention(nn.Module):
    """Multi-head attention (section 3.2.2): h heads, each with queries and keys of width d_k and values of width d_v
    (`config.head_dims`: d_model / h unless set, as in the paper's models; Table 3 (B) varies d_k), the projections
    W_Q, W_K of all heads as one d_model x h d_k matrix each and W_V as one d_model x h d_v, heads concatenated and
    projected back to d_model by W_O (h d_v x d_model). Biases only with `config.attention_bias` (tensor2tensor, the
    authors' code, has none). The attention itself goes through transformers' attention interface
    (`config._attn_implementation`: "sdpa" by default; "eager" returns the weights; flash and flex attention take the
    masks `masking_utils` builds for them)."""

    def __init__(self, config: VanillaTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int | None):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim, self.value_head_dim = config.head_dims(num_heads)  # d_k, d_v
        self.scaling = self.head_dim**-0.5  # 1 / sqrt(d_k)
        self.dropout = config.attention_dropout
        # Read by the sdpa / flash integrations when they get no mask (sdpa assumes causal if the attribute is
        # missing): only the decoder's self-attention is causal.
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.d_model, num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.d_model, num_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.d_model, num_heads * self.value_head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * self.value_head_dim, config.d_model, bias=bias)
        # W_Q, W_K, W_V are initialised as one stacked [3 d_model, d_model] Xavier-uniform matrix (gain 1/sqrt(2) per
        # matrix), as torch's nn.MultiheadAttention and fairseq draw them: half Xavier's variance per matrix, so the
        # initial attention logits have a quarter of the variance and the softmax starts near uniform rather than
        # saturated. Measured at fairseq's settings on Multi30k (docs/performance.md, "The race"): perplexity 169
        # after 280 updates, against 240 with plain Xavier per matrix, the cause of learning slower per update.
        for projection in (self.q_proj, self.k_proj, self.v_proj):
            projection.xavier_gain = 2**-0.5

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        batch, q_len = hidden_states.shape[:2]
        # [batch, q, d_model] -> [batch, heads, q, d_k]
        query = self.q_proj(hidden_states).view(batch, q_len, -1, self.head_dim).transpose(1, 2)

        layer_cache, is_updated = cache, False
        if isinstance(cache, EncoderDecoderCache):
            is_updated = is_cross_attention and cache.is_updated.get(self.layer_idx, False)
            layer_cache = cache.cross_attention_cache if is_cross_attention else cache.self_attention_cache

        if is_updated:
            # The encoder output does not change while decoding: its keys/values are computed once per layer
            # (first step) and reused.
            key = layer_cache.layers[self.layer_idx].keys
            value = layer_cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross_attention else hidden_states
            key = self.k_proj(source).view(batch, source.shape[1], -1, self.head_dim).transpose(1, 2)
            value = self.v_proj(source).view(batch, source.shape[1], -1, self.value_head_dim).transpose(1, 2)
            if layer_cache is not None:
                key, value = layer_cache.update(key, value, self.layer_idx)
                if is_cross_attention and isinstance(cache, EncoderDecoderCache):
                    cache.is_updated[self.layer_idx] = True

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = output.reshape(batch, q_len, -1).contiguous()  # heads concatenated: [batch, q, h d_v]
        return self.out_proj(output), weights


class VanillaTransformerFeedForward(nn.Module):
    """Section 3.3: FFN(x) = max(0, x W1 + b1) W2 + b2, inner size d_ff. `activation_dropout` (after the ReLU) is
    not in the paper's text; it defaults to 0."""

    def __init__(self, config: VanillaTransformerConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class VanillaTransformerLayer(GradientCheckpointingLayer):
    """What the encoder and decoder layers share (section 3.1): each sub-layer is wrapped as
    LayerNorm(x + Dropout(Sublayer(x))) (post-norm; the dropout is section 5.4's residual dropout). With
    `config.normalize_before` (not the paper; tensor2tensor's later default) the norm moves in front:
    x + Dropout(Sublayer(LayerNorm(x))), and each stack ends with a final norm."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.dropout = config.dropout
        self.normalize_before = config.normalize_before

    def sublayer_connection(
        self, hidden_states: torch.Tensor, layer_norm: nn.LayerNorm, sublayer: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """`sublayer` (attention or feed-forward) with its residual connection, residual dropout and `layer_norm`."""
        residual = hidden_states
        if self.normalize_before:
            hidden_states = layer_norm(hidden_states)
        hidden_states = nn.functional.dropout(sublayer(hidden_states), p=self.dropout, training=self.training)
        hidden_states = residual + hidden_states
        return hidden_states if self.normalize_before else layer_norm(hidden_states)


class VanillaTransformerEncoderLayer(VanillaTransformerLayer):
    """Section 3.1, encoder: multi-head self-attention, then the position-wise feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = VanillaTransformerAttention(config, config.encoder_attention_heads, False, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.ffn = VanillaTransformerFeedForward(config, config.encoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = self.sublayer_connection(
            hidden_states,
            self.self_attn_layer_norm,
            lambda x: self.self_attn(x, attention_mask=attention_mask, **kwargs)[0],
        )
        return self.sublayer_connection(hidden_states, self.final_layer_norm, self.ffn)


class VanillaTransformerDecoderLayer(VanillaTransformerLayer):
    """Section 3.1, decoder: masked multi-head self-attention, multi-head attention over the encoder output (queries
    from the decoder, keys and values from the final encoder layer), then the feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, True, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.encoder_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, False, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.ffn = VanillaTransformerFeedForward(config, config.decoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    @takes_cache("5.40.0")
    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        hidden_states = self.sublayer_connection(
            hidden_states,
            self.self_attn_layer_norm,
            lambda x: self.self_attn(x, attention_mask=attention_mask, cache=cache, **kwargs)[0],
        )
        hidden_states = self.sublayer_connection(
            hidden_states,
            self.encoder_attn_layer_norm,
            lambda x: self.encoder_attn(
                x, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask, cache=cache, **kwargs
            )[0],
        )
        return self.sublayer_connection(hidden_states, self.final_layer_norm, self.ffn)


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    config_class = VanillaTransformerConfig
    config: VanillaTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]
    # Masks come from transformers' `masking_utils`, which builds each implementation's own format (additive float
    # for eager, boolean or None for sdpa, padding-only for flash, BlockMask for flex).
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True

    # Set by `register_for_auto_class`: a `save_pretrained` of this class copies its code beside the weights.
    saves_its_code = False

    @classmethod
    def register_for_auto_class(cls, auto_class="AutoModel"):
        super().register_for_auto_class(auto_class)
        cls.saves_its_code = True

    def save_pretrained(self, save_directory, *args, **kwargs):
        # A checkpoint saved from the registered classes (importing the package registers them; a remote-code load
        # does too) names every Auto class in `auto_map`, not only the saved class's own, so that AutoConfig,
        # AutoModel and AutoModelForSeq2SeqLM all load it with `trust_remote_code=True`.
        if self.saves_its_code:
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
                "AutoModel": "modeling_vanilla_transformer.VanillaTransformerModel",
                "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
            }
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module):
        # fairseq's initialisation of the paper's model (the paper does not state one): Xavier-uniform projections
        # with zero biases (W_Q, W_K, W_V with their own gain, set by the attention), embeddings N(0, d_model^-0.5)
        # so that after the sqrt(d_model) scaling of section 3.4 they have unit variance, padding row zero.
        std = self.config.init_std if self.config.init_std is not None else self.config.d_model**-0.5
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight, gain=getattr(module, "xavier_gain", 1.0))
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                # The padding row zeroed through an init function given the whole weight, which leaves a loaded
                # weight alone as `normal_` did (given the row, it could not tell: a slice has no mark of loading).
                padding = torch.tensor([module.padding_idx], device=module.weight.device)
                init.copy_(module.weight, module.weight.index_fill(0, padding, 0.0))
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)


def _check_input_ids(ids: torch.Tensor, vocab_size: int, name: str) -> None:
    """Clear errors for token ids a user hands in. The shape and dtype checks read no data. The range check reads the
    ids, so it runs only where that is free: in eager mode on the CPU. On an accelerator it would be a host sync on
    every forward, and under `torch.compile` a graph break; there the tokenizer/model pairing is checked where data
    comes in (pipeline, `translate`, data loading)."""
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"`{name}` must hold integer token ids, got dtype {ids.dtype}: pass a torch.long tensor.")
    if ids.dim() != 2:
        raise ValueError(f"`{name}` must have shape [batch, sequence_length], got {tuple(ids.shape)}.")
    if ids.numel() == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(ids.shape)}): the batch needs at least one token.")
    if ids.device.type == "cpu" and not is_torchdynamo_compiling():
        bad = (ids < 0) | (ids >= vocab_size)
        if bad.any():
            raise ValueError(
                f"`{name}` contains token ids outside the vocabulary [0, {vocab_size}) (e.g. {ids[bad][0].item()}): "
                f"the tokenizer and the model do not match (check `len(tokenizer)` against `config.vocab_size`)."
            )


def _check_padding_mask(mask: torch.Tensor | None, shape: tuple[int, ...], name: str, check_rows: bool = True) -> None:
    """A user padding mask: [batch, length] of 1 (token) / 0 (padding). Same rule as `_check_input_ids`: the shape
    always, the values (every sequence keeps a token) in eager mode on the CPU."""
    if mask is None:
        return
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(
            f"`{name}` must have shape [batch, sequence_length] = {list(shape)} (1 for tokens, 0 for padding), got "
            f"{tuple(mask.shape)}."
        )
    if check_rows and mask.device.type == "cpu" and not is_torchdynamo_compiling() and not mask.bool().any(-1).all():
        raise ValueError(f"`{name}` masks every position of some sequence: each sequence needs at least one token.")


class VanillaTransformerStack(VanillaTransformerPreTrainedModel):
    """What the encoder and decoder stacks share (section 3.1): the shared embedding scaled by sqrt(d_model)
    (section 3.4), positions (section 3.5, or learned), N layers, and a final norm only for the pre-norm variant (the
    paper's post-norm stack ends with a layer's own norm). The token embedding is tied to the model's `shared` one."""

    def __init__(self, config: VanillaTransformerConfig, layer_class: type[nn.Module], num_layers: int):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = (
            nn.Embedding(config.max_position_embeddings, config.d_model)
            if config.position_embedding_type == "learned"
            else None
        )
        self.layers = nn.ModuleList([layer_class(config, i) for i in range(num_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model) if config.normalize_before else None
        self.gradient_checkpointing = False
        self.post_init()

    def embed(self, inputs_embeds: torch.Tensor, past_length: int) -> torch.Tensor:
        """Section 3.4: embeddings multiplied by sqrt(d_model); 3.5: positions added (continuing from the cache while
        decoding); 5.4: dropout on the sum."""
        length = inputs_embeds.shape[1]
        positions = torch.arange(past_length, past_length + length, device=inputs_embeds.device)
        if self.embed_positions is None:  # section 3.5, fixed sinusoids
            # In float32, or float64 for float64 embeddings (a float64 model computes nothing in float32).
            dtype = torch.promote_types(inputs_embeds.dtype, torch.float32)
            pe = sinusoidal_position_encoding(positions, inputs_embeds.shape[-1], dtype).to(inputs_embeds.dtype)
        else:  # learned positions (Table 3 row E), a table of max_position_embeddings rows
            table = self.embed_positions.num_embeddings
            if past_length + length > table:
                raise ValueError(
                    f"Sequence of {past_length + length} positions is longer than the learned position table "
                    f"(`max_position_embeddings`={table}): truncate the input (e.g. tokenizer max_length={table}) or "
                    f"use position_embedding_type='sinusoidal'."
                )
            pe = self.embed_positions(positions)
        hidden_states = inputs_embeds * self.embed_scale + pe.unsqueeze(0)
        return nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)


class VanillaTransformerEncoder(VanillaTransformerStack):
    """Section 3.1: a stack of N identical encoder layers over the scaled, position-encoded embeddings."""

    _can_record_outputs = {"hidden_states": VanillaTransformerEncoderLayer, "attentions": VanillaTransformerAttention}

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config, VanillaTransformerEncoderLayer, config.encoder_layers)

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds` to the encoder.")
        if inputs_embeds is None:
            _check_input_ids(input_ids, self.config.vocab_size, "input_ids")
            inputs_embeds = self.embed_tokens(input_ids)
        elif inputs_embeds.dim() != 3 or inputs_embeds.shape[1] == 0:
            raise ValueError(
                f"`inputs_embeds` must have shape [batch, length>0, d_model], got {tuple(inputs_embeds.shape)}."
            )
        _check_padding_mask(attention_mask, inputs_embeds.shape[:2], "attention_mask")

        hidden_states = self.embed(inputs_embeds, past_length=0)
        # Padding keys are masked in every attention (section 3.2.3).
        attention_mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VanillaTransformerDecoder(VanillaTransformerStack):
    """Section 3.1: a stack of N identical decoder layers; self-attention is causal (position i sees positions
    <= i), and cross-attention reads the final encoder output, the same for every layer."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerDecoderLayer,
        "attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config, VanillaTransformerDecoderLayer, config.decoder_layers)

    @capture_outputs
    @takes_cache("5.40.0")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `decoder_input_ids` and `decoder_inputs_embeds` to the decoder.")
        if encoder_hidden_states is None:
            raise ValueError(
                "The decoder needs `encoder_hidden_states` (or the model's `input_ids` / `encoder_outputs`)."
            )
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = cache.get_seq_length() if cache is not None else 0
        if inputs_embeds is None:
            # Later decoding steps feed back the model's own tokens: only the first step's ids need a check.
            if past_length == 0:
                _check_input_ids(input_ids, self.config.vocab_size, "decoder_input_ids")
            inputs_embeds = self.embed_tokens(input_ids)
        batch, length = inputs_embeds.shape[:2]
        if encoder_hidden_states.shape[0] != batch:
            raise ValueError(
                f"Batch size mismatch: the decoder input has {batch} sequences but the encoder output has "
                f"{encoder_hidden_states.shape[0]}: pass one target (decoder) sequence per source sequence."
            )
        if attention_mask is not None and past_length and attention_mask.shape[-1] == length:
            # A mask of only the new positions: the cached ones are real tokens.
            attention_mask = torch.cat([attention_mask.new_ones(batch, past_length), attention_mask], dim=-1)
        _check_padding_mask(attention_mask, (batch, past_length + length), "decoder_attention_mask", check_rows=False)
        # The encoder checked its mask's values; here only its shape (it is read again at every decoding step).
        _check_padding_mask(
            encoder_attention_mask, encoder_hidden_states.shape[:2], "attention_mask (encoder)", check_rows=False
        )

        hidden_states = self.embed(inputs_embeds, past_length)
        self_attention_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        # Section 3.2.3: "masking out (setting to -inf) all values in the input of the softmax which correspond to
        # illegal connections" (position i sees positions <= i), and padding keys in both attentions.
        causal_mask = create_causal_mask(self.config, inputs_embeds, attention_mask, self_attention_cache)
        encoder_attention_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, for gradient checkpointing
                encoder_attention_mask=encoder_attention_mask,
                cache=cache,
                **kwargs,
            )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return with_cache(BaseModelOutputWithPastAndCrossAttentions, cache, last_hidden_state=hidden_states)


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The encoder-decoder of section 3 (Figure 1) without the output projection. One embedding matrix, `shared`, is
    the input embedding of both stacks (section 3.4: a shared source-target vocabulary): each stack's `embed_tokens`
    is tied to it, so it is one tensor in memory and saved once."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = VanillaTransformerEncoder(config)
        self.decoder = VanillaTransformerDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    @can_return_tuple
    @takes_cache("5.40.0")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        r"""`kwargs` go to both stacks: `output_attentions` / `output_hidden_states` (collected by transformers'
        output capture; attention weights need `attn_implementation="eager"`: under sdpa transformers warns once and
        returns no weights, as for its own models), and attention-implementation arguments. `use_cache` defaults to
        `config.use_cache` in evaluation mode and to False in training mode, where a cache is never read. The cache
        is `cache`; `past_key_values` is its deprecated name, taken with transformers' warning as by its models."""
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                return_dict=True,
                **kwargs,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "Pass `decoder_input_ids` (the target shifted right, starting with `decoder_start_token_id`), or use "
                "VanillaTransformerForConditionalGeneration with `labels`, which builds them."
            )
        if use_cache is None:
            use_cache = self.config.use_cache and not self.training
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        return with_cache(
            Seq2SeqModelOutput,
            cache_of(decoder_outputs),
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The full model of Figure 1: encoder-decoder plus the pre-softmax linear transformation, which shares its weight
    with the two embedding layers (section 3.4, three-way tying)."""

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()
        # Section 6.1 decoding, shipped as generation_config.json (transformers ignores generation values in
        # config.json, and its default max_length of 20 would cut translations): beam 4, length penalty 0.6,
        # early termination, maximum output length = source length + 50 (see `generate`).
        # Built directly (not from the model config) so that the custom `source_length_offset` survives a reload.
        self.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
            num_beams=4,
            length_penalty=0.6,
            early_stopping=True,
            source_length_offset=50,
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    @takes_cache("5.40.0")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""`labels` [batch, target_length], padded with -100: the loss is the cross-entropy of the next token (the
        decoder input is the labels shifted right when none is given), in float32 whatever the logits' dtype, averaged
        over the target tokens, or summed and divided by `num_items_in_batch` when the Trainer passes it (the target
        tokens of the whole optimizer step), as transformers' own losses are. Section 5.4's label-smoothed loss is the
        trainer's (`training.trainer.LabelSmoothedLoss`), computed from the logits. Other `kwargs` as for
        `VanillaTransformerModel.forward`."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        # Section 3.4: the pre-softmax linear transformation is the (tied) embedding matrix.
        logits = self.lm_head(outputs.last_hidden_state)

        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:2]:  # shapes only: no host sync
                raise ValueError(
                    f"`labels` has shape {tuple(labels.shape)} but the decoder read {tuple(logits.shape[:2])} (batch, "
                    f"target length): pass `decoder_input_ids` made from these labels, or none (the model shifts the "
                    f"labels right itself)."
                )
            loss_sum, _, tokens = label_smoothed_cross_entropy(logits, labels)
            loss = per_target_token(loss_sum, tokens, num_items_in_batch)

        return with_cache(
            Seq2SeqLMOutput,
            cache_of(outputs),
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    @takes_cache("6.0.0")
    @torch.no_grad()
    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, logits_processor=None, **kwargs):
        """`GenerationMixin.generate`, with three additions.

        - The length penalty's form (`length_penalty_form`, "length" or "gnmt", section 6.1): the call's keyword, else
          the generation config's (the passed one's, else the model's), checked with its alpha (`check_decoding`);
          beam search in the "gnmt" form is the package's `gnmt_beam_search` (search_vanilla_transformer.py).

        - The paper's maximum output length (section 6.1: input length + 50), per sentence, when the call sets no
          length of its own: the generation config's `source_length_offset` (50 in the shipped config; None turns
          it off) is added to each source's length, taken from `attention_mask`, else from the non-padding
          `input_ids`, else from the length of `inputs_embeds` / `encoder_outputs`; with learned positions, capped
          at the position table.
        - Continuing from a returned cache: `decoder_input_ids` with the cache (`cache`; `past_key_values` with the
          deprecation warning of `GenerationMixin.generate`) are read as the whole target so far (as `generate`
          returns it), of which the cache holds a prefix. transformers tells that reading from a
          `decoder_attention_mask` covering the whole target; without one it would feed every target token again on
          top of the cache, so one is supplied. A cache that already holds every given token is cropped by one step,
          so that the last token is fed again and yields the next token's scores."""
        gen_config = generation_config if generation_config is not None else self.generation_config
        # The length penalty's form: the call's `length_penalty_form=`, else the generation config's (a named field;
        # transformers takes as keywords only the fields the model's config already has, so it is read here).
        named = kwargs.pop("length_penalty_form", None)
        for config in (generation_config, self.generation_config):
            named = named or getattr(config, "length_penalty_form", None)
        form = length_penalty_form(gen_config, length_penalty_form=named, length_penalty=kwargs.get("length_penalty"))
        offset = getattr(gen_config, "source_length_offset", None)
        explicit_length = any(kwargs.get(k) is not None for k in ("max_length", "max_new_tokens")) or (
            generation_config is not None and generation_config.max_new_tokens is not None
        )
        if offset is not None and not explicit_length:
            lengths = self._source_lengths(inputs if inputs is not None else kwargs.get("input_ids"), kwargs)
            if lengths is not None:
                # Learned positions (not the paper) end with their table: the start token and the output must fit.
                learned = self.config.position_embedding_type == "learned"
                cap = self.config.max_position_embeddings - 1 if learned else None
                limit = SourceLengthLimit(lengths, offset, self.config.eos_token_id, cap=cap)
                logits_processor = LogitsProcessorList([*(logits_processor or []), limit])
                kwargs["max_new_tokens"] = int(limit.limits.max())

        cache, target = kwargs.get("cache"), kwargs.get("decoder_input_ids")
        if cache is not None and target is not None and cache.get_seq_length() > 0:
            if cache.get_seq_length() >= target.shape[1]:
                cache.crop(target.shape[1] - 1 - cache.get_seq_length())  # (crop takes the number to drop, negated)
            if kwargs.get("decoder_attention_mask") is None:
                kwargs["decoder_attention_mask"] = torch.ones_like(target)
        if "cache" in kwargs:
            kwargs[CACHE_NAME] = kwargs.pop("cache")
        num_beams = kwargs.get("num_beams", gen_config.num_beams) or 1
        if form == "gnmt" and num_beams > 1 and kwargs.get("custom_generate") is None:
            # transformers' own beam search divides by length ** alpha, with no public way to change it: the GNMT form
            # runs the package's search, through `generate`'s public hook for a decoding loop (`custom_generate`),
            # after `generate` has prepared everything else (logits processors, stopping criteria, cache, encoder).
            kwargs["custom_generate"] = gnmt_beam_search
        return super().generate(
            inputs, generation_config=generation_config, logits_processor=logits_processor, **kwargs
        )

    def _source_lengths(self, source_ids: torch.Tensor | None, kwargs: dict) -> torch.Tensor | None:
        """Each source sentence's length in tokens, from whatever the `generate` call was given."""
        if kwargs.get("attention_mask") is not None:
            return kwargs["attention_mask"].long().sum(dim=-1)
        if source_ids is not None and source_ids.dim() == 2:
            return source_ids.ne(self.config.pad_token_id).long().sum(dim=-1)
        embeds = kwargs.get("inputs_embeds")
        if embeds is None and kwargs.get("encoder_outputs") is not None:
            embeds = kwargs["encoder_outputs"][0]
        if embeds is not None:
            return torch.full((embeds.shape[0],), embeds.shape[1], device=embeds.device)
        return None


__all__ = [
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "label_smoothed_cross_entropy",
    "shift_tokens_right",
    "sinusoidal_position_encoding",
]
