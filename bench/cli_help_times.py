"""How long `vanilla-transformer COMMAND --help` takes, per command: the median of N runs, each a new process, in
wall-clock seconds and in CPU seconds (user + system, of the child process: on shared cores the wall time waits for
the others, the CPU time does not).

    python bench/cli_help_times.py [--runs 5]

Each run starts `python -m vanilla_transformer_cli COMMAND --help` (the console script's module) and times it from
the start of the process to its exit, Python's own start included. The command line builds its parsers without
torch, transformers or huggingface_hub, and imports the package without registering the model with transformers
(vanilla_transformer_cli.py); this measures it. `train --help` is included (its options are the Trainer's: the
help is printed from training/options.json, without torch and transformers), and so is `python -c "import
vanilla_transformer"`, the registration that the console script defers. A command that is missing or fails is
printed with its error instead of a time. `--repo DIR` times another checkout's command line (e.g. a worktree of an
older commit), with this interpreter.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT  # the checkout timed (--repo)
COMMANDS = (
    [],
    ["translate"],
    ["export"],
    ["export", "ctranslate2"],
    ["push"],
    ["attention"],
    ["score"],
    ["average"],
    ["demo"],
    ["train"],
)


def time_help(command: list[str], runs: int) -> tuple[float | None, float | None, str]:
    """(median seconds, median CPU seconds, "") over `runs` runs of `COMMAND --help`, or (None, None, the error) if it
    exits non-zero."""
    return time_process(["-m", "vanilla_transformer_cli", *command, "--help"], runs)


def time_process(arguments: list[str], runs: int) -> tuple[float | None, float | None, str]:
    """(median seconds, median CPU seconds, "") over `runs` runs of `python ARGUMENTS`, or (None, None, the error) if
    it exits non-zero."""
    times, cpu_times = [], []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, *arguments],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
        )
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if result.returncode != 0:
            return None, None, (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
    return statistics.median(times), statistics.median(cpu_times), ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command (default 5)")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose command line is timed")
    args = parser.parse_args()
    global REPO
    REPO = args.repo.resolve()
    from vanilla_transformer.precision import (
        cpu_model_name,  # torch, in this process only: the runs are new ones
    )

    print(f"CPU: {cpu_model_name()} ({os.cpu_count()} logical cores); Python {platform.python_version()}")
    print(f"median of {args.runs} runs, seconds from process start to exit: wall clock, CPU (user + system)")
    for command in COMMANDS:
        name = " ".join(["vanilla-transformer", *command, "--help"])
        show(name, *time_help(command, args.runs))
    show("python -c 'import vanilla_transformer'", *time_process(["-c", "import vanilla_transformer"], args.runs))


def show(name: str, seconds: float | None, cpu_seconds: float | None, error: str) -> None:
    print(f"{name:<50} {seconds:6.3f} {cpu_seconds:6.3f}" if seconds is not None else f"{name:<50} error: {error}")


if __name__ == "__main__":
    main()
