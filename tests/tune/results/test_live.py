"""tune/results/live.py: the lines a trial prints to its actor's stdout, and the driver's best-so-far bookkeeping.
(The lines as a real sweep prints them, actor reuse included: tests/tune/test_watch.py.)"""
from __future__ import annotations

import logging
from types import SimpleNamespace

from tune.results import live
def test_epoch_line_names_trial_epoch_loss_metric_and_the_sweep_best():
    """Bug caught: the line drops the loss or the metric, or shows the published best when this epoch
    beats it (the driver has not seen this epoch yet), or formats with the wrong precision."""
    metrics = {"epoch": 3, "loss": 2.30118, "recall_at_1": 0.54213, "lr": 1e-3}
    best = {"value": 0.60119, "trial_id": "beaf5211", "epoch": 2}
    assert live.epoch_line("53d6a875", metrics, 6, "recall_at_1", "max", best) == (
        "[xbm] trial 53d6a875 epoch 3/6 loss=2.301 recall_at_1=0.5421 | "
        "sweep best recall_at_1=0.6012 (trial beaf5211, epoch 2)")
    better = {**metrics, "recall_at_1": 0.7}
    assert live.epoch_line("53d6a875", better, 6, "recall_at_1", "max", best).endswith(
        "| sweep best recall_at_1=0.7 (trial 53d6a875, epoch 3)")
    # minimising: a lower value is better; no published best yet and a NaN metric
    assert live.epoch_line("a", {"epoch": 1, "loss": 1.0}, 2, "loss", "min", {"value": 0.5, "trial_id": "b",
                                                                              "epoch": None}).endswith(
        "loss=1 | sweep best loss=0.5 (trial b)")
    assert live.epoch_line("a", {"epoch": 1, "loss": float("nan")}, 2, "loss", "min", None).endswith(
        "loss=nan | sweep best loss: none yet")


def test_header_names_the_trial_its_config_and_the_count_on_this_actor(caplog, monkeypatch):
    """Bug caught: a reused actor's second trial is not announced, or the count restarts per trial. (On the
    actor's stdout: tests/tune/trial/test_logs.py and, in a real sweep, test_watch.py.)"""
    monkeypatch.setattr(live, "_trials_on_this_actor", 0)
    caplog.set_level(logging.INFO, logger="tune.results.live")
    live.log_header("t1", "t1_kind=xbn", {"seed": 0, "normaliser.kind": "xbn"})
    live.log_header("t2", "t2_kind=none", {"normaliser.kind": "none"})
    first, second = [r.getMessage() for r in caplog.records if r.name == "tune.results.live"]
    assert first == '[xbm] trial t1 starts (trial 1 on this actor): t1_kind=xbn config {"normaliser.kind": "xbn", "seed": 0}'
    assert second.startswith("[xbm] trial t2 starts (trial 2 on this actor): t2_kind=none config")


def test_actor_name_marker_is_rays_log_prefix_protocol(capsys):
    """Bug caught: the marker is not Ray's (the log monitor would print it instead of renaming the prefix)."""
    live.announce_actor_name("XbmTrial(t2_kind=none)")
    out, err = capsys.readouterr()
    assert out == err == ":actor_name:XbmTrial(t2_kind=none)\n"


def test_sweep_best_keeps_the_best_and_seeds_from_restored_trials(monkeypatch):
    """Bug caught: a worse later value replaces the best, min mode is read as max, a NaN is published,
    or a resumed sweep forgets the values its trials reached before the restart."""
    published = []
    monkeypatch.setattr(live, "_kv_put", lambda name, best: published.append((name, dict(best))))
    callback = live.SweepBest("sw", "loss", "min")
    old = SimpleNamespace(trial_id="old", metric_analysis={"loss": {"min": 0.9, "max": 3.0}})
    new = SimpleNamespace(trial_id="new", metric_analysis={})
    callback.on_trial_start(0, [old, new], new)
    for value in (1.5, float("nan"), 0.7, 0.8):
        callback.on_trial_result(0, [old, new], new, {"loss": value, "epoch": 4})
    assert [b["value"] for _, b in published] == [0.9, 0.7]
    assert published[-1] == ("sw", {"value": 0.7, "trial_id": "new", "epoch": 4})
