"""AXBN's Kalman filter and the EMA: limits that equal XBN, state_dict round trips, the delay."""
from __future__ import annotations

import math

import pytest
import torch

from xbm.normalisers import NormaliserConfig, build_normaliser


def _run(norm, case, steps, epoch=0):
    outs = []
    for step in steps:
        memory, memory_labels = case.memory(step)
        batch, batch_labels = case.batch(step)
        outs.append(norm(memory, memory_labels, batch, batch_labels, epoch=epoch))
    return outs


@pytest.mark.parametrize("centre_only", [False, True])
@pytest.mark.parametrize("options", [dict(kind="axbn", kalman_r=0.0, kalman_interval=3),
                                     dict(kind="ema", ema_momentum=0.0)])
def test_r_zero_and_m_zero_equal_xbn(options, centre_only, case):
    xbn = build_normaliser(NormaliserConfig(kind="xbn", centre_only=centre_only))
    other = build_normaliser(NormaliserConfig(centre_only=centre_only, **options))
    for want, got in zip(_run(xbn, case, range(4)), _run(other, case, range(4))):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_kalman_gain_follows_algorithm_1_and_stays_fixed_between_updates(case):
    cfg = NormaliserConfig(kind="axbn", kalman_r=3.0, kalman_q=0.5, kalman_p0=2.0, kalman_interval=3)
    norm = build_normaliser(cfg)
    p, batch_size = 2.0, len(case.batch(0)[1])
    for call in range(7):
        _run(norm, case, [call])
        if call % 3 == 0:
            p_pred = p + 0.5
            gain = p_pred / (p_pred + 3.0 / batch_size)
            p = (1 - gain) * p_pred
        assert float(norm.gain) == pytest.approx(gain, rel=1e-12)
        assert float(norm.p) == pytest.approx(p, rel=1e-12)
        assert int(norm.calls) == call + 1


@pytest.mark.parametrize("options", [dict(kind="axbn", kalman_r=2.0, kalman_interval=2),
                                     dict(kind="ema", ema_momentum=0.7)])
def test_state_dict_round_trip_continues_identically(options, case):
    cfg = NormaliserConfig(**options)
    first = build_normaliser(cfg)
    _run(first, case, range(3))
    state = first.state_dict()
    assert {"mu_hat", "sigma_hat", "calls"} <= set(state)
    if cfg.kind == "axbn":
        assert {"p", "gain"} <= set(state)
    second = build_normaliser(cfg)   # fresh: empty running moments, resized on load
    second.load_state_dict(state)
    for a, b in zip(_run(first, case, range(3, 6)), _run(second, case, range(3, 6))):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(first.state_dict(), second.state_dict(), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["xbn", "axbn", "ema", "pcxbn", "scxbn"])
def test_delay_returns_memory_unchanged_and_freezes_state(kind, case):
    cfg = NormaliserConfig(kind=kind, delay_epochs=2, unit_norm=True)
    norm = build_normaliser(cfg, superclass_of=case.superclass_of)
    memory, memory_labels = case.memory(0)
    batch, batch_labels = case.batch(0)
    for epoch in (0, 1):
        assert not norm.active(epoch)
        out = norm(memory, memory_labels, batch, batch_labels, epoch=epoch)
        torch.testing.assert_close(out, memory, rtol=0, atol=0)
        assert out.data_ptr() != memory.data_ptr()
    if kind in ("axbn", "ema"):
        assert int(norm.calls) == 0
    assert norm.active(2)
    undelayed = build_normaliser(NormaliserConfig(kind=kind, unit_norm=True), superclass_of=case.superclass_of)
    torch.testing.assert_close(norm(memory, memory_labels, batch, batch_labels, epoch=2),
                               undelayed(memory, memory_labels, batch, batch_labels, epoch=0))


@pytest.mark.parametrize("kind", ["axbn", "ema"])
def test_a_fresh_filter_holds_no_estimate_and_an_int64_call_counter(kind):
    """Bug caught (mutation testing): running moments that start as a 1-element estimate of 0 instead of
    empty (a checkpoint taken during the delay then claims an estimate), or the call counter stored as a
    float (``calls += 1`` stalls at 2**24 and the Kalman interval with it)."""
    state = build_normaliser(NormaliserConfig(kind=kind)).state_dict()
    assert state["mu_hat"].shape == state["sigma_hat"].shape == (0,)
    assert state["calls"].dtype == torch.long and int(state["calls"]) == 0


def _gains(cfg, case, calls):
    norm = build_normaliser(cfg)
    out = []
    for call in range(calls):
        _run(norm, case, [call])
        out.append(float(norm.gain))
    return out


@pytest.mark.parametrize("ratio,q,interval", [(1.5625e-4, 1.0, 1), (0.3, 2.0, 2), (4.0, 0.25, 3), (0.0, 1.0, 1)])
def test_the_ratio_reaches_the_filter_as_r_over_q_batch(ratio, q, interval, case):
    """Bug caught: ``kalman_ratio`` ignored by the filter (it keeps using kalman_r / |B|), or turned into
    r / |B| the wrong way (ratio / |B|, ratio / q, ratio |B|): the gains must be Algorithm 1's with
    r = ratio q |B| (AXBN paper §3.2.1), computed here by hand, and equal those of the old keys given
    that r."""
    batch_size = len(case.batch(0)[1])
    cfg = NormaliserConfig(kind="axbn", kalman_ratio=ratio, kalman_q=q, kalman_p0=1.5, kalman_interval=interval)
    r = ratio * q * batch_size
    p, want = 1.5, []
    for call in range(7):
        if call % interval == 0:
            p_pred = p + q
            gain = p_pred / (p_pred + r / batch_size)
            p = (1 - gain) * p_pred
        want.append(gain)
    assert _gains(cfg, case, 7) == pytest.approx(want, rel=1e-12, abs=0)
    old = NormaliserConfig(kind="axbn", kalman_r=r, kalman_q=q, kalman_p0=1.5, kalman_interval=interval)
    assert _gains(old, case, 7) == pytest.approx(want, rel=1e-12, abs=0)


def test_the_same_ratio_with_another_q_gives_the_same_gains(case):
    """Bug caught: the ratio applied without q (r / |B| = ratio instead of ratio q), so that the gains move
    with q at a fixed ratio, against §3.2.1 (the system depends on r / q alone): with p_0 / q equal the gains
    are identical at every call, and from any p_0 they reach the same steady gain
    K* = s / (s + rho), s = (1 + sqrt(1 + 4 rho)) / 2."""
    rho = 0.7
    small = _gains(NormaliserConfig(kind="axbn", kalman_ratio=rho, kalman_q=0.5, kalman_p0=0.5), case, 6)
    large = _gains(NormaliserConfig(kind="axbn", kalman_ratio=rho, kalman_q=8.0, kalman_p0=8.0), case, 6)
    assert small == pytest.approx(large, rel=1e-12, abs=0) and len(set(small)) > 1
    s = (1 + math.sqrt(1 + 4 * rho)) / 2
    for q in (0.5, 8.0):   # p_0 = 1 for both: the first gains differ, the steady gain does not
        steady = _gains(NormaliserConfig(kind="axbn", kalman_ratio=rho, kalman_q=q, kalman_p0=1.0), case, 40)[-1]
        assert steady == pytest.approx(s / (s + rho), rel=1e-9)
