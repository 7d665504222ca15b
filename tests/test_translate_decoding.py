"""The decoding options of the commands (`translate`, `attention`, `demo`, `export`): one spelling everywhere, the
n-best list with `generate`'s scores, sampling with a seed, the GNMT penalty, and one-line errors for what cannot
work."""

import copy
import json

import pytest
import torch
from helpers import TINY_SIZES, read_multi30k, train_steps

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.commands import build_parser, main


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny model trained for 100 steps on 500 Multi30k pairs (EN->DE), saved with its tokenizer."""
    from vanilla_transformer.data.tokenizer import train_tokenizer

    src, tgt = read_multi30k("train.en.gz", 500), read_multi30k("train.de.gz", 500)
    tokenizer = train_tokenizer(src + tgt, vocab_size=600, model_max_length=48)
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(
        VanillaTransformerConfig(vocab_size=len(tokenizer), **TINY_SIZES, dropout=0.0)
    )
    train_steps(model, tokenizer, src, tgt, steps=100, seed=0)
    path = tmp_path_factory.mktemp("decoding_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model, tokenizer


@pytest.fixture(scope="module")
def sentences():
    return read_multi30k("test_2016_flickr.en.gz", 6)


def run(path, lines, tmp_path, *options) -> list[str]:
    source, target = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["translate", "--model", str(path), "--input", str(source), "--output", str(target), "--device", "cpu"]
    assert main([*argv, "--batch_size", "4", *options]) == 0
    return target.read_text(encoding="utf-8").splitlines()


def status_and_error(capsys, argv) -> tuple[int, str]:
    """`main(argv)`'s exit status (also when argparse exits) and its error: the one line of stderr that is one (a
    progress bar of loading may be there too: it is drawn on stderr)."""
    try:
        status = main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    err = capsys.readouterr().err
    errors = [line for line in err.replace("\r", "\n").splitlines() if ": error: " in line]
    assert len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err, err
    return status, errors[0]


def alone(model, tokenizer, line, **kwargs):
    """`generate` on one sentence alone: its hypotheses as (score, text), best first."""
    inputs = tokenizer(line, truncation=True, max_length=48, return_tensors="pt")  # as translate truncates
    with torch.no_grad():
        out = model.generate(**inputs, output_scores=True, return_dict_in_generate=True, **kwargs)
    texts = tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
    return [(float(s), t.strip()) for s, t in zip(out.sequences_scores, texts)]


@pytest.mark.parametrize("form", [None, "gnmt"])
def test_n_best_lines_carry_generates_scores(checkpoint, sentences, tmp_path, form):
    path, model, tokenizer = checkpoint
    lines = [sentences[0], "", *sentences[1:5]]
    options = ["--n_best", "3", "--num_beams", "4", "--length_penalty", "1.0"]
    kwargs = dict(num_beams=4, length_penalty=1.0, num_return_sequences=4)  # the whole beam
    if form:
        options += ["--length_penalty_form", form]
        kwargs["length_penalty_form"] = form
    got = [line.split("\t") for line in run(path, lines, tmp_path, *options)]
    assert all(len(fields) == 3 for fields in got)
    assert [int(index) for index, _, _ in got] == sorted(int(index) for index, _, _ in got)
    for i, line in enumerate(lines):
        rows = [row for row in got if int(row[0]) == i]
        if not line:
            assert [(float(s), t) for _, s, t in rows] == [(0.0, "")]  # a blank line: one empty translation
            continue
        seen = set()  # the beam's first 3 distinct texts, with their scores
        want = [(s, t) for s, t in alone(model, tokenizer, line, **kwargs) if not (t in seen or seen.add(t))][:3]
        assert [t for _, _, t in rows] == [t for _, t in want]
        assert all(abs(float(s) - w) < 1e-5 for (_, s, _), (w, _) in zip(rows, want))
        assert [float(s) for _, s, _ in rows] == sorted((float(s) for _, s, _ in rows), reverse=True)


def test_penalty_options_are_generates(checkpoint, sentences, tmp_path):
    path, model, tokenizer = checkpoint
    got = run(
        path, sentences, tmp_path, "--num_beams", "3", "--length_penalty", "1.3", "--length_penalty_form", "gnmt"
    )
    want = [
        alone(model, tokenizer, s, num_beams=3, length_penalty=1.3, length_penalty_form="gnmt")[0][1]
        for s in sentences
    ]
    assert got == want


@pytest.mark.parametrize("window", [6, 2])
def test_options_and_input_are_checked_once(checkpoint, sentences, tmp_path, monkeypatch, window):
    """`translate` checks its decoding options once before torch (`decoding_options`) and once against the loaded
    model's beam (`check_translation`), whatever the number of windows (here 1 and 3), and reads --input twice: the
    UTF-8 check before torch, then the translation."""
    import builtins
    import sys

    import vanilla_transformer.generation_vanilla_transformer as generation

    calls, reads = [], []
    code = generation.check_decoding.__code__
    source = tmp_path / "in.en"

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            calls.append(frame.f_back.f_code.co_name)

    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if str(file) == str(source):
            reads.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    sys.setprofile(profile)
    try:
        got = run(checkpoint[0], sentences, tmp_path, "--window", str(window), "--n_best", "2", "--num_beams", "3")
    finally:
        sys.setprofile(None)
    assert {int(line.split("\t")[0]) for line in got} == set(range(len(sentences)))  # every sentence's n-best lines
    assert calls == ["decoding_options", "check_translation"]
    assert len(reads) == 2


def test_sampling_is_reproducible_with_a_seed(checkpoint, sentences, tmp_path):
    path, _, _ = checkpoint
    first = run(path, sentences, tmp_path, "--temperature", "1.5", "--top_k", "20", "--seed", "3")
    assert first == run(path, sentences, tmp_path, "--temperature", "1.5", "--top_k", "20", "--seed", "3")
    greedy = run(path, sentences, tmp_path, "--num_beams", "1")
    assert first != greedy  # it does sample
    scored = [
        line.split("\t") for line in run(path, sentences[:2], tmp_path, "--sample", "--seed", "1", "--n_best", "2")
    ]
    assert {index for index, _, _ in scored} == {"0", "1"} and all(float(score) <= 0 for _, score, _ in scored)
    assert all(
        len({t for i, _, t in scored if i == index}) == [i for i, _, _ in scored].count(index) for index in "01"
    )


def test_every_command_spells_the_options_alike():
    parser = build_parser()
    spellings = {
        "num_beams": (["--num_beams", "3"], ["--num-beams", "3"]),
        "length_penalty": (["--length_penalty", "0.6"], ["--length-penalty", "0.6"]),
        "length_penalty_form": (["--length_penalty_form", "gnmt"], ["--length-penalty-form", "gnmt"]),
    }
    commands = {
        "translate": ["translate", "--model", "m"],
        "attention": ["attention", "--model", "m", "A man.", "--output", "a.png"],
        "demo": ["demo", "--model", "m"],
        "export": ["export", "ctranslate2", "m", "out"],
    }
    for command in commands.values():
        for dest, forms in spellings.items():
            values = {getattr(parser.parse_args([*command, *form]), dest) for form in forms}
            assert len(values) == 1 and None not in values, (command, dest)
    for form in (["--n_best", "2"], ["--n-best", "2"]):
        assert parser.parse_args([*commands["translate"], *form]).n_best == 2
    for command in ("translate", "attention"):
        args = parser.parse_args([*commands[command], "--max_new_tokens", "7", "--top_p", "0.9", "--top-k", "5"])
        assert (args.max_new_tokens, args.top_p, args.top_k) == (7, 0.9, 5)


@pytest.mark.parametrize(
    "options, flag, message",
    [
        (["--n_best", "5", "--num_beams", "4"], "--n_best 5", "is more than --num_beams 4"),
        (["--n_best", "5"], "--n_best 5", "is more than the beam size 4: beam search keeps 4"),
        (["--num_beams", "0"], "--num_beams", "must be at least 1, got 0"),
        (["--top_k", "-1"], "--top_k", "must be 0 or more"),
        (["--n_best", "0"], "--n_best", "must be at least 1"),
        (["--length_penalty", "-0.5", "--length_penalty_form", "gnmt"], "--length_penalty -0.5", "alpha >= 0"),
        (["--length_penalty", "nan"], "--length_penalty", "finite"),
        (["--length_penalty_form", "wu"], "--length_penalty_form", "invalid choice: 'wu'"),
        (["--temperature", "0.7", "--num_beams", "4"], "--temperature", "--num_beams is for beam search"),
        (["--top_p", "0.9", "--length_penalty", "1.0"], "--top_p", "--length_penalty is for beam search"),
        (["--sample", "--length_penalty_form", "gnmt"], "--sample", "--length_penalty_form is for beam search"),
        (["--top_p", "1.5"], "--top_p", "must be in (0, 1]"),
        (["--temperature", "0"], "--temperature", "must be above 0"),
        (["--seed", "1"], "--seed", "is for sampling"),
    ],
)
def test_bad_decoding_options_are_one_line_naming_the_flag(checkpoint, tmp_path, capsys, options, flag, message):
    source = tmp_path / "in.en"
    source.write_text("A man.\n", encoding="utf-8")
    argv = ["translate", "--model", str(checkpoint[0]), "--input", str(source), "--device", "cpu", *options]
    status, err = status_and_error(capsys, argv)
    assert status == 2 and err.startswith("vanilla-transformer translate: error: "), err
    assert flag in err and message in err, err


def test_a_saved_negative_gnmt_alpha_is_one_line(checkpoint, tmp_path, capsys):
    path, model, tokenizer = checkpoint
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    config_file = tmp_path / "m" / "generation_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "length_penalty_form": "gnmt", "length_penalty": -1.0}))
    source = tmp_path / "in.en"
    source.write_text("A man.\n", encoding="utf-8")
    argv = ["translate", "--model", str(tmp_path / "m"), "--input", str(source), "--device", "cpu"]
    status, err = status_and_error(capsys, argv)
    assert (
        status == 2
        and "`length_penalty` -1.0 with `length_penalty_form` 'gnmt': the GNMT penalty takes alpha >= 0" in err
    ), err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["attention", "--model", "m", "A man.", "--output", "a.png", "--top_k", "5", "--num_beams", "2"], "--top_k"),
        (
            ["attention", "--model", "m", "A man.", "--output", "a.png", "--target", "Ein Mann.", "--num_beams", "2"],
            "--target",
        ),
        (
            ["demo", "--model", "m/n", "--write_space", "space", "--num_beams", "2"],
            "decoding options are for the page",
        ),
        (
            ["translate", "--model", "m", "--engine", "ctranslate2", "--length_penalty_form", "gnmt"],
            "gnmt: CTranslate2",
        ),
        (
            ["translate", "--model", "m", "--engine", "ctranslate2", "--n_best", "2"],
            "--n_best is for --engine transformers",
        ),
        (["translate", "--model", "m", "--engine", "ctranslate2", "--top_p", "0.5"], "is for --engine transformers"),
    ],
)
def test_other_commands_refuse_what_cannot_work(argv, message, capsys):
    status, err = status_and_error(capsys, argv)
    assert status == 2 and message in err, err


def test_ctranslate2_export_of_a_gnmt_model(checkpoint, sentences, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    path, model, tokenizer = checkpoint
    gnmt = tmp_path / "gnmt"
    model.save_pretrained(gnmt)
    tokenizer.save_pretrained(gnmt)
    config_file = gnmt / "generation_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "length_penalty_form": "gnmt"}))
    status, err = status_and_error(capsys, ["export", "ctranslate2", str(gnmt), str(tmp_path / "refused")])
    assert status == 2 and "gnmt length penalty" in err and "--length_penalty_form length" in err, err
    assert not (tmp_path / "refused").exists()
    export = tmp_path / "ct2"
    argv = [
        "export",
        "ctranslate2",
        str(gnmt),
        str(export),
        "--length_penalty_form",
        "length",
        "--length_penalty",
        "1.0",
    ]
    assert main(argv) == 0
    capsys.readouterr()
    settings = json.loads((export / "vanilla_transformer_ct2.json").read_text())
    assert (settings["length_penalty"], settings["length_penalty_form"]) == (1.0, "length")
    # The engine's --length_penalty is generate's (length form).
    ct2 = run(export, sentences, tmp_path, "--engine", "ctranslate2", "--length_penalty", "1.5")
    want = [alone(model, tokenizer, s, length_penalty=1.5)[0][1] for s in sentences]
    assert ct2 == want


@pytest.mark.parametrize("mode", ["model default", "beam search"])
def test_demo_steps_score_with_the_models_penalty_form(checkpoint, sentences, mode):
    from vanilla_transformer.demo.computation import Decoding, run_translation
    from vanilla_transformer.demo.views import steps_html

    _, model, tokenizer = checkpoint
    model = copy.deepcopy(model)
    model.generation_config.length_penalty_form = "gnmt"
    decoding = Decoding(mode, num_beams=3, length_penalty=1.0)
    result = run_translation(model, tokenizer, sentences[0], decoding, max_new_tokens=20)
    with torch.no_grad():
        out = model.generate(
            **tokenizer(sentences[0], return_tensors="pt"),
            **decoding.generate_kwargs(),
            max_new_tokens=20,
            output_scores=True,
            return_dict_in_generate=True,
        )
    assert result.translation == tokenizer.decode(out.sequences[0], skip_special_tokens=True).strip()
    finals = [c for step in result.steps for c in step.candidates if c.final]
    assert len(finals) == 1 and finals[0].status == "ended"
    assert finals[0].score == pytest.approx(out.sequences_scores[0].item(), abs=1e-5)
    assert result.length_penalty_form == "gnmt" and "(5 + length) / 6" in steps_html(result)


def test_the_translation_pipeline_takes_the_form(checkpoint, sentences):
    from vanilla_transformer.pipeline_vanilla_transformer import TranslationPipeline

    _, model, tokenizer = checkpoint
    translator = TranslationPipeline(model=model, tokenizer=tokenizer)
    got = translator(sentences[:3], num_beams=3, length_penalty=1.3, length_penalty_form="gnmt", batch_size=2)
    want = [
        alone(model, tokenizer, s, num_beams=3, length_penalty=1.3, length_penalty_form="gnmt")[0][1]
        for s in sentences[:3]
    ]
    assert [r["translation_text"].strip() for r in got] == want
