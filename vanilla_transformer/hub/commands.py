"""The `vanilla-transformer push` command: a training run's output directory to the Hugging Face Hub in one commit,
as its parser beside the function that runs it.

    vanilla-transformer push runs/en-de your-name/transformer-en-de [--private] [--revision BRANCH] [--dry_run]

The parser is built without huggingface_hub (push.py imports it at its top): `cmd_push` imports push.py.
"""

from __future__ import annotations

import sys

from ..translation.shipped import resolve_model


def add_push_parser(commands) -> None:
    """`push`: a training run's output directory to the Hub, in one commit."""
    p = commands.add_parser(
        "push",
        help="publish a trained model on the Hugging Face Hub",
        description="Upload a training run's output directory in one commit: weights (safetensors), config with "
        "auto_map, generation config, remote code with the translation pipeline, tokenizer, model card written from "
        "results.json, plots and results.json; never checkpoints, optimizer states, training_args.bin, TensorBoard "
        "runs or hypotheses. The token is checked before anything is uploaded.",
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
        help="results JSON the model card is written from (default: OUTPUT_DIR/results.json; without one, "
        "an existing README.md is pushed as is, else a card without results)",
    )
    p.add_argument(
        "--no_prune",
        action="store_true",
        help="keep training files (training_args.bin, checkpoints, runs/) "
        "that the Trainer's pushes during training left in the repo; by default the commit deletes them",
    )
    p.add_argument(
        "--dry_run", action="store_true", help="list the files that would be uploaded and exit (no network)"
    )
    p.set_defaults(func=cmd_push, command_parser=p)


def cmd_push(args) -> int:
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
