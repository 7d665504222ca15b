"""The learning-rate schedule of section 5.3 (eq. 3), as the Trainer drives it."""

import io
import math

import pytest
import torch
from transformers import get_inverse_sqrt_schedule

from vanilla_transformer.training.schedule import NoamLR, noam_learning_rate, peak_learning_rate


def paper(step, d_model, warmup, factor=1.0):
    # Eq. 3, written out independently of the module.
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def lrs_of_updates(scheduler, n_updates):
    """The learning rate each update 1..n runs with, stepping as the Trainer does (optimizer, then scheduler)."""
    optimizer = scheduler.optimizer
    used = []
    for _ in range(n_updates):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return used


def make_optimizer(lr=1.0):
    return torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=lr, betas=(0.9, 0.98), eps=1e-9)


def test_formula_at_first_update_warmup_and_ten_times_warmup():
    # The paper's base model: d_model 512, 4000 warm-up steps.
    assert noam_learning_rate(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-12)
    assert noam_learning_rate(4000, 512, 4000) == pytest.approx((512 * 4000) ** -0.5, rel=1e-12)
    assert noam_learning_rate(40000, 512, 4000) == pytest.approx(512**-0.5 * 40000**-0.5, rel=1e-12)
    assert peak_learning_rate(512, 4000) == pytest.approx(6.9877e-4, rel=1e-4)
    assert peak_learning_rate(512, 4000, factor=2.0) == pytest.approx(2 * 6.9877e-4, rel=1e-4)


def test_scheduler_gives_update_n_the_formula_at_step_n():
    d_model, warmup, factor = 64, 40, 2.0
    used = lrs_of_updates(NoamLR(make_optimizer(), d_model, warmup, factor), 10 * warmup)
    for n in (1, 2, warmup - 1, warmup, warmup + 1, 10 * warmup):
        assert used[n - 1] == pytest.approx(paper(n, d_model, warmup, factor), rel=1e-12), n
    assert used[0] > 0  # the first update is not wasted at learning rate 0
    assert max(used) == pytest.approx(peak_learning_rate(d_model, warmup, factor), rel=1e-12)
    assert used.index(max(used)) == warmup - 1  # the peak is update number `warmup`


def test_same_curve_as_transformers_inverse_sqrt_one_update_later():
    """transformers' `inverse_sqrt` with lr = the peak is the same function of the step number (also during warm-up:
    peak * t / warmup = d^-0.5 * t * warmup^-1.5), but the Trainer applies it at t = last_epoch = n - 1 to update n:
    its first update has learning rate 0 and every later one lags this schedule by one update."""
    d_model, warmup = 64, 40
    peak = peak_learning_rate(d_model, warmup)
    ours = lrs_of_updates(NoamLR(make_optimizer(), d_model, warmup), 10 * warmup + 1)
    hf = lrs_of_updates(get_inverse_sqrt_schedule(make_optimizer(lr=peak), num_warmup_steps=warmup), 10 * warmup + 1)
    assert hf[0] == 0.0
    for n in range(1, 10 * warmup + 1):  # HF's update n + 1 runs with our update n's rate
        assert hf[n] == pytest.approx(ours[n - 1], rel=1e-12), n
    # After warm-up, `learning_rate * lambda(step)` of transformers is eq. 3 at the same step.
    for step in (warmup, 2 * warmup, 10 * warmup):
        assert hf[step] == pytest.approx(paper(step, d_model, warmup), rel=1e-12)


def test_resume_from_state_dict_continues_exactly():
    d_model, warmup = 32, 10
    uninterrupted = lrs_of_updates(NoamLR(make_optimizer(), d_model, warmup), 30)

    first = NoamLR(make_optimizer(), d_model, warmup)
    assert lrs_of_updates(first, 12) == uninterrupted[:12]
    # What the Trainer writes (optimizer.pt, scheduler.pt) and reads back with weights_only=True.
    buffer = io.BytesIO()
    torch.save({"optimizer": first.optimizer.state_dict(), "scheduler": first.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    # As in Trainer._load_optimizer_and_scheduler: a fresh optimizer and scheduler, then both states loaded.
    optimizer = make_optimizer()
    resumed = NoamLR(optimizer, d_model, warmup)
    optimizer.load_state_dict(saved["optimizer"])
    resumed.load_state_dict(saved["scheduler"])
    assert lrs_of_updates(resumed, 18) == uninterrupted[12:]
    assert resumed.last_epoch == 30


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(d_model=512, warmup_steps=0), "warmup_steps"),
        (dict(d_model=512, warmup_steps=0.5), "warmup_steps"),
        (dict(d_model=0, warmup_steps=4000), "d_model"),
        (dict(d_model=512, warmup_steps=4000, factor=0.0), "factor"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        NoamLR(make_optimizer(), **kwargs)


def test_step_zero_is_rejected_by_the_formula():
    with pytest.raises(ValueError, match="step"):
        noam_learning_rate(0, 512, 4000)
    assert math.isfinite(noam_learning_rate(1, 512, 4000))


# ---- Cool-down (not in the paper; off by default) ----


def test_cooldown_holds_the_rate_of_its_start_then_falls_linearly_to_zero():
    d_model, warmup, start, end = 32, 4, 10, 14
    used = lrs_of_updates(NoamLR(make_optimizer(), d_model, warmup, cooldown_start=start, cooldown_end=end), 16)
    for step in range(1, start + 1):  # the paper's schedule up to and including the start
        assert used[step - 1] == pytest.approx(paper(step, d_model, warmup), rel=1e-12)
    held = paper(start, d_model, warmup)
    # Updates 11..14 run with 4/5, 3/5, 2/5, 1/5 of it; after the end (which a run does not reach) zero.
    assert used[start:end] == pytest.approx([held * k / 5 for k in (4, 3, 2, 1)], rel=1e-12)
    assert used[end:] == [0.0, 0.0]
    assert NoamLR(make_optimizer(), d_model, warmup).cooldown_start is None  # the paper's schedule by default


def test_cooldown_planned_during_the_run_changes_only_the_updates_to_come():
    d_model, warmup = 32, 4
    scheduler = NoamLR(make_optimizer(), d_model, warmup)
    before = lrs_of_updates(scheduler, 6)
    scheduler.set_cooldown(6, 8)  # as callbacks.CooldownPlanner does after update 6
    # The Trainer logs `get_last_lr()`: the rate the next update runs with, the planned one from now on.
    assert scheduler.get_last_lr() == [scheduler.optimizer.param_groups[0]["lr"]]
    assert scheduler.get_last_lr() == pytest.approx([paper(6, d_model, warmup) * 2 / 3], rel=1e-12)
    after = lrs_of_updates(scheduler, 2)
    assert before == pytest.approx([paper(s, d_model, warmup) for s in range(1, 7)], rel=1e-12)
    assert after == pytest.approx([paper(6, d_model, warmup) * k / 3 for k in (2, 1)], rel=1e-12)
    with pytest.raises(ValueError, match="past"):
        scheduler.set_cooldown(5, 20)


def test_cooldown_is_restored_from_the_state_dict():
    d_model, warmup = 32, 4
    first = NoamLR(make_optimizer(), d_model, warmup)
    lrs_of_updates(first, 5)
    first.set_cooldown(5, 9)
    expected = lrs_of_updates(NoamLR(make_optimizer(), d_model, warmup, cooldown_start=5, cooldown_end=9), 9)[5:]
    buffer = io.BytesIO()
    torch.save({"optimizer": first.optimizer.state_dict(), "scheduler": first.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    optimizer = make_optimizer()
    resumed = NoamLR(optimizer, d_model, warmup)  # built without one, as a resumed timed run's is
    optimizer.load_state_dict(saved["optimizer"])
    resumed.load_state_dict(saved["scheduler"])
    assert (resumed.cooldown_start, resumed.cooldown_end) == (5, 9)
    assert lrs_of_updates(resumed, 4) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(cooldown_start=5), "go together"),
        (dict(cooldown_start=0, cooldown_end=5), "cooldown_start"),
        (dict(cooldown_start=5, cooldown_end=5), "end after it starts"),
        (dict(cooldown_start=5, cooldown_end=7.5), "cooldown_end"),
    ],
)
def test_bad_cooldowns_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NoamLR(make_optimizer(), 32, 4, **kwargs)


def test_a_warm_up_shortened_during_the_run_is_eq_3_with_the_new_one_from_the_next_update():
    """As callbacks.WarmupFitter does after measuring the run's speed: warm-up 100 -> 10 after update 3, the factor
    scaled to keep the peak. The three updates made keep their rates; from update 4 on the rates are eq. 3's with warm-up
    10 and the new factor, exactly, and a resumed run keeps them (`state_dict`)."""
    d_model, factor = 32, 0.7
    scheduler = NoamLR(make_optimizer(), d_model, 100, factor=factor)
    before = lrs_of_updates(scheduler, 3)
    new_factor = factor * math.sqrt(10 / 100)
    scheduler.set_warmup(10, new_factor)
    assert scheduler.get_last_lr() == pytest.approx([paper(4, d_model, 10, new_factor)], rel=1e-12)
    after = lrs_of_updates(scheduler, 20)
    assert before == pytest.approx([paper(s, d_model, 100, factor) for s in (1, 2, 3)], rel=1e-12)
    assert after == pytest.approx([paper(s, d_model, 10, new_factor) for s in range(4, 24)], rel=1e-12)
    assert max(after) == pytest.approx(peak_learning_rate(d_model, 100, factor), rel=1e-12)  # the same peak
    buffer = io.BytesIO()
    torch.save({"optimizer": scheduler.optimizer.state_dict(), "scheduler": scheduler.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    optimizer = make_optimizer()
    resumed = NoamLR(optimizer, d_model, 100, factor=factor)  # built from the recipe's values, then both states loaded
    optimizer.load_state_dict(saved["optimizer"])
    resumed.load_state_dict(saved["scheduler"])
    assert (resumed.warmup_steps, resumed.factor) == (10, new_factor)
    assert lrs_of_updates(resumed, 3) == pytest.approx([paper(s, d_model, 10, new_factor) for s in (24, 25, 26)])


def test_a_warm_up_is_only_shortened_and_only_while_it_lasts():
    scheduler = NoamLR(make_optimizer(), 32, 10)
    with pytest.raises(ValueError, match="lengthen"):
        scheduler.set_warmup(20, 1.0)
    with pytest.raises(ValueError, match="warmup_steps"):
        scheduler.set_warmup(0, 1.0)
    lrs_of_updates(scheduler, 10)
    with pytest.raises(ValueError, match="over"):
        scheduler.set_warmup(5, 1.0)


def test_a_planned_cool_down_can_be_dropped():
    """A resumed timed run drops the cool-down its checkpoint's clock planned (callbacks.CooldownPlanner): from the
    next update on, the paper's schedule again."""
    d_model, warmup = 32, 4
    scheduler = NoamLR(make_optimizer(), d_model, warmup, cooldown_start=5, cooldown_end=8)
    lrs_of_updates(scheduler, 8)
    assert scheduler.get_last_lr() == [0.0]
    scheduler.set_cooldown(None, None)
    assert (scheduler.cooldown_start, scheduler.cooldown_end) == (None, None)
    assert lrs_of_updates(scheduler, 2) == pytest.approx([paper(s, d_model, warmup) for s in (9, 10)], rel=1e-12)
    with pytest.raises(ValueError, match="go together|cooldown"):
        scheduler.set_cooldown(12, None)
