"""`vanilla-transformer train`: train the Transformer of "Attention Is All You Need" with the paper's recipe
(section 5) on the Hugging Face Trainer.

    vanilla-transformer train --recipe multi30k_en_de_cpu --dataset DATA_DIR         # one CPU, about an hour
    accelerate launch -m vanilla_transformer.training.train --recipe wmt14_en_de_base         # several GPUs or machines
    python -m vanilla_transformer.training.train ...  /  python train.py ...  (in a clone)    # the same command

The command, its steps in `vanilla_transformer.training`: `--help` and the checks that need only the options and the
file system, before torch loads (`training/preflight.py`), read the command line once and build the arguments
(`training/options.py`), load and check the data, check the output directory (below), get the shared tokenizer
(trained on the training split unless given), build the model, tokenize (`training/steps.py`), train
(`training/trainer.py`, `training/callbacks.py`), then the end-of-run report (`training/report.py`). Every error in
the options, the recipe or the data is found before anything is written, and a person at a command line gets it as
one line naming the flag (exit status 2; `VANILLA_TRANSFORMER_DEBUG=1` shows the traceback).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..checkpoints import last_checkpoint
from .preflight import (
    CPU_FLOAT32,
    LARGE_CORPUS,
    LARGE_CORPUS_RECIPE,
    default_recipe,
    option_table,
    output_dir_problem,
    preflight,
)
from .steps import build_model, get_tokenizer, load_data, tokenize  # light: each loads what it needs when called


# The options' dataclasses (options.py) import torch and transformers: they are imported once `preflight` has
# printed --help or checked what needs only the options and the file system.
if TYPE_CHECKING:
    from .options import RunArguments

logger = logging.getLogger("vanilla_transformer.training.train")
PROG = "vanilla-transformer train"


class Interrupted(KeyboardInterrupt):
    """Training stopped by Ctrl-C: its message says what the run kept and the command that goes on. A
    KeyboardInterrupt still, for Python callers of `train`."""


def main(argv: list[str] | None = None) -> int:
    """The command line: exit status 0, or 2 with one line `vanilla-transformer train: error: ...` on stderr, or 130
    with one line after Ctrl-C (what was kept, and the command that goes on)."""
    try:
        train(argv)
    except ValueError as error:
        if os.environ.get("VANILLA_TRANSFORMER_DEBUG"):
            raise
        message = " ".join(str(error).split())  # `train` has named the flags
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    except Interrupted as stop:
        if os.environ.get("RANK", "0") == "0":  # said once, by the main process
            print(f"{PROG}: {stop}", file=sys.stderr)
        return 130
    return 0


def as_flags(message: str) -> str:
    """A library error as the command line's: an option name in backticks becomes its flag (`max_tokens` ->
    --max_tokens), the options sharing their names with the library's arguments. Where a name differs (the data
    loader's `source` is --dataset), the library is given the flag (`load_data`)."""
    known = {option["dest"] for group in option_table() for option in group["options"]}
    return re.sub(r"`(\w+)`", lambda match: f"--{match[1]}" if match[1] in known else match[0], message)


def train(argv: list[str] | None = None) -> dict:
    """Parse `argv` (default `sys.argv[1:]`), train, and return the final model's results (results.json); {} on the
    processes other than the main one. Errors in the options, the recipe or the data are ValueErrors naming the flag,
    raised before anything is written."""
    try:
        return _train(argv)
    except ValueError as error:
        raise ValueError(as_flags(str(error))) from error


def _train(argv: list[str] | None) -> dict:
    given = list(sys.argv[1:] if argv is None else argv)
    argv, recipe = preflight(given)  # before torch: --help, and the early checks
    where = {}  # the output directory, once the options are parsed: what Ctrl-C keeps is there
    try:
        return _run(given, argv, recipe, where)
    except Interrupted:  # at the end of an update, said already
        raise
    except KeyboardInterrupt:  # before training, or a second Ctrl-C: what is complete on disk is kept
        raise Interrupted(kept_by_interruption(where.get("out_dir"), given)) from None


def kept_by_interruption(out_dir: Path | None, given: list[str], step: int | None = None) -> str:
    """The line said after Ctrl-C: the update training stopped after, the newest complete checkpoint (the one
    `--resume_from_checkpoint true` continues), and the command that goes on."""
    checkpoint = last_checkpoint(str(out_dir)) if out_dir is not None and out_dir.is_dir() else None
    stopped = f"interrupted after update {step:,}" if step is not None else "interrupted"
    if checkpoint is None:
        return (
            f"{stopped}, before the run's first checkpoint: there is nothing to resume; the same command starts it "
            f"again (reusing the tokenizer it trained)."
        )
    # The command line without its own resume or overwrite (a resume must not empty the directory), with the resume.
    words = without_options(given, ("--resume_from_checkpoint", "--overwrite_output_dir"))
    options = shlex.join([*words, "--resume_from_checkpoint", "true"])
    command = f"vanilla-transformer train {options}"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # launched: the same launch goes on
        command = f"the same launch of `-m vanilla_transformer.training.train {options}`"
    return f"{stopped}: {out_dir / Path(checkpoint).name} is kept, complete; to go on: {command}"


def without_options(words: list[str], names) -> list[str]:
    """The command line `words` without the options `names` (either spelling) and their values: `--name=V`, or
    `--name` and the next word unless that is an option."""
    kept, value_next = [], False
    for word in words:
        if value_next and not word.startswith("-"):
            value_next = False
            continue
        name = "--" + word.split("=", 1)[0][2:].replace("-", "_") if word.startswith("--") else word
        value_next = name in names and "=" not in word
        if name not in names:
            kept.append(word)
    return kept


def _run(given: list[str], argv: list[str], recipe: tuple, where: dict) -> dict:
    run_started = time.perf_counter()  # the run's wall time (results.json), its end included
    main_process = quiet_unless_main(os.environ)
    relaunch_if_alone(os.environ, parent_argv())
    from .options import build_arguments, read_command_line

    # The command's own defaults (the command line wins over them): the Trainer's messages once (the main process's),
    # and where stderr is no terminal (a log file), its logs printed as lines rather than progress bars.
    defaults = {"log_level_replica": "error"}
    if not sys.stderr.isatty() and main_process:
        defaults["disable_tqdm"] = True
    command_line = read_command_line(argv, recipe, defaults)  # the one pass of the dataclasses' parser
    model_args, data_args, tok_args, run_args, training_args = build_arguments(command_line)
    where["out_dir"] = Path(training_args.output_dir)
    if not sys.stderr.isatty() and main_process:
        no_progress_bars()
    if "--output_dir" in argv[len(given) :]:  # added by `preflight`: neither the command line nor the recipe sets it
        logger.info(
            "No --output_dir: the run writes %s (runs/DATASET_SRC_TGT_PRESET, as the recipes name theirs).",
            training_args.output_dir,
        )
    from transformers import logging as transformers_logging
    from transformers import set_seed

    from ..registration import register

    register()
    transformers_logging.set_verbosity_warning() if main_process else transformers_logging.set_verbosity_error()
    set_seed(training_args.seed)
    raw = load_data(data_args)  # checked before anything is written: files, line counts, languages, splits
    train_pairs = len(raw["train"])
    if training_args.recipe["default"] and default_recipe(train_pairs) != training_args.recipe["name"]:
        # No --recipe, and a corpus of another size than the recipe assumed before the data was read: its recipe,
        # from the command line already read. The data options come from the command line either way (the recipes
        # without --recipe name no data), so the data read stays valid.
        model_args, data_args, tok_args, run_args, training_args = build_arguments(command_line, train_pairs)
    out_dir = Path(training_args.output_dir)
    prepare_output_dir(out_dir, run_args, training_args)
    log_recipe(training_args, run_args, train_pairs)
    log_cpu_float32(model_args, data_args, tok_args, run_args, training_args)
    if training_args.push_to_hub:
        ensure_hub_repo(training_args, out_dir)
    tokenizer = get_tokenizer(tok_args, data_args, raw, training_args)
    model = build_model(model_args, run_args, tokenizer)
    tokenized = tokenize(raw, tokenizer, data_args, training_args)
    from .callbacks import Interrupt, TrainingClock
    from .trainer import build_trainer, resume_checkpoint

    checkpoint = resume_checkpoint(training_args, model.config.d_model)
    interrupt = Interrupt()  # Ctrl-C: a checkpoint at the end of the update, then the command that goes on
    callbacks = [interrupt, TrainingClock(), *run_end(run_args, data_args, training_args, tokenized, raw)]
    trainer = build_trainer(
        model,
        training_args,
        tokenizer,
        tokenized["train"],
        tokenized.get("validation"),  # None: --validation_split '', a run that does not evaluate
        callbacks=callbacks,
        max_train_minutes=run_args.max_train_minutes,
    )
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    # The time trained, before the checkpoint resumed from too (the Trainer may have put a restored copy in its place).
    clock = next(callback for callback in trainer.callback_handler.callbacks if isinstance(callback, TrainingClock))
    train_seconds = clock.trained_seconds()
    if interrupt.step is not None:  # its checkpoint is saved: the end of the run (the report) is the resumed run's
        raise Interrupted(kept_by_interruption(out_dir, given, interrupt.step))
    trainer.save_model()  # final model + tokenizer + generation config, ready for from_pretrained
    trainer.save_state()
    if not trainer.is_world_process_zero():
        return {}
    from .report import write_report

    options = (model_args, data_args, run_args)
    timing = dict(run_started=run_started, resumed=(clock.resumed_at, clock.before))
    return write_report(trainer, tokenizer, raw, tokenized["train"], options, train_result, train_seconds, **timing)


def ensure_hub_repo(training_args, out_dir: Path) -> None:
    """A missing or invalid token, or a namespace the token cannot write to, fails here, before any training. The repo
    and the `hub_revision` branch are created now: the Trainer pushes while training, and it never creates a branch
    itself."""
    from ..hub.push import ensure_repo

    ensure_repo(
        training_args.hub_model_id or out_dir.name,
        private=bool(training_args.hub_private_repo),
        revision=training_args.hub_revision,
        token=training_args.hub_token,
    )


def run_end(run_args, data_args, training_args, tokenized, raw) -> list:
    """With a time limit, the callback that says when the run ends: the limit bounds the training, the end of the run
    (the last validation, the test translations, the averaging) follows it."""
    if not run_args.max_train_minutes:
        return []
    from .callbacks import RunEnd

    return [
        RunEnd(
            run_args.max_train_minutes,
            validation=len(tokenized.get("validation", ())),
            test=len(raw["test"]) if data_args.test_split else 0,
            models=2 if run_args.average_last else 1,
            evaluates=training_args.eval_strategy != "no",
        )
    ]


def quiet_unless_main(environ) -> bool:
    """Whether this is the main process (global rank 0, or no launcher). Every process runs the same steps, so only
    the main one logs: each event, and each warning that concerns every process, appears once. The others log errors
    only, without progress bars or Python warnings."""
    main_process = environ.get("RANK", "0") == "0"
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO if main_process else logging.ERROR
    )
    if not main_process:
        import warnings

        import datasets
        from transformers.utils import logging as transformers_logging

        logging.getLogger().setLevel(logging.ERROR)  # a basicConfig made earlier in this process keeps its level
        warnings.simplefilter("ignore")
        datasets.disable_progress_bars()
        transformers_logging.disable_progress_bar()
    return main_process


def no_progress_bars() -> None:
    """No progress bars where stderr is no terminal (a log file): each redraw would be a line of "\\r" updates there.
    The Trainer prints its logs as lines (its PrinterCallback: `disable_tqdm`, a default of the command, unless
    --disable_tqdm false asks for the bars); `datasets`', transformers' and huggingface_hub's bars are off (as
    `translate` keeps its bars out of a file)."""
    import datasets

    from ..arguments import quiet_progress_bars

    if hasattr(sys.stdout, "reconfigure"):  # the logged losses (stdout) reach the file as they are printed
        sys.stdout.reconfigure(line_buffering=True)
    datasets.disable_progress_bars()
    quiet_progress_bars()


RELAUNCHED = "VANILLA_TRANSFORMER_RELAUNCHED"


def parent_argv() -> list[str]:
    """The command line of the process that started this one (Linux), or [] where it cannot be read."""
    try:
        return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")[:-1]
    except (OSError, UnicodeDecodeError):
        return []


def launched_alone(environ) -> bool:
    """Whether `accelerate launch` was asked for several processes or machines but started this process alone: its
    plain launcher (what `--num_processes N` without `--multi_gpu` gets on a machine without GPUs) sets MASTER_PORT
    only then, and never WORLD_SIZE, which torchrun sets for each process it starts."""
    return "ACCELERATE_USE_CPU" in environ and "MASTER_PORT" in environ and "WORLD_SIZE" not in environ


def relaunch_if_alone(environ, parent: list[str]) -> None:
    """A launch that asked for N processes and got one is started again as it should have been, `accelerate launch
    --multi_gpu ...` (torchrun: N gloo processes on a CPU), in place of this process; said in one line. Where the
    launch's command line cannot be read (or the relaunch got one process again), a ValueError gives the command."""
    if not launched_alone(environ):
        return
    launch = next((i for i, arg in enumerate(parent) if arg in ("launch", "accelerate.commands.launch")), None)
    if launch is None or environ.get(RELAUNCHED):
        raise ValueError(
            "accelerate launch asked for several processes but started this one alone (on a machine without GPUs, "
            "its plain launcher runs one process): launch with --multi_gpu, as in `accelerate launch --multi_gpu "
            "--num_processes 2 -m vanilla_transformer.training.train ...` (docs/distributed.md)."
        )
    # `--cpu` would refuse `--multi_gpu`; the command itself trains on the CPU where there is no accelerator.
    args = ["--multi_gpu", *(arg for arg in parent[launch + 1 :] if arg != "--cpu")]
    shown = " ".join(shlex.quote(arg) for arg in ["accelerate", "launch", *args])
    logger.warning(
        "accelerate launch without --multi_gpu started one process instead of the ones asked for: running `%s` "
        "instead (pass --multi_gpu to launch that way directly).",
        shown,
    )
    for stream in (sys.stdout, sys.stderr):  # execv keeps no buffer
        stream.flush()
    os.environ[RELAUNCHED] = "1"
    os.execv(sys.executable, [sys.executable, "-m", "accelerate.commands.launch", *args])


def log_recipe(training_args, run_args: RunArguments, train_pairs: int) -> None:
    """Say which recipe the run trains with when no --recipe chose one, and a warm-up fitted to the run's budget."""
    if training_args.recipe["default"]:
        logger.info(
            "No --recipe: the recipe %r, the default for a training split of %s pairs (%r from %s pairs on; "
            "docs/training.md); options on the command line win over it.",
            training_args.recipe["name"],
            f"{train_pairs:,}",
            LARGE_CORPUS_RECIPE,
            f"{LARGE_CORPUS:,}",
        )
    fitted = training_args.warmup_fitted
    if fitted and "kept_from" in fitted:
        logger.info(
            "Resuming: the warm-up and lr_factor of %s's schedule are kept (%s), as the run that began it fitted them.",
            fitted["kept_from"],
            ", ".join(f"{name} {values[1]:g}" for name, values in fitted.items() if name != "kept_from"),
        )
    elif fitted:
        (warmup, to), factor = fitted["warmup_steps"], fitted.get("lr_factor")
        logger.info(
            "Warm-up fitted to this run's budget (--max_train_minutes %s, --max_steps %s): %s updates instead of the "
            "recipe's %s%s; --warmup_steps sets it.",
            run_args.max_train_minutes,
            training_args.max_steps,
            f"{to:,}",
            f"{warmup:,}",
            f", with --lr_factor {factor[1]:g} instead of {factor[0]:g} for the same peak learning rate"
            if factor
            else "",
        )
    if training_args.fit_warmup_to_speed:
        from .schedule import WARMUP_SHARE

        logger.info(
            "Warm-up: %s updates until this run has measured its speed over its first updates, then at most %.0f%% "
            "of the updates it will make in --max_train_minutes %s; --warmup_steps sets it.",
            f"{training_args.warmup_steps:,}",
            100 * WARMUP_SHARE,
            run_args.max_train_minutes,
        )


def log_cpu_float32(model_args, data_args, tok_args, run_args, training_args) -> None:
    """Say that the recipe's `cpu_float32` options apply, and which of them the command line changed."""
    if not training_args.recipe_cpu_float32:
        return
    used = {k: getattr(a, k) for a in (model_args, data_args, tok_args, run_args, training_args) for k in vars(a)}
    changed = {k: used[k] for k, v in training_args.recipe_cpu_float32.items() if used[k] != v}
    logger.info(
        "Training in float32 on a CPU (%s): the recipe's %r options apply where the command line does not set them: "
        "%s%s",
        training_args.precision_reason,
        CPU_FLOAT32,
        training_args.recipe_cpu_float32,
        f"; the command line sets {changed}" if changed else "",
    )


def prepare_output_dir(out_dir: Path, run_args: RunArguments, training_args) -> None:
    """Refuse to mix two runs in one directory: an earlier run's `checkpoint-*` would be averaged with this run's and
    its tokenizer reused. A non-empty directory is taken only to resume, or emptied with --overwrite_output_dir; one
    that a run left before its first checkpoint (`preflight.stopped_before_first_checkpoint`) is started in again.
    Checked by the main process before any process writes there (and by `preflight`, before torch loads)."""
    with training_args.main_process_first(desc="checking the output directory", local=False):
        if training_args.process_index != 0 or training_args.resume_from_checkpoint or not out_dir.is_dir():
            return
        problem = output_dir_problem(out_dir, None, run_args.overwrite_output_dir)
        if problem:
            raise ValueError(problem)
        entries = sorted(p.name for p in out_dir.iterdir())
        if not entries or not run_args.overwrite_output_dir:
            return  # empty, or a run stopped before its first checkpoint: this run starts there
        logger.warning("--overwrite_output_dir: deleting the earlier run in %s (%s).", out_dir, ", ".join(entries))
        for name in entries:
            path = out_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


if __name__ == "__main__":
    sys.exit(main())
