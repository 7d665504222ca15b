"""The `vanilla-transformer` command: `translate` on real Multi30k sentences with a trained tiny model, compared with
`model.generate` called directly on each sentence (same beams); order, empty lines and over-long lines; option
errors; `--help`; `average`; one spelling of every option (underscores; hyphens and the old names parse alike); the
console script's start without torch, and `import vanilla_transformer`'s registration."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_SIZES, read_multi30k, run_command, subprocess_env, train_steps

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.arguments import read_lines
from vanilla_transformer.commands import build_parser, main
from vanilla_transformer.data.tokenizer import train_tokenizer
from vanilla_transformer.precision import fast_attention_implementation
from vanilla_transformer.translation.loading import load_model


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
            "--batch_size",
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
            "vanilla_transformer.commands",
            "translate",
            "--model",
            str(path),
            "--num_beams",
            "1",
            "--batch_size",
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
        "--num_beams",
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
    assert main([*command, "--num_beams", "1", "--batch_size", "1", "--device", "cpu"]) == 0
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
    warning = f"Line 2 has {n_tokens} tokens (</s> included) but the model takes at most {MAX_LENGTH}"
    assert warning in " ".join(messages), messages


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
        (["--batch_size", "0"], "--batch_size must be at least 1, got 0."),
        (["--num_beams", "0"], "--num_beams must be at least 1, got 0."),
        (["--max_new_tokens", "0"], "--max_new_tokens must be at least 1, got 0."),
        (["--input", "/no/such/file.en"], "--input '/no/such/file.en' is not a file"),
        (["--device", "cuda:0"] if not torch.cuda.is_available() else ["--device", "nonsense"], "--device"),
    ],
)
def test_bad_options_fail_with_a_message_that_names_them(checkpoint, options, message, capsys):
    status, err = run_main(["translate", "--model", str(checkpoint[0]), *options], capsys)
    assert status == 2
    assert err.startswith("vanilla-transformer translate: error: ") and message in err, err


def test_missing_model_is_a_clear_error(tmp_path, capsys):
    source = tmp_path / "in.en"
    source.write_text("A dog.\n", encoding="utf-8")
    assert main(["translate", "--model", str(tmp_path / "nowhere"), "--input", str(source), "--device", "cpu"]) == 2
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
        "--num_beams",
        "--batch_size",
        "--device",
        "--dtype",
        "--max_new_tokens",
        "--revision",
        "--trust_remote_code",
    ):
        assert any(option in a.option_strings for a in subparsers["translate"]._actions), option


def test_push_help_gives_the_commit_message_it_uses(capsys):
    from vanilla_transformer.hub.push import DEFAULT_COMMIT_MESSAGE

    with pytest.raises(SystemExit):
        main(["push", "--help"])
    assert f"(default: '{DEFAULT_COMMIT_MESSAGE}')" in " ".join(capsys.readouterr().out.split())


def test_average_is_a_command_like_the_others(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["average", "--help"])
    assert exit_info.value.code == 0 and "--last" in capsys.readouterr().out
    status, err = run_main(["average", str(tmp_path), "--last", "2", "--output", str(tmp_path / "avg")], capsys)
    assert status == 2 and "holds no `checkpoint-<step>` directory" in err


# ------------------------------------------------------------------------------------------------ plain errors


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    """The exit status of `main(argv)` (argparse's errors exit through SystemExit) and what it wrote on stderr."""
    try:
        status = main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    return status, capsys.readouterr().err


def assert_plain_error(status: int, err: str, command: str, flag: str, message: str) -> None:
    """Exit status 2, one line `vanilla-transformer COMMAND: error: ...` naming `flag` and saying `message`."""
    assert status == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"vanilla-transformer{' ' + command if command else ''}: error: "), err
    assert flag in err and message in err and "Traceback" not in err, err


@pytest.fixture
def directories(tmp_path):
    """A run directory holding only checkpoints, one holding no model at all, a model directory without tokenizer.
    Only the files the checks look at: nothing here is loaded."""
    for step in (900, 1000):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "run" / f"checkpoint-{step}" / "config.json").write_text("{}")
    (tmp_path / "untrained" / "runs").mkdir(parents=True)
    (tmp_path / "untrained" / "trainer_log.jsonl").write_text("")
    (tmp_path / "no_tokenizer").mkdir()
    (tmp_path / "no_tokenizer" / "config.json").write_text("{}")
    (tmp_path / "no_tokenizer" / "model.safetensors").write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize(
    "argv, command, flag, message",
    [
        (["translate", "--model", "/no/such/dir"], "translate", "--model '/no/such/dir'", "no such directory"),
        (["translate", "--model", "./no/such"], "translate", "--model './no/such'", "no such directory"),
        (
            ["translate", "--model", "{tmp}/run"],
            "translate",
            "--model",
            "holds no model (no config.json) but models in its subdirectories (checkpoint-900, checkpoint-1000): "
            "pass one of them, e.g. --model {tmp}/run/checkpoint-1000",
        ),
        (
            ["translate", "--model", "{tmp}/untrained"],
            "translate",
            "--model",
            "holds no model (no config.json; it holds runs/, trainer_log.jsonl)",
        ),
        (
            ["translate", "--model", "{tmp}/no_tokenizer"],
            "translate",
            "--model",
            "has no tokenizer (tokenizer.json): save the tokenizer beside the model (tokenizer.save_pretrained(",
        ),
        (["translate", "--model", "x", "--num_beams", "0"], "translate", "--num_beams", "must be at least 1, got 0"),
        (["translate", "--model", "x", "--num-beams", "0"], "translate", "--num_beams", "must be at least 1, got 0"),
        (
            ["translate", "--model", "x", "--beams", "0"],
            "translate",
            "--beams",
            "unrecognized arguments: --beams 0 (did you mean --num_beams?)",
        ),
        (
            ["translate", "--model", "x", "--batch_sise", "2"],
            "translate",
            "--batch_sise",
            "unrecognized arguments: --batch_sise 2 (did you mean --batch_size?)",
        ),
        (
            ["translate", "--model", "x", "--batch-sise", "2"],
            "translate",
            "--batch_sise",
            "unrecognized arguments: --batch_sise 2 (did you mean --batch_size?)",
        ),
        (
            ["export", "ctranslate2", "/no/such/dir", "{tmp}/out"],
            "export ctranslate2",
            "MODEL_DIR_OR_REPO '/no/such/dir'",
            "no such directory",
        ),
        (
            ["export", "ctranslate2", "{tmp}/run", "{tmp}/out"],
            "export ctranslate2",
            "MODEL_DIR_OR_REPO",
            "pass one of them, e.g. {tmp}/run/checkpoint-1000",
        ),
        (
            ["export", "ctranslate2", "x", "{tmp}/out", "--quantisation", "int8"],
            "export ctranslate2",
            "--quantisation",
            "(did you mean --quantization?)",
        ),
        (["average", "/no/such/dir", "--output", "{tmp}/avg"], "average", "RUN_DIR", "no such directory"),
        (
            ["average", "{tmp}/untrained", "--output", "{tmp}/avg"],
            "average",
            "RUN_DIR",
            "holds no `checkpoint-<step>` directory whose save finished (it holds runs, trainer_log.jsonl)",
        ),
        (["average", "{tmp}/run", "--last", "0", "--output", "{tmp}/avg"], "average", "--last", "at least 1"),
        (
            ["average", "--checkpoints", "{tmp}/run/checkpoint-900", "/no/such", "--output", "{tmp}/avg"],
            "average",
            "--checkpoints '/no/such'",
            "is not a directory",
        ),
        (["push", "/no/such/dir", "me/model", "--dry_run"], "push", "output_dir", "is not a directory"),
        (["transalte", "--model", "x"], "", "COMMAND", "invalid choice: 'transalte'"),
    ],
)
def test_errors_are_one_plain_line(directories, capsys, argv, command, flag, message):
    argv = [arg.replace("{tmp}", str(directories)) for arg in argv]
    status, err = run_main(argv, capsys)
    assert_plain_error(status, err, command, flag, message.replace("{tmp}", str(directories)))
    assert not (directories / "out").exists() and not (directories / "avg").exists()  # nothing was written


def test_an_error_in_a_process_is_one_line_without_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer.commands", "translate", "--model", "/no/such/dir"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=120,
    )
    assert_plain_error(result.returncode, result.stderr, "translate", "--model", "no such directory")


HEAVY_MODULES = ("torch", "transformers", "huggingface_hub", "ctranslate2", "matplotlib", "gradio")


COMMANDS = [[], ["translate"], ["export"], ["export", "ctranslate2"], ["push"], ["attention"], ["score"], ["average"]]


@pytest.mark.parametrize("command", [*COMMANDS, ["demo"]])
def test_help_imports_no_heavy_module(command):
    # `python -X importtime` lists every module the process imports (on stderr): the console script's module builds
    # the parsers and prints the help without torch, transformers, huggingface_hub, ctranslate2 or matplotlib, which
    # take seconds to import.
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vanilla_transformer_cli", *command, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=120,
    )
    assert result.returncode == 0 and "usage: vanilla-transformer" in result.stdout, result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import")}
    assert (
        "vanilla_transformer.translation.loading" in imported
    )  # what commands.py imports: the listing is the one of this process
    heavy = sorted(name for name in imported if name.split(".")[0] in HEAVY_MODULES)
    assert heavy == [], heavy


def test_score_prints_sacrebleu_and_the_papers_tokenized_bleu(tmp_path, capsys):
    (tmp_path / "hyp.de").write_text("Ein gut-bekannter Mann.\n")
    (tmp_path / "ref.de").write_text("Ein gut-bekannter Mann läuft.\n")
    options = ["--hypotheses", str(tmp_path / "hyp.de"), "--references", str(tmp_path / "ref.de")]
    assert main(["score", *options, "--lang", "de"]) == 0
    sacre, paper = capsys.readouterr().out.splitlines()
    assert sacre.startswith("sacreBLEU") and "tok:13a" in sacre
    assert paper.startswith("tokenized BLEU   67.32") and "Table 2" in paper
    (tmp_path / "ref.de").write_text("one\ntwo\n")
    assert main(["score", *options]) == 2
    assert capsys.readouterr().err.strip() == (
        "vanilla-transformer score: error: --hypotheses has 1 lines and --references 2: line i of one must be the "
        "translation of line i of the other."
    )
    # A missing file is named by its own flag.
    assert main(["score", "--hypotheses", str(tmp_path / "none.de"), "--references", str(tmp_path / "ref.de")]) == 2
    assert capsys.readouterr().err.startswith(
        f"vanilla-transformer score: error: --hypotheses '{tmp_path / 'none.de'}'"
    )


# ------------------------------------------------------------------------------------------------ one spelling

# What each command needs besides the option tried, and a value each kind of option takes.
REQUIRED = {
    "translate": ["--model", "m"],
    "attention": ["A man.", "--model", "m", "--output", "a.png"],
    "ctranslate2": ["m", "out"],
    "push": ["run", "me/model"],
    "score": ["--hypotheses", "h", "--references", "r"],
    "demo": [],
    "average": ["run", "--output", "avg"],
    "table3": [],
}


def command_parsers():
    """(argv prefix, parser) of every command but `train` (tests/test_train_command.py checks its options)."""
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name, parser in commands.items():
        if name == "export":
            yield (
                ["export", "ctranslate2"],
                next(a for a in parser._actions if a.dest == "format").choices["ctranslate2"],
            )
        elif name != "train":
            yield [name], parser


def value_for(action) -> list[str]:
    if action.nargs == 0:
        return []
    if action.choices:
        return [list(action.choices)[-1]]
    return ["2"] if getattr(action.type, "__name__", "") in ("int", "integer", "positive_int") else ["0.5"]


def test_hyphens_and_underscores_give_the_same_arguments_in_every_command():
    parser, tried = build_parser(), 0
    for prefix, command in command_parsers():
        required = REQUIRED[prefix[-1]]
        for action in command._actions:
            for option in action.option_strings:
                if "_" not in option or option in required:
                    continue
                value = value_for(action)
                underscores = vars(parser.parse_args([*prefix, *required, option, *value]))
                hyphens = vars(parser.parse_args([*prefix, *required, option.replace("_", "-"), *value]))
                assert underscores == hyphens and underscores[action.dest] != action.default, (prefix, option)
                tried += 1
    assert tried >= 20  # batch_size, num_beams, ..., trust_remote_code in each command that loads a model


def test_no_command_takes_a_prefix_of_an_option(capsys):
    """argparse's abbreviations are off in every command (`allow_abbrev=False`): `--num_beam 4` was taken for
    `--num_beams` while `--length` was refused as ambiguous. A prefix is refused with the option it begins."""
    tried = 0
    for prefix, command in command_parsers():
        required = REQUIRED[prefix[-1]]
        options = {option for action in command._actions for option in action.option_strings}
        for action in command._actions:
            for option in action.option_strings:
                short = option[:-1]
                if not option.startswith("--") or short in options or option in required or len(short) < 4:
                    continue
                with pytest.raises(SystemExit) as exit_info:
                    main([*prefix, *required, short, *value_for(action)])
                err = capsys.readouterr().err
                assert exit_info.value.code == 2 and "unrecognized arguments: " + short in err, (prefix, short, err)
                meant = re.search(r"\(did you mean (--\w+)\?\)", err)
                assert meant and meant[1].startswith(short), (prefix, short, err)  # `--top_`: --top_k or --top_p
                tried += 1
    assert tried >= 40
    status, err = run_command(["train", "--max_step", "3"], capsys)
    assert status == 2 and "unrecognized argument '--max_step'; did you mean '--max_steps'?" in err, err
    status, err = run_command(["translate", "--model", "m", "--length", "1.0"], capsys)
    assert status == 2 and "--length 1.0 (did you mean --length_penalty?)" in err, err


@pytest.mark.parametrize(
    "old, option",
    [("--beams", "--num_beams"), ("--beam", "--num_beams"), ("--lenpen", "--length_penalty"), ("--nbest", "--n_best")],
)
def test_another_name_of_a_decoding_option_is_refused_with_the_option(capsys, old, option):
    """One name per option (its hyphenated spelling aside): fairseq's names and earlier releases' are not options
    of these commands; the error names the option meant."""
    for prefix in (["translate", "--model", "m"], ["attention", "--model", "m", "A man.", "--output", "a.png"]):
        if old == "--nbest" and prefix[0] == "attention":
            continue  # attention has no --n_best
        with pytest.raises(SystemExit) as exit_info:
            main([*prefix, old, "2"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"unrecognized arguments: {old} 2 (did you mean {option}?)" in err, err
    with pytest.raises(SystemExit):
        main(["translate", "--model", "m", "--do_sample"])
    assert "(did you mean --sample?)" in capsys.readouterr().err


def test_help_lists_the_one_spelling_only(capsys):
    for prefix, command in command_parsers():
        with pytest.raises(SystemExit):
            main([*prefix, "--help"])
        text = capsys.readouterr().out
        hyphenated = re.findall(r"(?<![\w-])--[a-z0-9]+(?:-[a-z0-9]+)+", text)
        assert hyphenated == [], (prefix, hyphenated)
        for action in command._actions:  # every option once, by its one name
            assert len(action.option_strings) <= 2 and all("-" not in o.lstrip("-") for o in action.option_strings)


# Issue 50: a `--help` text says what an option or command does in a sentence or two; the details are in the docs.
HELP_CHARS, DESCRIPTION_CHARS = 200, 250


def help_texts(parser, prefix=()):
    """(where, kind, text) of every description and help string of `parser` and its commands, but `train`'s
    (tests/test_train_command.py checks its options)."""
    if parser.description:
        yield prefix, "description", parser.description
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest != "train":
                    yield (*prefix, choice.dest), "help", choice.help
            for name, sub in action.choices.items():
                if name != "train":
                    yield from help_texts(sub, (*prefix, name))
        elif action.help not in (None, argparse.SUPPRESS):
            yield (*prefix, (action.option_strings or [action.dest])[0]), "help", action.help


def test_help_texts_are_short():
    texts = list(help_texts(build_parser()))
    assert any(kind == "description" and where == ("translate",) for where, kind, _ in texts)  # the walk reaches them
    assert any(where == ("export", "ctranslate2", "--quantization") for where, _, _ in texts)
    too_long = [
        (" ".join(where), kind, len(text))
        for where, kind, text in texts
        if len(text) > (DESCRIPTION_CHARS if kind == "description" else HELP_CHARS)
    ]
    assert too_long == [], f"shorten these (details go to README.md and docs/): {too_long}"


def test_the_console_script_imports_no_torch_and_the_package_registers_on_import():
    """`import vanilla_transformer` registers the model with the Auto classes; the console script's module imports
    the package without that (nor torch), and leaves no trace of how in the environment."""
    script = (
        "import os, sys, vanilla_transformer_cli; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules), "
        "os.environ.get('VANILLA_TRANSFORMER_REGISTER_LATER'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=120
    )
    assert result.returncode == 0 and result.stdout.split() == ["[]", "None"], result.stdout + result.stderr
    script = (
        "import vanilla_transformer; from transformers import AutoConfig, AutoModelForSeq2SeqLM; "
        "config = AutoConfig.for_model('vanilla-transformer', vocab_size=40, d_model=16, encoder_layers=1, "
        "decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, "
        "decoder_ffn_dim=32); print(type(AutoModelForSeq2SeqLM.from_config(config)).__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "VanillaTransformerForConditionalGeneration"


def test_the_decoding_rules_import_without_torch():
    """generation_vanilla_transformer.py holds the decoding rules that the command line checks before anything loads
    and that the model code applies: alone (as remote code loads it, or as the command line does) it imports only the
    standard library."""
    path = ROOT / "vanilla_transformer" / "generation_vanilla_transformer.py"
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('generation', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(sorted(name for name in ('torch', 'transformers', 'numpy') if name in sys.modules))\n"
        "print(*module.LENGTH_PENALTY_FORMS)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=120
    )
    assert result.returncode == 0 and result.stdout.splitlines() == ["[]", "length gnmt"], (
        result.stdout + result.stderr
    )
