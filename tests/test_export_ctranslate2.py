"""Export to CTranslate2: the exported model decodes the same tokens as `generate` (greedy and beam 4, a random and a
trained model, real Multi30k sentences of different lengths in padded batches), with per-step scores equal to 1e-4;
the variants of the architecture; int8; `translate_ctranslate2` and the command line against `translate`; the
OpenMP runtime CTranslate2 binds to when torch is loaded first."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import read_multi30k, subprocess_env, tiny_config, train_steps

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.translation.ctranslate2 import import_ctranslate2


try:
    ctranslate2 = import_ctranslate2()
except ImportError as error:
    pytest.skip(
        f"ctranslate2 is not installed ({error}); it comes with the dev extra: pip install -e '.[dev]'",
        allow_module_level=True,
    )

from vanilla_transformer.commands import main  # noqa: E402
from vanilla_transformer.data.tokenizer import train_tokenizer  # noqa: E402
from vanilla_transformer.translation.ctranslate2 import (  # noqa: E402
    CTranslate2Model,
    export_ctranslate2,
    translate_ctranslate2,
)
from vanilla_transformer.translation.translate import translate  # noqa: E402


MAX_LENGTH = 48  # the tokenizer's model_max_length: the longest source translate() takes


@pytest.fixture(scope="module")
def corpus():
    return read_multi30k("train.en.gz", 500), read_multi30k("train.de.gz", 500)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    src, tgt = corpus
    return train_tokenizer(src + tgt, vocab_size=600, model_max_length=MAX_LENGTH)


def two_layer_config(tokenizer, **overrides):
    """The tiny model with two layers a side and no dropout, on the tokenizer's vocabulary."""
    return tiny_config(
        **{"vocab_size": len(tokenizer), "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0, **overrides}
    )


@pytest.fixture(scope="module")
def random_model(tokenizer):
    torch.manual_seed(0)
    return VanillaTransformerForConditionalGeneration(two_layer_config(tokenizer)).eval()


@pytest.fixture(scope="module")
def trained_model(tokenizer, corpus):
    """Trained 100 steps (a few seconds) on 500 Multi30k pairs: it ends some translations with </s> and runs others
    to the length limit, so both ways a beam search ends are exercised."""
    src, tgt = corpus
    torch.manual_seed(2)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), dropout=0.0))
    return train_steps(model, tokenizer, src, tgt, steps=100, seed=2)


@pytest.fixture(scope="module")
def sentences(tokenizer):
    """Multi30k test2016 sentences from 6 to 48 tokens, longest and shortest interleaved."""
    lines = [line for line in read_multi30k("test_2016_flickr.en.gz", 40) if len(tokenizer(line)["input_ids"]) <= 48]
    lines = sorted(lines[:16], key=lambda line: len(tokenizer(line)["input_ids"]))
    return [line for pair in zip(lines[:8], reversed(lines[8:])) for line in pair]


def exported(model, tokenizer, path, quantization="float32"):
    export_ctranslate2(model, path, tokenizer=tokenizer, quantization=quantization)
    return CTranslate2Model(path, intra_threads=1)


def generate_batch(model, tokenizer, lines, num_beams):
    """`generate` on one padded batch: token ids without the start token and </s>, the output, the source lengths."""
    inputs = tokenizer(lines, padding=True, return_tensors="pt")
    out = model.generate(**inputs, num_beams=num_beams, output_scores=True, return_dict_in_generate=True)
    ids = []
    for row in out.sequences[:, 1:].tolist():
        n = row.index(tokenizer.eos_token_id) if tokenizer.eos_token_id in row else len(row)
        ids.append(row[:n])
    return ids, out, inputs["attention_mask"].sum(-1).tolist()


def step_log_probs_ct2(ct2_model, source_ids, target_ids):
    """CTranslate2's log-probability of each target token and of the closing </s>, given the previous ones."""
    tokens = ct2_model.tokens
    results = ct2_model.translator.score_batch(
        [[tokens[t] for t in s] for s in source_ids], [[tokens[t] for t in t_ids] for t_ids in target_ids]
    )
    return [r.log_probs for r in results]


@pytest.mark.parametrize("which", ["random", "trained"])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_tokens_and_step_scores_equal_generate(which, num_beams, request, tokenizer, sentences, tmp_path):
    model = request.getfixturevalue(f"{which}_model")
    ct2_model = exported(model, tokenizer, tmp_path / "ct2")
    want, out, source_lengths = generate_batch(model, tokenizer, sentences, num_beams)
    source_ids = [tokenizer(line)["input_ids"] for line in sentences]
    got, scores = ct2_model.generate(source_ids, num_beams=num_beams, batch_size=5, return_scores=True)
    assert got == want

    # Per-step log-probabilities of the tokens chosen: generate's own (its `scores`, along each output's beam) and
    # CTranslate2's for the same tokens, except the </s> that generate forces at the length limit (score 0 there).
    transition = model.compute_transition_scores(
        out.sequences, out.scores, out.beam_indices if num_beams > 1 else None, normalize_logits=num_beams == 1
    )
    ct2_steps = step_log_probs_ct2(ct2_model, source_ids, want)
    at_limit = 0
    for i, ids in enumerate(want):
        steps = len(ids) + 1  # with </s>
        forced = steps == source_lengths[i] + 50
        at_limit += forced
        n = steps - 1 if forced else steps
        torch.testing.assert_close(torch.tensor(ct2_steps[i][:n]), transition[i, :n].float(), atol=1e-4, rtol=0)
    if which == "random":
        assert at_limit >= len(sentences) // 2  # a random model hardly ever says </s>: outputs end at the limit
    else:
        assert 0 < at_limit < len(sentences)  # some outputs end by themselves, some at the limit
    if num_beams > 1:  # generate's sequence scores: sum of log-probabilities / length ** 0.6
        torch.testing.assert_close(torch.tensor(scores), out.sequences_scores.float(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("offset", [2, 8])
def test_beam_search_at_the_length_limit_equals_generate(offset, trained_model, tokenizer, tmp_path):
    """With a short maximum length most sentences reach it: generate forces </s> there, per sentence. The exported
    model must pick the same hypothesis (among those ended by </s> before and those generate completes with the
    forced </s>), which a plain CTranslate2 call with one max_decoding_length does not. The last sentence is one
    where, at offset 8, generate stops without completing the best hypothesis (4 ended in </s> before)."""
    lines = [
        line
        for line in read_multi30k("test_2016_flickr.en.gz", 260)
        if len(tokenizer(line)["input_ids"]) <= MAX_LENGTH
    ][:200]
    lines.append("Three dogs play with each other out in the field.")
    trained_model.generation_config.source_length_offset = offset
    try:
        ct2_model = exported(trained_model, tokenizer, tmp_path / "ct2")
        want = []
        for start in range(0, len(lines), 50):
            want += generate_batch(trained_model, tokenizer, lines[start : start + 50], 4)[0]
    finally:
        trained_model.generation_config.source_length_offset = 50
    got = ct2_model.generate([tokenizer(line)["input_ids"] for line in lines], batch_size=16)
    assert got == want
    assert ct2_model.settings["source_length_offset"] == offset


@pytest.mark.parametrize(
    "flags",
    [
        {"normalize_before": True},
        {"position_embedding_type": "learned", "max_position_embeddings": 128},
        {"attention_bias": True, "activation_function": "gelu", "scale_embedding": False},
        {"tie_word_embeddings": False, "decoder_attention_heads": 4, "decoder_layers": 1},
    ],
    ids=["pre-norm", "learned-positions", "bias-gelu-unscaled", "untied-other-decoder"],
)
def test_architecture_variants_equal_generate(flags, tokenizer, sentences, tmp_path):
    torch.manual_seed(1)
    model = VanillaTransformerForConditionalGeneration(two_layer_config(tokenizer, **flags)).eval()
    with torch.no_grad():  # biases and norms start at 0 / 1: make them matter
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    ct2_model = exported(model, tokenizer, tmp_path / "ct2")
    source_ids = [tokenizer(line)["input_ids"] for line in sentences[:6]]
    for num_beams in (1, 4):
        assert (
            ct2_model.generate(source_ids, num_beams=num_beams)
            == generate_batch(model, tokenizer, sentences[:6], num_beams)[0]
        )


@pytest.mark.parametrize("widths", [{"qk_head_dim": 8}, {"v_head_dim": 4}, {"qk_head_dim": 8, "v_head_dim": 8}])
def test_head_widths_apart_from_d_model_over_h_are_refused_by_name(widths, tokenizer, tmp_path):
    """CTranslate2's Transformer splits d_model into h heads for queries, keys and values alike: a model with another
    d_k or d_v (Table 3 row B) is refused naming the field; one that sets them to d_model / h exports."""
    model = VanillaTransformerForConditionalGeneration(two_layer_config(tokenizer, **widths)).eval()
    name = next(iter(widths))
    with pytest.raises(ValueError, match=rf"config.{name}={widths[name]}: CTranslate2.*--engine transformers"):
        export_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer)
    assert not (tmp_path / "ct2").exists()
    same = VanillaTransformerForConditionalGeneration(two_layer_config(tokenizer, qk_head_dim=16, v_head_dim=16))
    assert export_ctranslate2(same.eval(), tmp_path / "same", tokenizer=tokenizer).is_dir()


def test_int8_export_loads_and_translates(trained_model, tokenizer, sentences, tmp_path):
    float32 = exported(trained_model, tokenizer, tmp_path / "float32")
    int8 = exported(trained_model, tokenizer, tmp_path / "int8", quantization="int8")
    size = {name: (tmp_path / name / "model.bin").stat().st_size for name in ("float32", "int8")}
    # float32: the parameters (the embedding once: encoder, decoder and output share it) and one position table.
    config = trained_model.config
    parameters = sum(p.numel() for p in trained_model.parameters()) + (MAX_LENGTH + 50) * config.d_model
    assert 4 * parameters < size["float32"] < 4 * (parameters + config.vocab_size * config.d_model // 2)
    assert size["int8"] < 0.5 * size["float32"]
    assert ctranslate2.Translator(str(tmp_path / "int8")).compute_type in ("int8", "int8_float32")
    config = json.loads((tmp_path / "int8" / "config.json").read_text())
    assert config["layer_norm_epsilon"] == trained_model.model.encoder.layers[0].final_layer_norm.eps
    got = translate_ctranslate2(int8, sentences)
    want = translate_ctranslate2(float32, sentences)
    assert all(got) and len(got) == len(sentences)
    # Quantized weights move the log-probabilities a little. Not "most translations are the same": this 100-step
    # model's translations are near ties (repetitions), and which ties int8 flips depends on the CPU's int8 kernels
    # (1 of 16 identical on an AVX2-only CPU, most with AVX-512). So the int8 model scores the float32 model's
    # translations, token by token, and must agree with the float32 model's scores. Measured on an AVX2-only CPU:
    # 0.17 nats per token on average; int8 exports of this model with a wrong weight are further off: the embedding
    # x1.1 0.33, the FFN's first layers x2 0.37, one cross-attention output projection transposed 0.46 (an untrained
    # model: 4.1).
    sources = [[float32.tokens[i] for i in ids] for ids in float32.encode(sentences)]
    targets = [[float32.tokens[i] for i in ids] for ids in float32.encode(want)]
    reference = [p for result in float32.translator.score_batch(sources, targets) for p in result.log_probs]
    quantized = [p for result in int8.translator.score_batch(sources, targets) for p in result.log_probs]
    assert len(quantized) == len(reference) > 10 * len(sentences)
    error = sum(abs(a - b) for a, b in zip(quantized, reference)) / len(reference)
    assert error < 0.25, f"int8 log-probabilities differ from float32 ones by {error:.3f} nats per token on average"


def test_translate_function_equals_translate(trained_model, tokenizer, sentences, tmp_path, caplog):
    long_line = " ".join(read_multi30k("test_2016_flickr.en.gz", 30)[20:30])  # far over MAX_LENGTH tokens
    # Outer whitespace on two lines: both engines strip it (as training does), so they still agree.
    lines = [
        "",
        sentences[0],
        "   ",
        " " + sentences[1],
        *sentences[2:4],
        sentences[4] + "  ",
        long_line,
        sentences[5],
        "",
    ]
    ct2_model = exported(trained_model, tokenizer, tmp_path / "ct2")
    with caplog.at_level("WARNING"):
        got = translate_ctranslate2(ct2_model, lines, batch_size=3)
    ct2_warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    caplog.clear()
    with caplog.at_level("WARNING"):
        want = translate(trained_model, tokenizer, lines, batch_size=3)
    assert got == want
    assert [i for i, text in enumerate(got) if not text] == [0, 2, 9]
    assert ct2_warnings == [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "Line 8 has" in ct2_warnings[0]
    assert translate_ctranslate2(ct2_model, lines, num_beams=1, max_new_tokens=5) == translate(
        trained_model, tokenizer, lines, num_beams=1, max_new_tokens=5
    )


def test_command_line_export_and_translate(trained_model, tokenizer, sentences, tmp_path, capsys):
    checkpoint, export = tmp_path / "checkpoint", tmp_path / "ct2"
    trained_model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    assert main(["export", "ctranslate2", str(checkpoint), str(export)]) == 0
    assert capsys.readouterr().out.strip() == str(export)
    source = tmp_path / "in.en"
    source.write_text("\n".join(["", *sentences[:6], ""]) + "\n", encoding="utf-8")
    for engine, model in (("ctranslate2", export), ("transformers", checkpoint)):
        args = [
            "translate",
            "--engine",
            engine,
            "--model",
            str(model),
            "--input",
            str(source),
            "--output",
            str(tmp_path / f"{engine}.de"),
            "--batch_size",
            "4",
            "--device",
            "cpu",
        ]
        assert main(args) == 0
    ct2_lines = (tmp_path / "ctranslate2.de").read_text(encoding="utf-8").split("\n")
    assert ct2_lines == (tmp_path / "transformers.de").read_text(encoding="utf-8").split("\n")
    assert len(ct2_lines) == 9 and ct2_lines[0] == "" and all(ct2_lines[1:7])

    # An existing output directory is kept unless --force.
    assert main(["export", "ctranslate2", str(checkpoint), str(export)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["export", "ctranslate2", str(checkpoint), str(export), "--quantization", "int8", "--force"]) == 0
    assert (export / "model.bin").stat().st_size < (checkpoint / "model.safetensors").stat().st_size / 2


@pytest.mark.parametrize(
    "options, message",
    [
        (["--dtype", "bfloat16"], "--dtype is for --engine transformers"),
        (["--revision", "v1"], "--revision is for --engine transformers"),
        (["--trust_remote_code"], "--trust_remote_code is for --engine transformers"),
        (["--device", "mps"], "--device 'mps': CTranslate2 takes auto, cpu or cuda"),
    ],
)
def test_ctranslate2_options_are_checked(options, message, tmp_path, capsys):
    args = ["translate", "--engine", "ctranslate2", "--model", str(tmp_path), "--input", os.devnull, *options]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_a_directory_that_is_not_an_export_is_a_clear_error(trained_model, tokenizer, tmp_path, capsys):
    trained_model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)  # a checkpoint, not an export
    source = tmp_path / "in.en"
    source.write_text("A man.\n", encoding="utf-8")
    assert main(["translate", "--engine", "ctranslate2", "--model", str(tmp_path), "--input", str(source)]) == 2
    assert "is not a CTranslate2 export of this package" in capsys.readouterr().err
    assert main(["translate", "--compute_type", "int8", "--model", str(tmp_path), "--input", str(source)]) == 2
    assert "--compute_type is for --engine ctranslate2" in capsys.readouterr().err


@pytest.mark.skipif(sys.platform != "linux", reason="reads the dynamic linker's symbol bindings (glibc LD_DEBUG)")
@pytest.mark.skipif(
    not list((Path(ctranslate2.__file__).parents[1] / "ctranslate2.libs").glob("libgomp*")),
    reason="this ctranslate2 build ships no OpenMP runtime of its own",
)
def test_ctranslate2_keeps_its_own_openmp_runtime_when_torch_is_loaded_first(tmp_path):
    """Imported after torch, CTranslate2 would run its threads in torch's libgomp (both engines slow down);
    `import_ctranslate2` loads it so that it binds its own, as when it is imported first."""
    script = "import torch; import vanilla_transformer.translation.ctranslate2 as m; m.import_ctranslate2()"
    log = tmp_path / "ld"
    # LD_BIND_NOW: every symbol is bound (and logged) when its library is loaded, not at its first call.
    env = subprocess_env(LD_DEBUG="bindings", LD_DEBUG_OUTPUT=str(log), LD_BIND_NOW="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    bindings = [
        line
        for path in tmp_path.glob("ld.*")
        for line in path.read_text().splitlines()
        if "libctranslate2" in line.split(" to ")[0] and "GOMP_parallel" in line
    ]
    assert bindings, "no binding of GOMP_parallel from libctranslate2 was logged"
    # Bound to ctranslate2.libs/libgomp-*.so, not torch/lib/libgomp.so.1 (where a plain `import ctranslate2` after
    # `import torch` binds it).
    assert {Path(line.split(" to ")[1].split(" [")[0]).parent.name for line in bindings} == {"ctranslate2.libs"}
