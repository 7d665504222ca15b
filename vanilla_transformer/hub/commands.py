"""The `vanilla-transformer push` command: a training run's output directory to the Hugging Face Hub in one commit,
as its parser beside the function that runs it.

    vanilla-transformer push runs/en-de your-name/transformer-en-de [--private] [--revision BRANCH] [--dry_run]

The parser is built without huggingface_hub (push.py imports it at its top): `cmd_push` imports push.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..translation.shipped import closest_shipped, resolve_model


def add_push_parser(commands) -> None:
    """`push`: a training run's output directory to the Hub, in one commit."""
    p = commands.add_parser(
        "push",
        help="publish a trained model on the Hugging Face Hub",
        description="Upload a training run's model, tokenizer, remote code and model card to the Hub in one commit, "
        "never its checkpoints or optimizer states (docs/sharing.md).",
    )
    p.add_argument(
        "output_dir",
        type=resolve_model,
        help="a shipped model's name, `vanilla-transformer train`'s --output_dir, or a save_pretrained directory "
        "holding the tokenizer",
    )
    p.add_argument(
        "repo_id", help="'namespace/name' on the Hub ('name' alone: your own namespace); created if missing"
    )
    p.add_argument(
        "--private", action="store_true", help="create the repo private (an existing public repo is an error)"
    )
    p.add_argument(
        "--revision",
        default=None,
        metavar="BRANCH",
        help="commit to this branch, created from main if missing (default: main)",
    )
    p.add_argument(
        "--token", default=None, help="Hub token with write access (default: HF_TOKEN, else `hf auth login`)"
    )
    p.add_argument(
        "--commit_message",
        default=None,
        # push.DEFAULT_COMMIT_MESSAGE's words (push.py imports huggingface_hub, which --help does not wait for;
        # tests/test_cli.py checks that they are the same).
        help="commit title (default: 'Upload model trained with vanilla-transformer')",
    )
    p.add_argument(
        "--results",
        default=None,
        metavar="FILE",
        help="results JSON the model card is written from (default OUTPUT_DIR/results.json; without one, an existing "
        "README.md is pushed as is)",
    )
    p.add_argument(
        "--no_prune",
        action="store_true",
        help="keep the training files (checkpoints, runs/, training_args.bin) that pushes during training left in "
        "the repo; by default the commit deletes them",
    )
    p.add_argument(
        "--dry_run", action="store_true", help="list the files that would be uploaded and exit (no network)"
    )
    p.set_defaults(func=cmd_push, check=check_push, command_parser=p)


def check_push(args) -> None:
    """The checks of `push` that need only its options and the file system, run before huggingface_hub's client and
    torch are loaded: OUTPUT_DIR a directory with a config.json, a repo id that huggingface_hub's own validation
    takes, a --results file that exists. `files_to_push` then checks what the directory holds."""
    if not Path(args.output_dir).is_dir():
        close = closest_shipped(args.output_dir) if "/" not in args.output_dir else None
        hint = f" (did you mean the shipped model {close}?)" if close else ""
        raise ValueError(
            f"output_dir {args.output_dir!r} is not a directory{hint}: pass `vanilla-transformer train`'s "
            f"--output_dir, a shipped model's name or a save_pretrained directory holding the tokenizer."
        )
    if not (Path(args.output_dir) / "config.json").is_file():
        raise ValueError(
            f"output_dir {args.output_dir!r} has no config.json: it is not a saved model (`vanilla-transformer "
            f"train` writes the final model at the top of its --output_dir when training ends)."
        )
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(args.repo_id)
    except HFValidationError as error:
        message = " ".join(str(error).split())
        raise ValueError(f"repo_id {args.repo_id!r} is not a valid Hub repo id ({message})") from None
    if args.results is not None and not Path(args.results).is_file():
        raise ValueError(f"--results {args.results!r} is not a file: pass the results JSON the card is written from.")


def cmd_push(args, _checked: None) -> int:
    """Run after `check_push(args)`, which hands on nothing (`commands.main` passes its None)."""
    from .push import DEFAULT_COMMIT_MESSAGE, files_to_push, push_run

    files = files_to_push(args.output_dir)  # a wrong OUTPUT_DIR fails here, before the Hub is asked anything
    if args.dry_run:
        for name in files:
            print(name)
        print("README.md")
        return 0
    try:
        url = push_run(
            args.output_dir,
            args.repo_id,
            private=args.private,
            revision=args.revision,
            token=args.token,
            commit_message=DEFAULT_COMMIT_MESSAGE if args.commit_message is None else args.commit_message,
            results=args.results,
            prune=not args.no_prune,
        )
    except ValueError as error:
        # The Hub's answer (a token it refuses, a repo of another namespace): the command ran and failed, which is
        # exit status 1; status 2 is for options and inputs checked before any work.
        print(f"{args.command_parser.prog}: error: {error}", file=sys.stderr)
        return 1
    print(url)
    return 0
