"""The GNMT length penalty of section 6.1 ("length penalty alpha = 0.6 (Wu et al., 2016)"): `generate` with
`length_penalty_form="gnmt"` against a tensor2tensor beam search written out plainly here, and `generate` without it
against transformers' own beam search.

The reference is tensor2tensor's `utils/beam_search.py` for one sentence, without a cache: each step grows the alive
hypotheses by every token, keeps the 2 x beam best candidates by log-probability (their scores log P / lp(|Y|) rank
the same, all having one length), the best `beam` of them not ending in `</s>` stay alive, and every one that ends
enters the finished set, which keeps the `beam` best scores, lp(|Y|) = ((5 + |Y|) / 6) ** alpha, `</s>` counted in
|Y|. The sentence's maximum length is the model's (source length + `source_length_offset` tokens, `</s>` forced at the
last one, with log-probability 0 as `SourceLengthLimit` forces it). When it stops, as `generate`'s `early_stopping` says:

- "never": at the maximum length. tensor2tensor's own early stop (alive's best log-probability over lp(maximum length)
  below the worst finished) and `generate`'s "never" both stop only when decoding further cannot change the finished
  set, so the three return the same hypotheses (the finished set being full, which the forced `</s>` makes it);
- True: after the step at which `beam` hypotheses are finished (transformers' and fairseq's rule);
- False: when the finished set is full and alive's best log-probability over lp(current length) is below its worst
  score (transformers' heuristic).
"""

import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from helpers import BLOCK_PACKAGE, TINY_SIZES, subprocess_env
from safetensors.torch import save_file
from transformers import GenerationConfig
from transformers.generation import GenerationMixin

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.generation_vanilla_transformer import gnmt_length_penalty


PAD, EOS = 0, 2
VOCAB = 24  # small, so that </s> is often among a step's best candidates; more than 2 x beam + specials
OFFSET = 4  # at most source length + 4 output tokens: short searches, many ended by the forced </s>


def tiny_model(seed: int, **overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    config = VanillaTransformerConfig(**{**TINY_SIZES, "vocab_size": VOCAB, "dropout": 0.0, **overrides})
    model = VanillaTransformerForConditionalGeneration(config).eval()
    model.generation_config.source_length_offset = OFFSET
    # A random model seldom ends a hypothesis before its forced </s> (which costs it nothing): the decoder's last
    # LayerNorm gets a bias along the </s> embedding, which adds ~1.5 to the logit of </s> (the output layer is that
    # embedding matrix), so that hypotheses of many lengths end by themselves and compete.
    decoder = model.model.decoder
    norm = decoder.layer_norm if decoder.layer_norm is not None else decoder.layers[-1].final_layer_norm
    with torch.no_grad():
        eos = model.model.shared.weight[EOS]
        norm.bias += 1.5 * eos / eos.dot(eos)
    return model


def sources(seed: int, lengths=(5, 2, 7, 3)) -> list[list[int]]:
    """Token ids of a few source sentences of different lengths, each ending in </s>."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, VOCAB, (n - 1,), generator=g).tolist() + [EOS] for n in lengths]


def padded(batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, batch))
    ids = torch.tensor([s + [PAD] * (width - len(s)) for s in batch])
    return ids, ids.ne(PAD).long()


@torch.no_grad()
def t2t_beam_search(model, source: list[int], *, beams: int, alpha: float, early_stopping) -> list[tuple]:
    """tensor2tensor's beam search for one sentence (module docstring): the finished hypotheses, best first, as
    (score, tokens ending in </s>)."""
    limit = len(source) + model.generation_config.source_length_offset
    src = torch.tensor([source])
    start = model.config.decoder_start_token_id
    alive = [(torch.tensor(0.0), [])]  # (log-probability, tokens), best first
    finished = []  # (score, tokens), best first, at most `beams`
    for length in range(1, limit + 1):
        candidates = []
        for log_prob, tokens in alive:
            decoder_input = torch.tensor([[start, *tokens]])
            logits = model(input_ids=src, decoder_input_ids=decoder_input, use_cache=False).logits[0, -1]
            step = torch.log_softmax(logits.float(), dim=-1)
            if length == limit:  # the model's SourceLengthLimit: the last token is </s>, with log-probability 0
                step = torch.full_like(step, float("-inf")).index_fill(0, torch.tensor([EOS]), 0.0)
            for token in range(VOCAB) if length < limit else [EOS]:
                candidates.append((log_prob + step[token], [*tokens, token]))
        candidates.sort(key=lambda c: -float(c[0]))
        top = candidates[: 2 * beams]
        ended = [(float(lp) / gnmt_length_penalty(length, alpha), tokens) for lp, tokens in top if tokens[-1] == EOS]
        finished = sorted(finished + ended, key=lambda c: -c[0])[:beams]
        alive = [c for c in top if c[1][-1] != EOS][:beams]
        full = len(finished) == beams
        if early_stopping is True and full:
            break
        if not alive:  # the forced </s> ended them all
            break
        if (
            early_stopping is False
            and full
            and float(alive[0][0]) / gnmt_length_penalty(length, alpha) <= finished[-1][0]
        ):
            break
    return finished


def generated(row: torch.Tensor) -> list[int]:
    """The tokens of one `generate` output row after the start token, up to its first </s> (kept)."""
    tokens = row[1:].tolist()
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens


MODELS = [
    dict(seed=0),
    dict(seed=1, normalize_before=True),
    dict(seed=2, encoder_layers=2, decoder_layers=2),
]


@pytest.mark.parametrize("early_stopping", ["never", True, False])
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("spec", MODELS, ids=lambda s: f"seed{s['seed']}")
def test_generate_with_the_gnmt_penalty_is_the_tensor2tensor_search(spec, use_cache, early_stopping):
    model = tiny_model(**spec)
    beams, alpha, n_best = 4, 0.6, 3
    batch = sources(spec["seed"])
    ids, mask = padded(batch)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=beams,
        length_penalty=alpha,
        length_penalty_form="gnmt",
        early_stopping=early_stopping,
        num_return_sequences=n_best,
        use_cache=use_cache,
        output_scores=True,
        return_dict_in_generate=True,
    )
    ended_by_the_model = 0
    for i, source in enumerate(batch):
        expected = t2t_beam_search(model, source, beams=beams, alpha=alpha, early_stopping=early_stopping)
        for rank in range(n_best):
            row = i * n_best + rank
            assert generated(out.sequences[row]) == expected[rank][1], (i, rank)
            assert abs(float(out.sequences_scores[row]) - expected[rank][0]) < 1e-5, (i, rank)
        ended_by_the_model += sum(len(tokens) < len(source) + OFFSET for _, tokens in expected)
    assert ended_by_the_model > 0  # the comparison covers hypotheses of several lengths, not only forced ends


def peaked_model(seed: int) -> VanillaTransformerForConditionalGeneration:
    """A tiny model whose next-token distributions are peaked (one cheap continuation, </s> a few nats behind), with
    12 more output tokens allowed: finished sets fill early while running hypotheses stay cheap, so that with alpha
    1.5 a longer hypothesis can still win later and the three stopping rules give different results (the random
    models above finish within a few steps, where they agree)."""
    model = tiny_model(seed)
    model.generation_config.source_length_offset = 12
    decoder = model.model.decoder
    norm = decoder.layer_norm if decoder.layer_norm is not None else decoder.layers[-1].final_layer_norm
    with torch.no_grad():
        eos = model.model.shared.weight[EOS]
        norm.weight *= 8
        norm.bias *= 8
        norm.bias += (12 - 8 * 1.5) * eos / eos.dot(eos)  # </s>'s logit: +12 in all
    return model


@pytest.mark.parametrize("early_stopping", ["never", True, False])
def test_each_stopping_rule_is_the_references_on_peaked_models(early_stopping):
    for seed in (0, 4, 5):  # on seed 0 the three rules give three different n-best lists (the test below)
        model = peaked_model(seed)
        batch = sources(seed)
        ids, mask = padded(batch)
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=4,
            length_penalty=1.5,
            length_penalty_form="gnmt",
            early_stopping=early_stopping,
            num_return_sequences=4,
            output_scores=True,
            return_dict_in_generate=True,
        )
        for i, source in enumerate(batch):
            expected = t2t_beam_search(model, source, beams=4, alpha=1.5, early_stopping=early_stopping)
            got = [(float(out.sequences_scores[i * 4 + r]), generated(out.sequences[i * 4 + r])) for r in range(4)]
            assert [tokens for _, tokens in got] == [tokens for _, tokens in expected], (seed, i)
            assert max(abs(a[0] - b[0]) for a, b in zip(got, expected)) < 1e-5, (seed, i)


def test_the_stopping_rules_differ_on_the_peaked_model_the_tests_use():
    """What makes the test above discriminate: a rule swapped for another (or the |Y| ** alpha penalty in the
    heuristic) changes what `generate` returns for peaked_model(0)."""
    model = peaked_model(0)
    ids, mask = padded(sources(0))
    results = [
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=4,
            length_penalty=1.5,
            length_penalty_form="gnmt",
            early_stopping=rule,
            num_return_sequences=4,
        ).tolist()
        for rule in ("never", True, False)
    ]
    assert results[0] != results[1] and results[0] != results[2] and results[1] != results[2]


def test_gnmt_penalty_with_another_beam_and_alpha():
    model = tiny_model(seed=3)
    batch = sources(3, lengths=(4, 6, 2))
    ids, mask = padded(batch)
    for beams, alpha in ((3, 1.3), (5, 0.0)):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            num_beams=beams,
            length_penalty=alpha,
            length_penalty_form="gnmt",
            early_stopping="never",
            num_return_sequences=beams,
            output_scores=True,
            return_dict_in_generate=True,
        )
        for i, source in enumerate(batch):
            expected = t2t_beam_search(model, source, beams=beams, alpha=alpha, early_stopping="never")
            got = [
                (float(out.sequences_scores[i * beams + r]), generated(out.sequences[i * beams + r]))
                for r in range(beams)
            ]
            assert [tokens for _, tokens in got] == [tokens for _, tokens in expected]
            assert max(abs(a[0] - b[0]) for a, b in zip(got, expected)) < 1e-5


# --- the option off: transformers' beam search, unchanged ------------------------------------------------------------


@pytest.mark.parametrize("early_stopping", ["never", True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_without_the_option_generate_is_transformers_beam_search(seed, early_stopping):
    """The "length" form is transformers' own beam search, untouched: the model's `generate` gives what
    `GenerationMixin.generate` gives (with a length of the call's own, so that neither adds the source-length limit)."""
    model = tiny_model(seed)
    ids, mask = padded(sources(seed))
    options = dict(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        length_penalty=1.3,
        early_stopping=early_stopping,
        num_return_sequences=2,
        output_scores=True,
        return_dict_in_generate=True,
        max_new_tokens=9,
    )
    want = GenerationMixin.generate(model, **options)
    for extra in ({}, {"length_penalty_form": "length"}):
        got = model.generate(**options, **extra)
        assert torch.equal(got.sequences, want.sequences)
        assert torch.equal(got.sequences_scores, want.sequences_scores)
    gnmt = model.generate(**options, length_penalty_form="gnmt")
    assert not torch.equal(gnmt.sequences_scores, want.sequences_scores)  # the option does change the scores


def test_the_gnmt_search_returns_what_transformers_beam_search_returns_beside_its_scores():
    """The package's search fills the same outputs as transformers' (`GenerateBeamEncoderDecoderOutput`): per-step
    scores and logits, beam indices that rebuild each sequence's path, attention weights, and a cache."""
    model = tiny_model(2)
    model.config._attn_implementation = "eager"
    ids, mask = padded(sources(2))
    options = dict(
        input_ids=ids, attention_mask=mask, num_beams=3, num_return_sequences=2, return_dict_in_generate=True
    )
    options |= dict(output_scores=True, output_logits=True, output_attentions=True, output_hidden_states=True)
    stock = model.generate(**options)
    gnmt = model.generate(**options, length_penalty_form="gnmt")
    steps = len(gnmt.scores)
    for name in ("logits", "decoder_attentions", "cross_attentions", "decoder_hidden_states"):
        assert len(getattr(gnmt, name)) == steps > 0 and len(getattr(stock, name)) == len(stock.scores), name
    assert len(gnmt.cross_attentions[0]) == model.config.decoder_layers
    assert len(gnmt.encoder_attentions) == model.config.encoder_layers
    assert gnmt.beam_indices.shape == gnmt.sequences[:, 1:].shape
    assert gnmt.sequences_scores.shape == stock.sequences_scores.shape
    # Each returned hypothesis's score is the sum of the log-probabilities of its tokens along its beam path, over lp.
    alpha = model.generation_config.length_penalty
    step_scores = torch.stack(gnmt.scores)  # [steps, batch * beams, vocab]
    for row in range(gnmt.sequences.shape[0]):
        tokens = generated(gnmt.sequences[row])
        path = gnmt.beam_indices[row, : len(tokens)]
        total = sum(float(step_scores[t, path[t], token]) for t, token in enumerate(tokens))
        assert abs(total / gnmt_length_penalty(len(tokens), alpha) - float(gnmt.sequences_scores[row])) < 1e-4, row
    assert getattr(gnmt, "cache", None) is not None or getattr(gnmt, "past_key_values", None) is not None


def test_the_form_comes_from_the_generation_config_and_greedy_and_sampling_ignore_it():
    model = tiny_model(0)
    ids, mask = padded(sources(0))
    asked = model.generate(
        input_ids=ids,
        attention_mask=mask,
        length_penalty_form="gnmt",
        output_scores=True,
        return_dict_in_generate=True,
    )
    model.generation_config.length_penalty_form = "gnmt"
    configured = model.generate(input_ids=ids, attention_mask=mask, output_scores=True, return_dict_in_generate=True)
    assert torch.equal(asked.sequences, configured.sequences)
    assert torch.equal(asked.sequences_scores, configured.sequences_scores)
    greedy = model.generate(input_ids=ids, attention_mask=mask, num_beams=1)
    assert torch.equal(
        greedy, model.generate(input_ids=ids, attention_mask=mask, num_beams=1, length_penalty_form="length")
    )


def test_concurrent_calls_each_decode_with_their_own_form():
    """The form travels with the `generate` call (not on the model): calls in other threads, with the other form,
    return what each returns alone."""
    model = tiny_model(1)
    ids, mask = padded(sources(1))
    options = dict(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        length_penalty=1.3,
        output_scores=True,
        return_dict_in_generate=True,
    )
    alone = {form: model.generate(**options, length_penalty_form=form).sequences_scores for form in ("length", "gnmt")}
    assert not torch.equal(alone["length"], alone["gnmt"])
    with ThreadPoolExecutor(4) as pool:
        together = list(
            pool.map(lambda form: (form, model.generate(**options, length_penalty_form=form)), ["length", "gnmt"] * 4)
        )
    assert all(torch.equal(out.sequences_scores, alone[form]) for form, out in together)
    assert torch.equal(model.generate(**options).sequences_scores, alone["length"])  # nothing left behind


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(length_penalty_form="wu"), "not a length penalty form"),
        (dict(length_penalty_form="gnmt", length_penalty=-0.5), "the GNMT penalty takes alpha >= 0"),
    ],
)
def test_a_form_the_model_does_not_know_and_a_negative_gnmt_alpha_are_refused(options, message):
    model = tiny_model(0)
    ids, mask = padded(sources(0))
    with pytest.raises(ValueError, match=message):
        model.generate(input_ids=ids, attention_mask=mask, **options)
    model.generation_config.length_penalty_form = options["length_penalty_form"]  # saved so, e.g. by hand
    model.generation_config.length_penalty = options.get("length_penalty", 0.6)
    with pytest.raises(ValueError, match=message):
        model.generate(input_ids=ids, attention_mask=mask)


# --- the WMT14 recipes: saved, and loaded with transformers alone ----------------------------------------------------


def recipe_decoding(name: str) -> GenerationConfig:
    from vanilla_transformer.training.options import RunArguments
    from vanilla_transformer.training.steps import set_decoding

    recipe = json.loads(
        (Path(__file__).resolve().parents[1] / "vanilla_transformer" / "training" / "recipes" / name).read_text()
    )
    run_args = RunArguments(**{f.name: recipe[f.name] for f in fields(RunArguments) if f.name in recipe})
    config = GenerationConfig(num_beams=4, length_penalty=0.6, early_stopping=True)
    set_decoding(config, run_args)
    return config


def test_recipes_decoding():
    for name in ("wmt14_en_de_base.json", "wmt14_en_de_big.json"):
        config = recipe_decoding(name)
        assert (config.num_beams, config.length_penalty, config.length_penalty_form, config.early_stopping) == (
            4,
            0.6,
            "gnmt",
            "never",
        )
    for name in ("multi30k_en_de_cpu.json", "multi30k_de_en_cpu.json", "multi30k_en_fr_cpu.json"):
        config = recipe_decoding(name)
        assert (config.num_beams, config.length_penalty, config.length_penalty_form) == (6, 1.3, "length")


def test_a_recipe_with_num_beams_1_saves_a_greedy_generation_config(tmp_path):
    """`train --recipe multi30k_en_de_cpu --num_beams 1`: the recipe's length penalty and early stopping are beam-only
    options, which transformers refuses to save beside `num_beams=1` (the end of a run would fail after training)."""
    from vanilla_transformer.training.options import RunArguments
    from vanilla_transformer.training.steps import set_decoding

    recipe = json.loads(
        (
            Path(__file__).resolve().parents[1]
            / "vanilla_transformer"
            / "training"
            / "recipes"
            / "multi30k_en_de_cpu.json"
        ).read_text()
    )
    fields_ = {f.name: recipe[f.name] for f in fields(RunArguments) if f.name in recipe}
    run_args = RunArguments(**{**fields_, "num_beams": 1})
    model = tiny_model(0)
    set_decoding(model.generation_config, run_args)
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (1, 1.0)
    model.save_pretrained(tmp_path / "greedy")
    saved = json.loads((tmp_path / "greedy" / "generation_config.json").read_text())
    assert saved.get("num_beams", 1) == 1 and not saved.get("early_stopping", False)


def test_a_wmt14_recipe_model_decodes_with_the_gnmt_penalty_where_only_transformers_is_installed(tmp_path):
    model = tiny_model(4)
    decoding = recipe_decoding("wmt14_en_de_base.json")
    for key in ("num_beams", "length_penalty", "length_penalty_form", "early_stopping"):
        setattr(model.generation_config, key, getattr(decoding, key))
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    saved = json.loads((ckpt / "generation_config.json").read_text())
    assert (saved["length_penalty_form"], saved["length_penalty"], saved["early_stopping"]) == ("gnmt", 0.6, "never")
    batch = sources(4)
    ids, mask = padded(batch)
    out = model.generate(input_ids=ids, attention_mask=mask, output_scores=True, return_dict_in_generate=True)
    for i, source in enumerate(batch):  # the saved decoding is tensor2tensor's
        best = t2t_beam_search(model, source, beams=4, alpha=0.6, early_stopping="never")[0]
        assert generated(out.sequences[i]) == best[1] and abs(float(out.sequences_scores[i]) - best[0]) < 1e-5
    save_file(
        {
            "ids": ids,
            "mask": mask,
            "sequences": out.sequences.contiguous(),
            "scores": out.sequences_scores.contiguous(),
        },
        str(tmp_path / "expected.safetensors"),
    )
    script = BLOCK_PACKAGE + textwrap.dedent(
        f"""
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModelForSeq2SeqLM
        exp = load_file({str(tmp_path / "expected.safetensors")!r})
        model = AutoModelForSeq2SeqLM.from_pretrained({str(ckpt)!r}, trust_remote_code=True).eval()
        assert model.generation_config.length_penalty_form == "gnmt", model.generation_config
        out = model.generate(input_ids=exp["ids"], attention_mask=exp["mask"], output_scores=True,
                             return_dict_in_generate=True)
        assert torch.equal(out.sequences, exp["sequences"])
        assert torch.allclose(out.sequences_scores, exp["scores"], atol=1e-6)
        print("REMOTE-GNMT-OK", type(model).__module__)
        """
    )
    env = subprocess_env(HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "REMOTE-GNMT-OK transformers_modules" in result.stdout


def test_the_model_card_names_the_form_its_generation_config_uses():
    from test_model_card import REPO, RESULTS, small_config

    from vanilla_transformer.hub.model_card import render_model_card

    gnmt = {**RESULTS, "decoding": {**RESULTS["decoding"], "length_penalty_form": "gnmt"}}
    text = render_model_card(small_config(), gnmt, REPO).content
    assert "decodes with the paper's GNMT length penalty" in text and "divides by `length ** alpha`" not in text
    text = render_model_card(small_config(), RESULTS, REPO).content  # no form recorded: transformers' length form
    assert "divides by `length ** alpha`" in text and "decodes with the paper's GNMT" not in text
    assert "\n\n- The model only knows" not in text  # the bullets stay one list


# --- the transformers releases the package declares ---------------------------------------------------------------


def test_transformers_is_declared_from_5_17_to_below_6_and_the_installed_one_is_in_it():
    import tomllib

    import transformers
    from packaging.requirements import Requirement
    from packaging.version import Version

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    requirement = next(Requirement(r) for r in pyproject["project"]["dependencies"] if r.startswith("transformers"))
    assert str(requirement.specifier) in ("<6,>=5.17", ">=5.17,<6"), requirement
    assert Version(transformers.__version__) in requirement.specifier
