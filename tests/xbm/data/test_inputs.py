"""xbm/data/inputs.py: the one registry of path-valued config keys, and making them absolute."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from xbm import train_cli
from xbm.config import TrainConfig
from xbm.data.inputs import PATH_KEYS, RELOCATABLE_KEYS, absolute_path, absolute_paths

PATH_LIKE = ("_root", "_path", "_dir", "_file", "cache")


def test_every_path_valued_key_is_registered():
    """Bug: a new path-valued TrainConfig key (e.g. an image cache folder) left out of PATH_KEYS stays
    relative and points elsewhere inside a Ray trial's directory; a registered name that is not a string
    field (a typo) would silently do nothing."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for key in PATH_KEYS:
        assert key in fields and isinstance(fields[key].default, str), key
    named_like_paths = {k for k in TrainConfig.keys() if k.endswith(PATH_LIKE)}
    assert named_like_paths <= set(PATH_KEYS), \
        f"register in xbm.data.inputs.PATH_KEYS: {named_like_paths - set(PATH_KEYS)}"


def test_relocatable_keys_are_paths_a_checkpoint_may_resume_with():
    """Bug: resume --set moving a key the trainer refuses in a checkpoint (RESUMABLE_CHANGES) would make
    every resumed trial fail in load_state_dict."""
    from xbm.trainer import RESUMABLE_CHANGES

    assert set(RELOCATABLE_KEYS) <= set(PATH_KEYS) & set(RESUMABLE_CHANGES)


def test_absolute_paths_joins_relative_values_only(tmp_path):
    """Bug: relative paths kept as typed; or non-path values (lr, dataset), unset "" or absolute paths changed."""
    values = {"data_root": "../data/x", "pretrained_path": "", "dataset": "omniglot", "lr": 0.1,
              "memory": {"ratio": 0.5}}
    out = absolute_paths(values, tmp_path / "here")
    assert out == {**values, "data_root": str(tmp_path / "data" / "x")}
    assert absolute_paths({"data_root": "/abs/./d"}, tmp_path) == {"data_root": "/abs/d"}
    assert absolute_path("~/d", tmp_path) == str(Path.home() / "d")


def test_train_config_file_paths_are_relative_to_the_file(tmp_path, monkeypatch):
    """Bug: paths in `xbm-tune train --config FILE` read against the working directory, so a config file
    worked from one directory only; --set paths stay relative to the working directory."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run.yaml").write_text("data_root: ../data/omniglot\nmemory: {ratio: 0.2}\n")
    monkeypatch.chdir(tmp_path)  # not the file's folder: the two readings differ
    args = argparse.Namespace(config="runs/run.yaml", overrides=["pretrained_path=w.pth"])
    cfg = train_cli.resolve_config(args)
    assert cfg.data_root == str(tmp_path / "data" / "omniglot") and cfg.memory.ratio == 0.2
    assert cfg.pretrained_path == str(tmp_path / "w.pth")
