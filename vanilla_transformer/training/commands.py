"""The training layer's commands beside `train` (training/train.py, which owns its options): `average`, the last
checkpoints of a run averaged into one model (section 6.1), and `table3`, the paper's Table 3 as `train` runs.

    vanilla-transformer average RUN_DIR --last 5 --output OUT
    vanilla-transformer average --checkpoints RUN_DIR/checkpoint-800 RUN_DIR/checkpoint-1000 --output OUT
    vanilla-transformer table3 --recipe multi30k_en_de_cpu --rows A,B,C,D,E --seeds 2 --max_steps 3000

The parsers are built without torch: `cmd_average` imports the averaging when it runs; `table3` needs no torch at all
(each row is a `train` process).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from ..arguments import number, positive_int
from ..checkpoints import complete_checkpoints, last_complete_checkpoints


# ------------------------------------------------------------------------------------------------ average


def add_average_parser(commands) -> None:
    """`vanilla-transformer average`: the last checkpoints of a run, or the ones named, into one model."""
    a = commands.add_parser(
        "average",
        help="average the last checkpoints of a run (paper section 6.1)",
        description="Average the weights of the last checkpoints of a training run (paper, section 6.1) into a "
        "directory that loads with from_pretrained.",
    )
    a.add_argument(
        "run_dir", nargs="?", metavar="RUN_DIR", help="the Trainer's output_dir, holding checkpoint-<step> directories"
    )
    a.add_argument(
        "--last",
        type=positive_int,
        default=5,
        help="how many of the newest checkpoints (default 5, the paper's base models; 20 for big)",
    )
    a.add_argument("--checkpoints", nargs="+", help="explicit checkpoint directories instead of RUN_DIR --last")
    a.add_argument("--output", required=True, help="directory to write the averaged model to")
    a.set_defaults(func=cmd_average, check=check_average, command_parser=a)


def check_average(args) -> list[str]:
    """The checks of `average` that need only its options and the file system, run before torch loads
    (`commands.main`): RUN_DIR or --checkpoints, the checkpoints' directories, --last, and an --output that can take
    the average. Returns the checkpoint directories to average."""
    if (args.run_dir is None) == (args.checkpoints is None):
        raise ValueError("give either RUN_DIR (with --last) or --checkpoints, not both or neither")
    if args.checkpoints:
        missing = [path for path in args.checkpoints if not Path(path).is_dir()]
        if missing:
            raise ValueError(
                f"--checkpoints {missing[0]!r} is not a directory: pass checkpoint-<step> directories of one run."
            )
        checkpoints = args.checkpoints
    else:
        checkpoints = _last_checkpoints_of(args.run_dir, args.last)
    if Path(args.output).resolve() in {Path(path).resolve() for path in checkpoints}:
        raise ValueError(f"--output {args.output!r} is one of the checkpoints averaged: write the average elsewhere.")
    if Path(args.output).exists() and not Path(args.output).is_dir():
        raise ValueError(f"--output {args.output!r} is a file: name a directory to write the averaged model to.")
    return checkpoints


def cmd_average(args, checkpoints: list[str]) -> int:
    """`checkpoints`: what `check_average` returned (option errors are found there, before any weight is read)."""
    from .averaging import average_checkpoints, logger

    logger.setLevel(logging.INFO)  # its line naming the checkpoints averaged
    print(average_checkpoints(checkpoints, args.output))
    return 0


def _last_checkpoints_of(run_dir: str, last: int) -> list[str]:
    """`last_complete_checkpoints`, once RUN_DIR and --last are checked (errors naming them)."""
    if not Path(run_dir).is_dir():
        raise ValueError(f"RUN_DIR {run_dir!r}: no such directory. Pass the output directory of a training run.")
    checkpoints = complete_checkpoints(run_dir)
    if not checkpoints:
        held = sorted(child.name for child in Path(run_dir).iterdir())
        raise ValueError(
            f"RUN_DIR {run_dir!r} holds no `checkpoint-<step>` directory whose save finished (it holds "
            f"{', '.join(held[:8]) + (', ...' if len(held) > 8 else '') if held else 'nothing'}): pass it once "
            f"training has saved checkpoints there, or name checkpoint directories with --checkpoints."
        )
    if last > len(checkpoints):
        raise ValueError(
            f"--last {last} but RUN_DIR {run_dir!r} holds only {len(checkpoints)} checkpoints whose save finished "
            f"({', '.join(Path(path).name for path in checkpoints)}): pass --last {len(checkpoints)} or fewer."
        )
    return last_complete_checkpoints(run_dir, last)


# ------------------------------------------------------------------------------------------------ table3


def add_table3_parser(commands) -> None:
    """`vanilla-transformer table3`: the rows of the paper's Table 3, each a `train` run of a recipe (docs/table3.md)."""
    t = commands.add_parser(
        "table3",
        help="train the variations of the paper's Table 3 on a recipe and write the table (docs/table3.md)",
        description="Train the rows of the paper's Table 3, each scaled to the recipe's model, and write the table. "
        "A finished run is not trained again: the same command resumes (docs/table3.md).",
    )
    t.add_argument("--recipe", default="multi30k_en_de_cpu", help="the base row: a shipped recipe or a JSON file")
    t.add_argument(
        "--rows",
        default="A,B,C,D,E,big",
        help="comma-separated groups (A, B, C, D, E, big) or rows (B1, C4, ...); base is always trained",
    )
    t.add_argument("--seeds", type=positive_int, default=2, help="runs per row, seeds 1..N (default 2)")
    t.add_argument("--max_steps", type=positive_int, help="updates per run, the same for every row")
    t.add_argument("--max_train_minutes", type=number, help="minutes per run instead of --max_steps")
    t.add_argument(
        "--jobs", type=positive_int, default=1, help="runs at once, each a process with cores / jobs threads"
    )
    t.add_argument("--output_dir", default="runs/table3", help="the table's directory (default runs/table3)")
    t.set_defaults(func=cmd_table3, check=check_table3, command_parser=t)


def check_table3(args) -> dict:
    """The budget, the recipe, every row (one that cannot be built is named) and --output_dir, before anything is
    written or trained."""
    if (args.max_steps is None) == (args.max_train_minutes is None):
        raise ValueError("give --max_steps N (the same updates for every row) or --max_train_minutes M, not both")
    if args.max_train_minutes is not None and not args.max_train_minutes > 0:
        raise ValueError(f"--max_train_minutes must be above 0, got {args.max_train_minutes}")
    from .table3 import plan

    return plan(args)


def cmd_table3(args, work: dict) -> int:
    """`work`: the plan `check_table3` returned."""
    from .table3 import run_table

    try:
        print(run_table(args, work))
    except RuntimeError as error:  # a row's `train` failed: one line naming the row and its log, which says why
        print(f"{args.command_parser.prog}: error: {error}", file=sys.stderr)
        return 1
    return 0
