"""The one trial set-up (tune/trial/setup.py) that the one-process trainable, a data-parallel rank and a worker of
``xbm-tune train --workers N`` share, without Ray running: Ray's answers are stand-ins."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import ray
import torch

import xbm.runtime.cpus
from tune.results.keys import GPU_KEY, NODE_KEY, RELOCATED_KEY
from tune.trial.setup import restore_and_prepare, setup_trial

CONFIG = {"dataset": "toy", "model": "mlp", "data_root": "/old", "seed": 7, "device": "auto"}


@pytest.fixture
def on_a_node(monkeypatch):
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "node-1"))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the test process keeps its threads
    monkeypatch.setattr(xbm.runtime.cpus, "_limit", xbm.runtime.cpus._limit)  # its CPU limit, put back after the test


def test_moved_paths_device_seed_and_where_come_from_one_place(on_a_node):
    """Bug caught: one of the trial's set-ups (one process, a data-parallel rank, a train worker) drifting from the
    others: the moved data_root not applied or not reported as relocated, ``auto`` taking a GPU Ray did not assign,
    or the seed not set before the trainer is built."""
    setup = setup_trial(CONFIG, {"data_root": "/new", "dataset": "toy"}, 1.0)
    assert setup.cfg.data_root == "/new" and setup.cfg.device == "cpu" and setup.moved == {"data_root": "/new"}
    assert torch.initial_seed() == 7
    assert setup.where() == {NODE_KEY: "node-1", GPU_KEY: None, RELOCATED_KEY: {"data_root": "/new"}}
    assert setup.where(["0", "1"])[GPU_KEY] == "0,1"   # a data-parallel trial names every rank's GPUs
    assert RELOCATED_KEY not in setup_trial(CONFIG, None, 1.0).where()


def test_a_refused_config_raises_before_anything_is_set_up(on_a_node, monkeypatch):
    """Bug caught: a config the trainer refuses getting as far as the device or the seed (a retry would meet it
    again: the callers report one error row)."""
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: pytest.fail("the set-up went on past the refused config"))
    with pytest.raises(ValueError, match="lambda_mu"):
        setup_trial({**CONFIG, "normaliser.kind": "pcxbn", "normaliser.lambda_mu": 1.17}, None, 1.0)


def test_restore_and_prepare_restores_only_a_given_checkpoint():
    """Bug caught: a fresh trial trying to restore, or a resumed one prepared before its state is loaded."""
    calls = []
    trainer = SimpleNamespace(prepare=lambda: calls.append("prepare"))
    restore_and_prepare(trainer, None, lambda t, folder: calls.append("restore"))
    assert calls == ["prepare"]

    class Checkpoint:
        def as_directory(self):
            import contextlib

            return contextlib.nullcontext("/ckpt")

    calls.clear()
    restore_and_prepare(trainer, Checkpoint(), lambda t, folder: calls.append(f"restore {folder}"))
    assert calls == ["restore /ckpt", "prepare"]
