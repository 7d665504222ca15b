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
"""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


def _check_positive(name: str, value, integer: bool) -> None:
    kind = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        what = "a positive integer" if integer else "a positive number"
        raise ValueError(f"`{name}` must be {what}, got {value!r}.")


def _lrate(step: int, d_model: int, warmup_steps: int, factor: float) -> float:
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """Eq. 3 of the paper at update `step` (1-based): `factor * d_model^-0.5 * min(step^-0.5, step *
    warmup_steps^-1.5)`."""
    _check_positive("step", step, integer=True)
    _check_positive("d_model", d_model, integer=True)
    _check_positive("warmup_steps", warmup_steps, integer=True)
    _check_positive("factor", factor, integer=False)
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
        _check_positive("d_model", d_model, integer=True)
        if not isinstance(warmup_steps, bool) and isinstance(warmup_steps, float) and warmup_steps.is_integer():
            warmup_steps = int(warmup_steps)
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 1:
            raise ValueError(
                f"`warmup_steps` must be an integer >= 1, got {warmup_steps!r}: the schedule's warm-up term "
                f"divides by it (the paper uses 4000)."
            )
        _check_positive("factor", factor, integer=False)
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
        _check_positive("factor", factor, integer=False)
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


__all__ = ["NoamLR", "noam_learning_rate", "peak_learning_rate"]
