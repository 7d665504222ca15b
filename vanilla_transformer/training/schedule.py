"""The learning-rate schedule of "Attention Is All You Need", section 5.3 (eq. 3):

    lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

a linear warm-up over the first `warmup_steps` updates to the peak `factor * (d_model * warmup_steps)^-0.5`,
then a decay proportional to the inverse square root of the step number. The paper uses warmup_steps = 4000
and no factor (factor = 1); the Annotated Transformer and fairseq runs sometimes scale it (`factor`).

Step numbering. The formula's `step` is the number of the optimizer update, starting at 1 (step 0 would
divide by zero). A torch scheduler sets the learning rate of the *next* update: it is built before the first
update (which happens with the learning rate it set at construction, when `last_epoch` = 0) and the Trainer
calls `scheduler.step()` after every optimizer update. So the update number `n` (1-based) runs with
`last_epoch = n - 1`, and `NoamLR` uses `step = last_epoch + 1`: the first update uses lrate(1), the
`warmup_steps`-th update uses the peak.

transformers' `get_inverse_sqrt_schedule` (`lr_scheduler_type="inverse_sqrt"`) has the same shape,
`lr * min(t / warmup, sqrt(warmup / t))`, which equals this formula with `lr` = the peak, but it is
evaluated at `t = last_epoch`: its first update runs with learning rate 0 and every later update `n` with
lrate(n - 1), one update behind this schedule. (tests/test_schedule.py checks both statements.)

Cool-down (a departure from the paper, off by default: `cooldown_start` / `set_cooldown`). The paper's
inverse-square-root decay never reaches zero, so a run stopped by a budget ends at a learning rate still a good part
of its peak (1/3 of it at nine times the warm-up), where the weights keep jumping around a minimum they never settle
into (what checkpoint averaging, section 6.1, partly makes up for). With a cool-down, the learning rate holds its
value at update `start` and then falls linearly to zero at update `end + 1`, so the last update (`end`) runs with
`lrate(start) / (end + 1 - start)`: the "warmup-stable-decay" shape, annealed to the end of the budget. A
time-limited run learns its `end` only during training (`callbacks.CooldownPlanner` estimates it from the recent
updates per second), hence `set_cooldown` as well as the constructor arguments.

A warm-up fitted during the run (`set_warmup`). A time-limited run knows how many updates it will make only once it
has measured its speed (`callbacks.WarmupFitter`, after its first updates): it starts with its recipe's warm-up and
may then shorten it, keeping the peak (`factor` scaled by sqrt(new / old)). From the next update on the schedule is
eq. 3 with the new warm-up and factor, exactly; the updates already made keep the rates they had (lower ones: a
shorter warm-up with the same peak ramps faster).

The scheduler's state is the step counter, the warm-up and factor, and the cool-down's two update numbers, so
`state_dict` / `load_state_dict` (the Trainer's `scheduler.pt`) restore it exactly: a resumed run keeps the warm-up it
began with.

Every rule of the learning rate is here, the options (options.py) only carry its values: the schedule (`NoamLR`), the
warm-up fitted to a run's budget before it starts (`fit_warmup`, `fit_warmup_of`) and to its measured speed during it
(`warmup_for_speed`, which `callbacks.WarmupFitter` applies), the cool-down planned over the last steps
(`planned_cooldown`; `callbacks.CooldownPlanner` moves it earlier in a timed run), and what a resumed run takes from
its checkpoint's schedule (`keep_schedule_of_checkpoint`) and refuses (`check_schedule_of`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from ..checkpoints import last_checkpoint
from ..generation_vanilla_transformer import check_positive_int


SCHEDULER_FILE = "scheduler.pt"  # the Trainer's name for a checkpoint's schedule (transformers.trainer.SCHEDULER_NAME)


def _check_positive_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"`{name}` must be a positive number, got {value!r}.")


def _lrate(step: int, d_model: int, warmup_steps: int, factor: float) -> float:
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """Eq. 3 of the paper at update `step` (1-based): `factor * d_model^-0.5 * min(step^-0.5, step *
    warmup_steps^-1.5)`."""
    check_positive_int("`step`", step)
    check_positive_int("`d_model`", d_model)
    check_positive_int("`warmup_steps`", warmup_steps)
    _check_positive_number("factor", factor)
    return _lrate(step, d_model, warmup_steps, factor)


def peak_learning_rate(d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The largest learning rate of the schedule, reached at update `warmup_steps`: `factor * (d_model *
    warmup_steps)^-0.5` (7.0e-4 for the base model, d_model = 512 and 4000 warm-up steps)."""
    return noam_learning_rate(warmup_steps, d_model, warmup_steps, factor)


class NoamLR(LRScheduler):
    """Sets every parameter group's learning rate to eq. 3 of the paper (see the module docstring for the
    step numbering). The optimizer's own `lr` is ignored: the schedule gives absolute values.

    Args:
        optimizer: the optimizer whose learning rate is scheduled (the paper's Adam(0.9, 0.98, 1e-9)).
        d_model: the model width (512 base, 1024 big).
        warmup_steps: the number of warm-up updates (4000 in the paper).
        factor: a constant multiplier (1.0 in the paper).
        cooldown_start, cooldown_end: the updates where the linear cool-down starts and ends (see the module
            docstring); both None (the default, the paper's schedule) or both given, 1 <= start < end.
        last_epoch: the number of updates already done, as in every torch scheduler (-1 = fresh start).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        d_model: int,
        warmup_steps: int = 4000,
        factor: float = 1.0,
        last_epoch: int = -1,
        cooldown_start: int | None = None,
        cooldown_end: int | None = None,
    ):
        check_positive_int("`d_model`", d_model)
        if not isinstance(warmup_steps, bool) and isinstance(warmup_steps, float) and warmup_steps.is_integer():
            warmup_steps = int(warmup_steps)
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
            raise ValueError(
                f"`warmup_steps` must be an integer >= 1, got {warmup_steps!r}: the schedule's warm-up term "
                f"divides by it (the paper uses 4000)."
            )
        _check_positive_number("factor", factor)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.factor = float(factor)
        self.cooldown_start, self.cooldown_end = None, None
        if (cooldown_start is None) != (cooldown_end is None):
            raise ValueError(
                f"`cooldown_start` and `cooldown_end` go together (got {cooldown_start!r} and {cooldown_end!r})."
            )
        if cooldown_start is not None:
            self._check_cooldown(cooldown_start, cooldown_end)
            self.cooldown_start, self.cooldown_end = cooldown_start, cooldown_end
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _check_cooldown(start, end) -> None:
        for name, value in (("cooldown_start", start), ("cooldown_end", end)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an update number >= 1, got {value!r}.")
        if not start < end:
            raise ValueError(
                f"The cool-down must end after it starts: `cooldown_start`={start}, `cooldown_end`={end}."
            )

    def set_cooldown(self, start: int | None, end: int | None) -> None:
        """(Re)plan the cool-down: hold `lrate(start)` after update `start`, reach zero after update `end` (see the
        module docstring); None and None: no cool-down (a resumed timed run drops the one its checkpoint's clock
        planned). Called between updates by whoever learns the end then (`callbacks.CooldownPlanner`, from the time
        limit's clock). `start` may not lie before the update about to run, whose learning rate is set now: the
        schedule never rewrites what already happened. The plan is part of `state_dict`, so a resumed run keeps it."""
        if start is not None or end is not None:
            self._check_cooldown(start, end)
            if start < self.last_epoch:
                raise ValueError(
                    f"`cooldown_start`={start} lies in the past: {self.last_epoch} updates are already done."
                )
        self.cooldown_start, self.cooldown_end = start, end
        self._set_next_lr()

    def set_warmup(self, warmup_steps: int, factor: float) -> None:
        """Shorten the warm-up to `warmup_steps`, with `factor` (the caller keeps the peak: `callbacks.WarmupFitter`),
        from the update about to run on; the updates made keep their rates. Refused once the warm-up has ended (the
        decay would jump) or to lengthen it (the rate would fall back). Part of `state_dict`, so a resumed run keeps
        it."""
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
            raise ValueError(f"`warmup_steps` must be an integer >= 1, got {warmup_steps!r}.")
        _check_positive_number("factor", factor)
        if warmup_steps > self.warmup_steps:
            raise ValueError(f"`warmup_steps`={warmup_steps} would lengthen the warm-up of {self.warmup_steps}.")
        if self.last_epoch >= self.warmup_steps:
            raise ValueError(f"The warm-up of {self.warmup_steps} updates is over: {self.last_epoch} are done.")
        self.warmup_steps, self.factor = warmup_steps, float(factor)
        self._set_next_lr()

    def _set_next_lr(self) -> None:
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr

    def get_last_lr(self) -> list[float]:
        """The learning rates the optimizer holds now: those of the last `step`, or of `set_cooldown` after it."""
        return [group["lr"] for group in self.optimizer.param_groups]

    def get_lr(self) -> list[float]:
        # `last_epoch` counts the updates already done, so the update about to run is number last_epoch + 1.
        # (The arguments were checked once, in __init__: nothing is validated per update.)
        step = self.last_epoch + 1
        start, end = self.cooldown_start, self.cooldown_end
        if start is not None and step > start:
            lr = (
                _lrate(start, self.d_model, self.warmup_steps, self.factor)
                * max(end + 1 - step, 0)
                / (end + 1 - start)
            )
        else:
            lr = _lrate(step, self.d_model, self.warmup_steps, self.factor)
        return [lr for _ in self.optimizer.param_groups]


def planned_cooldown(fraction: float, steps: int) -> tuple[int | None, int | None]:
    """(start, end) of a cool-down over the last `fraction` of `steps` updates, or (None, None): none asked for, or a
    run too short for one. A timed run's `steps` is only a ceiling: `callbacks.CooldownPlanner` moves it earlier."""
    start = max(round((1 - fraction) * steps), 1)
    return (start, steps) if fraction and start < steps else (None, None)


# ---- the warm-up fitted to the run -----------------------------------------------------------------------------------

# The largest share of a run's updates that a warm-up the command line did not set takes: of a `max_steps` budget
# (`fit_warmup`), or of the updates a time-limited run is measured to make in its limit (`warmup_for_speed`). The
# largest share a shipped recipe's warm-up takes of its own hour, so that no hour on the machine it was chosen on gets
# a shorter one: float32, 1,600 of 6,160-6,306 updates (docs/results.md); bfloat16, 800 of ~6,000
# (docs/training.md, "A warm-up fitted to the run").
WARMUP_SHARE = 0.25


def fit_warmup(warmup: float, minutes: float | None, recipe_minutes: float | None, max_steps: int) -> float:
    """A recipe's warm-up (updates) fitted to a run's budget, for a warm-up the command line does not set: scaled by
    `minutes / recipe_minutes` when the run's time limit is shorter than the one the recipe's warm-up was chosen for
    (the Multi30k recipes' 60), and at most WARMUP_SHARE of `max_steps` (when positive). A warm-up below 1 (a ratio
    of `max_steps`, the Trainer's convention) already scales and is returned as it is.

    Why: a warm-up is sized for its run. The float32 recipe's 1,600 updates are a quarter of its hour; a 10-minute run
    makes ~1,400 updates, and would stop inside that warm-up with a model that cannot have learned. (`fit_warmup_of`
    also scales `lr_factor` by sqrt(fitted / warmup), unless the command line sets it, to keep the schedule's peak.)"""
    if warmup < 1:
        return warmup
    fitted = warmup
    if minutes and recipe_minutes and minutes < recipe_minutes:
        fitted = warmup * minutes / recipe_minutes
    if max_steps > 0:
        fitted = min(fitted, WARMUP_SHARE * max_steps)
    return max(1, round(fitted))


def fit_warmup_of(training_args, minutes: float | None, recipe_minutes: float | None, lr_factor_given: bool) -> None:
    """`fit_warmup` applied to the arguments, recorded in `training_args.warmup_fitted`. A time-limited run of the
    paper's schedule (`minutes`) keeps its recipe's warm-up (capped by `max_steps`) until it has measured its speed:
    then `callbacks.WarmupFitter` fits it (`warmup_for_speed`; `training_args.fit_warmup_to_speed` asks for it);
    other schedules cannot change during the run, and scale it by the time limit."""
    warmup = training_args.warmup_steps
    if minutes and training_args.lr_schedule == "noam" and warmup >= 1:
        training_args.fit_warmup_to_speed = {"lr_factor": not lr_factor_given}
        minutes = None
    fitted = fit_warmup(warmup, minutes, recipe_minutes, training_args.max_steps)
    if fitted != warmup:
        training_args.warmup_steps = fitted
        training_args.warmup_fitted = {"warmup_steps": [warmup, fitted]}
        if not lr_factor_given:
            # The same peak after the shorter warm-up: section 5.3's schedule peaks at lr_factor * (d_model *
            # warmup_steps)^-0.5, and a higher peak trained this model worse (the recipe search's run with a warm-up
            # of 400 instead of 800 at the same factor: git show bbc37b1:bench/multi30k_search.md).
            factor = round(training_args.lr_factor * math.sqrt(fitted / warmup), 6)
            training_args.warmup_fitted["lr_factor"] = [training_args.lr_factor, factor]
            training_args.lr_factor = factor


def warmup_for_speed(
    warmup: int, done: int, updates_per_second: float, seconds_left: float, max_steps: int
) -> tuple[int, int]:
    """(warm-up, expected updates) of a time-limited run once it has measured its speed (`callbacks.WarmupFitter`):
    the run will make `done` updates plus `updates_per_second` over `seconds_left` (no more than `max_steps`, when
    positive), and its warm-up is at most WARMUP_SHARE of them, never longer than `warmup`, its recipe's (at least 1).

    Why measured: a recipe's warm-up is sized for its hour on the machine it was chosen on (800 of ~6,000 bfloat16
    updates). Scaled to a shorter limit at that machine's speed, it swallowed a 4-minute run on a busy 2-core CPU
    (40 updates inside a warm-up of 53); fitted to the run's own speed, it is a quarter of them (10)."""
    expected = done + updates_per_second * seconds_left
    if max_steps > 0:
        expected = min(expected, max_steps)
    return max(1, min(warmup, round(WARMUP_SHARE * expected))), round(expected)


# ---- a resumed run's schedule ----------------------------------------------------------------------------------------


def saved_schedule(checkpoint) -> dict | None:
    """The schedule's state a checkpoint saved (`scheduler.pt`: numbers only, no pickled objects), or None where it
    saved none (`save_only_model`)."""
    path = Path(checkpoint) / SCHEDULER_FILE
    return torch.load(path, map_location="cpu", weights_only=True) if path.is_file() else None


def keep_schedule_of_checkpoint(training_args, given) -> None:
    """A resumed run keeps the warm-up and lr_factor its checkpoint's schedule has, those the command line (`given`)
    does not set: fitted to the budget or the speed of the run that began it, they would be fitted otherwise now, and
    `check_schedule_of` refuses a checkpoint whose schedule differs from the arguments."""
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is True:
        checkpoint = last_checkpoint(training_args.output_dir)
    saved = saved_schedule(checkpoint or "") if training_args.lr_schedule == "noam" else None
    if saved is None or "factor" not in saved:
        return  # a stock schedule, none saved, or a stock one saved: `check_schedule_of` says what is wrong
    kept = {}
    for name, key in (("warmup_steps", "warmup_steps"), ("lr_factor", "factor")):
        if name not in given and getattr(training_args, name) != saved[key]:
            kept[name] = [getattr(training_args, name), saved[key]]
            setattr(training_args, name, saved[key])
    if kept:
        training_args.warmup_fitted = {**kept, "kept_from": Path(checkpoint).name}


def check_schedule_of(checkpoint: str, args, d_model: int | None) -> None:
    """ValueError unless the checkpoint's schedule is the one `args` (VanillaTrainingArguments) ask for: the Trainer
    would restore the checkpoint's, silently ignoring the new values."""
    saved = saved_schedule(checkpoint)
    if saved is None:
        return  # a checkpoint saved without optimizer state (`save_only_model`): nothing is restored
    paper_schedule = args.lr_schedule == "noam"
    if paper_schedule != ("factor" in saved):
        kind = "the paper's learning-rate schedule" if "factor" in saved else "a stock Trainer schedule"
        raise ValueError(
            f"Checkpoint {checkpoint!r} was trained with {kind}, but this run sets "
            f"`lr_schedule`={args.lr_schedule!r} ({args.lr_scheduler_type!r}): "
            f"resume with the checkpoint's schedule, or start a new run from its weights (`--init_from`)."
        )
    if paper_schedule:
        # A warm-up given as a ratio depends on the step count, known here only from `max_steps`.
        warmup = saved["warmup_steps"]
        if args.warmup_steps >= 1 or args.max_steps > 0:
            warmup = args.get_warmup_steps(args.max_steps)
        ours = {"warmup_steps": warmup, "lr_factor": float(args.lr_factor), "d_model": d_model}
        theirs = {"warmup_steps": saved["warmup_steps"], "lr_factor": saved["factor"], "d_model": saved["d_model"]}
    else:
        ours, theirs = {"learning_rate": args.learning_rate}, {"learning_rate": saved["base_lrs"][0]}
    changed = [name for name in ours if ours[name] != theirs[name]]
    if changed:
        raise ValueError(
            f"Checkpoint {checkpoint!r} has the learning-rate schedule "
            f"{', '.join(f'{n}={theirs[n]!r}' for n in changed)}, but this run sets "
            f"{', '.join(f'{n}={ours[n]!r}' for n in changed)}; resuming would restore the checkpoint's values "
            f"and ignore these. Pass the checkpoint's values to continue its run, or start a new run from its weights "
            f"(`--init_from`)."
        )


__all__ = ["NoamLR", "noam_learning_rate", "peak_learning_rate"]
