"""The translation pipeline against `model.generate` called directly on each sentence: string and
list inputs, batching with the tokenizer's pad id, generation kwargs, truncation, and
`pipeline("translation", model=<checkpoint>, trust_remote_code=True)` in a process without this package."""

import copy
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import BLOCK_PACKAGE, subprocess_env, tiny_config
from transformers import AutoModelForSeq2SeqLM, pipeline
from transformers.dynamic_module_utils import get_imports, get_relative_imports
from transformers.pipelines import clean_custom_task

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    pipeline_vanilla_transformer,
)
from vanilla_transformer.pipeline_vanilla_transformer import CUSTOM_PIPELINES, TranslationPipeline


# Three real sentences of different lengths, so that a batch of them needs padding.
SOURCES = [
    "Ein Mann schläft.",
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Eine Frau mit einem großen Hut sitzt auf einer Bank.",
]


def tiny_model(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = tiny_config(
        vocab_size=len(tokenizer),
        dropout=0.0,
        max_position_embeddings=64,
        # Untied: a random *tied* model keeps predicting the token whose embedding is closest to its last input,
        # whatever the source, and then a batching test could not fail (see test_outputs_depend_on_the_source).
        tie_word_embeddings=False,
    )
    model = VanillaTransformerForConditionalGeneration(config).eval()
    # The model stops each sentence at source length + offset (section 6.1: + 50); a small offset keeps the test
    # fast while still giving each sentence of a padded batch its own limit.
    model.generation_config.source_length_offset = 3
    return model


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer)


@pytest.fixture()
def pipe(model, tokenizer):
    return TranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")


_REFERENCES = {}


def generate_one(model, tokenizer, text, **kwargs):
    """The reference: `generate` on one sentence, no padding involved (cached: generation is the slow part)."""
    key = (id(model), text, tuple(sorted(kwargs.items())))
    if key not in _REFERENCES:
        _REFERENCES[key] = model.generate(**tokenizer(text, return_tensors="pt"), **kwargs)
    return _REFERENCES[key]


def until_eos(ids, eos_id=2):
    """A generated sequence up to its first </s>: in a batch, finished rows are filled up to the longest one (with
    <pad> by greedy search, with </s> by beam search), which is not part of the translation."""
    ids = [int(i) for i in ids]
    return ids[: ids.index(eos_id) + 1] if eos_id in ids else ids


# --- what comes out ------------------------------------------------------------------------------------------------


def test_outputs_depend_on_the_source(model, tokenizer):
    # Guard for the comparisons below: different sentences get different translations and lengths.
    outputs = [until_eos(generate_one(model, tokenizer, s, num_beams=1)[0]) for s in SOURCES]
    assert len({tuple(o) for o in outputs}) == len(SOURCES)
    assert len({len(o) for o in outputs}) > 1


def test_string_gives_a_list_of_one_dict(pipe, model, tokenizer):
    out = pipe(SOURCES[0], num_beams=1)
    expected = tokenizer.decode(generate_one(model, tokenizer, SOURCES[0], num_beams=1)[0], skip_special_tokens=True)
    assert out == [{"translation_text": expected}]


@pytest.mark.parametrize("num_beams, batch_sizes", [(1, (1, 3)), (2, (3,))])
def test_list_input_and_batch_sizes_match_generate_on_each_sentence(pipe, model, tokenizer, num_beams, batch_sizes):
    expected = [until_eos(generate_one(model, tokenizer, s, num_beams=num_beams)[0]) for s in SOURCES]
    for batch_size in batch_sizes:
        ids = pipe(SOURCES, num_beams=num_beams, batch_size=batch_size, return_tensors=True)
        assert [until_eos(r["translation_token_ids"]) for r in ids] == expected, batch_size
    if num_beams == 1:  # the text is the decoded ids (checked once: generation is the slow part)
        texts = pipe(SOURCES, num_beams=num_beams, batch_size=3)
        assert texts == [{"translation_text": tokenizer.decode(e, skip_special_tokens=True)} for e in expected]


def test_outer_whitespace_is_not_part_of_the_input(pipe, model, tokenizer):
    # As train.py (data.tokenize_corpus) and translate(): the model never saw a sentence with outer whitespace,
    # which the tokenizer would keep (a lone "▁" token first).
    padded = ["  " + SOURCES[0], SOURCES[1] + " \t", " " + SOURCES[2] + "\n"]
    expected = [until_eos(generate_one(model, tokenizer, s, num_beams=1)[0]) for s in SOURCES]
    # Guard: as they are, the padded sentences give the model other inputs and other outputs.
    assert [until_eos(generate_one(model, tokenizer, p, num_beams=1)[0]) for p in padded] != expected
    ids = pipe(padded, num_beams=1, batch_size=3, return_tensors=True)
    assert [until_eos(r["translation_token_ids"]) for r in ids] == expected


def test_tuple_and_empty_inputs(pipe):
    kwargs = dict(num_beams=1, max_new_tokens=1)
    assert pipe(tuple(SOURCES[:2]), **kwargs) == pipe(SOURCES[:2], **kwargs)
    assert len(pipe(SOURCES[:2], **kwargs)) == 2
    assert pipe([]) == []


def test_batch_is_padded_with_the_tokenizer_pad_id(pipe, model, tokenizer, monkeypatch):
    seen = []
    original = model.generate

    def spy(*args, **kwargs):
        seen.append((kwargs["input_ids"].clone(), kwargs["attention_mask"].clone()))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    pipe(SOURCES, num_beams=1, max_new_tokens=2, batch_size=3)
    assert len(seen) == 1
    input_ids, attention_mask = seen[0]
    encoded = [tokenizer(s)["input_ids"] for s in SOURCES]
    width = max(map(len, encoded))
    assert input_ids.shape == (3, width)
    for row, mask, ids in zip(input_ids.tolist(), attention_mask.tolist(), encoded):
        pad = width - len(ids)
        assert row == ids + [tokenizer.pad_token_id] * pad  # right padding with <pad> = 0
        assert mask == [1] * len(ids) + [0] * pad


# --- generation kwargs ---------------------------------------------------------------------------------------------


def test_generation_kwargs_pass_through(pipe, model, tokenizer):
    free = generate_one(model, tokenizer, SOURCES[1], num_beams=1)[0]
    assert len(until_eos(free)) > 4  # without a limit the sentence is longer than the limit tested next
    short = pipe(SOURCES[1], num_beams=1, max_new_tokens=3, return_tensors=True)[0]["translation_token_ids"]
    expected = generate_one(model, tokenizer, SOURCES[1], num_beams=1, max_new_tokens=3)[0]
    assert short.tolist() == expected.tolist() and len(short) <= 1 + 3  # decoder start + 3 new tokens


def test_generation_kwargs_given_at_construction_and_overridden_per_call(model, tokenizer):
    pipe = TranslationPipeline(model=model, tokenizer=tokenizer, device="cpu", num_beams=1, max_new_tokens=2)
    ids = pipe(SOURCES[1], return_tensors=True)[0]["translation_token_ids"]
    assert ids.tolist() == generate_one(model, tokenizer, SOURCES[1], num_beams=1, max_new_tokens=2)[0].tolist()
    ids = pipe(SOURCES[1], max_new_tokens=4, return_tensors=True)[0]["translation_token_ids"]
    assert ids.tolist() == generate_one(model, tokenizer, SOURCES[1], num_beams=1, max_new_tokens=4)[0].tolist()


def test_several_sequences_per_input(pipe):
    one = pipe(SOURCES[0], num_beams=2, num_return_sequences=2, max_new_tokens=3)
    assert len(one) == 2 and all(set(r) == {"translation_text"} for r in one)
    many = pipe(SOURCES, num_beams=2, num_return_sequences=2, max_new_tokens=3, batch_size=2)
    assert len(many) == 3 and all(len(records) == 2 for records in many)


# --- input handling ------------------------------------------------------------------------------------------------


def record_first_source(model, monkeypatch) -> list[list[int]]:
    """Spy on `model.generate`: the list it returns gets the first source sentence's ids of every call."""
    seen = []
    original = model.generate

    def spy(*args, **kwargs):
        seen.append(kwargs["input_ids"][0].tolist())
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    return seen


def test_inputs_are_truncated_to_the_model_limit(pipe, model, tokenizer, monkeypatch):
    seen = record_first_source(model, monkeypatch)
    long_text = " ".join(SOURCES * 6)
    full = tokenizer(long_text)["input_ids"]
    assert len(full) > model.config.max_position_embeddings == 64
    pipe(long_text, num_beams=1, max_new_tokens=1)
    assert seen[-1] == full[:63] + [tokenizer.eos_token_id]
    pipe(long_text, num_beams=1, max_new_tokens=1, max_input_length=5)
    assert seen[-1] == full[:4] + [tokenizer.eos_token_id]
    pipe(long_text, num_beams=1, max_new_tokens=1, truncation=False)
    assert seen[-1] == full


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("tokenizer_limit, limit", [(None, 24), (16, 16)])
def test_pipeline_and_translate_cut_inputs_alike(tokenizer, monkeypatch, positions, tokenizer_limit, limit):
    # One rule for both entry points: the smaller of the model's max_position_embeddings and the tokenizer's
    # model_max_length, whatever the positions (sinusoidal ones have no table, but the config's size is the
    # longest input the model is meant for).
    from vanilla_transformer.translation.translate import translate

    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=len(tokenizer),
        d_model=16,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=24,
        position_embedding_type=positions,
    )
    model = VanillaTransformerForConditionalGeneration(config).eval()
    tokenizer = copy.deepcopy(tokenizer)
    if tokenizer_limit is not None:
        tokenizer.model_max_length = tokenizer_limit
    seen = record_first_source(model, monkeypatch)
    long_text = " ".join(SOURCES * 3)
    full = tokenizer(long_text)["input_ids"]
    assert len(full) > 24
    translate(model, tokenizer, [long_text], num_beams=1, max_new_tokens=2)
    TranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")(long_text, num_beams=1, max_new_tokens=2)
    assert seen == [full[: limit - 1] + [tokenizer.eos_token_id]] * 2


def test_bad_input_is_rejected(pipe, model):
    with pytest.raises(ValueError, match="translates strings, got int"):
        pipe(123)
    with pytest.raises(ValueError, match="`max_input_length` must be a positive integer"):
        pipe(SOURCES[0], max_input_length=0)
    with pytest.raises(ValueError, match="`tokenizer` is None"):
        TranslationPipeline(model=model, tokenizer=None, device="cpu")


# --- shipping the pipeline with a checkpoint -----------------------------------------------------------------------


def test_custom_pipelines_entry_is_what_transformers_reads():
    entry, options = clean_custom_task(copy.deepcopy(CUSTOM_PIPELINES["translation"]))
    assert entry["pt"] == (AutoModelForSeq2SeqLM,) and options is None
    module, cls = entry["impl"].split(".")
    assert module == Path(pipeline_vanilla_transformer.__file__).stem and cls == TranslationPipeline.__name__
    json.dumps(CUSTOM_PIPELINES)  # it goes into config.json as is


def test_pipeline_file_imports_only_torch_and_transformers():
    # The file is remote code: transformers checks these imports when it loads it from a checkpoint.
    path = pipeline_vanilla_transformer.__file__
    assert set(get_imports(path)) <= {"torch", "transformers"}
    assert get_relative_imports(path) == []


def test_in_memory_model_with_pipeline_function(model, tokenizer):
    pipe = pipeline(
        "translation",
        model=model,
        config=model.config,
        tokenizer=tokenizer,
        pipeline_class=TranslationPipeline,
        device="cpu",
    )
    assert isinstance(pipe, TranslationPipeline)
    assert pipe(SOURCES[0], num_beams=1) == TranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")(
        SOURCES[0], num_beams=1
    )


def test_pipeline_from_a_checkpoint_in_a_process_without_the_package(model, tokenizer, tmp_path):
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    assert (ckpt / "pipeline_vanilla_transformer.py").exists()
    assert json.loads((ckpt / "config.json").read_text())["custom_pipelines"] == CUSTOM_PIPELINES
    expected = [until_eos(generate_one(model, tokenizer, s, num_beams=1)[0]) for s in SOURCES]
    script = BLOCK_PACKAGE + textwrap.dedent(
        f"""
        import json, os
        from transformers import pipeline
        pipe = pipeline("translation", model={str(ckpt)!r}, trust_remote_code=True, device="cpu")
        out = pipe({SOURCES!r}, num_beams=1, batch_size=2, return_tensors=True)
        ids = [[int(i) for i in r["translation_token_ids"]] for r in out]
        text = pipe({SOURCES[0]!r}, num_beams=1)
        # Saving the loaded model again still ships the pipeline, with a JSON-clean config entry.
        pipe.model.save_pretrained({str(tmp_path / "again")!r})
        print(json.dumps({{
            "class": type(pipe).__module__ + "." + type(pipe).__name__, "ids": ids, "text": text,
            "files": sorted(os.listdir({str(tmp_path / "again")!r})),
            "vanilla_modules": [m for m in sys.modules if m.startswith("vanilla_transformer")],
        }}))
        """
    )
    env = subprocess_env(HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-I", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["class"].startswith("transformers_modules.") and loaded["class"].endswith(".TranslationPipeline")
    assert loaded["vanilla_modules"] == []
    assert [until_eos(row) for row in loaded["ids"]] == expected
    assert loaded["text"] == [{"translation_text": tokenizer.decode(expected[0], skip_special_tokens=True)}]
    assert "pipeline_vanilla_transformer.py" in loaded["files"]
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    assert again["custom_pipelines"] == CUSTOM_PIPELINES
