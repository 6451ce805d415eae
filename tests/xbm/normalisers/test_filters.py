"""AXBN's Kalman filter and the EMA: limits that equal XBN, state_dict round trips, the delay."""
from __future__ import annotations

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
