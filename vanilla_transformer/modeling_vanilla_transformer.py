"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017, arXiv:1706.03762).

One self-contained modeling file in the style of transformers' `modeling_marian.py` / `modeling_bart.py`:
it imports only torch, transformers and its sibling configuration file (relative import), so that
`save_pretrained` after `register_for_auto_class` copies it into a checkpoint that loads with
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
from transformers.generation import GenerationConfig, GenerationMixin, LogitsProcessor, LogitsProcessorList
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.utils import logging

from .configuration_vanilla_transformer import VanillaTransformerConfig
# Unused here: the import makes `save_pretrained` copy the translation pipeline next to this file (it copies the
# relative imports of the model code), for `pipeline("translation", model=<checkpoint>, trust_remote_code=True)`.
from .pipeline_vanilla_transformer import TranslationPipeline  # noqa: F401


logger = logging.get_logger(__name__)


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder input = the target shifted right by one, starting with the start token (section 3, Fig. 1:
    "outputs (shifted right)"). Label positions ignored by the loss (-100) become padding."""
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    shifted.masked_fill_(shifted == -100, pad_token_id)
    return shifted


def sinusoidal_position_encoding(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)),
    sin and cos interleaved. Computed on the fly for the positions asked for, so there is no maximum length
    (the paper's argument for the sinusoid: it "may allow the model to extrapolate to sequence lengths longer
    than the ones encountered during training") and no buffer that `from_pretrained` would leave
    uninitialised (HF_V5_NOTES fact 6). Returns float32 [len(positions), d_model]."""
    two_i = torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32)
    inv_freq = torch.exp(two_i * (-math.log(10000.0) / d_model))  # 1 / 10000^(2i/d_model)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    pe = torch.empty(positions.shape[0], d_model, device=positions.device, dtype=torch.float32)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Section 3.2.1: softmax(Q K^T / sqrt(d_k)) V. `attention_mask` is boolean, True = may attend; masked
    scores get the dtype's most negative value before the softmax, so they get weight 0."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class VanillaTransformerAttention(nn.Module):
    """Multi-head attention (section 3.2.2): h heads of d_k = d_v = d_model / h, the projections W_Q, W_K, W_V of
    all heads as one d_model x d_model matrix each, heads concatenated and projected by W_O. Biases only with
    `config.attention_bias` (tensor2tensor, the authors' code, has none). The attention itself goes through
    transformers' attention interface (`config._attn_implementation`: "sdpa" by default, "eager" returns the
    weights)."""

    def __init__(self, config: VanillaTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int | None):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5  # 1 / sqrt(d_k)
        self.dropout = config.attention_dropout
        # Read by the sdpa integration when no mask is given (HF_V5_NOTES fact 9): only the decoder's
        # self-attention is causal.
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.k_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.v_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.out_proj = nn.Linear(config.d_model, config.d_model, bias=bias)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        is_cross_attention = key_value_states is not None
        batch, q_len = hidden_states.shape[:2]
        query = self.q_proj(hidden_states).view(batch, q_len, -1, self.head_dim).transpose(1, 2)

        cache = None
        if past_key_values is not None:
            if isinstance(past_key_values, EncoderDecoderCache):
                cache = past_key_values.cross_attention_cache if is_cross_attention else past_key_values.self_attention_cache
            else:
                cache = past_key_values

        if is_cross_attention and cache is not None and past_key_values.is_updated.get(self.layer_idx):
            # The encoder output does not change while decoding: its keys/values are computed once per layer
            # (first step) and reused.
            key = cache.layers[self.layer_idx].keys
            value = cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross_attention else hidden_states
            kv_shape = (batch, source.shape[1], -1, self.head_dim)
            key = self.k_proj(source).view(kv_shape).transpose(1, 2)
            value = self.v_proj(source).view(kv_shape).transpose(1, 2)
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if is_cross_attention:
                    past_key_values.is_updated[self.layer_idx] = True

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
        output = output.reshape(batch, q_len, -1).contiguous()
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


class _SublayerMixin:
    """Section 3.1: each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) (post-norm, section 5.4 for the
    dropout). With `normalize_before` (not the paper): x + Dropout(Sublayer(LayerNorm(x)))."""

    def _residual(self, x: torch.Tensor, norm: nn.LayerNorm, sublayer: Callable) -> tuple[torch.Tensor, object]:
        out, extra = sublayer(norm(x) if self.normalize_before else x)
        x = x + nn.functional.dropout(out, p=self.dropout, training=self.training)
        return (x if self.normalize_before else norm(x)), extra


class VanillaTransformerEncoderLayer(_SublayerMixin, GradientCheckpointingLayer):
    """Section 3.1, encoder: multi-head self-attention, then the position-wise feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__()
        self.dropout = config.dropout
        self.normalize_before = config.normalize_before
        self.self_attn = VanillaTransformerAttention(config, config.encoder_attention_heads, False, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.ffn = VanillaTransformerFeedForward(config, config.encoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        hidden_states, attn_weights = self._residual(
            hidden_states,
            self.self_attn_layer_norm,
            lambda x: self.self_attn(x, attention_mask=attention_mask, **kwargs),
        )
        hidden_states, _ = self._residual(hidden_states, self.final_layer_norm, lambda x: (self.ffn(x), None))
        return hidden_states, attn_weights


class VanillaTransformerDecoderLayer(_SublayerMixin, GradientCheckpointingLayer):
    """Section 3.1, decoder: masked multi-head self-attention, multi-head attention over the encoder output (queries
    from the decoder, keys and values from the final encoder layer), then the feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int):
        super().__init__()
        self.dropout = config.dropout
        self.normalize_before = config.normalize_before
        self.self_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, True, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.encoder_attn = VanillaTransformerAttention(config, config.decoder_attention_heads, False, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.ffn = VanillaTransformerFeedForward(config, config.decoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ):
        hidden_states, self_weights = self._residual(
            hidden_states,
            self.self_attn_layer_norm,
            lambda x: self.self_attn(x, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs),
        )
        hidden_states, cross_weights = self._residual(
            hidden_states,
            self.encoder_attn_layer_norm,
            lambda x: self.encoder_attn(
                x,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                past_key_values=past_key_values,
                **kwargs,
            ),
        )
        hidden_states, _ = self._residual(hidden_states, self.final_layer_norm, lambda x: (self.ffn(x), None))
        return hidden_states, self_weights, cross_weights


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    config_class = VanillaTransformerConfig
    config: VanillaTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]
    # Masks are built here as boolean [batch, 1, q, k] tensors (True = attend), which the eager and sdpa paths
    # take; flash / flex attention would need other formats and are not claimed.
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False

    def save_pretrained(self, save_directory, *args, **kwargs):
        # A checkpoint saved from the registered classes (importing the package registers them; a remote-code load
        # does too) names every Auto class in `auto_map`, not only the saved class's own, so that AutoConfig,
        # AutoModel and AutoModelForSeq2SeqLM all load it with `trust_remote_code=True`.
        if self._auto_class is not None:
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
                "AutoModel": "modeling_vanilla_transformer.VanillaTransformerModel",
                "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
            }
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module):
        # tensor2tensor / fairseq initialisation of the paper's model (the paper does not state one):
        # Xavier-uniform projections with zero biases, embeddings N(0, d_model^-0.5) so that after the
        # sqrt(d_model) scaling of section 3.4 they have unit variance, padding row zero.
        std = self.config.init_std if self.config.init_std is not None else self.config.d_model**-0.5
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            # (the flag check is explicit because slicing loses it; as in PreTrainedModel._init_weights)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)


def _check_token_ids(ids: torch.Tensor, vocab_size: int, name: str) -> None:
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"`{name}` must hold integer token ids, got dtype {ids.dtype}: pass a torch.long tensor.")
    if ids.dim() != 2:
        raise ValueError(f"`{name}` must have shape [batch, sequence_length], got {tuple(ids.shape)}.")
    if ids.numel() == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(ids.shape)}): the batch needs at least one token.")
    if bool(((ids < 0) | (ids >= vocab_size)).any()):
        bad = ids[(ids < 0) | (ids >= vocab_size)]
        raise ValueError(
            f"`{name}` contains token ids outside the vocabulary [0, {vocab_size}) (e.g. {bad[0].item()}): the "
            f"tokenizer and the model do not match (check `len(tokenizer)` against `config.vocab_size`)."
        )


def _check_padding_mask(
    mask: torch.Tensor | None, batch: int, length: int, name: str, validate: bool = True
) -> torch.Tensor | None:
    """A user padding mask: [batch, length] of 1 (token) / 0 (padding). Returned as bool, or None when nothing is
    padded (so that sdpa can take its unmasked kernels)."""
    if mask is None:
        return None
    if mask.dim() != 2 or mask.shape[0] != batch or mask.shape[1] != length:
        raise ValueError(
            f"`{name}` must have shape [batch, sequence_length] = [{batch}, {length}] (1 for tokens, 0 for padding), "
            f"got {tuple(mask.shape)}."
        )
    mask = mask.bool() if mask.dtype == torch.bool else mask != 0
    if validate and not bool(mask.any(dim=-1).all()):
        raise ValueError(f"`{name}` masks every position of some sequence: each sequence needs at least one token.")
    return None if bool(mask.all()) else mask


class _Stack(nn.Module):
    """What the encoder and decoder stacks share (section 3.1): the shared embedding scaled by sqrt(d_model)
    (section 3.4), positions (section 3.5, or learned), N layers, and a final norm only for the pre-norm variant (the
    paper's post-norm stack ends with a layer's own norm)."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding, layer_class, num_layers: int):
        super().__init__()
        self.config = config
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = (
            nn.Embedding(config.max_position_embeddings, config.d_model)
            if config.position_embedding_type == "learned"
            else None
        )
        self.layers = nn.ModuleList([layer_class(config, i) for i in range(num_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model) if config.normalize_before else None
        self.gradient_checkpointing = False

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def _add_positions(self, embeds: torch.Tensor, past_length: int) -> torch.Tensor:
        length = embeds.shape[1]
        positions = torch.arange(past_length, past_length + length, device=embeds.device)
        if self.embed_positions is None:  # section 3.5, fixed sinusoids
            pe = sinusoidal_position_encoding(positions, embeds.shape[-1]).to(embeds.dtype)
        else:  # learned positions (Table 3 row E), a table of max_position_embeddings rows
            table = self.embed_positions.num_embeddings
            if past_length + length > table:
                raise ValueError(
                    f"Sequence of {past_length + length} positions is longer than the learned position table "
                    f"(`max_position_embeddings`={table}): truncate the input (e.g. tokenizer max_length={table}) or "
                    f"use position_embedding_type='sinusoidal'."
                )
            pe = self.embed_positions(positions)
        return embeds + pe.unsqueeze(0)


class VanillaTransformerEncoder(_Stack):
    """Section 3.1: a stack of N identical encoder layers over the scaled, position-encoded embeddings."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens, VanillaTransformerEncoderLayer, config.encoder_layers)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds` to the encoder.")
        if inputs_embeds is None:
            _check_token_ids(input_ids, self.config.vocab_size, "input_ids")
            inputs_embeds = self.embed_tokens(input_ids)
        elif inputs_embeds.dim() != 3 or inputs_embeds.shape[1] == 0:
            raise ValueError(f"`inputs_embeds` must have shape [batch, length>0, d_model], got {tuple(inputs_embeds.shape)}.")
        batch, length = inputs_embeds.shape[:2]
        padding = _check_padding_mask(attention_mask, batch, length, "attention_mask")
        # Padding keys are masked in every attention (section 3.2.3); [batch, 1, 1, src] broadcasts over queries.
        mask = None if padding is None else padding[:, None, None, :]
        output_attentions, output_hidden_states = _output_flags(self.config, output_attentions, output_hidden_states)

        # Section 3.4: embeddings multiplied by sqrt(d_model); 3.5: positions added; 5.4: dropout on the sum.
        hidden_states = self._add_positions(inputs_embeds * self.embed_scale, 0)
        hidden_states = nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)

        all_hidden, all_attn = (), ()
        for layer in self.layers:
            if output_hidden_states:
                all_hidden += (hidden_states,)
            hidden_states, weights = layer(hidden_states, mask, **_attn_kwargs(output_attentions))
            if output_attentions:
                all_attn += (weights,)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        if output_hidden_states:
            all_hidden += (hidden_states,)
        out = BaseModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden or None,
            attentions=all_attn or None,
        )
        return out if _return_dict(self.config, return_dict) else out.to_tuple()


class VanillaTransformerDecoder(_Stack):
    """Section 3.1: a stack of N identical decoder layers; self-attention is causal (position i sees positions
    <= i), and cross-attention reads the final encoder output, the same for every layer."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding):
        super().__init__(config, embed_tokens, VanillaTransformerDecoderLayer, config.decoder_layers)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `decoder_input_ids` and `decoder_inputs_embeds` to the decoder.")
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        # Inputs are validated on the first step; later decoding steps feed back the model's own tokens, and each
        # check is a host sync on an accelerator.
        first_step = past_length == 0
        if inputs_embeds is None:
            if first_step:
                _check_token_ids(input_ids, self.config.vocab_size, "decoder_input_ids")
            inputs_embeds = self.embed_tokens(input_ids)
        batch, length = inputs_embeds.shape[:2]
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs `encoder_hidden_states` (or the model's `input_ids` / `encoder_outputs`).")
        if encoder_hidden_states.shape[0] != batch:
            raise ValueError(
                f"Batch size mismatch: the decoder input has {batch} sequences but the encoder output has "
                f"{encoder_hidden_states.shape[0]}: pass one target (decoder) sequence per source sequence."
            )
        output_attentions, output_hidden_states = _output_flags(self.config, output_attentions, output_hidden_states)

        self_mask = self._self_attention_mask(attention_mask, batch, length, past_length, inputs_embeds.device)
        enc_padding = _check_padding_mask(
            encoder_attention_mask, batch, encoder_hidden_states.shape[1], "attention_mask (encoder)", validate=first_step
        )
        cross_mask = None if enc_padding is None else enc_padding[:, None, None, :]

        # Positions continue from the cache during incremental decoding.
        hidden_states = self._add_positions(inputs_embeds * self.embed_scale, past_length)
        hidden_states = nn.functional.dropout(hidden_states, p=self.config.dropout, training=self.training)

        all_hidden, all_self, all_cross = (), (), ()
        for layer in self.layers:
            if output_hidden_states:
                all_hidden += (hidden_states,)
            hidden_states, self_w, cross_w = layer(
                hidden_states,
                self_mask,
                encoder_hidden_states,  # positional, for gradient checkpointing
                encoder_attention_mask=cross_mask,
                past_key_values=past_key_values,
                **_attn_kwargs(output_attentions),
            )
            if output_attentions:
                all_self += (self_w,)
                all_cross += (cross_w,)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        if output_hidden_states:
            all_hidden += (hidden_states,)
        out = BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            past_key_values=past_key_values if use_cache else None,
            hidden_states=all_hidden or None,
            attentions=all_self or None,
            cross_attentions=all_cross or None,
        )
        return out if _return_dict(self.config, return_dict) else out.to_tuple()

    def _self_attention_mask(self, attention_mask, batch, length, past_length, device) -> torch.Tensor | None:
        """Causal mask (section 3.2.3: "masking out (setting to -inf) all values in the input of the softmax which
        correspond to illegal connections"), combined with decoder padding, as bool [batch, 1, q, past + q].
        Returns None where sdpa's own `is_causal` (or no mask at all, for a single query) is exactly right."""
        total = past_length + length
        padding = None
        if attention_mask is not None:
            if attention_mask.dim() != 2 or attention_mask.shape[0] != batch or attention_mask.shape[1] not in (length, total):
                raise ValueError(
                    f"`decoder_attention_mask` must have shape [batch, target_length] = [{batch}, {length}] (or "
                    f"[{batch}, {total}] including cached positions), got {tuple(attention_mask.shape)}."
                )
            padding = attention_mask.bool() if attention_mask.dtype == torch.bool else attention_mask != 0
            if padding.shape[1] == length and past_length:
                padding = torch.cat([padding.new_ones(batch, past_length), padding], dim=1)
            if bool(padding.all()):
                padding = None
        if padding is None and self.config._attn_implementation == "sdpa" and (length == 1 or past_length == 0):
            return None
        query_pos = torch.arange(past_length, total, device=device)
        causal = query_pos[:, None] >= torch.arange(total, device=device)[None, :]  # [q, k]
        mask = causal[None, None, :, :].expand(batch, 1, length, total)
        if padding is not None:
            mask = mask & padding[:, None, None, :]
            # A query row whose every key is masked (left padding before the first token) would give NaN in
            # sdpa; let it see itself. Its output is padding and never used.
            mask = mask | (~mask.any(dim=-1, keepdim=True) & (query_pos[None, None, :, None] == torch.arange(total, device=device)))
        return mask


def _output_flags(config, output_attentions, output_hidden_states):
    output_attentions = config.output_attentions if output_attentions is None else output_attentions
    output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
    if output_attentions and config._attn_implementation != "eager":
        raise ValueError(
            f"`output_attentions=True` needs the eager attention path, but the model uses "
            f"{config._attn_implementation!r}: load it with `attn_implementation='eager'` or call "
            f"`model.set_attn_implementation('eager')`."
        )
    return bool(output_attentions), bool(output_hidden_states)


def _attn_kwargs(output_attentions: bool) -> dict:
    # What the layers pass on to the attention functions: only whether weights are wanted (the bookkeeping kwargs
    # that generation passes, e.g. `cache_position` for remote code, stop at the stacks).
    return {"output_attentions": output_attentions} if output_attentions else {}


def _return_dict(config, return_dict):
    return config.return_dict if return_dict is None else return_dict


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The encoder-decoder of section 3 (Figure 1) without the output projection. One embedding matrix, `shared`, is
    the input embedding of both stacks (section 3.4: a shared source-target vocabulary)."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = VanillaTransformerEncoder(config, self.shared)
        self.decoder = VanillaTransformerDecoder(config, self.shared)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput | tuple:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
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
        use_cache = self.config.use_cache if use_cache is None else use_cache
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        out = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return out if _return_dict(self.config, return_dict) else out.to_tuple()


class SourceLengthLimit(LogitsProcessor):
    """Section 6.1: "We set the maximum output length during inference to input length + 50". Forces `</s>` once a
    hypothesis has `source_length + offset` tokens, per sentence, so that a sentence in a padded batch stops where
    it would stop alone. Rows are the batch expanded by beams / returned sequences (batch-major)."""

    def __init__(self, source_lengths: torch.Tensor, offset: int, eos_token_id: int, start_length: int = 1):
        self.limits = source_lengths.long() + offset
        self.eos_token_id = eos_token_id
        self.start_length = start_length  # the decoder start token is not part of the output

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        limits = self.limits.to(input_ids.device).repeat_interleave(input_ids.shape[0] // self.limits.shape[0])
        generated = input_ids.shape[1] - self.start_length
        done = generated >= limits - 1  # the next token is the last one allowed: it must be </s>
        if bool(done.any()):
            forced = torch.full_like(scores[done], torch.finfo(scores.dtype).min)
            forced[:, self.eos_token_id] = 0.0
            scores = scores.clone()
            scores[done] = forced
        return scores


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

    def get_input_embeddings(self):
        return self.model.shared

    def set_input_embeddings(self, value):
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def get_encoder(self, modality: str | None = None):
        return self.model.encoder

    def get_decoder(self, modality: str | None = None):
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput | tuple:
        r"""`labels` [batch, target_length], padded with -100: the loss is the cross-entropy of the next token,
        averaged over target tokens (or summed and divided by `num_items_in_batch` when the Trainer passes it, so
        that gradient accumulation and data parallelism give the same loss and gradients; HF_V5_NOTES fact 7).
        Label smoothing (section 5.4) is applied by the trainer, which also reports this plain NLL."""
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
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **kwargs,
        )
        # Section 3.4: the pre-softmax linear transformation is the (tied) embedding matrix.
        logits = self.lm_head(outputs.last_hidden_state)

        loss = None
        if labels is not None:
            if labels.shape[0] != logits.shape[0]:
                raise ValueError(f"`labels` has {labels.shape[0]} rows but the batch has {logits.shape[0]}.")
            loss = nn.functional.cross_entropy(
                logits.float().view(-1, logits.shape[-1]), labels.to(logits.device).view(-1),
                ignore_index=-100, reduction="sum",
            )
            denominator = num_items_in_batch if num_items_in_batch is not None else (labels != -100).sum()
            if isinstance(denominator, torch.Tensor):
                denominator = denominator.to(loss.device)
            loss = loss / denominator

        out = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )
        return out if _return_dict(self.config, return_dict) else out.to_tuple()

    @torch.no_grad()
    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, logits_processor=None, **kwargs):
        """`GenerationMixin.generate`, with the paper's maximum output length (section 6.1: input length + 50) applied
        per sentence when the call sets no length of its own: the generation config's `source_length_offset` (50 in
        the shipped config; None to turn this off) is added to each source's length."""
        gen_config = generation_config if generation_config is not None else self.generation_config
        offset = getattr(gen_config, "source_length_offset", None)
        explicit_length = any(kwargs.get(k) is not None for k in ("max_length", "max_new_tokens")) or (
            generation_config is not None and generation_config.max_new_tokens is not None
        )
        source = inputs if inputs is not None else kwargs.get("input_ids")
        if offset is not None and not explicit_length and source is not None and source.dim() == 2:
            mask = kwargs.get("attention_mask")
            if mask is None:
                mask = source.ne(self.config.pad_token_id)
            lengths = mask.long().sum(dim=-1)
            limit = SourceLengthLimit(lengths, offset, self.config.eos_token_id)
            logits_processor = LogitsProcessorList([*(logits_processor or []), limit])
            kwargs["max_new_tokens"] = int(lengths.max().item()) + offset
        return super().generate(
            inputs, generation_config=generation_config, logits_processor=logits_processor, **kwargs
        )


__all__ = [
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "shift_tokens_right",
    "sinusoidal_position_encoding",
]
