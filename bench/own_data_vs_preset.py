"""The README's own-data command against the Multi30k preset's recipe: the same data, direction, time and machine.

Issue 45: a user's run of the README's command without `--recipe` trained 8 minutes, inside its warm-up, and scored
0.30 BLEU, where `--recipe multi30k_en_de_cpu` on the same data trained a useful model. The command now trains with
the recipe by default (docs/training.md, "Without --recipe"); this script checks that it is as good as the preset.

It lays out Multi30k's FROM->TO pairs (by default French->German, a direction no preset has) as the README's tables
(`train.tsv`, `dev.tsv`, `test.tsv`, a header row naming the columns), then runs, one after the other, in new
processes with the machine's threads:

1. the README's own-data command as README.md shows it, substituting only the dataset, the languages, the columns,
   the output directory and (with `--minutes`) the time limit;
2. the same command with `--recipe multi30k_en_de_cpu` before its options (the command line wins over the preset, so
   the data, direction and time are the same).

(`--side_by_side`: both at once, each pinned to one of the machine's first two CPUs with one thread, so the two
share every condition of the machine and the comparison takes the time limit once; each has half the machine, so
both make fewer updates than alone) and prints, for each: the recipe, the precision and why, the minutes, updates, validation BLEU at the end, and test
BLEU of the final and the averaged model, with the CPU's flags. A full comparison takes twice the README's time
limit (2 hours) plus the test translations:

    python bench/own_data_vs_preset.py                            # the README's 60 minutes, each
    python bench/own_data_vs_preset.py --side_by_side             # both at once, one CPU each: 1 hour
    python bench/own_data_vs_preset.py --minutes 0.5 --eval_pairs 50 --work /tmp/own   # does the script work?
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _data import MULTI30K, read_lines


ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- own-data-command -->"
# Multi30k's split for each split flag of the README's command.
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}


def readme_command() -> list[str]:
    """The own-data command of README.md, as the arguments after `vanilla-transformer train`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split(MARKER, 1)[1].split("```", 2)[1]
    (line,) = [line for line in block.splitlines() if line.strip()]
    words = line.split()
    if words[:2] != ["vanilla-transformer", "train"]:
        raise SystemExit(f"README.md's block after {MARKER} is not a `vanilla-transformer train` command: {line!r}")
    return words[2:]


def substitute(argv: list[str], **values) -> list[str]:
    """`argv` with the values of the flags named replaced; each must be in it (only what it says is changed)."""
    argv = list(argv)
    for name, value in values.items():
        if f"--{name}" not in argv:
            raise SystemExit(f"README.md's own-data command has no --{name}: this script substitutes it.")
        argv[argv.index(f"--{name}") + 1] = str(value)
    return argv


def write_tables(argv: list[str], data_dir: Path, langs: tuple[str, str], eval_pairs: int | None) -> None:
    """Multi30k's pairs as the README's tables, in the directory `--dataset` names, under the command's split names
    and columns; the validation and test tables hold their first `eval_pairs` pairs (None: all)."""
    corpus = Path(argv[argv.index("--dataset") + 1])
    corpus.mkdir(parents=True)
    src, tgt = argv[argv.index("--src_column") + 1], argv[argv.index("--tgt_column") + 1]
    for flag, split in MULTI30K_SPLITS.items():
        limit = None if flag == "train" else eval_pairs
        sources, targets = (read_lines(data_dir / f"{split}.{lang}.gz", limit) for lang in langs)
        # A table cannot hold a tab inside a sentence: a space instead (Multi30k has one, in train.de).
        pairs = zip(sources, targets, strict=True)
        lines = [f"{src}\t{tgt}"] + ["\t".join(s.replace("\t", " ") for s in pair) for pair in pairs]
        (corpus / f"{argv[argv.index(f'--{flag}_split') + 1]}.tsv").write_text("\n".join(lines) + "\n", "utf-8")


def start(name: str, argv: list[str], log: Path, cpu: int | None = None) -> tuple[subprocess.Popen, float]:
    """`vanilla-transformer train ARGV` in a new process (the console script beside this Python, else the module),
    its output to `log`; with `cpu`, pinned to that CPU with one thread (OpenMP's and the tokenizer's)."""
    script = Path(sys.executable).parent / "vanilla-transformer"
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "vanilla_transformer.commands"]
    env = dict(os.environ)
    if cpu is not None:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", RAYON_NUM_THREADS="1")
    where = f", CPU {cpu}, 1 thread" if cpu is not None else ""
    print(f"[{name}] vanilla-transformer train {' '.join(argv)}  (log: {log}{where})", flush=True)
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    with log.open("w") as handle:
        process = subprocess.Popen(
            [*command, "train", *argv], stdout=handle, stderr=subprocess.STDOUT, env=env, preexec_fn=pin
        )
    return process, time.perf_counter()


def finish(name: str, process: subprocess.Popen, started: float, log: Path) -> float:
    """Waits for a run of `start`; returns its wall-clock seconds, exits if the command failed."""
    process.wait()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"[{name}] exit status {process.returncode} after {seconds:.0f} s: see {log}")
    return seconds


def summary(run_dir: Path) -> dict:
    """What the comparison prints of a finished run."""
    results = json.loads((run_dir / "results.json").read_text())
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    validation = [h for h in history if "eval_bleu" in h]
    training = results["training"]
    averaged = results.get("averaged_model")
    return {
        "recipe": training.get("recipe", {}).get("config"),
        "precision": f"{training['precision']['mixed_precision']} ({training['precision']['reason']})",
        "minutes": round(training["train_runtime_s"] / 60, 1),
        "updates": training["steps"],
        "epochs": training["epochs"],
        "warmup": training["hyperparameters"]["warmup_steps"],
        "validation BLEU (last)": validation[-1]["eval_bleu"] if validation else None,
        "test BLEU, final": results["bleu"]["test"]["score"],
        "test BLEU, averaged": averaged["bleu_test"]["score"] if averaged else None,
        "warnings": results.get("warnings", []),
        "hardware": training["hardware"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", type=Path, default=MULTI30K, help="Multi30k's directory of .gz line files.")
    parser.add_argument("--src", default="fr", help="Source language of Multi30k (default fr: no preset has fr->de).")
    parser.add_argument("--tgt", default="de", help="Target language of Multi30k.")
    parser.add_argument("--preset", default="multi30k_en_de_cpu", help="The preset to compare with.")
    parser.add_argument(
        "--minutes", type=float, default=None, help="The time limit of each run (default: the README command's)."
    )
    parser.add_argument(
        "--eval_pairs", type=int, default=None, help="Only the first N validation and test pairs (a quick check)."
    )
    parser.add_argument(
        "--work", type=Path, default=ROOT / "runs" / "own_data_vs_preset", help="Directory for data and runs."
    )
    parser.add_argument(
        "--side_by_side",
        action="store_true",
        help="Both runs at once, each pinned to one CPU with one thread (CPUs 0 and 1).",
    )
    args = parser.parse_args(argv)
    if args.side_by_side and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--side_by_side needs two CPUs: this process may run on one.")
    if args.work.exists():
        raise SystemExit(f"--work {args.work} exists: remove it or choose another directory (runs are not mixed).")

    from machine_peak import cpu_flags

    readme = readme_command()
    names = {"fr": "french", "de": "german", "en": "english", "cs": "czech"}
    own = substitute(
        readme,
        dataset=args.work / "corpus",
        src_lang=args.src,
        tgt_lang=args.tgt,
        src_column=names.get(args.src, args.src),
        tgt_column=names.get(args.tgt, args.tgt),
        output_dir=args.work / "readme",
        **({"max_train_minutes": args.minutes} if args.minutes is not None else {}),
    )
    minutes = own[own.index("--max_train_minutes") + 1]
    write_tables(own, args.data_dir, (args.src, args.tgt), args.eval_pairs)
    preset = ["--recipe", args.preset, *substitute(own, output_dir=args.work / "preset")]
    runs = {"readme": own, "preset": preset}
    seconds = {}
    if args.side_by_side:
        cpus = sorted(os.sched_getaffinity(0))[:2]
        started = {
            name: start(name, argv, args.work / f"{name}.log", cpu) for (name, argv), cpu in zip(runs.items(), cpus)
        }
        for name, (process, began) in started.items():
            seconds[name] = finish(name, process, began, args.work / f"{name}.log")
    else:
        for name, argv in runs.items():
            seconds[name] = finish(name, *start(name, argv, args.work / f"{name}.log"), args.work / f"{name}.log")
    rows = {"README command": summary(args.work / "readme"), f"--recipe {args.preset}": summary(args.work / "preset")}
    mode = "side by side, one CPU and one thread each" if args.side_by_side else "one after the other, all threads"
    print(f"\n{args.src}->{args.tgt}, {minutes} minutes each, {mode}; CPU: {json.dumps(cpu_flags())}")
    for name, row in rows.items():
        hardware = row.pop("hardware")
        print(f"\n{name} ({seconds['readme' if name.startswith('README') else 'preset']:.0f} s in all): {hardware}")
        for key, value in row.items():
            print(f"  {key}: {value}")
    shutil.rmtree(args.work / "corpus")  # a copy of Multi30k; the runs stay
    return 0


if __name__ == "__main__":
    sys.exit(main())
