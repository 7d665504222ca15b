"""Callbacks of a timed run: the wall-clock limit, the learning-rate warm-up fitted to the speed measured in the run,
the cool-down planned in the time left, and the progress bar that counts the limit; the clock of the time trained
across resumes, and Ctrl-C. The Trainer's own limits are in steps or epochs; the paper's runs, and CPU runs
here, are sized in hours.

The processes of a data-parallel run must act at the same step: one that stopped a step early would wait in the
checkpoint's collectives while the others wait in the next step's gradient all-reduce, and the run would hang. Their
clocks are not the same, so the main process's clock decides: `TimeLimit` broadcasts its reading to the others after
every update (one tiny collective, next to the all-reduce of every gradient), and every decision here is computed
from that shared reading, the same on every process.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable

import torch
from accelerate.utils import broadcast, reduce
from tqdm.auto import tqdm
from transformers import ProgressCallback, TrainerCallback
from transformers.trainer_callback import ExportableState

from .schedule import WARMUP_SHARE, NoamLR, warmup_for_speed


logger = logging.getLogger(__name__)


def _stop(args, control) -> None:
    control.should_training_stop = True
    control.should_save = True
    control.should_log = True  # the loss since the last log: a run shorter than `logging_steps` has a curve's end too
    control.should_evaluate = args.eval_strategy != "no"


class TimeLimit(TrainerCallback):
    """Ends training after `minutes` of wall-clock time, saving (and, when the run evaluates, evaluating) at that
    step; the first and the last update are logged, so that a run of fewer than `logging_steps` updates still has the
    two ends of its loss curve. `clock` returns seconds; the default is `time.monotonic`. `elapsed` is the training time as of the last
    update, which `CooldownPlanner` and `TimeLimitProgressCallback` read (add them after this callback)."""

    def __init__(self, minutes: float, clock: Callable[[], float] = time.monotonic):
        if not minutes > 0:
            raise ValueError(f"`minutes` must be positive, got {minutes!r}: the wall-clock budget of the training.")
        self.seconds = minutes * 60
        self.clock = clock
        self.started = None
        self.elapsed = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = self.clock()
        self.elapsed = 0.0

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            control.should_log = True  # the curve's start (the loss before learning), as `logging_first_step` would
        elapsed = self.clock() - self.started
        if args.world_size > 1:  # the main process's clock, for all
            elapsed = broadcast(torch.tensor([elapsed], dtype=torch.float64, device=args.device), 0).item()
        self.elapsed = elapsed
        if self.elapsed >= self.seconds:
            logger.info(
                "Time limit of %.1f minutes reached at step %d: saving and stopping.",
                self.seconds / 60,
                state.global_step,
            )
            _stop(args, control)
        return control


class WarmupFitter(TrainerCallback):
    """Fits the warm-up of a time-limited run of the paper's schedule to the speed measured in the run: after its first
    updates (update 1, the start-up, left out; then FIT_UPDATES updates, or fewer once they took FIT_SHARE of the
    limit, at least 2), the warm-up becomes at most a quarter of the updates that speed projects into the limit
    (`schedule.warmup_for_speed`), through `NoamLR.set_warmup`; with `scale_factor` (the command line did not set
    `lr_factor`), the factor is scaled by sqrt(fitted / before) to keep the peak. `args.warmup_steps`, `args.lr_factor`
    and `args.warmup_fitted` (results.json's record) follow. A resumed run is not fitted again: it keeps the warm-up of
    its checkpoint's schedule (`schedule.keep_schedule_of_checkpoint`). Add it after the `TimeLimit`, whose reading
    (the main process's) it uses, so that every process fits the same warm-up."""

    FIT_UPDATES = 20
    FIT_SHARE = 0.02

    def __init__(self, limit: TimeLimit, scale_factor: bool = True):
        self.limit = limit
        self.scale_factor = scale_factor
        self._mark = None  # (seconds, update) at the end of update 1, where the measurement starts; None: done

    def on_train_begin(self, args, state, control, **kwargs):
        self._mark = (0.0, 0) if state.global_step == 0 else None

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        if self._mark is None or not isinstance(lr_scheduler, NoamLR):
            return control
        step, elapsed = state.global_step, self.limit.elapsed
        if step == 1:
            self._mark = (elapsed, step)
            return control
        since, first = self._mark
        measured, window = step - first, elapsed - since
        if step >= lr_scheduler.warmup_steps:
            self._mark = None  # the warm-up is over before the speed was measured: nothing left to fit
            return control
        if not (measured >= self.FIT_UPDATES or (measured >= 2 and window >= self.FIT_SHARE * self.limit.seconds)):
            return control
        self._mark = None
        rate = measured / window if window > 0 else float("inf")
        seconds_left = max(self.limit.seconds - elapsed, 0.0)
        before, factor = lr_scheduler.warmup_steps, lr_scheduler.factor
        warmup, expected = warmup_for_speed(before, step, rate, seconds_left, state.max_steps)
        if warmup < before:
            if self.scale_factor:
                factor = round(factor * math.sqrt(warmup / before), 6)
            lr_scheduler.set_warmup(warmup, factor)
        record = args.warmup_fitted or {}
        args.warmup_fitted = {
            "warmup_steps": [record.get("warmup_steps", [before])[0], warmup],
            "lr_factor": [record.get("lr_factor", [args.lr_factor])[0], factor],
            "updates_per_second": round(rate, 3),
            "measured_updates": [first + 1, step],
            "expected_updates": expected,
        }
        args.warmup_steps, args.lr_factor = warmup, factor
        logger.info(
            "Warm-up fitted to this run's speed: %.2f updates/s over updates %d-%d, so about %s updates in the time "
            "limit, and a warm-up of %s updates (at most %.0f%% of them; the recipe's: %s), lr_factor %g; "
            "--warmup_steps sets it.",
            rate,
            first + 1,
            step,
            f"{expected:,}",
            f"{warmup:,}",
            100 * WARMUP_SHARE,
            f"{before:,}",
            factor,
        )
        return control


class CooldownPlanner(TrainerCallback):
    """With `lr_cooldown` (a fraction f of the run, VanillaTrainingArguments) and the paper's schedule in a run with a
    `TimeLimit`: once f of the time is left (and the schedule's own cool-down, planned from `max_steps`, has not
    started), the cool-down starts at the current update and ends at the update the run is expected to reach at the
    limit, from its updates per second over the stretch of the same length just before (evaluations included, which
    recur; the start-up excluded). The run then stops at that update or at the limit, whichever comes first. The plan
    is part of the schedule's state (`scheduler.pt`), but a resumed run has a time limit of its own: it drops the
    plan of its checkpoint's run and plans one at its own end.

    A callback beside the `TimeLimit`, since the end is known only from its clock, which the Trainer's loop never
    reads; it changes the schedule only through the schedule's own interface, `NoamLR.set_cooldown`."""

    def __init__(self, limit: TimeLimit):
        self.limit = limit
        self._mark = None  # (seconds, update) when the window that measures the speed opened

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        self._mark = None
        planned = getattr(lr_scheduler, "cooldown_end", None)
        if state.global_step and planned is not None and planned < state.max_steps:
            # A resumed run: its checkpoint's cool-down was planned in the time limit of the run that wrote it (and
            # may be over: the run would stop after one update). This run has a limit of its own and plans its
            # cool-down at its end; until then the schedule is the paper's again.
            logger.info(
                "Resumed at update %d: the cool-down planned by the earlier run (updates %d-%d) is dropped; this "
                "run plans its own in its time limit.",
                state.global_step,
                lr_scheduler.cooldown_start,
                planned,
            )
            lr_scheduler.set_cooldown(None, None)

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        fraction = getattr(args, "lr_cooldown", 0.0)
        if not (fraction and isinstance(lr_scheduler, NoamLR)):
            return control
        scheduler, step = lr_scheduler, state.global_step
        # The limit's reading is the main process's on every process: the plan below is the same everywhere.
        elapsed, seconds = self.limit.elapsed, self.limit.seconds
        end, rate = 0, 0.0  # where the cool-down should end (0: not now)
        if self._mark is None and elapsed >= (1 - 2 * fraction) * seconds:
            # The speed is measured over the stretch as long as the cool-down just before it: late enough to miss
            # the start-up (and a resumed run's reloading), long enough to hold the evaluations that recur.
            self._mark = (elapsed, step)
        late = elapsed >= (1 - fraction) * seconds
        if late and (scheduler.cooldown_start is None or step < scheduler.cooldown_start):
            since, first = self._mark if self._mark[0] < elapsed else (0.0, 0)
            rate = (step - first) / (elapsed - since) if elapsed > since else 0.0
            end = step + max(int((seconds - elapsed) * rate), 1)
        if end and (scheduler.cooldown_end is None or end < scheduler.cooldown_end):
            scheduler.set_cooldown(step, end)
            logger.info(
                "Learning rate cool-down (%g of the time limit left): linear from %.3g after update %d to zero after "
                "update %d (%.2f updates/s lately).",
                fraction,
                scheduler.get_last_lr()[0],
                step,
                end,
                rate,
            )
        if scheduler.cooldown_end is not None and step >= scheduler.cooldown_end and not control.should_training_stop:
            logger.info("Cool-down finished at step %d: saving and stopping.", step)
            _stop(args, control)
        return control


class RunEnd(TrainerCallback):
    """Says when a timed run ends. `--max_train_minutes` bounds the training; the end of the run follows it: the last
    validation (at the stop), the test translation by the final model and by the averaged one, the averaging and the
    figures. At the start one line gives the training's deadline and what follows it; at the first evaluation,
    whose translations measure the speed, one line gives the estimated end of the run. `validation` and `test` are
    the splits' sentence counts (0: none), `models` how many models translate the test split (the final, the
    averaged), `evaluates` whether the run evaluates. `clock` returns the wall-clock time (seconds since the epoch)."""

    def __init__(self, minutes: float, validation: int, test: int, models: int, evaluates: bool, clock=time.time):
        self.seconds, self.validation, self.test, self.models = minutes * 60, validation, test, models
        self.evaluates, self.clock = evaluates, clock
        self.deadline = None
        self.estimated = None  # the estimated end of the run, once an evaluation has measured the speed

    def on_train_begin(self, args, state, control, **kwargs):
        self.deadline, self.estimated = self.clock() + self.seconds, None
        if not state.is_world_process_zero:
            return
        after = ["the last validation"] if self.evaluates else []
        if self.test:
            which = "the final and the averaged model" if self.models > 1 else "the final model"
            after.append(f"the test translation of {self.test:,} sentences by {which}")
        after += ["the averaging and the figures"] if self.models > 1 else ["the figures"]
        when = (
            "estimated at the first evaluation, whose translations measure the speed"
            if self.evaluates
            else "not estimated: the run does not evaluate, which would measure the speed of translation"
        )
        logger.info(
            "Time limit: training stops by %s (--max_train_minutes %g); the end of the run follows it, outside the "
            "limit: %s (its time %s).",
            _clock_time(self.deadline),
            self.seconds / 60,
            ", ".join(after),
            when,
        )

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        runtime = (metrics or {}).get("eval_runtime")
        if self.estimated is not None or not runtime or not self.validation or self.deadline is None:
            return
        rate = self.validation / runtime  # sentences per second, beam search as at the end
        now = self.clock()
        stopping = now >= self.deadline or control.should_training_stop  # this evaluation is the last
        end_of_training = now if stopping else self.deadline
        after = (0 if stopping else runtime) + self.models * self.test / rate
        self.estimated = end_of_training + after
        if state.is_world_process_zero:
            logger.info(
                "The run ends at about %s: training until %s, then about %s for %s (%.1f sentences/s in this "
                "evaluation of %s sentences).",
                _clock_time(self.estimated),
                _clock_time(end_of_training),
                f"{after:.0f} s" if after < 90 else f"{after / 60:.1f} minutes",
                " and ".join(
                    (["the last validation"] if not stopping else [])
                    + ([f"{self.models} test translation{'s' if self.models > 1 else ''}"] if self.test else [])
                )
                or "nothing to translate",
                rate,
                f"{self.validation:,}",
            )


def _clock_time(seconds: float) -> str:
    """A wall-clock time as a person reads it in the log (the machine's local time)."""
    return time.strftime("%H:%M:%S", time.localtime(seconds))


class Interrupt(TrainerCallback):
    """Ctrl-C (SIGINT) during training ends it at the end of the current update, with a checkpoint, as a time limit
    does: `--resume_from_checkpoint true` continues from there as if the run had not stopped. A second Ctrl-C stops
    at once (KeyboardInterrupt), keeping the checkpoints already complete. `step` is the update it stopped after, or
    None. Every process stops at the same update: after each update their flags are summed (one tiny collective),
    since the key reaches them at different moments of their step, and one that stopped alone would hang the others
    in the next gradient all-reduce. The handler is this run's only: installed at the start of training, the one
    before it put back at its end."""

    # A launcher (torchrun, under `accelerate launch`) passes the terminal's Ctrl-C on to its processes, which the
    # terminal has already sent it to: a second signal this soon after the first is the same key.
    SAME_KEY_SECONDS = 1.0

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.pressed = False
        self.step = None
        self.clock = clock
        self._previous = None
        self._first = None

    def _press(self, signum, frame):
        if self.pressed:
            if self.clock() - self._first < self.SAME_KEY_SECONDS:
                return
            raise KeyboardInterrupt
        self.pressed, self._first = True, self.clock()
        logger.warning("Ctrl-C: stopping after this update, with a checkpoint (Ctrl-C again stops at once).")

    def on_train_begin(self, args, state, control, **kwargs):
        self.pressed, self.step = False, None
        if threading.current_thread() is threading.main_thread():  # where Python runs signal handlers
            self._previous = signal.signal(signal.SIGINT, self._press)

    def on_step_end(self, args, state, control, **kwargs):
        pressed = self.pressed
        if args.world_size > 1:  # any process's key stops them all, at this same update
            flag = torch.tensor([float(pressed)], device=args.device)
            pressed = reduce(flag, reduction="sum").item() > 0
        if pressed:
            self.step = state.global_step
            control.should_training_stop = True
            control.should_save = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


class TrainingClock(TrainerCallback, ExportableState):
    """The seconds a run has trained, across resumes. Every checkpoint's `trainer_state.json` carries them (the
    Trainer saves an `ExportableState` callback's `state()` with each checkpoint), and a resumed run starts from the
    seconds of the checkpoint it resumed from, so that results.json's training time and tokens per second are those
    of the model, not of the last command; the training between that checkpoint and the stop, lost, is not counted.
    `before` is None where the checkpoint holds no time (written before this callback existed): the time is then
    the resumed part's. The time limit (`TimeLimit`) is not this: it bounds each command, so that a timed run resumed
    trains its minutes again."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.started = None
        self.before = 0.0  # seconds trained before the checkpoint resumed from
        self.resumed_at = None  # that checkpoint's update, or None: a run from its start

    def on_train_begin(self, args, state, control, **kwargs):
        name = type(self).__name__
        saved = state.stateful_callbacks.get(name)
        if state.global_step > 0:  # resumed: `state` is the checkpoint's
            self.resumed_at = state.global_step
            self.before = saved["attributes"]["seconds"] if isinstance(saved, dict) else None
        # An older checkpoint has no entry, which the Trainer's save expects to find.
        state.stateful_callbacks.setdefault(name, self.state())
        self.started = self.clock()

    def trained_seconds(self) -> float:
        """The seconds trained so far: before the resumed checkpoint (where known) and since this command's start."""
        return (self.before or 0.0) + (self.clock() - self.started if self.started is not None else 0.0)

    def state(self) -> dict:
        return {"args": {}, "attributes": {"seconds": round(self.trained_seconds(), 3)}}


class TimeLimitProgressCallback(ProgressCallback):
    """The Trainer's progress bar for a run with a `TimeLimit`: it counts the limit's seconds rather than `max_steps`
    (which a timed run sets high, e.g. 100,000 steps: the stock bar's ETA would be a day for a one-hour run), with
    the update number beside it. It replaces the stock bar: `trainer.pop_callback(ProgressCallback)`, then
    `trainer.add_callback(TimeLimitProgressCallback(limit))`, after the `TimeLimit` (whose clock it shows)."""

    def __init__(self, limit: TimeLimit):
        super().__init__()
        self.limit = limit

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar = tqdm(
                total=round(self.limit.seconds),
                unit="s",
                dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n:.0f}/{total} s of the time limit [{elapsed}<{remaining}{postfix}]",
            )
        self.current_step = 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            # The limit's own reading of its clock (it runs first): the bar shows what the limit decides on.
            elapsed = min(self.limit.elapsed, self.limit.seconds)
            self.training_bar.set_postfix_str(f"update {state.global_step}", refresh=False)
            self.training_bar.update(elapsed - self.training_bar.n)
            self.current_step = state.global_step
