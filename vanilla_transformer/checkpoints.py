"""The Trainer's checkpoints of a training run: their names, whether a save finished, and which ones a run has.

Standard library only: the averaging command, the Hub upload and the training layer all read checkpoint
directories, and none of them should load the Trainer (or torch) just to list them.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path


logger = logging.getLogger(__name__)

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")  # the names the Trainer gives its checkpoints
# transformers.trainer.TRAINER_STATE_NAME (not imported from there: that module loads the whole Trainer).
TRAINER_STATE_NAME = "trainer_state.json"
# The files of a Trainer checkpoint that describe the training run, not the model (glob patterns): never published,
# nor copied into an average of checkpoints.
TRAINING_STATE_FILES = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    TRAINER_STATE_NAME,
    "training_args.bin",
)


def is_complete_checkpoint(checkpoint: str | Path) -> bool:
    """Whether a save of `checkpoint-<step>` finished. The Trainer writes `trainer_state.json` last, after the weights,
    optimizer, scheduler and RNG states: a directory without it, or with a truncated one, is what a crash during the
    save left."""
    try:
        with open(Path(checkpoint) / TRAINER_STATE_NAME, encoding="utf-8") as handle:
            return isinstance(json.load(handle).get("global_step"), int)
    except (OSError, ValueError, AttributeError):
        return False


def complete_checkpoints(run_dir: str | Path, after: int | None = None) -> list[str]:
    """The complete `checkpoint-<step>` directories of `run_dir`, by step (oldest first); with `after`, only those
    written after update `after` (e.g. the start of a learning-rate cool-down: see the end-of-run report)."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    steps = sorted((int(m.group(1)), child) for child in run.iterdir() if (m := CHECKPOINT_RE.match(child.name)))
    steps = [(step, path) for step, path in steps if after is None or step > after]
    return [str(path) for _, path in steps if path.is_dir() and is_complete_checkpoint(path)]


def last_checkpoint(run_dir: str | Path) -> str | None:
    """The newest complete checkpoint of `run_dir` (what `resume_from_checkpoint=True` takes), or None."""
    checkpoints = complete_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def remove_incomplete_checkpoints(run_dir: str | Path) -> None:
    """Delete the `checkpoint-<step>` directories whose save did not finish (what a crash during a save left): never
    resumed from, and rewritten when the run reaches that step again; removed so that neither checkpoint rotation nor
    averaging counts them meanwhile."""
    run = Path(run_dir)
    if not run.is_dir():
        return
    for path in sorted(run.iterdir()):
        if CHECKPOINT_RE.match(path.name) and path.is_dir() and not is_complete_checkpoint(path):
            logger.warning("Removing %s: its save did not finish (no %s).", path, TRAINER_STATE_NAME)
            shutil.rmtree(path)
