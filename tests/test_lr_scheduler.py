"""Learning-rate schedules against the sequences MXNet 1.x produces."""
import math

import pytest

from ember import lr_scheduler


def test_factor_scheduler_decays_after_each_step_and_stops_at_the_floor():
    schedule = lr_scheduler.FactorScheduler(step=3, factor=0.5, stop_factor_lr=0.2, base_lr=1.0)
    rates = [schedule(n) for n in range(1, 14)]
    # The rate changes at update step + 1 (MXNet's `num_update > count + step`).
    assert rates == [1.0] * 3 + [0.5] * 3 + [0.25] * 3 + [0.2] * 4
    assert schedule.count == 12


def test_factor_scheduler_catches_up_when_resumed_late():
    schedule = lr_scheduler.FactorScheduler(step=10, factor=0.1, base_lr=1.0)
    assert schedule(35) == pytest.approx(1e-3)
    assert schedule.count == 30
    # Stateful: an earlier update number does not bring the rate back.
    assert schedule(5) == pytest.approx(1e-3)


def test_factor_scheduler_warmup_then_decay():
    schedule = lr_scheduler.FactorScheduler(step=5, factor=0.5, base_lr=0.4, warmup_steps=4,
                                            warmup_begin_lr=0.0)
    assert [schedule(n) for n in range(4)] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert [schedule(n) for n in range(4, 8)] == [0.4, 0.4, 0.2, 0.2]


def test_multi_factor_scheduler():
    schedule = lr_scheduler.MultiFactorScheduler(step=[3, 5, 9], factor=0.1, base_lr=1.0)
    rates = [schedule(n) for n in range(1, 12)]
    expected = [1.0] * 3 + [0.1] * 2 + [0.01] * 4 + [0.001] * 2
    assert rates == pytest.approx(expected)
    assert schedule.cur_step_ind == 3 and schedule.count == 9


def test_multi_factor_scheduler_constant_warmup():
    schedule = lr_scheduler.MultiFactorScheduler(step=[15, 25], factor=0.5, base_lr=0.1,
                                                 warmup_steps=10, warmup_begin_lr=0.05,
                                                 warmup_mode='constant')
    assert {schedule(n) for n in range(10)} == {0.05}
    assert schedule(15) == 0.1 and schedule(16) == 0.05 and schedule(26) == 0.025


def test_poly_scheduler_matches_mxnet_with_warmup():
    base_lr, steps, warmup = 3.0, 1000, 100
    schedule = lr_scheduler.PolyScheduler(steps, base_lr=base_lr, pwr=2, final_lr=0,
                                          warmup_steps=warmup, warmup_begin_lr=0)
    assert schedule(0) == 0
    assert schedule(50) == pytest.approx(base_lr / 2)
    assert schedule(100) == pytest.approx(base_lr)
    for n in range(100, steps, 37):
        assert schedule(n) == pytest.approx(base_lr * (1 - (n - warmup) / (steps - warmup)) ** 2)
    assert schedule(steps) == pytest.approx(0.0)
    assert schedule(steps + 5) == pytest.approx(0.0)


def test_cosine_scheduler_matches_mxnet():
    base_lr, final_lr, steps = 3.0, 0.1, 1000
    schedule = lr_scheduler.CosineScheduler(steps, base_lr=base_lr, final_lr=final_lr)
    assert schedule(0) == pytest.approx(base_lr)
    assert schedule(500) == pytest.approx((base_lr + final_lr) / 2)
    assert schedule(250) == pytest.approx(
        final_lr + (base_lr - final_lr) * (1 + math.cos(math.pi / 4)) / 2)
    assert schedule(steps) == pytest.approx(final_lr)
    assert schedule(steps + 100) == pytest.approx(final_lr)


@pytest.mark.parametrize('make, message', [
    (lambda: lr_scheduler.FactorScheduler(step=0), 'step=0'),
    (lambda: lr_scheduler.FactorScheduler(step=2, factor=1.5), 'factor=1.5'),
    (lambda: lr_scheduler.MultiFactorScheduler(step=[5, 3]), 'strictly increasing'),
    (lambda: lr_scheduler.MultiFactorScheduler(step=[0, 3]), 'counts >= 1'),
    (lambda: lr_scheduler.PolyScheduler(0), 'max_update=0'),
    (lambda: lr_scheduler.CosineScheduler(10, warmup_mode='cubic'), "warmup_mode='cubic'"),
    (lambda: lr_scheduler.CosineScheduler(10, base_lr=0.1, warmup_begin_lr=0.5),
     'warmup_begin_lr=0.5'),
    (lambda: lr_scheduler.LRScheduler(warmup_steps=-1), 'warmup_steps=-1'),
])
def test_bad_arguments_are_rejected_with_the_value(make, message):
    with pytest.raises(ValueError, match=message.replace('[', r'\[')):
        make()


def test_non_integer_counts_are_rejected():
    with pytest.raises(TypeError, match='warmup_steps=2.5'):
        lr_scheduler.LRScheduler(warmup_steps=2.5)
    with pytest.raises(TypeError, match='non-empty list'):
        lr_scheduler.MultiFactorScheduler(step=5)


def test_base_class_must_be_specialised():
    with pytest.raises(NotImplementedError, match='LRScheduler'):
        lr_scheduler.LRScheduler()(1)
