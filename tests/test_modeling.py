"""The model against independent references: torch.nn.Transformer*Layer, the paper's formulas, Table 3's parameter
counts, and itself across cache / attention implementation / save-load / remote code."""

import contextlib
import json
import math
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from helpers import BLOCK_PACKAGE, TINY_SIZES, subprocess_env
from huggingface_hub.errors import StrictDataclassClassValidationError
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import MarianConfig, MarianMTModel
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import Seq2SeqLMOutput

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    loss_vanilla_transformer,
    shipped_model_path,
)
from vanilla_transformer.configuration_vanilla_transformer import TABLE3_LABEL_SMOOTHING, TABLE3_ROWS
from vanilla_transformer.modeling_vanilla_transformer import (
    CACHE_NAME,
    cache_of,
    label_smoothed_cross_entropy,
    sinusoidal_position_encoding,
)


# Two layers and four heads a side (the attention shapes asserted below count them); no dropout.
TINY = dict(
    TINY_SIZES,
    vocab_size=97,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    dropout=0.0,
)


def tiny_model(attn="sdpa", seed=0, **overrides):
    torch.manual_seed(seed)
    config = VanillaTransformerConfig(**{**TINY, **overrides}, attn_implementation=attn)
    return VanillaTransformerForConditionalGeneration(config).eval()


def padded_batch(seed=1, lengths=(7, 4, 9), vocab=97):
    """Source batch with right padding (pad id 0), every sentence ending in </s> (2)."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        ids[i, n - 1] = 2
    return ids, ids.ne(0).long()


# --- fidelity against torch.nn reference layers (section 3.1, post-norm, ReLU) -------------------------------------


def _copy_attention(ours, theirs, bias):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
            theirs.out_proj.bias.copy_(ours.out_proj.bias)
        else:
            theirs.in_proj_bias.zero_()
            theirs.out_proj.bias.zero_()


def _copy_ffn_norms(ours, theirs, norm_pairs):
    with torch.no_grad():
        theirs.linear1.weight.copy_(ours.ffn.fc1.weight)
        theirs.linear1.bias.copy_(ours.ffn.fc1.bias)
        theirs.linear2.weight.copy_(ours.ffn.fc2.weight)
        theirs.linear2.bias.copy_(ours.ffn.fc2.bias)
        for mine, ref in norm_pairs:
            # Random affine parameters so that the norms are really compared.
            mine.weight.uniform_(0.5, 1.5)
            mine.bias.uniform_(-0.5, 0.5)
            ref.weight.copy_(mine.weight)
            ref.bias.copy_(mine.bias)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("bias", [False, True])
def test_encoder_layer_matches_torch_transformer_encoder_layer(attn, bias):
    model = tiny_model(attn, attention_bias=bias)
    ours = model.model.encoder.layers[0]
    ref = torch.nn.TransformerEncoderLayer(
        32, 4, dim_feedforward=64, dropout=0.0, activation="relu", batch_first=True, norm_first=False
    ).eval()
    _copy_attention(ours.self_attn, ref.self_attn, bias)
    _copy_ffn_norms(ours, ref, [(ours.self_attn_layer_norm, ref.norm1), (ours.final_layer_norm, ref.norm2)])

    torch.manual_seed(3)
    x = torch.randn(3, 9, 32)
    _, mask = padded_batch()
    keep = mask.bool()
    with torch.no_grad():
        got = ours(x, keep[:, None, None, :])
        # The torch fast path only triggers under no_grad+eval with nested tensors; disable it to compare the math.
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            want = ref(x, src_key_padding_mask=~keep)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    assert torch.allclose(got[keep], want[keep], atol=1e-5, rtol=0), (got[keep] - want[keep]).abs().max()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("bias", [False, True])
def test_decoder_layer_matches_torch_transformer_decoder_layer(attn, bias):
    model = tiny_model(attn, attention_bias=bias)
    ours = model.model.decoder.layers[0]
    ref = torch.nn.TransformerDecoderLayer(
        32, 4, dim_feedforward=64, dropout=0.0, activation="relu", batch_first=True, norm_first=False
    ).eval()
    _copy_attention(ours.self_attn, ref.self_attn, bias)
    _copy_attention(ours.encoder_attn, ref.multihead_attn, bias)
    _copy_ffn_norms(
        ours,
        ref,
        [
            (ours.self_attn_layer_norm, ref.norm1),
            (ours.encoder_attn_layer_norm, ref.norm2),
            (ours.final_layer_norm, ref.norm3),
        ],
    )
    torch.manual_seed(4)
    memory = torch.randn(3, 9, 32)
    _, src_mask = padded_batch()
    tgt = torch.randn(3, 6, 32)
    tgt_keep = torch.tensor([[1] * 6, [1] * 3 + [0] * 3, [1] * 5 + [0]]).bool()
    causal = torch.tril(torch.ones(6, 6, dtype=torch.bool))
    self_mask = causal[None, None] & tgt_keep[:, None, None, :]
    with torch.no_grad():
        got = ours(tgt, self_mask, memory, encoder_attention_mask=src_mask.bool()[:, None, None, :])
        want = ref(
            tgt,
            memory,
            tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(6),
            tgt_key_padding_mask=~tgt_keep,
            memory_key_padding_mask=~src_mask.bool(),
        )
    assert torch.allclose(got[tgt_keep], want[tgt_keep], atol=1e-5, rtol=0), (
        (got[tgt_keep] - want[tgt_keep]).abs().max()
    )


def test_positional_encoding_is_the_papers_formula():
    d = 16
    positions = torch.arange(0, 60)
    pe = sinusoidal_position_encoding(positions, d)
    for pos in range(60):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_embeddings_scaled_by_sqrt_d_model_plus_positions():
    model = tiny_model("eager")
    ids, mask = padded_batch()
    out = model.model.encoder(ids, attention_mask=mask, output_hidden_states=True)
    expected = model.model.shared(ids) * math.sqrt(32) + sinusoidal_position_encoding(torch.arange(ids.shape[1]), 32)
    assert torch.allclose(out.hidden_states[0], expected, atol=1e-6)
    unscaled = tiny_model("eager", scale_embedding=False).model.encoder(ids, output_hidden_states=True)
    assert not torch.allclose(unscaled.hidden_states[0], expected, atol=1e-3)


def test_a_float64_model_adds_positions_computed_in_float64():
    """Not float32 values cast up (1e-8 off): the train command's float64 check needs nothing computed in float32."""
    model = tiny_model("eager").double()
    ids, mask = padded_batch()
    out = model.model.encoder(ids, attention_mask=mask, output_hidden_states=True)
    positions = torch.arange(ids.shape[1])
    pe = sinusoidal_position_encoding(positions, 32, torch.float64)
    assert pe.dtype == out.hidden_states[0].dtype == torch.float64
    embedded = model.model.shared(ids) * math.sqrt(32)
    assert torch.allclose(out.hidden_states[0], embedded + pe, rtol=0, atol=1e-12)
    from_float32 = embedded + sinusoidal_position_encoding(positions, 32).double()
    assert not torch.allclose(out.hidden_states[0], from_float32, rtol=0, atol=1e-12)


def test_sinusoidal_model_takes_sequences_longer_than_max_position_embeddings():
    model = tiny_model(max_position_embeddings=8)
    ids = torch.randint(4, 97, (1, 40))
    logits = model(input_ids=ids, decoder_input_ids=ids).logits
    assert logits.shape == (1, 40, 97) and torch.isfinite(logits).all()


def test_three_embeddings_are_one_tensor_in_memory_and_in_the_file(tmp_path):
    model = tiny_model()
    shared = model.model.shared.weight
    assert model.lm_head.weight is shared
    assert model.model.encoder.embed_tokens.weight is shared and model.model.decoder.embed_tokens.weight is shared
    model.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = list(f.keys())
    assert [k for k in keys if "embed" in k or "shared" in k or "lm_head" in k] == ["model.shared.weight"]
    reloaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)
    assert reloaded.lm_head.weight is reloaded.model.shared.weight
    assert reloaded.model.encoder.embed_tokens.weight is reloaded.model.shared.weight
    assert torch.equal(reloaded.model.shared.weight, shared)
    # A gradient step moves all three uses together.
    assert reloaded.model.decoder.embed_tokens.weight.data_ptr() == reloaded.lm_head.weight.data_ptr()


# Table 3's "params x10^6" column, for the rows that give one (the others have base's count or none).
TABLE3_PARAMS = {
    "base": 65,
    **{"B1": 58, "B2": 60},
    **{"C1": 36, "C2": 50, "C3": 80, "C4": 28, "C5": 168, "C6": 53, "C7": 90},
    "big": 213,
}


def table3_count(config) -> int:
    """Exact arithmetic of the architecture: the shared embedding once; per attention W_Q, W_K (d x h d_k), W_V
    (d x h d_v), W_O (h d_v x d); per FFN 2 d d_ff + d_ff + d; per LayerNorm 2 d; learned position tables."""
    d, v = config.d_model, config.vocab_size

    def attention(heads):
        d_k, d_v = config.head_dims(heads)
        return 2 * d * heads * d_k + 2 * d * heads * d_v

    ffn = 2 * d * config.encoder_ffn_dim + config.encoder_ffn_dim + d
    enc = attention(config.encoder_attention_heads) + ffn + 2 * 2 * d
    dec = 2 * attention(config.decoder_attention_heads) + ffn + 3 * 2 * d
    positions = 2 * config.max_position_embeddings * d if config.position_embedding_type == "learned" else 0
    return v * d + config.encoder_layers * enc + config.decoder_layers * dec + positions


@pytest.mark.parametrize("row", list(TABLE3_ROWS))
def test_every_table_3_row_is_a_config_with_the_papers_parameter_count(row):
    """Each row at the paper's size with its 37,000-token shared vocabulary, counted on the meta device (tied
    weights once): the architecture's exact count, within 3M or 5% of the column (the paper rounds and does not say
    how it counted; docs/model.md gives each count)."""
    config = VanillaTransformerConfig.from_table3(row, vocab_size=37000)
    with torch.device("meta"):
        model = VanillaTransformerForConditionalGeneration(config)
    count = model.num_parameters()
    assert count == table3_count(config)
    paper = TABLE3_PARAMS.get(row, 65 if row != "E" else None)  # rows (A), (D): base's count, the column blank
    if paper is not None:
        assert abs(count - paper * 1e6) <= max(3e6, 0.05 * paper * 1e6), (row, count)
    base = VanillaTransformerConfig.from_preset("base")
    changed = {k for k in config.to_dict() if k != "vocab_size" and getattr(config, k) != getattr(base, k, None)}
    assert changed == {k for k, v in TABLE3_ROWS[row].items() if getattr(base, k) != v}


def test_table_3_rows_change_what_the_paper_changes():
    heads_and_widths = {
        row: (config.encoder_attention_heads, *config.head_dims(config.encoder_attention_heads))
        for row in ("base", "A1", "A2", "A3", "A4", "B1", "B2", "C4", "C5", "big")
        for config in [VanillaTransformerConfig.from_table3(row)]
    }
    assert heads_and_widths == {
        "base": (8, 64, 64),
        **{"A1": (1, 512, 512), "A2": (4, 128, 128), "A3": (16, 32, 32), "A4": (32, 16, 16)},
        **{"B1": (8, 16, 64), "B2": (8, 32, 64)},
        **{"C4": (8, 32, 32), "C5": (8, 128, 128)},
        "big": (16, 64, 64),
    }
    assert TABLE3_LABEL_SMOOTHING == {"D3": 0.0, "D4": 0.2}
    with pytest.raises(ValueError, match="Unknown Table 3 row 'F'"):
        VanillaTransformerConfig.from_table3("F")


def test_output_projection_uses_the_embedding():
    model = tiny_model()
    ids, mask = padded_batch()
    out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids, output_hidden_states=True)
    expected = out.decoder_hidden_states[-1] @ model.model.shared.weight.T
    assert torch.allclose(out.logits, expected, atol=1e-5)


# --- loss ---------------------------------------------------------------------------------------------------------


def test_loss_is_token_mean_cross_entropy_of_shifted_labels():
    model = tiny_model()
    ids, mask = padded_batch()
    labels = torch.tensor([[10, 11, 12, 2], [13, 2, -100, -100], [14, 15, 2, -100]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    decoder_input = torch.tensor([[1, 10, 11, 12], [1, 13, 2, 0], [1, 14, 15, 2]])
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input).logits
    logp = torch.log_softmax(logits, -1)
    picks = [-logp[b, t, labels[b, t]] for b in range(3) for t in range(4) if labels[b, t] != -100]
    assert torch.allclose(out.loss, torch.stack(picks).mean(), atol=1e-6)
    summed = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(18)).loss
    assert torch.allclose(summed, torch.stack(picks).sum() / 18, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("label_smoothing_factor", [0.0, 0.1])
def test_label_smoothed_loss_and_its_gradient_equal_torch_cross_entropy(monkeypatch, dtype, label_smoothing_factor):
    """The chunked log-sum-exp loss (eager mode) against `F.cross_entropy(label_smoothing=...)` on the float32 logits:
    values and gradients, with chunks of 3 rows so that the 14 rows span several (and a partial last one)."""
    monkeypatch.setitem(loss_vanilla_transformer._LOSS_CHUNK_VALUES, "cpu", 3 * 50)
    torch.manual_seed(0)
    logits = (torch.randn(2, 7, 50) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (2, 7))
    labels[0, 5:] = -100
    loss, nll, tokens = label_smoothed_cross_entropy(logits, labels, label_smoothing_factor)
    loss.backward()
    reference = logits.detach().float().requires_grad_()
    ref_loss = torch.nn.functional.cross_entropy(
        reference.view(-1, 50), labels.view(-1), label_smoothing=label_smoothing_factor, reduction="sum"
    )
    ref_loss.backward()
    ref_nll = torch.nn.functional.cross_entropy(reference.view(-1, 50), labels.view(-1), reduction="sum")
    assert tokens.item() == 12 and loss.dtype == torch.float32 and not nll.requires_grad
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(nll, ref_nll, rtol=1e-6, atol=1e-5)
    assert logits.grad.dtype == dtype  # the gradient comes back in the logits' dtype (bfloat16: rounded to it)
    torch.testing.assert_close(logits.grad.float(), reference.grad.to(dtype).float(), rtol=0, atol=1e-6)
    per_sentence = label_smoothed_cross_entropy(logits.detach(), labels, label_smoothing_factor, per_sequence=True)
    torch.testing.assert_close(per_sentence[0].sum(), loss.detach())
    assert per_sentence[2].tolist() == [5, 7]


def test_model_loss_is_the_plain_cross_entropy_as_transformers_models_return_it():
    """As Marian's: `Seq2SeqLMOutput` with the mean cross-entropy of the target tokens (label smoothing is the
    trainer's loss), no cache, and with the mixed precision's bfloat16 logits still a float32 loss."""
    model = tiny_model()
    ids, mask = padded_batch()
    labels = torch.tensor([[10, 11, 12, 2], [13, 2, -100, -100], [14, 15, 2, -100]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert type(out) is Seq2SeqLMOutput and cache_of(out) is None
    flat_logits, flat_labels = out.logits.flatten(0, 1), labels.flatten()
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(flat_logits, flat_labels))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert autocast.logits.dtype == torch.bfloat16 and autocast.loss.dtype == torch.float32


def test_forward_and_loss_are_one_graph_for_torch_compile():
    """No graph break in a training forward with its loss, under bfloat16 autocast: the input checks and the chunked
    loss are eager-only, nothing reads a tensor on the host. (Tracing only: no compilation.)"""
    model = tiny_model("eager").train()
    ids, mask = padded_batch()
    labels = torch.tensor([[10, 11, 12, 2], [13, 2, -100, -100], [14, 15, 2, -100]])
    torch._dynamo.reset()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explanation = torch._dynamo.explain(model)(input_ids=ids, attention_mask=mask, labels=labels)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


@pytest.mark.slow
def test_compiled_and_eager_training_forward_give_the_same_loss_and_gradients():
    """torch.compile (inductor, ~1 minute on 2 CPU cores) against eager mode: the same loss and gradients."""
    ids, mask = padded_batch()
    labels = torch.tensor([[10, 11, 12, 2], [13, 2, -100, -100], [14, 15, 2, -100]])
    results = []
    for compiled in (False, True):
        model = tiny_model("eager").train()  # dropout 0: the same function in both
        call = torch.compile(model) if compiled else model
        loss = call(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (eager_loss, eager_grads), (compiled_loss, compiled_grads) = results
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


# --- attention implementations, cache, generation --------------------------------------------------------------------


def test_eager_and_sdpa_logits_agree():
    ids, mask = padded_batch()
    labels = torch.tensor([[10, 11, 12, 2], [13, 2, -100, -100], [14, 15, 2, -100]])
    eager = tiny_model("eager")(input_ids=ids, attention_mask=mask, labels=labels).logits
    sdpa_model = tiny_model("sdpa")
    sdpa = sdpa_model(input_ids=ids, attention_mask=mask, labels=labels).logits
    assert torch.allclose(eager, sdpa, atol=1e-5, rtol=0)
    sdpa_model.set_attn_implementation("eager")
    assert sdpa_model.config._attn_implementation == "eager"
    assert torch.allclose(sdpa_model(input_ids=ids, attention_mask=mask, labels=labels).logits, eager, atol=1e-6)


# d_k = 6 and d_v = 10 with d_model 32 and 4 heads: neither is d_model / h (8), and they differ from each other.
WIDTHS = dict(qk_head_dim=6, v_head_dim=10)


def test_key_and_value_widths_are_the_papers_d_k_and_d_v():
    """Section 3.2.2 with d_k and d_v set: W_Q, W_K of h d_k columns, W_V of h d_v, W_O of h d_v rows, and
    softmax(Q K^T / sqrt(d_k)) V computed by hand equals the layer's output under eager and sdpa."""
    model = tiny_model("eager", **WIDTHS)
    attention = model.model.encoder.layers[0].self_attn
    h, d = 4, 32
    shapes = [
        tuple(p.weight.shape) for p in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj)
    ]
    assert shapes == [(h * 6, d), (h * 6, d), (h * 10, d), (d, h * 10)]
    x = torch.randn(2, 5, d)
    q = attention.q_proj(x).view(2, 5, h, 6).transpose(1, 2)
    k = attention.k_proj(x).view(2, 5, h, 6).transpose(1, 2)
    v = attention.v_proj(x).view(2, 5, h, 10).transpose(1, 2)
    heads = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(6), dim=-1) @ v
    expected = attention.out_proj(heads.transpose(1, 2).reshape(2, 5, h * 10))
    for implementation in ("eager", "sdpa"):
        model.set_attn_implementation(implementation)
        assert torch.allclose(attention(x)[0], expected, atol=1e-6), implementation


def test_default_widths_are_d_model_over_h_and_leave_the_model_as_it_was():
    """None (default, and a config.json without the fields) is d_model / h: the same parameters, the same draw."""
    plain, explicit = tiny_model(), tiny_model(qk_head_dim=8, v_head_dim=8)
    assert (plain.config.qk_head_dim, plain.config.v_head_dim) == (None, None)
    assert plain.config.head_dims(4) == (8, 8)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), explicit.state_dict().values()))
    # A shipped config.json, written before the fields existed:
    shipped = VanillaTransformerConfig.from_pretrained(shipped_model_path("multi30k-en-de"))
    assert (shipped.qk_head_dim, shipped.v_head_dim, shipped.head_dims(4)) == (None, None, (64, 64))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_key_and_value_widths_decode_with_the_cache_and_reload(attn, tmp_path):
    model = tiny_model(attn, **WIDTHS)
    ids, mask = padded_batch()
    target = torch.tensor([[1, 10, 11, 12, 13], [1, 14, 15, 16, 17], [1, 18, 19, 20, 21]])
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
    enc = model.get_encoder()(ids, attention_mask=mask)
    cache, steps = None, []
    for t in range(target.shape[1]):
        out = model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=target[:, t : t + 1], cache=cache)
        cache, steps = cache_of(out), steps + [out.logits]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    for num_beams in (1, 4):
        kw = dict(input_ids=ids, attention_mask=mask, num_beams=num_beams, max_new_tokens=12)
        assert torch.equal(model.generate(**kw, use_cache=True), model.generate(**kw, use_cache=False))
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["qk_head_dim"] == 6
    reloaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation=attn).eval()
    assert torch.equal(reloaded(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits, full)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_incremental_decoding_with_cache_equals_full_forward(attn):
    model = tiny_model(attn)
    ids, mask = padded_batch()
    target = torch.tensor([[1, 10, 11, 12, 13], [1, 14, 15, 16, 17], [1, 18, 19, 20, 21]])
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
    enc = model.get_encoder()(ids, attention_mask=mask)
    past, steps = None, []
    for t in range(target.shape[1]):
        out = model(
            encoder_outputs=enc,
            attention_mask=mask,
            decoder_input_ids=target[:, t : t + 1],
            use_cache=True,
            cache=past,
        )
        past = cache_of(out)
        steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_the_cache_is_taken_under_either_name_and_returned_as_cache(name):
    """transformers 5.24 renamed the cache `past_key_values` -> `cache` (argument and output field): `forward` takes
    `cache`, and `past_key_values` with transformers' deprecation warning (see the next test), and returns the cache
    as `cache`, where `generate` reads it."""
    assert CACHE_NAME in Seq2SeqLMOutput.__dataclass_fields__  # (`cache` from transformers 5.24)
    model = tiny_model()
    ids, mask = padded_batch()
    target = torch.tensor([[1, 10, 11, 12, 13], [1, 14, 15, 16, 17], [1, 18, 19, 20, 21]])
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target).logits
    first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=target[:, :3], use_cache=True)
    cache = cache_of(first)
    assert isinstance(cache, EncoderDecoderCache) and cache.get_seq_length() == 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (`past_key_values` on >= 5.24: checked in the next test)
        rest = model(
            input_ids=ids, attention_mask=mask, decoder_input_ids=target[:, 3:], use_cache=True, **{name: cache}
        )
    assert cache_of(rest) is cache and cache.get_seq_length() == 5
    assert torch.allclose(torch.cat([first.logits, rest.logits], 1), full, atol=1e-5)


@contextlib.contextmanager
def _cache_name_warnings(class_name):
    """Collects the FutureWarnings about the cache's name, with the model's class name made generic."""
    found = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    found += [
        str(w.message).replace(f"`{class_name}.", "`<model>.")
        for w in caught
        if issubclass(w.category, FutureWarning) and "past_key_values" in str(w.message)
    ]


# `past_key_values` is transformers' deprecated name for the cache from 5.24 on; before, it is the name itself (the
# package takes it without a word there: tests/test_public_api.py checks both sides whichever transformers runs).
deprecated_cache_name = pytest.mark.skipif(
    CACHE_NAME != "cache", reason="transformers before 5.24 names the cache past_key_values: no deprecation"
)


@deprecated_cache_name
@torch.no_grad()
def test_past_key_values_is_deprecated_as_for_transformers_own_models():
    """`forward(past_key_values=cache)` is `forward(cache=cache)` with the deprecation warning that transformers' own
    decorator gives a tiny Marian model for the same call; both names at once get Marian's warning, and `cache` is
    used."""
    ids, mask = padded_batch()
    target = torch.tensor([[1, 10, 11, 12, 13], [1, 14, 15, 16, 17], [1, 18, 19, 20, 21]])
    warned = {}
    for m in (_tiny_marian("sdpa"), tiny_model()):
        name = type(m).__name__
        kw = dict(input_ids=ids, attention_mask=mask, use_cache=True)
        new_cache, old_cache = (cache_of(m(**kw, decoder_input_ids=target[:, :3])) for _ in range(2))
        with _cache_name_warnings(name) as with_new_name:
            new = m(**kw, decoder_input_ids=target[:, 3:], cache=new_cache)
        with _cache_name_warnings(name) as warned[name]:
            old = m(**kw, decoder_input_ids=target[:, 3:], past_key_values=old_cache)
        assert with_new_name == [], name
        assert torch.equal(old.logits, new.logits), name
        assert cache_of(old) is old_cache and old_cache.get_seq_length() == new_cache.get_seq_length() == 5, name
        for a, b in zip(new_cache.self_attention_cache.layers, old_cache.self_attention_cache.layers):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values), name
    assert len(warned["MarianMTModel"]) == 1 and "`past_key_values` is deprecated" in warned["MarianMTModel"][0]
    assert warned["VanillaTransformerForConditionalGeneration"] == warned["MarianMTModel"]

    # Both names: Marian and this model warn that they use `cache` and ignore `past_key_values`.
    kw = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=target[:, :1], use_cache=True)
    both, ignored = {}, DynamicCache()
    for m in (_tiny_marian("sdpa"), tiny_model()):
        with _cache_name_warnings(type(m).__name__) as both[type(m).__name__]:
            out = m(**kw, cache=None, past_key_values=ignored)
        assert isinstance(cache_of(out), EncoderDecoderCache) and cache_of(out).get_seq_length() == 1
    assert len(both["MarianMTModel"]) == 1
    assert both["MarianMTModel"][0].startswith("Both `past_key_values` and `cache` are set for `<model>.forward`.")
    assert both["VanillaTransformerForConditionalGeneration"] == both["MarianMTModel"]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_generation_with_and_without_cache_is_identical(attn, num_beams):
    model = tiny_model(attn)
    ids, mask = padded_batch()
    kw = dict(input_ids=ids, attention_mask=mask, num_beams=num_beams, max_new_tokens=12)
    with_cache = model.generate(**kw, use_cache=True)
    without = model.generate(**kw, use_cache=False)
    assert torch.equal(with_cache, without)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_batched_generation_equals_generating_each_sentence_alone(num_beams):
    model = tiny_model(seed=5)
    ids, mask = padded_batch(lengths=(7, 3, 11, 5))
    batched = model.generate(input_ids=ids, attention_mask=mask, num_beams=num_beams)
    for i in range(ids.shape[0]):
        n = int(mask[i].sum())
        alone = model.generate(input_ids=ids[i : i + 1, :n], num_beams=num_beams)[0]
        assert torch.equal(batched[i, : alone.shape[0]], alone)
        # Anything after the sentence's own end is padding/eos only.
        assert set(batched[i, alone.shape[0] :].tolist()) <= {0, 2}


def test_default_decoding_is_the_papers():
    model = tiny_model()
    gc = model.generation_config
    assert (gc.num_beams, gc.length_penalty, gc.early_stopping, gc.source_length_offset) == (4, 0.6, True, 50)
    ids, mask = padded_batch(lengths=(7, 3))
    out = model.generate(input_ids=ids, attention_mask=mask)
    # A random model rarely stops by itself: each sentence is cut at its source length + 50 output tokens
    # (+1 for the start token), never at transformers' default of 20.
    for i, n in enumerate((7, 3)):
        row = out[i].tolist()
        length = row.index(2) + 1 if 2 in row[1:] else len(row)
        assert length <= n + 50 + 1
    assert out.shape[1] > 20
    limited = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5)
    assert limited.shape[1] <= 6


def test_sampling_runs_and_is_seeded():
    model = tiny_model()
    ids, mask = padded_batch()
    torch.manual_seed(0)
    a = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, num_beams=1, top_k=10, max_new_tokens=8)
    torch.manual_seed(0)
    b = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, num_beams=1, top_k=10, max_new_tokens=8)
    assert torch.equal(a, b) and a.shape[0] == 3


def test_output_attentions_with_eager():
    ids, mask = padded_batch()
    out = tiny_model("eager")(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5], output_attentions=True)
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (3, 4, 9, 9)
    assert out.decoder_attentions[0].shape == (3, 4, 5, 5) and out.cross_attentions[0].shape == (3, 4, 5, 9)
    # Padding keys get weight 0; the decoder cannot look ahead.
    assert out.encoder_attentions[0][1, :, :, 4:].abs().max() == 0
    assert torch.triu(out.decoder_attentions[0][0, 0], diagonal=1).abs().max() == 0


def _tiny_marian(attn):
    config = MarianConfig(
        **{k: v for k, v in TINY.items() if k != "dropout"},
        dropout=0.0,
        pad_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=1,
        max_position_embeddings=64,
        attn_implementation=attn,
    )
    return MarianMTModel(config).eval()


def test_output_attentions_under_sdpa_follows_transformers(caplog):
    """transformers' convention (its sdpa integration, and every library model, e.g. MarianMTModel): asking for the
    weights under sdpa warns once and returns no weights; everything else is unchanged. It must not raise, so that
    generic code passing `output_attentions=True` (pipelines, Trainer prediction, interpretability tools) runs."""
    ids, mask = padded_batch()
    kw = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
    model = tiny_model("sdpa")
    plain = model(**kw)
    with caplog.at_level("WARNING"):
        out = model(**kw, output_attentions=True)
    assert "does not support `output_attentions=True`" in caplog.text
    assert torch.equal(out.logits, plain.logits)
    marian = _tiny_marian("sdpa")(**kw, output_attentions=True)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        assert getattr(out, name) == getattr(marian, name) == (), name
    # generate with attentions asked for runs too, and gives the same tokens.
    gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=5)
    gen_att = model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=5, output_attentions=True, return_dict_in_generate=True
    )
    assert torch.equal(gen, gen_att.sequences)


def test_gradient_checkpointing_gives_the_same_gradients():
    ids, mask = padded_batch()
    labels = torch.tensor([[10, 11, 12, 2], [13, 2, -100, -100], [14, 15, 2, -100]])
    grads = []
    for checkpointing in (False, True):
        model = tiny_model(dropout=0.0).train()
        if checkpointing:
            # transformers 5.24's name; `gradient_checkpointing_enable`, its deprecated alias there, before it.
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()
            assert model.model.encoder.layers[0].gradient_checkpointing
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-6), name


def test_variants_behind_flags():
    ids, mask = padded_batch()
    for flags in (
        dict(normalize_before=True),
        dict(position_embedding_type="learned"),
        dict(attention_bias=True),
        dict(attention_dropout=0.1, activation_dropout=0.1),
    ):
        model = tiny_model(**flags)
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids)
        assert torch.isfinite(out.logits).all(), flags
    assert tiny_model(normalize_before=True).model.encoder.layer_norm is not None
    assert tiny_model().model.encoder.layer_norm is None  # post-norm: no final norm (section 3.1)
    assert tiny_model(attention_bias=True).model.encoder.layers[0].self_attn.q_proj.bias is not None
    assert tiny_model().model.encoder.layers[0].self_attn.q_proj.bias is None


def test_base_model_and_auto_classes(tmp_path):
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    model = tiny_model()
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), VanillaTransformerConfig)
    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, VanillaTransformerModel)
    assert torch.equal(base.shared.weight, model.model.shared.weight)
    assert isinstance(AutoModelForSeq2SeqLM.from_pretrained(tmp_path), VanillaTransformerForConditionalGeneration)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"].endswith("VanillaTransformerForConditionalGeneration")


def _assert_same_generation(full, continued, first_scores=()):
    """Same tokens, scores and caches (self- and cross-attention) as transformers' own continuation test checks."""
    assert torch.equal(full.sequences, continued.sequences)
    scores = tuple(first_scores) + tuple(continued.scores)
    assert len(scores) == len(full.scores)
    for a, b in zip(full.scores, scores):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    for part in ("self_attention_cache", "cross_attention_cache"):
        mine, theirs = (getattr(cache_of(out), part) for out in (full, continued))
        for a, b in zip(mine.layers, theirs.layers):
            assert a.keys.shape == b.keys.shape, (part, a.keys.shape, b.keys.shape)
            assert torch.allclose(a.keys, b.keys, atol=1e-5) and torch.allclose(a.values, b.values, atol=1e-5), part


NO_STOP = dict(do_sample=False, use_cache=True, return_dict_in_generate=True, output_scores=True, eos_token_id=-1)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("crop", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_generate_continues_from_its_returned_cache(attn, crop, with_mask):
    """transformers' contract (GenerationTesterMixin.test_generate_continue_from_past_key_values): 3 tokens, then 1
    more from the returned `past_key_values` and `sequences`, gives the scores, tokens and cache of 4 tokens in one
    call; with the cache as returned or cropped by one step, with or without a decoder mask covering the sequence."""
    model = tiny_model(attn)
    ids, mask = padded_batch()
    kw = dict(input_ids=ids, attention_mask=mask, num_beams=1, **NO_STOP)
    full = model.generate(**kw, max_new_tokens=4)
    first = model.generate(**kw, max_new_tokens=3)
    cache = cache_of(first)
    if crop:
        cache.crop(-1)
    extra = {"decoder_attention_mask": torch.ones_like(first.sequences)} if with_mask else {}
    continued = model.generate(**kw, max_new_tokens=1, decoder_input_ids=first.sequences, cache=cache, **extra)
    _assert_same_generation(full, continued, first.scores)


@deprecated_cache_name
def test_generate_takes_past_key_values_as_transformers_generate_does():
    """`generate(past_key_values=...)` continues from the cache as `generate(cache=...)` does (the override reads the
    cache after the library's renaming), with the warning `GenerationMixin.generate` gives a tiny Marian model."""
    model = tiny_model()
    ids, mask = padded_batch()
    kw = dict(input_ids=ids, attention_mask=mask, num_beams=1, **NO_STOP)
    full = model.generate(**kw, max_new_tokens=4)
    first = model.generate(**kw, max_new_tokens=3)
    with _cache_name_warnings(type(model).__name__) as ours:
        continued = model.generate(
            **kw, max_new_tokens=1, decoder_input_ids=first.sequences, past_key_values=cache_of(first)
        )
    _assert_same_generation(full, continued, first.scores)
    marian = _tiny_marian("sdpa")
    with _cache_name_warnings("MarianMTModel") as theirs:
        marian.generate(input_ids=ids, attention_mask=mask, max_new_tokens=1, past_key_values=None)
    assert len(theirs) == 1 and ours == theirs


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("crop", [False, True])
def test_generation_from_a_prefix_with_its_cache_equals_without(attn, num_beams, crop):
    """Greedy and beam search from a forced target prefix whose cache was computed beforehand (for the batch expanded
    by beams, as beam search lays it out; whole, or cropped by one step as `generate` leaves it) give the scores,
    tokens and final cache of the same search given only the prefix."""
    model = tiny_model(attn)
    ids, mask = padded_batch()
    prefix = torch.tensor([[1, 10, 11], [1, 12, 13], [1, 14, 15]])
    kw = dict(
        input_ids=ids, attention_mask=mask, num_beams=num_beams, max_new_tokens=4, decoder_input_ids=prefix, **NO_STOP
    )
    reference = model.generate(**kw)
    expanded = [t.repeat_interleave(num_beams, dim=0) for t in (ids, mask, prefix)]
    fed = expanded[2][:, :-1] if crop else expanded[2]
    with torch.no_grad():
        out = model(input_ids=expanded[0], attention_mask=expanded[1], decoder_input_ids=fed, use_cache=True)
    _assert_same_generation(reference, model.generate(**kw, cache=cache_of(out)))


@pytest.mark.parametrize("num_beams", [1, 4])
def test_source_length_rule_at_every_generate_entry_point(num_beams):
    """Section 6.1's maximum output length (source + 50) applies whether `generate` gets `input_ids`, precomputed
    `encoder_outputs` or `inputs_embeds`: never transformers' default of 20 tokens."""
    model = tiny_model(seed=5)
    ids, mask = padded_batch(lengths=(7, 3))
    reference = model.generate(input_ids=ids, attention_mask=mask, num_beams=num_beams)
    assert reference.shape[1] > 21
    encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
    from_encoder = model.generate(encoder_outputs=encoder_outputs, attention_mask=mask, num_beams=num_beams)
    assert torch.equal(from_encoder, reference)
    # Without a mask the encoder output's full length counts for every sentence: the cap is 9 + 50.
    unmasked = model.generate(encoder_outputs=model.get_encoder()(input_ids=ids), num_beams=num_beams)
    assert 21 < unmasked.shape[1] <= 9 + 50 + 1
    embeds = model.get_input_embeddings()(ids)
    from_embeds = model.generate(inputs_embeds=embeds, attention_mask=mask, num_beams=num_beams)
    assert torch.equal(from_embeds, reference)


def test_learned_positions_cap_the_output_length_at_the_table():
    """With learned positions (Table 3 row E, not the default) the source + 50 rule must not run past the table."""
    model = tiny_model(seed=5, position_embedding_type="learned", max_position_embeddings=24)
    ids, mask = padded_batch(lengths=(20, 7))
    for num_beams in (1, 4):
        out = model.generate(input_ids=ids, attention_mask=mask, num_beams=num_beams)
        assert out.shape[1] <= 24


def test_empty_state_dict_materialises_and_initialises_every_parameter():
    """`from_pretrained(None, config=..., state_dict={})` is how transformers initialises missing weights: every
    parameter of both classes must be real (not on the meta device) and set by `_init_weights`, with the three-way
    tie (section 3.4) holding."""
    config = VanillaTransformerConfig(**TINY)
    for cls in (VanillaTransformerModel, VanillaTransformerForConditionalGeneration):
        model = cls.from_pretrained(None, config=config, state_dict={})
        on_meta = [n for n, p in model.named_parameters(remove_duplicate=False) if p.device.type == "meta"]
        assert on_meta == [], (cls.__name__, on_meta)
        base = model if cls is VanillaTransformerModel else model.model
        shared = base.shared.weight
        assert base.encoder.embed_tokens.weight is shared and base.decoder.embed_tokens.weight is shared
        if cls is VanillaTransformerForConditionalGeneration:
            assert model.lm_head.weight is shared
        assert torch.all(shared[config.pad_token_id] == 0)  # padding row zero
        assert abs(shared[4:].std().item() - config.d_model**-0.5) < 0.02  # N(0, d_model^-0.5)
        norm = base.encoder.layers[0].self_attn_layer_norm
        assert torch.all(norm.weight == 1) and torch.all(norm.bias == 0)


def test_a_fresh_model_has_fairseqs_initialisation():
    """Xavier-uniform linear layers, except W_Q, W_K, W_V drawn as one fused [3 d, d] matrix (gain 1/sqrt(2), as
    torch's nn.MultiheadAttention and fairseq): plain Xavier per matrix saturates the initial softmax and learned
    slower per update (docs/performance.md, "The race"). Uniform(-b, b) has std b / sqrt(3)."""
    torch.manual_seed(0)
    config = VanillaTransformerConfig(**{**TINY, "d_model": 128, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512})
    model = VanillaTransformerForConditionalGeneration(config)
    d, ffn = config.d_model, config.encoder_ffn_dim
    xavier = (6 / (d + d)) ** 0.5 / 3**0.5
    for attention in (model.model.encoder.layers[0].self_attn, model.model.decoder.layers[0].encoder_attn):
        for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
            assert abs(projection.weight.std().item() / (xavier * 2**-0.5) - 1) < 0.03
            assert projection.weight.abs().max().item() <= (6 / (4 * d)) ** 0.5  # the fused matrix's Xavier bound
        assert abs(attention.out_proj.weight.std().item() / xavier - 1) < 0.03
    fc1 = model.model.encoder.layers[0].ffn.fc1
    assert abs(fc1.weight.std().item() / ((6 / (d + ffn)) ** 0.5 / 3**0.5) - 1) < 0.03
    assert torch.all(fc1.bias == 0)


@pytest.mark.parametrize(
    "cls, key",
    [(VanillaTransformerModel, "shared.weight"), (VanillaTransformerForConditionalGeneration, "model.shared.weight")],
)
def test_checkpoint_without_the_shared_embedding_reports_it_missing(tmp_path, cls, key):
    from safetensors.torch import load_file

    cls(VanillaTransformerConfig(**TINY)).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    assert [k for k in tensors if "embed_tokens" in k or "shared" in k or "lm_head" in k] == [key]  # saved once
    del tensors[key]
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    model, info = cls.from_pretrained(tmp_path, output_loading_info=True)
    assert key.removeprefix("model.") in {k.removeprefix("model.") for k in info["missing_keys"]}
    base = model if cls is VanillaTransformerModel else model.model
    assert base.encoder.embed_tokens.weight is base.shared.weight and base.shared.weight.device.type != "meta"


@pytest.mark.slow
def test_flex_attention_matches_eager():
    """flex attention (declared supported: its masks come from `masking_utils`) on the CPU, inference only (torch has
    no flex backward on the CPU). Slow: flex attention compiles its kernel (~2-4 minutes here)."""
    ids, mask = padded_batch()
    kw = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :5])
    with torch.no_grad():
        eager = tiny_model("eager")
        flex = tiny_model("flex_attention")
        assert torch.allclose(flex(**kw).logits, eager(**kw).logits, atol=1e-5)
        gen = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6, num_beams=1)
        assert torch.equal(flex.generate(**gen), eager.generate(**gen))


# --- round trips -------------------------------------------------------------------------------------------------------


def test_save_load_round_trip_bit_identical(tmp_path):
    model = tiny_model()
    ids, mask = padded_batch()
    model.save_pretrained(tmp_path)
    reloaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    kw = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=ids)
    assert torch.equal(model(**kw).logits, reloaded(**kw).logits)
    assert torch.equal(
        model.generate(input_ids=ids, attention_mask=mask), reloaded.generate(input_ids=ids, attention_mask=mask)
    )


@pytest.mark.parametrize("widths", [{}, WIDTHS], ids=["d_model-over-h", "d_k-d_v"])
def test_remote_code_load_in_a_process_without_the_package(widths, tmp_path):
    model = tiny_model(**widths)
    ids, mask = padded_batch()
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    assert (ckpt / "modeling_vanilla_transformer.py").exists() and (
        ckpt / "configuration_vanilla_transformer.py"
    ).exists()
    expected = {
        "logits": model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids).logits.contiguous(),
        "generated": model.generate(input_ids=ids, attention_mask=mask).contiguous(),
        "ids": ids,
        "mask": mask,
    }
    save_file(expected, str(tmp_path / "expected.safetensors"))
    script = BLOCK_PACKAGE + textwrap.dedent(
        f"""
        import torch
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
        exp = load_file({str(tmp_path / "expected.safetensors")!r})
        config = AutoConfig.from_pretrained({str(ckpt)!r}, trust_remote_code=True)
        assert type(config).__name__ == "VanillaTransformerConfig"
        assert "vanilla_transformer" not in sys.modules
        model = AutoModelForSeq2SeqLM.from_pretrained({str(ckpt)!r}, trust_remote_code=True).eval()
        assert model.lm_head.weight is model.model.shared.weight
        logits = model(input_ids=exp["ids"], attention_mask=exp["mask"], decoder_input_ids=exp["ids"]).logits
        assert torch.equal(logits, exp["logits"]), (logits - exp["logits"]).abs().max()
        gen = model.generate(input_ids=exp["ids"], attention_mask=exp["mask"])
        assert torch.equal(gen, exp["generated"])
        base = AutoModel.from_pretrained({str(ckpt)!r}, trust_remote_code=True)
        assert type(base).__name__ == "VanillaTransformerModel"
        print("REMOTE-OK", type(model).__module__)
        """
    )
    env = subprocess_env(HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "REMOTE-OK transformers_modules" in result.stdout


# --- bad input -----------------------------------------------------------------------------------------------------


def test_clear_errors_for_bad_input():
    model = tiny_model()
    ids, mask = padded_batch()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(input_ids=ids + 200, attention_mask=mask, decoder_input_ids=ids)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids - 5)
    with pytest.raises(ValueError, match="Batch size mismatch"):
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:2])
    with pytest.raises(ValueError, match=r"attention_mask.*shape"):
        model(input_ids=ids, attention_mask=mask[:, :4], decoder_input_ids=ids)
    with pytest.raises(ValueError, match="integer token ids"):
        model(input_ids=ids.float(), decoder_input_ids=ids)
    with pytest.raises(ValueError, match="empty"):
        model(input_ids=ids[:0], decoder_input_ids=ids[:0])
    with pytest.raises(ValueError, match="at least one token"):
        model(input_ids=ids, attention_mask=torch.zeros_like(mask), decoder_input_ids=ids)
    # Labels that are not the decoder inputs' (another length, or other rows): named, not a gather error in the loss.
    for labels in (ids[:, :3], ids[:2]):
        with pytest.raises(ValueError, match=r"`labels` has shape .* \(batch, target length\)"):
            model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids, labels=labels)
    learned = tiny_model(position_embedding_type="learned", max_position_embeddings=8)
    with pytest.raises(ValueError, match="longer than the learned position table"):
        learned(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, :4])


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(d_model=30), "divisible"),
        (dict(d_model=30, qk_head_dim=8), r"divisible by `encoder_attention_heads` \(4\) so that v_head_dim"),
        (dict(qk_head_dim=0), r"`qk_head_dim` must be at least 1 or None \(None = d_model / h\), got 0"),
        (dict(v_head_dim=-4), r"`v_head_dim` must be at least 1 or None \(None = d_model / h\), got -4"),
        (dict(dropout=1.0), r"dropout.*\[0, 1\)"),
        (dict(encoder_layers=0), "`encoder_layers` must be at least 1, got 0"),
        (dict(pad_token_id=500), "inside the vocabulary"),
        (dict(position_embedding_type="rotary"), "position_embedding_type"),
    ],
)
def test_config_validation(overrides, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        VanillaTransformerConfig(**{**TINY, **overrides})
    # The same check is the config's strict-dataclass validator: a value changed after construction is refused
    # before `save_pretrained` writes anything.
    config = VanillaTransformerConfig(**TINY)
    for name, value in overrides.items():
        setattr(config, name, value)
    with pytest.raises(StrictDataclassClassValidationError, match=match):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_widths_set_apart_from_d_model_need_no_divisible_d_model():
    config = VanillaTransformerConfig(**{**TINY, "d_model": 30, "qk_head_dim": 8, "v_head_dim": 8})
    assert config.head_dims(4) == (8, 8)


def test_presets():
    base = VanillaTransformerConfig.from_preset("base")
    assert (base.d_model, base.encoder_ffn_dim, base.encoder_attention_heads, base.dropout) == (512, 2048, 8, 0.1)
    big = VanillaTransformerConfig.from_preset("big")
    assert (big.d_model, big.encoder_ffn_dim, big.encoder_attention_heads, big.dropout) == (1024, 4096, 16, 0.3)
    with pytest.raises(ValueError, match="Unknown preset"):
        VanillaTransformerConfig.from_preset("huge")
