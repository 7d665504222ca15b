"""Attention figures: the weights drawn are the model's `output_attentions` for the same input (checked against a
forward pass of an eager copy of the model, and in a process where the model comes from the checkpoint's own code),
the figures hold exactly those weights, the PNG is written, and bad options are clear errors."""

import copy
import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers import BLOCK_PACKAGE, subprocess_env, tiny_config
from safetensors.torch import load_file

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.commands import main
from vanilla_transformer.evaluation import attention as attention_figures
from vanilla_transformer.evaluation.attention import (
    LINE_WIDTH,
    attention_figure,
    attention_weights,
    draw_attention,
    token_labels,
)


SOURCE = "Two young men are riding bicycles down the street."
TARGET = "Zwei junge Männer fahren mit Fahrrädern die Straße entlang."


@pytest.fixture(scope="module")
def model(tokenizer):
    # Encoder and decoder of different depths and head counts, so that a mix-up of the kinds changes the shapes.
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer),
        encoder_layers=2,
        decoder_layers=3,
        decoder_attention_heads=4,
        dropout=0.1,
        tie_word_embeddings=False,
    )
    model = VanillaTransformerForConditionalGeneration(config).eval()
    assert model.config._attn_implementation == "sdpa"  # the default: the function must switch to eager itself
    return model


@pytest.fixture(scope="module")
def weights(model, tokenizer):
    return attention_weights(model, tokenizer, SOURCE, TARGET)


def reference(model, tokenizer, source, target_ids):
    """The model's own output_attentions, from an eager copy, with the decoder input made by the model's shift."""
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    labels = torch.tensor([target_ids])
    with torch.no_grad():
        return eager(
            **tokenizer(source, return_tensors="pt"),
            decoder_input_ids=eager.prepare_decoder_input_ids_from_labels(labels),
            output_attentions=True,
            return_dict=True,
        )


# --- the weights ---------------------------------------------------------------------------------------------------


def test_weights_are_the_models_output_attentions(model, tokenizer, weights):
    source_ids = tokenizer(SOURCE)["input_ids"]
    target_ids = tokenizer(text_target=TARGET)["input_ids"]
    out = reference(model, tokenizer, SOURCE, target_ids)
    for kind, name in (
        ("encoder", "encoder_attentions"),
        ("decoder", "decoder_attentions"),
        ("cross", "cross_attentions"),
    ):
        expected = torch.stack([w[0] for w in getattr(out, name)])
        assert torch.equal(weights.of(kind), expected), kind
    s, t = len(source_ids), len(target_ids)
    assert weights.encoder.shape == (2, 2, s, s)
    assert weights.decoder.shape == (3, 4, t, t)
    assert weights.cross.shape == (3, 4, t, s)
    for kind in ("encoder", "decoder", "cross"):
        torch.testing.assert_close(weights.of(kind).sum(-1), torch.ones(weights.of(kind).shape[:-1]))
    # Section 3.2.3: a decoder position never attends to a later one.
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    assert (weights.decoder[..., future] == 0).all() and (weights.decoder[..., ~future] > 0).all()
    # The model is left as it was found: sdpa attention, eval mode.
    assert model.config._attn_implementation == "sdpa" and not model.training


def test_labels_follow_the_tokens(tokenizer, weights):
    source_ids = tokenizer(SOURCE)["input_ids"]
    target_ids = tokenizer(text_target=TARGET)["input_ids"]
    assert len(weights.source_tokens) == len(source_ids) and len(weights.target_tokens) == len(target_ids)
    assert weights.source_tokens[-1] == weights.target_tokens[-1] == "</s>"  # special tokens shown, by name
    assert weights.decoder_input_tokens == ["<s>", *weights.target_tokens[:-1]]  # what each position reads
    # Joining word starts with a space and "##" continuations without one gives back the sentence.
    for labels, text in ((weights.source_tokens, SOURCE), (weights.target_tokens, TARGET)):
        words = " ".join(labels[:-1]).replace(" ##", "")
        assert words == text, labels
    assert any(label.startswith("##") for label in weights.source_tokens + weights.target_tokens)
    assert weights.translation == TARGET and weights.generated is False


def test_outer_whitespace_is_not_drawn(model, tokenizer, weights):
    # As in training and `translate`: a padded sentence is the bare one, not a lone "▁" token more on each side.
    assert tokenizer("  " + SOURCE)["input_ids"] != tokenizer(SOURCE)["input_ids"]
    padded = attention_weights(model, tokenizer, "  " + SOURCE + " ", " " + TARGET + "\t")
    assert (padded.source, padded.translation) == (SOURCE, TARGET)
    assert (padded.source_tokens, padded.target_tokens) == (weights.source_tokens, weights.target_tokens)
    assert torch.equal(padded.cross, weights.cross) and torch.equal(padded.encoder, weights.encoder)


def test_token_labels_keep_byte_fallback_and_spaces(tokenizer):
    ids = tokenizer("niño")["input_ids"]  # "ñ" is not in this small vocabulary: it falls back to its UTF-8 bytes
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert "<0xC3>" in pieces
    labels = token_labels(tokenizer, ids)
    assert len(labels) == len(ids) and "##<0xC3>" in labels and labels[-1] == "</s>"


def test_generated_target_is_the_beam_search_output(model, tokenizer):
    generated = attention_weights(model, tokenizer, SOURCE, num_beams=2, max_new_tokens=6)
    ids = model.generate(**tokenizer(SOURCE, return_tensors="pt"), num_beams=2, max_new_tokens=6)[0].tolist()
    target_ids = ids[1:]  # after the decoder start token
    if tokenizer.eos_token_id in target_ids:
        target_ids = target_ids[: target_ids.index(tokenizer.eos_token_id) + 1]
    assert generated.generated is True
    assert generated.target_tokens == token_labels(tokenizer, target_ids)
    assert generated.translation == tokenizer.decode(target_ids, skip_special_tokens=True).strip()
    out = reference(model, tokenizer, SOURCE, target_ids)
    assert torch.equal(generated.cross, torch.stack([w[0] for w in out.cross_attentions]))


def test_by_default_the_translation_uses_the_models_generation_config(model, tokenizer, monkeypatch):
    """As `generate`, `translate` and the pipeline: the Multi30k recipes' models decode with beam 6, and their card's
    figure must show the translation their test BLEU was scored on."""
    calls = []
    generate = model.generate
    monkeypatch.setattr(model, "generate", lambda **kwargs: calls.append(kwargs) or generate(**kwargs))
    monkeypatch.setattr(model.generation_config, "num_beams", 3)
    default = attention_weights(model, tokenizer, SOURCE, max_new_tokens=6)
    assert "num_beams" not in calls[-1]  # generate reads the generation config
    assert (
        default.translation == attention_weights(model, tokenizer, SOURCE, num_beams=3, max_new_tokens=6).translation
    )
    assert calls[-1]["num_beams"] == 3
    attention_weights(model, tokenizer, SOURCE, num_beams=1, max_new_tokens=6)
    assert calls[-1]["num_beams"] == 1  # an explicit beam size wins
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="`num_beams` must be a positive integer or None"):
            attention_weights(model, tokenizer, SOURCE, num_beams=bad)


def test_model_is_switched_back_when_the_forward_fails(model, tokenizer, monkeypatch):
    model.train()

    def broken(*args, **kwargs):
        assert model.config._attn_implementation == "eager" and not model.training
        raise RuntimeError("forward failed")

    monkeypatch.setattr(model, "forward", broken)
    try:
        with pytest.raises(RuntimeError, match="forward failed"):
            attention_weights(model, tokenizer, SOURCE, TARGET)
        assert model.config._attn_implementation == "sdpa" and model.training
    finally:
        model.eval()


# --- the figures ---------------------------------------------------------------------------------------------------


def artists(figure, kind):
    """{gid: artist} of the heatmaps ("cross/layer=L/head=H") or line sets drawn in `figure`."""
    found = {}
    for ax in figure.axes:
        for artist in [*ax.images, *ax.collections]:
            if artist.get_gid() and artist.get_gid().startswith(kind + "/"):
                found[artist.get_gid()] = artist
    return found


def test_heatmaps_hold_the_cross_attention(weights):
    figure = draw_attention(weights, "cross")  # every layer, every head, and their mean
    images = artists(figure, "cross")
    assert len(images) == 3 * (4 + 1)
    for layer in range(3):
        for head in range(4):
            np.testing.assert_array_equal(
                images[f"cross/layer={layer}/head={head}"].get_array(), weights.cross[layer, head].numpy()
            )
        np.testing.assert_allclose(
            images[f"cross/layer={layer}/head=mean"].get_array(), weights.cross[layer].mean(0).numpy(), rtol=1e-6
        )
    ax = next(a for a in figure.axes if images["cross/layer=0/head=0"] in a.images)
    assert [t.get_text() for t in ax.get_xticklabels()] == weights.source_tokens
    assert [t.get_text() for t in ax.get_yticklabels()] == weights.target_tokens

    chosen = artists(draw_attention(weights, "cross", layer=-1, heads="1,3"), "cross")
    assert set(chosen) == {"cross/layer=2/head=1", "cross/layer=2/head=3", "cross/layer=2/head=mean"}
    np.testing.assert_allclose(
        chosen["cross/layer=2/head=mean"].get_array(), weights.cross[2, [1, 3]].mean(0).numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("kind, tokens", [("encoder", "source_tokens"), ("decoder", "decoder_input_tokens")])
def test_lines_hold_the_self_attention(weights, kind, tokens):
    figure = draw_attention(weights, kind, layer=1, heads=[0, 1])
    lines = artists(figure, kind)
    assert set(lines) == {f"{kind}/layer=1/head=0", f"{kind}/layer=1/head=1"}
    n = len(getattr(weights, tokens))
    for head in (0, 1):
        collection = lines[f"{kind}/layer=1/head={head}"]
        expected = weights.of(kind)[1, head].numpy()  # [query, key]
        segments = collection.get_segments()
        assert len(segments) == n * n
        # The line from query i (upper copy, y=1) to key j (lower copy, y=0) has width and opacity of weight [i, j].
        query, key = int(segments[n + 2][0][0]), int(segments[n + 2][1][0])
        assert (query, key) == (1, 2) and segments[n + 2][0][1] == 1 and segments[n + 2][1][1] == 0
        np.testing.assert_allclose(collection.get_linewidths(), LINE_WIDTH * expected.reshape(-1), rtol=1e-6)
        np.testing.assert_allclose(collection.get_colors()[:, 3], expected.reshape(-1), rtol=1e-6)
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert texts.count(getattr(weights, tokens)[0]) >= 2  # the sentence is written twice


def test_png_is_written(model, tokenizer, tmp_path):
    path = tmp_path / "cross.png"
    figure = attention_figure(model, tokenizer, SOURCE, TARGET, layer=0, heads=[0], output=path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000
    assert set(artists(figure, "cross")) == {"cross/layer=0/head=0", "cross/layer=0/head=mean"}


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, layer, heads, named",
    [
        ("cross", 3, "all", r"`layer` .* the model has 3 layers, got 3"),
        ("encoder", 2, "all", r"`layer` .* the model has 2 layers, got 2"),
        ("cross", -4, "all", r"`layer`"),
        ("cross", "1", "all", r"`layer`"),
        ("encoder", 0, [2], r"`heads` .*this attention has 2 heads\), got \[2\]"),
        ("cross", 0, "0,4", r"`heads` .* got \[4\]"),
        ("cross", 0, "first", r"`heads` must be 'all' or head indices such as '0,3', got 'first'"),
        ("cross", 0, [], r"`heads`"),
        ("self", 0, "all", r"`kind` must be one of \['cross', 'encoder', 'decoder'\], got 'self'"),
    ],
)
def test_bad_layer_head_or_kind(weights, kind, layer, heads, named):
    with pytest.raises(ValueError, match=named):
        draw_attention(weights, kind, layer, heads)


def test_bad_sentences(model, tokenizer, monkeypatch):
    with pytest.raises(ValueError, match="`source` must be a non-empty sentence"):
        attention_weights(model, tokenizer, "  ")
    monkeypatch.setattr(tokenizer, "model_max_length", 8)
    with pytest.raises(ValueError, match=r"`source` has \d+ tokens \(</s> included\) but the model takes at most 8"):
        attention_weights(model, tokenizer, SOURCE, TARGET)
    with pytest.raises(ValueError, match=r"`target` has \d+ tokens \(</s> included\) but the model takes at most 8"):
        attention_weights(model, tokenizer, "A man.", TARGET)


def test_missing_matplotlib_is_a_clear_error(model, tokenizer, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes `import matplotlib.figure` fail
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("the model ran before the check"))
    with pytest.raises(ImportError, match=re.escape(attention_figures.PLOT_HINT)):
        attention_figure(model, tokenizer, SOURCE, TARGET)


# --- the command and a checkpoint's own code -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(model, tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_command_writes_the_figure(checkpoint, tmp_path, capsys):
    path = tmp_path / "enc.png"
    assert (
        main(
            [
                "attention",
                "--model",
                str(checkpoint),
                SOURCE,
                "--target",
                TARGET,
                "--kind",
                "encoder",
                "--layer",
                "-1",
                "--heads",
                "0,1",
                "--output",
                str(path),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert path.read_bytes().startswith(b"\x89PNG") and str(path) in capsys.readouterr().out
    assert (
        main(
            [
                "attention",
                "--model",
                str(checkpoint),
                SOURCE,
                "--target",
                TARGET,
                "--heads",
                "7",
                "--output",
                str(path),
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    assert "`heads` must be 'all' or indices in [0, 4)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options, flag, message",
    [
        (["--kind", "encoder", "--layer", "2"], "--layer 2", "the model has 2 layers, got 2"),
        (["--layer", "-4"], "--layer -4", "the model has 3 layers, got -4"),
        (["--kind", "encoder", "--heads", "0,2"], "--heads 0,2", "this attention has 2 heads), got [2]"),
        (["--heads", "first"], "--heads first", "head indices such as '0,3', got 'first'"),
        (["--output", "{tmp}/missing/cross.png"], "--output", "the directory '{tmp}/missing' does not exist"),
        (["--output", "{tmp}/cross.txt"], "--output", "must end in a format matplotlib writes: .png, .svg, .pdf"),
        (["--output", "{tmp}/cross"], "--output", "must end in a format matplotlib writes"),
        (["--num_beams", "0"], "--num_beams", "must be at least 1, got 0"),
    ],
)
def test_command_checks_its_options_before_loading_the_model(
    checkpoint, tmp_path, capsys, monkeypatch, options, flag, message
):
    # The layer and head counts come from config.json; the model is never loaded (nor a sentence translated).
    monkeypatch.setattr(
        "vanilla_transformer.translation.loading.load_model", lambda *a, **k: pytest.fail("model loaded")
    )
    options = [option.replace("{tmp}", str(tmp_path)) for option in options]
    argv = ["attention", "--model", str(checkpoint), SOURCE, "--output", str(tmp_path / "a.png"), *options]
    try:
        status = main(argv)
    except SystemExit as exit_info:  # a value argparse refuses (--num_beams 0)
        status = exit_info.code
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("vanilla-transformer attention: error: "), err
    assert flag in err and message.replace("{tmp}", str(tmp_path)) in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # no figure written


def test_remote_code_model_in_a_process_without_the_package(checkpoint, weights, tmp_path):
    # The model class comes from the checkpoint (transformers_modules), loaded with the default sdpa attention; the
    # figure module is loaded by its path, since importing it through the package would import the package's model.
    script = BLOCK_PACKAGE + textwrap.dedent(
        f"""
        import importlib.util, json
        from safetensors.torch import save_file
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        spec = importlib.util.spec_from_file_location("attention_figures", {attention_figures.__file__!r})
        figures = sys.modules["attention_figures"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(figures)
        model = AutoModelForSeq2SeqLM.from_pretrained({str(checkpoint)!r}, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained({str(checkpoint)!r}, trust_remote_code=True)
        w = figures.attention_weights(model, tokenizer, {SOURCE!r}, {TARGET!r})
        save_file({{"encoder": w.encoder, "decoder": w.decoder, "cross": w.cross}}, {str(tmp_path / "w.safetensors")!r})
        figures.attention_figure(model, tokenizer, {SOURCE!r}, {TARGET!r}, kind="encoder", layer=0,
                                 output={str(tmp_path / "remote.png")!r})
        print(json.dumps({{"class": type(model).__module__, "attn": model.config._attn_implementation,
                          "tokens": [w.source_tokens, w.target_tokens],
                          "vanilla_modules": [m for m in sys.modules if m.startswith("vanilla_transformer")]}}))
        """
    )
    env = subprocess_env(HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["class"].startswith("transformers_modules.") and loaded["vanilla_modules"] == []
    assert loaded["attn"] == "sdpa"
    assert loaded["tokens"] == [weights.source_tokens, weights.target_tokens]
    remote = load_file(tmp_path / "w.safetensors")
    for kind in ("encoder", "decoder", "cross"):
        assert torch.equal(remote[kind], weights.of(kind)), kind
    assert (tmp_path / "remote.png").read_bytes().startswith(b"\x89PNG")


# --- the model card's figure ---------------------------------------------------------------------------------------


def test_model_card_figure(model, tokenizer, tmp_path, monkeypatch, caplog):
    from vanilla_transformer.hub.model_card import write_attention_figure

    monkeypatch.setattr(model.generation_config, "num_beams", 3)  # the figure decodes as the model does
    entry = write_attention_figure(model, tokenizer, SOURCE, tmp_path, split="val")
    assert (tmp_path / "attention.png").read_bytes().startswith(b"\x89PNG")
    expected = attention_weights(model, tokenizer, SOURCE, num_beams=3)
    assert entry == {
        "file": "attention.png",
        "layer": entry["layer"],
        "layers": 3,
        "num_beams": 3,
        "source": SOURCE,
        "split": "val",
        "translation": expected.translation,
    }
    # The layer drawn is the one whose head-averaged rows have the largest maximum weight, on average.
    concentration = [
        float(np.mean([row.max() for row in expected.cross[layer].mean(0).numpy()])) for layer in range(3)
    ]
    assert entry["layer"] == int(np.argmax(concentration))
    # A training run is not failed for its card's figure: no figure, a warning.
    monkeypatch.setattr(tokenizer, "model_max_length", 4)
    assert write_attention_figure(model, tokenizer, SOURCE, tmp_path / "long") is None
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    assert write_attention_figure(model, tokenizer, SOURCE, tmp_path / "none") is None
    ours = [r.message for r in caplog.records if r.name == "vanilla_transformer.hub.model_card"]
    assert len(ours) == 2 and all(m.startswith("No attention figure in the model card: ") for m in ours)
    assert "`source` has " in ours[0] and attention_figures.PLOT_HINT in ours[1]
