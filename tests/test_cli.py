"""The `vanilla-transformer` command: `translate` on real Multi30k sentences with a trained tiny model, compared with
`model.generate` called directly on each sentence (same beams); order, empty lines and over-long lines; option
errors; `--help`; routing of `average`."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_SIZES, read_multi30k, subprocess_env, train_steps

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import build_parser, load_model, main, read_lines
from vanilla_transformer.precision import fast_attention_implementation
from vanilla_transformer.tokenization import train_tokenizer


ROOT = Path(__file__).resolve().parents[1]
MAX_LENGTH = 48  # the tokenizer's model_max_length: longer lines are truncated by translate


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny model trained for 150 steps on 500 Multi30k pairs (EN->DE), saved with its tokenizer."""
    src, tgt = read_multi30k("train.en.gz", 500), read_multi30k("train.de.gz", 500)
    tokenizer = train_tokenizer(src + tgt, vocab_size=600, model_max_length=MAX_LENGTH)
    torch.manual_seed(0)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        **TINY_SIZES,
        dropout=0.0,
    )
    model = VanillaTransformerForConditionalGeneration(config)
    train_steps(model, tokenizer, src, tgt, steps=150, seed=0)
    path = tmp_path_factory.mktemp("cli_model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model, tokenizer


_REFERENCE = {}


def generate_one(model, tokenizer, line, **kwargs):
    """The reference: `generate` on one sentence alone (no batch, no padding), decoded as translate() does."""
    key = (id(model), line, tuple(sorted(kwargs.items())))
    if key not in _REFERENCE:
        inputs = tokenizer(line, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, **kwargs)
        _REFERENCE[key] = tokenizer.decode(out[0], skip_special_tokens=True).strip()
    return _REFERENCE[key]


def expected(model, tokenizer, lines, **kwargs):
    return [generate_one(model, tokenizer, line, **kwargs) if line.strip() else "" for line in lines]


@pytest.fixture(scope="module")
def lines():
    """The first 20 sentences of the Multi30k 2016 test set, with empty and blank lines in between and at the end."""
    test = read_multi30k("test_2016_flickr.en.gz", 20)
    return ["", *test[:5], "", *test[5:12], "", "   ", *test[12:], ""]


def test_file_to_file_equals_generate_per_sentence(checkpoint, lines, tmp_path):
    path, model, tokenizer = checkpoint
    source, target = tmp_path / "test.en", tmp_path / "test.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # batch size 3: sentences of different lengths share batches (padding), and several batches are needed.
    status = main(
        [
            "translate",
            "--model",
            str(path),
            "--input",
            str(source),
            "--output",
            str(target),
            "--batch-size",
            "3",
            "--device",
            "cpu",
        ]
    )
    assert status == 0
    got = target.read_text(encoding="utf-8").split("\n")
    assert got[-1] == "" and len(got) - 1 == len(lines)  # one line out per line in, each ended by "\n"
    want = expected(model, tokenizer, lines)  # beams: the model's generation config (4), as the command's default
    assert got[:-1] == want
    assert [i for i, line in enumerate(got[:-1]) if not line] == [
        i for i, line in enumerate(lines) if not line.strip()
    ]
    # The translations differ from one sentence to the next, so a shuffled order could not pass.
    assert len(set(want) - {""}) >= 10


def test_stdin_to_stdout_in_a_subprocess(checkpoint, lines):
    path, model, tokenizer = checkpoint
    text = "\r\n".join(lines[:9])  # Windows line ends, no newline after the last line
    env = subprocess_env()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vanilla_transformer.cli",
            "translate",
            "--model",
            str(path),
            "--beams",
            "1",
            "--batch-size",
            "4",
            "--device",
            "cpu",
        ],
        input=text.encode("utf-8"),
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode("utf-8").split("\n") == [*expected(model, tokenizer, lines[:9], num_beams=1), ""]
    # stderr is a pipe, not a terminal: no progress bar.
    assert "sent/s" not in result.stderr.decode() and "translate:" not in result.stderr.decode()


def test_progress_bar_only_on_a_terminal(checkpoint, lines, tmp_path, capsys, monkeypatch):
    path, _, _ = checkpoint
    source = tmp_path / "in.en"
    source.write_text(lines[1] + "\n", encoding="utf-8")
    args = [
        "translate",
        "--model",
        str(path),
        "--input",
        str(source),
        "--output",
        str(tmp_path / "out"),
        "--beams",
        "1",
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    assert "translate" not in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(args) == 0
    assert "translate: 100%" in capsys.readouterr().err


def translate_greedily(path, sentences: list[str], tmp_path, *options: str) -> list[str]:
    """`vanilla-transformer translate` of `sentences`, file to file, greedy, one sentence per batch, on the CPU."""
    source, target = tmp_path / "in.en", tmp_path / "out.de"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    command = ["translate", "--model", str(path), "--input", str(source), "--output", str(target), *options]
    assert main([*command, "--beams", "1", "--batch-size", "1", "--device", "cpu"]) == 0
    return target.read_text(encoding="utf-8").splitlines()


def test_overlong_line_is_truncated_with_a_warning_not_dropped(checkpoint, lines, tmp_path, caplog):
    path, model, tokenizer = checkpoint
    long_line = " ".join(read_multi30k("test_2016_flickr.en.gz", 30)[20:30])  # ten sentences: far over MAX_LENGTH
    n_tokens = len(tokenizer(long_line)["input_ids"])
    assert n_tokens > MAX_LENGTH
    with caplog.at_level("WARNING"):
        got = translate_greedily(path, [lines[1], long_line, lines[2]], tmp_path)
    # The long line is translated from its first MAX_LENGTH tokens (</s> included), in its place.
    assert got == expected(model, tokenizer, [lines[1], long_line, lines[2]], num_beams=1)
    assert got[1]
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"Line 2 has {n_tokens} tokens; the model takes {MAX_LENGTH}" in " ".join(messages), messages


def test_outer_whitespace_is_translated_as_training_saw_it(checkpoint, lines, tmp_path):
    # train.py strips every sentence (data.tokenize_corpus); the tokenizer keeps spaces, so " A man" would start with
    # a lone "▁" token the model never saw. translate() strips too: a padded line translates as the bare one.
    path, model, tokenizer = checkpoint
    bare = lines[1:4]
    padded = ["  " + bare[0], bare[1] + " \t", " " + bare[2] + " "]
    assert [tokenizer(p)["input_ids"] for p in padded] != [tokenizer(b)["input_ids"] for b in bare]
    # Guard: given to the model as they are, the padded lines translate differently, so the check below can fail.
    assert [generate_one(model, tokenizer, p, num_beams=1) for p in padded] != expected(
        model, tokenizer, bare, num_beams=1
    )
    assert translate_greedily(path, padded, tmp_path) == expected(model, tokenizer, bare, num_beams=1)


def test_read_lines_splits_on_newlines_only(tmp_path):
    path = tmp_path / "in.txt"
    # U+2028 and form feed are line breaks for str.splitlines(), not for a one-sentence-per-line file.
    path.write_bytes("\ufeffa\u2028b\r\n\nc\x0cd\n".encode("utf-8"))
    assert read_lines(str(path)) == ["a\u2028b", "", "c\x0cd"]
    path.write_bytes(b"")
    assert read_lines(str(path)) == []


def test_empty_input_gives_empty_output(checkpoint, tmp_path):
    source, target = tmp_path / "empty.en", tmp_path / "empty.de"
    source.write_text("", encoding="utf-8")
    assert (
        main(
            [
                "translate",
                "--model",
                str(checkpoint[0]),
                "--input",
                str(source),
                "--output",
                str(target),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert target.read_bytes() == b""


@pytest.mark.parametrize(
    "options, message",
    [
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--beams", "0"], "--beams must be at least 1"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
        (["--input", "/no/such/file.en"], "--input '/no/such/file.en' is not a file"),
        (["--device", "cuda:0"] if not torch.cuda.is_available() else ["--device", "nonsense"], "--device"),
    ],
)
def test_bad_options_fail_with_a_message_that_names_them(checkpoint, options, message, capsys):
    assert main(["translate", "--model", str(checkpoint[0]), *options]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vanilla-transformer translate: error: ") and message in err, err


def test_missing_model_is_a_clear_error(tmp_path, capsys):
    source = tmp_path / "in.en"
    source.write_text("A dog.\n", encoding="utf-8")
    assert main(["translate", "--model", str(tmp_path / "nowhere"), "--input", str(source), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert f"--model {str(tmp_path / 'nowhere')!r} could not be loaded" in err and "Traceback" not in err


def test_dtype_choices_are_enforced(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "--model", "x", "--dtype", "float64"])
    assert exit_info.value.code == 2 and "invalid choice: 'float64'" in capsys.readouterr().err


def test_bfloat16_weights(checkpoint, lines, tmp_path):
    path, _, _ = checkpoint
    translated = translate_greedily(path, lines[1:4], tmp_path, "--dtype", "bfloat16")
    # In bfloat16 on a CPU the command uses the eager attention, the fast kernel there (precision.py); kernels round
    # differently in bfloat16, so the reference uses the same one.
    bf16 = VanillaTransformerForConditionalGeneration.from_pretrained(
        path, dtype=torch.bfloat16, attn_implementation=fast_attention_implementation("cpu", torch.bfloat16) or "sdpa"
    ).eval()
    assert translated == expected(bf16, checkpoint[2], lines[1:4], num_beams=1)


@pytest.mark.parametrize("native", [True, False])
def test_dtype_auto_is_bfloat16_only_where_native(checkpoint, lines, tmp_path, monkeypatch, native):
    # The hardware question is answered by torch (precision.bf16_support); both answers are checked here.
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    path, model, tokenizer = checkpoint
    loaded, _ = load_model(str(path), dtype="auto", device="cpu")
    assert loaded.dtype == (torch.bfloat16 if native else torch.float32)
    assert loaded.config._attn_implementation == ("eager" if native else "sdpa")
    translated = translate_greedily(path, lines[1:4], tmp_path, "--dtype", "auto")
    if native:
        reference = VanillaTransformerForConditionalGeneration.from_pretrained(
            path, dtype=torch.bfloat16, attn_implementation="eager"
        ).eval()
    else:
        reference = model  # float32, the default attention
    assert translated == expected(reference, tokenizer, lines[1:4], num_beams=1)


def test_help_documents_every_option(capsys):
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name in ("translate", "push"):
        sub = subparsers[name]
        for action in sub._actions:
            assert action.help, f"{name}: {action.option_strings or action.dest} has no help"
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
        text = capsys.readouterr().out
        for action in sub._actions:
            for option in action.option_strings or [action.dest]:
                assert option in text, (name, option)
    for option in (
        "--model",
        "--input",
        "--output",
        "--beams",
        "--batch-size",
        "--device",
        "--dtype",
        "--max-new-tokens",
        "--revision",
        "--trust-remote-code",
    ):
        assert any(option in a.option_strings for a in subparsers["translate"]._actions), option


def test_average_routes_to_the_averaging_command(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["average", "--help"])
    assert exit_info.value.code == 0 and "--last" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["average", str(tmp_path), "--last", "2", "--output", str(tmp_path / "avg")])
    assert exit_info.value.code == 2 and "holds no `checkpoint-<step>` directory" in capsys.readouterr().err
