"""Paths in sweeps (issue 11): relative ``data_root`` / ``pretrained_path`` are made absolute where they
were typed (``--set``: the launch directory; a space file: its folder), a missing data set stops the
sweep before Ray starts, and ``resume --set data_root=NEW`` moves a sweep to data elsewhere."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ray
from PIL import Image

from analysis.contract import SweepRecord
from tune import cli
from tune.driver.options import SweepOptions
from tune.driver.plan import prepare, relocated
from tune.driver.sweep import resume_sweep, start
from tune.errors import SweepInputError
from tune.results.record import outcome, sweep_record
from tune.search.spaces import load_space
from xbm.data.inputs import RELOCATABLE_KEYS

SPACE = """description: paths test (a tiny Omniglot tree, flattened 8 px images, mlp)
base: {dataset: omniglot, model: mlp, image_size: 8, embedding_size: 8, epochs: 2, warmup_epochs: 0,
       batch_size: 8, samples_per_class: 4, device: cpu, num_workers: 0}
params:
  lr: {grid: [1.0e-3]}
"""


def make_omniglot(root: Path) -> Path:
    """The official extracted layout ``<Alphabet>/characterNN/<drawing>.png`` in miniature: 4 alphabets x 4
    characters x 4 drawings of 8x8 pixels (8 training classes of 4 samples, 8 test classes)."""
    rng = np.random.default_rng(0)
    for a in range(4):
        for c in range(1, 5):
            folder = root / "images_evaluation" / f"Alphabet{a}" / f"character{c:02d}"
            folder.mkdir(parents=True)
            for d in range(4):
                pixels = (rng.random((8, 8)) < 0.2 + 0.15 * c).astype(np.uint8) * 255
                Image.fromarray(pixels).convert("1").save(folder / f"{a}{c:02d}_{d:02d}.png")
    return root


def mlp_weights(path: Path) -> Path:
    """A state dict of the mlp backbone the SPACE's trials build (3x8x8 inputs)."""
    import torch

    from xbm.models import create_backbone

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(create_backbone("mlp", (1, 8, 8)).state_dict(), path)  # omniglot: one grey channel
    return path


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """tmp/space.yaml, tmp/data/omniglot, and the working directory tmp/launch (not the repository)."""
    (tmp_path / "space.yaml").write_text(SPACE)
    make_omniglot(tmp_path / "data" / "omniglot")
    (tmp_path / "launch").mkdir()
    monkeypatch.chdir(tmp_path / "launch")
    return tmp_path


def sweep_options(tmp_path, **changes) -> SweepOptions:
    # trials run to their epochs (the toy MLP starts below raw pixels: collapse-aware stopping would end them)
    return SweepOptions(storage=str(tmp_path / "sweeps"), dashboard=False, scheduler="fifo", stop_collapsed=False,
                        **changes)


# ---- no Ray -------------------------------------------------------------------------------------
def test_set_paths_are_made_absolute_against_the_launch_directory(layout):
    """Bug: a relative --set data_root reached the trials (which run in their own trial directories) and
    sweep.json as typed, so it pointed at nothing there."""
    plan = prepare(str(layout / "space.yaml"), sweep_options(
        layout, overrides={"data_root": "../data/omniglot"}))
    expected = str(layout / "data" / "omniglot")
    assert plan.space.base["data_root"] == expected
    assert plan.options.overrides["data_root"] == expected
    assert sweep_record(plan).paths == {"data_root": expected}


def test_space_file_paths_are_relative_to_the_file(layout):
    """Bug: a space file's base data_root (and a swept choice of weight files) were read against the
    directory the command ran in, so the same file worked from one directory only."""
    spaces = layout / "spaces"
    spaces.mkdir()
    (spaces / "s.yaml").write_text(SPACE.replace("device: cpu", "device: cpu, data_root: ../data/omniglot")
                                   + "  pretrained_path: {choice: [w.pth, ~/x.pth]}\n")
    space = load_space(str(spaces / "s.yaml"))
    assert space.base["data_root"] == str(layout / "data" / "omniglot")
    assert space.params["pretrained_path"].possible_values() == [str(spaces / "w.pth"),
                                                                 str(Path.home() / "x.pth")]
    # --set still means the launch directory, also over a value from the file
    assert load_space(str(spaces / "s.yaml"), overrides={"data_root": "d"}).base["data_root"] == \
        str(layout / "launch" / "d")


@pytest.mark.parametrize("setting, message, path", [
    ("data_root=../data/nowhere", "Expected this official layout under data_root", "data/nowhere"),
    ("pretrained_path=missing.pth", "pretrained_path must name an existing state-dict file", "launch/missing.pth"),
])
def test_missing_files_exit_2_before_ray_starts_and_write_nothing(layout, capsys, setting, message, path, ray_down):
    """Bug: a missing data set was found by each trial after Ray started (13 s in), every trial failed
    and the sweep folder was left behind; the driver now opens the data set first and exits 2."""
    argv = ["sweep", str(layout / "space.yaml"), "--set", "data_root=../data/omniglot", "--set", setting,
            "--storage", str(layout / "sweeps"), "--name", "x", "--no-dashboard"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and str(layout / path) in err  # the layout, and the absolute path it looked at
    assert not (layout / "sweeps").exists()
    assert not ray.is_initialized()


def test_resume_moves_only_the_data_and_only_an_unswept_key(tmp_path, monkeypatch):
    """Bug: resume --set could change what a checkpointed trial learns (lr, pretrained_path), or clobber a
    swept path; a relative new data_root must be absolute like any --set path."""
    monkeypatch.chdir(tmp_path)
    record = SweepRecord.from_dict({"paths": {"data_root": "/old", "pretrained_path": "/w.pth"},
                                    "space": {"params": ["lr"]}})
    assert relocated(record, {"data_root": "new"}, RELOCATABLE_KEYS, "resume") == {
        "data_root": str(tmp_path / "new"), "pretrained_path": "/w.pth"}
    for key in ("lr", "pretrained_path"):
        with pytest.raises(SweepInputError, match=f"resume --set must name one of.*but got '{key}'"):
            relocated(record, {key: "x"}, RELOCATABLE_KEYS, "resume")
    swept = SweepRecord.from_dict({"paths": {}, "space": {"params": ["data_root"]}})
    with pytest.raises(SweepInputError, match="but got 'data_root'"):
        relocated(swept, {"data_root": "x"}, RELOCATABLE_KEYS, "resume")


# ---- Ray ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sweep_from_another_directory_with_relative_paths_trains(ray_session, layout):
    """Bug (the README's own example): a relative data_root was read inside each trial's directory, every
    trial failed with "download the data set", and trials.parquet recorded the relative path. The same
    for a relative pretrained_path, which must load (an mlp state dict)."""
    mlp_weights(layout / "weights" / "mlp.pth")
    plan = prepare(str(layout / "space.yaml"), sweep_options(
        layout, name="rel", overrides={"data_root": "../data/omniglot", "pretrained_path": "../weights/mlp.pth"}))
    start(plan).tuner.fit()
    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials
    assert list(trials.status) == ["completed"], trials.error.tolist()
    assert trials["config.data_root"].tolist() == [str(layout / "data" / "omniglot")]
    assert trials["config.pretrained_path"].tolist() == [str(layout / "weights" / "mlp.pth")]
    epochs = pd.read_parquet(Path(plan.results_uri) / "epochs")
    assert sorted(epochs.epoch) == [1, 2] and (epochs["config.data_root"] == str(layout / "data" / "omniglot")).all()


@pytest.mark.slow
def test_resume_with_the_data_moved_finishes_the_sweep(ray_session, layout):
    """Bug: after the data moved, a resumed sweep read the recorded old path and failed again; and a trial
    missing its data said only the path, not on which node (the driver's check cannot see workers)."""
    plan = prepare(str(layout / "space.yaml"), sweep_options(
        layout, name="moved", max_failures=0, overrides={"data_root": "../data/omniglot"}))
    (layout / "data").rename(layout / "elsewhere")  # after the driver's check: only the trial sees it
    start(plan).tuner.fit()
    failed = outcome(plan.experiment_uri, "recall_at_1", "max").trials
    assert list(failed.status) == ["failed"]
    assert f"missing on node {socket.gethostname()}" in failed.error[0]
    assert str(layout / "data" / "omniglot") in failed.error[0]

    result = resume_sweep(plan.experiment_uri, dashboard=False, paths={"data_root": "../elsewhere/omniglot"})
    moved = str(layout / "elsewhere" / "omniglot")
    trials = result.trials
    assert list(trials.status) == ["completed"] and result.exit_code() == 0
    assert trials["config.data_root"].tolist() == [moved]  # where it read its data, not Tune's old config
    epochs = pd.read_parquet(Path(plan.results_uri) / "epochs")
    assert sorted(epochs.epoch) == [1, 2] and (epochs["config.data_root"] == moved).all()
    record = json.loads((Path(plan.results_uri) / "sweep.json").read_text())
    assert record["paths"] == {"data_root": moved}  # a later resume or confirm reads it there too
