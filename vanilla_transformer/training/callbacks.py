"""Callbacks of a timed run: the wall-clock limit, the learning-rate cool-down planned in the time left, and the
progress bar that counts the limit. The Trainer's own limits are in steps or epochs; the paper's runs, and CPU runs
here, are sized in hours.

The processes of a data-parallel run must act at the same step: one that stopped a step early would wait in the
checkpoint's collectives while the others wait in the next step's gradient all-reduce, and the run would hang. Their
clocks are not the same, so the main process's clock decides: `TimeLimit` broadcasts its reading to the others after
every update (one tiny collective, next to the all-reduce of every gradient), and every decision here is computed
from that shared reading, the same on every process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
from accelerate.utils import broadcast
from tqdm.auto import tqdm
from transformers import ProgressCallback, TrainerCallback

from .schedule import NoamLR


logger = logging.getLogger(__name__)


def _stop(args, control) -> None:
    control.should_training_stop = True
    control.should_save = True
    control.should_evaluate = args.eval_strategy != "no"


class TimeLimit(TrainerCallback):
    """Ends training after `minutes` of wall-clock time, saving (and, when the run evaluates, evaluating) at that
    step. `clock` returns seconds; the default is `time.monotonic`. `elapsed` is the training time as of the last
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


class CooldownPlanner(TrainerCallback):
    """With `lr_cooldown` (a fraction f of the run, VanillaTrainingArguments) and the paper's schedule in a run with a
    `TimeLimit`: once f of the time is left (and the schedule's own cool-down, planned from `max_steps`, has not
    started), the cool-down starts at the current update and ends at the update the run is expected to reach at the
    limit, from its updates per second over the stretch of the same length just before (evaluations included, which
    recur; the start-up excluded). The run then stops at that update or at the limit, whichever comes first. The plan
    is part of the schedule's state (`scheduler.pt`): a resumed run keeps it.

    A callback beside the `TimeLimit`, since the end is known only from its clock, which the Trainer's loop never
    reads; it changes the schedule only through the schedule's own interface, `NoamLR.set_cooldown`."""

    def __init__(self, limit: TimeLimit):
        self.limit = limit
        self._mark = None  # (seconds, update) when the window that measures the speed opened

    def on_train_begin(self, args, state, control, **kwargs):
        self._mark = None

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
