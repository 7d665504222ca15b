"""The Trainer's checkpoints of a training run: their names, whether a save finished, and which ones a run has.

Standard library only: the averaging command, the Hub upload and the training layer all read checkpoint
directories, and none of them should load the Trainer (or torch) just to list them.
"""

from __future__ import annotations

import json
import logging
import os
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
# The part of that state that only resuming reads, and that makes a checkpoint three times its model's size (Adam's
# two moments): what a finished run removes from every checkpoint but the newest (`prune_checkpoints`).
RESUME_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth")


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


def last_complete_checkpoints(run_dir: str | Path, k: int, after: int | None = None) -> list[str]:
    """The `k` newest complete checkpoints of `run_dir` (fewer if it has fewer), oldest first; with `after`, among
    those written after update `after`. What checkpoint averaging takes (section 6.1: "the last 5 checkpoints")."""
    return complete_checkpoints(run_dir, after=after)[-k:] if k > 0 else []


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


def has_resume_state(checkpoint: str | Path) -> bool:
    """Whether `checkpoint` still holds the optimizer state that resuming restores (`prune_checkpoints` removes it
    from all but the newest checkpoint of a finished run; the Trainer's `save_only_model` never writes it)."""
    return (Path(checkpoint) / "optimizer.pt").is_file()


def prune_checkpoints(run_dir: str | Path, keep_weights=()) -> dict:
    """What a finished run keeps of its complete checkpoints: the newest one whole (what resuming takes), the weights
    of those named in `keep_weights` (names or paths; e.g. the averaged ones), without their `RESUME_STATE_FILES`,
    and nothing of the others. Their `trainer_state.json` stays, so that a kept checkpoint is still complete, found
    and averaged as before. Returns {"kept": names kept whole, "weights": names kept as weights, "deleted": names,
    "freed_bytes": n}.

    A stripped checkpoint keeps its directory's modification time: the Trainer orders checkpoints by it when it
    rotates them (`save_total_limit`) in a resumed run, and a fresher time would make an old checkpoint look new."""
    checkpoints = [Path(path) for path in complete_checkpoints(run_dir)]
    summary = {"kept": [], "weights": [], "deleted": [], "freed_bytes": 0}
    if not checkpoints:
        return summary
    wanted = {Path(name).name for name in keep_weights}
    for path in checkpoints:
        if path == checkpoints[-1]:
            summary["kept"].append(path.name)
            continue
        if path.name in wanted:
            times = path.stat()
            for pattern in RESUME_STATE_FILES:
                for item in path.glob(pattern):
                    summary["freed_bytes"] += item.stat().st_size
                    item.unlink()
            os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
            summary["weights"].append(path.name)
        else:
            summary["freed_bytes"] += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            shutil.rmtree(path)
            summary["deleted"].append(path.name)
    return summary
