"""The `vanilla-transformer` command: the parser of every command, and the dispatch to the command's function.

    vanilla-transformer COMMAND --help          # train, translate, export, push, attention, score, demo, average, table3

Each command's parser and function live in its subpackage's commands.py (translation/, evaluation/, hub/, demo/,
training/); `train` has its own `HfArgumentParser` (training/train.py), routed to before this parser; its `--help`
and early checks (training/preflight.py) need neither torch nor transformers either. What every
parser shares is arguments.py. The console script, vanilla_transformer_cli.py beside the package, imports this
module without registering the model with transformers, so that `--help` needs neither torch nor transformers;
`main` registers before the command runs. Every command first runs its parser's `check` (what needs only the options
and the file system: paths, model names, output directories, repo ids, languages), before torch, transformers or the
model load: a mistake fails in a second, in one line naming the option, and writes nothing. README.md and docs/
document each command.
"""

from __future__ import annotations

import logging
import sys

# Only light modules (the standard library, and package modules that import nothing heavy at their top): the parsers
# are built without torch, transformers or huggingface_hub, so that `--help` answers at once.
from .arguments import PROG, ArgumentParser, quiet_progress_bars, unrecognized
from .demo.commands import add_demo_parser
from .evaluation.commands import add_attention_parser, add_score_parser
from .hub.commands import add_push_parser
from .training.commands import add_average_parser, add_table3_parser
from .translation.commands import add_export_parser, add_translate_parser


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
    add_table3_parser(commands)
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
        # The training command owns its options (vanilla_transformer/training/train.py); this command only routes to it.
        from .training.train import main as train_main

        return train_main(argv[1:])
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # reported by the command's parser, with the closest known option, not by the top level's
        getattr(args, "command_parser", parser).error(unrecognized(getattr(args, "command_parser", parser), extras))
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s: %(message)s")
    # huggingface_hub prints its warnings through a handler of its own: passed on to this one too, each came twice.
    logging.getLogger("huggingface_hub").propagate = False
    from .registration import register

    try:
        # What needs only the options and the file system, checked once, before torch and the model load; the command
        # gets what the check produced (the decoding options, the input's line count, ...) and checks none of it again.
        checked = args.check(args)
        register()  # a no-op after `import vanilla_transformer`; the console script defers it to here (its docstring)
        if getattr(args, "quiet", False) or not sys.stderr.isatty():
            quiet_progress_bars()  # no "Loading weights" bar in a log file
        return args.func(args, checked)
    except ValueError as error:  # an option or input that cannot work, found before (or instead of) the work
        print(f"{args.command_parser.prog}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
