"""The `vanilla-transformer` console command: one parser per command, and the dispatch to the command's function.

    vanilla-transformer train --recipe multi30k_en_de_cpu --dataset DATA_DIR --output_dir runs/en-de
    vanilla-transformer translate --model runs/en-de < news.en > news.de
    vanilla-transformer translate --model your-name/transformer-en-de --input test.en --output test.de --device cuda
    vanilla-transformer push runs/en-de your-name/transformer-en-de [--private] [--revision BRANCH]
    vanilla-transformer average runs/en-de --last 5 --output runs/en-de/averaged
    vanilla-transformer attention --model runs/en-de "A man is riding a bicycle." --layer 4 --output cross.png
    vanilla-transformer export ctranslate2 runs/en-de runs/en-de-ct2 [--quantization int8]
    vanilla-transformer translate --engine ctranslate2 --model runs/en-de-ct2 < news.en > news.de
    vanilla-transformer score --hypotheses newstest2014.hyp.de --references newstest2014.de --lang de
    vanilla-transformer demo --model runs/en-de [--host 127.0.0.1] [--port 7860] [--share]
    vanilla-transformer demo --model runs/en-de --compare runs/en-de/averaged
    vanilla-transformer demo --model your-name/transformer-en-de --write_space space/ --requirement SPEC

`vanilla-transformer COMMAND --help` documents every option. Long options are spelled with underscores, as the
Trainer's (`--batch_size`, `--num_beams`); the same names with hyphens are accepted too, and a name that is no
option of the command gets the closest one in its error (vanilla_transformer/command_line.py).

Each command's parser and function live in the subpackage it belongs to: `translate` and `export` in
translation/commands.py, `attention` and `score` in evaluation/commands.py, `push` in hub/commands.py, `average` in
training/averaging.py, `train` in training/command.py (its own `HfArgumentParser`, routed to before this parser;
its `--help` and early checks, training/preflight.py, need neither torch nor transformers either);
`demo` is here. The console script is `vanilla_transformer_cli.main` (beside this package), which imports the package
without registering the model with transformers: parsing and `--help` need neither torch nor transformers, and
`main` registers before the command runs. `python -m vanilla_transformer_cli ...` does the same; `python -m
vanilla_transformer.cli ...` too, after the registration that importing the package does.

translate reads one sentence per line (UTF-8) and writes one translation per line, in the input order: line i of
the output is the translation of line i of the input, so the files stay aligned. Around that promise:
  * empty (or all-whitespace) lines give empty lines, without running the model;
  * lines are split on "\\n" only (a trailing "\\r" is dropped), never on the other characters Python's
    `splitlines` treats as line breaks, which can occur inside a sentence;
  * a line longer than the model takes (the smaller of the tokenizer's `model_max_length` and the model's
    `max_position_embeddings`) is truncated to that many tokens and translated, with a warning on stderr naming
    the line (numbered from 1): it is never dropped;
  * a line break inside a generated translation (possible with byte-level tokens) is written as a space.
The input is read --window lines at a time; each window is translated in batches of similar length (sorted by length,
order restored afterwards) and written, flushed, before the next is read: memory does not grow with the input, and an
interrupted run leaves the translations of its finished windows (--all_or_nothing: all or none); decoding is
the model's generation config (its beam size and length penalty, and at most source length + 50 tokens, section 6.1)
unless the decoding options say otherwise (`--num_beams`, `--length_penalty`, `--length_penalty_form gnmt`: the
paper's penalty, `--max_new_tokens`, `--sample --temperature --top_k --top_p --seed`); `--n_best N` writes N
hypotheses per sentence, one per line: index (from 0), score, text, tab-separated. Progress bars (translating, loading
the weights) are drawn on stderr only when it is a terminal, and not with --quiet.
`--engine ctranslate2` does the same with a model written by `export ctranslate2` (same tokens as `generate`, about
twice as fast on a CPU; see vanilla_transformer/translation/ctranslate2.py).

Every command checks what needs only its options and the file system (`check` of its parser: paths, model names,
output directories, repo ids, languages) before torch, transformers or the model are loaded: a mistake fails in a
second, in one line naming the option, and writes nothing.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

# Only light modules (the standard library, and package modules that import nothing heavy at their top): the parsers
# are built without torch, transformers or huggingface_hub, so that `--help` answers at once.
from .command_line import (
    PROG,
    ArgumentParser,
    add_checkpoint_options,
    add_decoding_options,
    apply_decoding,
    decoding_options,
    quiet_progress_bars,
    unrecognized,
)
from .evaluation.commands import add_attention_parser, add_score_parser
from .hub.commands import add_push_parser
from .training.averaging import add_average_parser
from .translation.commands import add_export_parser, add_translate_parser
from .translation.loading import check_model_location
from .translation.shipped import DEFAULT_MODEL, PRETRAINED_DIR, resolve_model


# ------------------------------------------------------------------------------------------------ demo


def add_demo_parser(commands) -> None:
    """`demo`: the web page of a model (docs/demo.md)."""
    d = commands.add_parser(
        "demo",
        help="a web page that translates and shows attention, beam search steps and word alignment",
        description="Serve a Gradio page for a model: translate what a visitor types (the model's decoding, or "
        "greedy / beam / sampling), with its cross-, encoder and decoder attention per layer and head, the beam "
        "search step by step, and a word alignment read from the cross-attention. Needs the demo extra (pip install "
        "'.[demo]' in the clone). See docs/demo.md.",
    )
    d.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help=f"a shipped model's name (default {DEFAULT_MODEL}), a checkpoint directory or a Hub repo id (with its "
        "tokenizer); with --write_space a Hub repo id",
    )
    d.add_argument(
        "--compare",
        default=None,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help="a second model shown beside --model (e.g. the averaged model of the same run), loaded with the same "
        "--device, --revision and --trust_remote_code; it must have --model's vocabulary",
    )
    d.add_argument("--host", default="127.0.0.1", help="interface to serve on (default 127.0.0.1: this machine only)")
    d.add_argument("--port", type=int, default=7860, help="port (default 7860; 0 = the first free one from 7860 up)")
    d.add_argument("--share", action="store_true", help="also open a public gradio.live link (Gradio's tunnel)")
    d.add_argument("--device", default="auto", help="torch device: auto (default), cpu, cuda, mps")
    d.add_argument(
        "--write_space",
        default=None,
        metavar="DIR",
        help="write a Hugging Face Space (app.py, requirements.txt, README.md) running this page for the Hub model "
        "--model into DIR, instead of serving",
    )
    d.add_argument(
        "--requirement",
        default=None,
        metavar="SPEC",
        help="with --write_space: the line of the Space's requirements.txt that installs this package, e.g. "
        "'vanilla-transformer[demo] @ git+https://github.com/YOUR_NAME/vanilla-transformer' (default: the same line "
        "with the Repository URL of the package's metadata; required where the metadata records none)",
    )
    add_decoding_options(d, sampling=False)  # the page's "model default" decoding
    add_checkpoint_options(d)
    d.set_defaults(func=cmd_demo, check=check_demo, command_parser=d)


def check_demo(args) -> None:
    """The checks of `demo` that need only its options and the file system, run before torch and gradio load."""
    decoding_options(args)  # the options alone first, then the files
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535 (0: the first free one from 7860 up), got {args.port}.")
    if not args.host.strip():
        raise ValueError("--host must name an interface, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every one).")
    if args.write_space is not None:
        if args.compare is not None:
            raise ValueError("--compare is for the page served here: --write_space writes a Space for one model.")
        return
    if args.requirement is not None:
        raise ValueError("--requirement is for --write_space (the Space's requirements.txt).")
    check_model_location(args.model)
    if args.compare is not None:
        check_model_location(args.compare, option="--compare")


def _display_name(model: str) -> str:
    """A shipped model by its short name (its directory is deep in site-packages), any other model as given."""
    return Path(model).name if Path(model).parent == PRETRAINED_DIR else model


def cmd_demo(args) -> int:
    """The web page (vanilla_transformer/demo/, docs/demo.md), or with --write_space a Space that runs it."""
    decoding = decoding_options(args)  # the page's "model default" decoding, and its controls' first values
    check_demo(args)  # again, for a caller that did not run main: before gradio, torch and the weights are loaded
    if args.write_space is not None:
        if decoding:
            raise ValueError(
                "the decoding options are for the page served here: a Space decodes as its model's config."
            )
        from .demo import write_space

        path = write_space(args.write_space, args.model, revision=args.revision, requirement=args.requirement)
        print(f"Space written in {path}: upload it with `hf upload --repo-type space NAME {path}`")
        return 0
    from .demo import DEMO_HINT, VocabularyMismatch, build_demo, launch_demo

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        import gradio  # noqa: F401
    except ImportError:
        raise ValueError(f"the demo needs gradio: {DEMO_HINT}") from None
    from .translation.loading import load_model

    options = dict(revision=args.revision, device=args.device, trust_remote_code=args.trust_remote_code)
    model, tokenizer = load_model(args.model, **options)
    apply_decoding(model.generation_config, decoding)
    compare = None
    if args.compare is not None:
        model_b, tokenizer_b = load_model(args.compare, **options)
        apply_decoding(model_b.generation_config, decoding)
        compare = (model_b, tokenizer_b, _display_name(args.compare))
    try:
        blocks = build_demo(model, tokenizer, model_name=_display_name(args.model), compare=compare)
    except VocabularyMismatch as mismatch:  # build_demo's check (the only one), told in the command's options
        raise ValueError(
            f"--compare {args.compare!r} has another vocabulary than --model {args.model!r} ({mismatch.difference}): "
            "the two models must share one tokenizer to translate the same tokens."
        ) from None
    launch_demo(blocks, host=args.host, port=args.port or None, share=args.share)
    return 0


# ------------------------------------------------------------------------------------------------ dispatch


def build_parser() -> ArgumentParser:
    """The parser of every command but `train` (whose options are dataclasses: `main` routes to its own parser)."""
    parser = ArgumentParser(
        prog=PROG,
        description="Train the Transformer of 'Attention Is All You Need', translate with it, look at its attention, "
        "score, average, export and publish it.",
        epilog=f"Run `{PROG} COMMAND --help` for the options of a command.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    add_translate_parser(commands)
    add_export_parser(commands)
    add_push_parser(commands)
    add_attention_parser(commands)
    add_score_parser(commands)
    add_demo_parser(commands)
    add_average_parser(commands)
    commands.add_parser(
        "train",
        add_help=False,
        help=f"train a model with the paper's recipe; `{PROG} train --help` for its options",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default `sys.argv[1:]`); returns the exit status (0 = success)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        # The training command owns its options (vanilla_transformer/training/command.py); this command only routes to it.
        from .training.command import main as train_main

        return train_main(argv[1:])
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # reported by the command's parser, with the closest known option, not by the top level's
        getattr(args, "command_parser", parser).error(unrecognized(getattr(args, "command_parser", parser), extras))
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s: %(message)s")
    from . import register

    try:
        if getattr(args, "check", None) is not None:
            args.check(args)  # what needs only the options and the file system: before torch and the model load
        register()  # a no-op after `import vanilla_transformer`; the console script defers it to here (its docstring)
        if getattr(args, "quiet", False) or not sys.stderr.isatty():
            quiet_progress_bars()  # no "Loading weights" bar in a log file
        return args.func(args)
    except ValueError as error:  # an option or input that cannot work, found before (or instead of) the work
        print(f"{args.command_parser.prog}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
