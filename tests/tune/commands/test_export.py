"""``xbm-tune export`` (tune/commands/export.py): which weights, which trial, and exit 2 naming bad input."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.xbm.embedder_fixture import omniglot_mlp_trainer
from tune.cli import main
from xbm.evaluate.embedder import CARD, WEIGHTS, load_embedder


def weights_payload(trainer, epoch: int, value: float) -> dict:
    return {"model": {k: v.clone() for k, v in trainer.model.state_dict().items()}, "config": trainer.cfg.to_dict(),
            "preprocessing": trainer.preprocessing_dict(), "epoch": epoch, "value": value, "metric": "recall_at_1"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep folder as the sink leaves it: trials.parquet, each trial's best_weights.pt."""
    root = tmp_path_factory.mktemp("sweep")
    trainer = omniglot_mlp_trainer(root / "data")
    rows, payloads = [], {}
    for i, (status, best) in enumerate([("completed", 0.5), ("stopped_early", 0.7), ("running", 0.9),
                                        ("failed", None)]):
        trial = f"t_{i:05d}"
        with torch.no_grad():
            for p in trainer.model.parameters():
                p.add_(0.01)
        payload = weights_payload(trainer, epoch=3 + i, value=best if best is not None else float("nan"))
        path = root / "sweep" / trial / "best_weights.pt"
        path.parent.mkdir(parents=True)
        torch.save(payload, path)
        payloads[trial] = payload
        rows.append({"experiment": "fake", "stage": "sweep", "trial_id": trial, "status": status,
                     "best_recall_at_1": best, "best_weights": str(path) if best is not None else None,
                     "git_sha": "abc123"})
    (root / "sweep" / "results").mkdir()
    pd.DataFrame(rows).to_parquet(root / "sweep" / "results" / "trials.parquet")
    (root / "sweep" / "results" / "sweep.json").write_text(json.dumps({"version": 1, "experiment": "fake",
                                                                       "metric": "recall_at_1", "mode": "max"}))
    return root / "sweep", payloads, trainer


def exported(folder):
    return yaml.safe_load((folder / CARD).read_text()), load_file(str(folder / WEIGHTS))


def test_best_exports_the_best_finished_trial_with_its_provenance(sweep, tmp_path):
    """Bug caught: --best picks a running trial (0.9 not final) or the last row, or exports other weights."""
    folder, payloads, _ = sweep
    assert main(["export", str(folder), "--best", "--out", str(tmp_path / "e")]) == 0
    card, weights = exported(tmp_path / "e")
    assert card["provenance"]["trial"] == "t_00001" and card["provenance"]["epoch"] == 4
    assert card["provenance"]["value"] == 0.7 and card["provenance"]["git_sha"] == "abc123"
    assert card["provenance"]["stage"] == "sweep" and card["provenance"]["metric"] == "recall_at_1"
    assert all(torch.equal(weights[k], v) for k, v in payloads["t_00001"]["model"].items())
    assert card["preprocessing"]["invert"] is True and card["preprocessing"]["mode"] == "L"


def test_trial_exports_that_trial_and_the_export_embeds(sweep, tmp_path):
    """Bug caught: --trial ignored; an export that cannot be loaded back."""
    folder, payloads, trainer = sweep
    assert main(["export", str(folder), "--trial", "t_00000", "--out", str(tmp_path / "e")]) == 0
    card, weights = exported(tmp_path / "e")
    assert card["provenance"]["trial"] == "t_00000"
    assert all(torch.equal(weights[k], v) for k, v in payloads["t_00000"]["model"].items())
    query = trainer.splits.test.query
    files = [query.source.file_of(int(j)) for j in query.indices]
    trainer.model.load_state_dict(payloads["t_00000"]["model"])
    expected, _ = trainer.embed(trainer.model, query)
    assert float((load_embedder(tmp_path / "e", "cpu").embed(files) - expected).abs().max()) <= 1e-6


@pytest.mark.parametrize("argv, named", [
    (["--trial", "t_99999"], "t_99999"),                        # a trial id not in the sweep
    (["--trial", "t_00003"], "no best weights"),               # a failed trial that kept none
    (["--best", "--stage", "confirm"], "--best needs a finished"),  # no completed trial in that stage
])
def test_bad_input_exits_2_naming_it(sweep, tmp_path, capsys, argv, named):
    """Bug caught: an unknown trial or an empty stage ends in a KeyError/IndexError traceback (exit 1)."""
    folder, _, _ = sweep
    assert main(["export", str(folder), *argv, "--out", str(tmp_path / "e")]) == 2
    assert named in capsys.readouterr().err and not (tmp_path / "e").exists()


def test_not_a_sweep_exits_2(tmp_path, capsys):
    """Bug caught: a wrong path reported as a failure (exit 1) instead of bad input."""
    assert main(["export", str(tmp_path), "--best", "--out", str(tmp_path / "e")]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_a_missing_sweep_is_named_by_the_export_command(tmp_path, capsys):
    """Bug caught: ``export /missing --stage refit`` said "status needs a sweep folder", naming another
    command (the message came from the status command's loader)."""
    missing = tmp_path / "missing"
    assert main(["export", str(missing), "--stage", "refit", "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "export needs a sweep folder" in err and str(missing) in err and "status" not in err


def test_stage_with_run_is_refused(tmp_path, capsys):
    """Bug caught: ``--stage`` silently ignored with ``--run`` (a run has no stages), exporting the run's
    weights as if the stage had been honoured."""
    assert main(["export", "--run", str(tmp_path / "run"), "--stage", "refit", "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "--stage" in err and "--run" in err and not (tmp_path / "e").exists()


def test_run_exports_the_runs_best_epoch(tmp_path, capsys):
    """Bug caught: ``export --run`` takes the last epoch's checkpoint when train kept a better one, or
    train never writes best_weights.pt."""
    from tests.xbm.data.conftest import make_drawings

    make_drawings(tmp_path / "data")
    run = tmp_path / "run"
    assert main(["train", "--set", "dataset=omniglot", "--set", f"data_root={tmp_path / 'data'}", "--set", "model=mlp",
                 "--set", "image_size=16", "--set", "embedding_size=8", "--set", "batch_size=8",
                 "--set", "samples_per_class=4", "--set", "epochs=4", "--set", "warmup_epochs=0",
                 "--set", "num_workers=0", "--set", "lr=0.003", "--output", str(run), "--no-progress"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    recalls = [r["recall_at_1"] for r in rows]
    best_epoch = recalls.index(max(recalls)) + 1  # the first epoch at the best
    assert best_epoch < len(rows), f"the fixture must peak before its last epoch: {recalls}"
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "e")]) == 0
    card, weights = exported(tmp_path / "e")
    assert card["provenance"]["epoch"] == best_epoch and card["provenance"]["value"] == max(recalls)
    assert card["provenance"]["weights"] == "best_weights.pt"
    saved = torch.load(run / "best_weights.pt", weights_only=True)["model"]
    assert all(torch.equal(weights[k], v) for k, v in saved.items())
    (run / "best_weights.pt").unlink()
    (run / "checkpoint.pt").unlink()
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "f")]) == 2
    assert "no weights" in capsys.readouterr().err


def test_refit_stage_exports_the_refit_run_by_its_kept_epoch(sweep, tmp_path):
    """Bug: export --stage refit refused (not a stage), a sweep row exported for it, or its runs ranked by
    best_<metric>: a refit keeps its last epoch's weights, so the epoch that ranks them must be that one."""
    _, _, trainer = sweep
    root, rows = tmp_path / "s", []
    runs = [("sw", "sweep", 0.99, 0.99), ("r0", "refit", 0.9, 0.4), ("r1", "refit", 0.6, 0.6)]
    for trial, stage, best, final in runs:
        path = root / trial / "best_weights.pt"
        path.parent.mkdir(parents=True)
        torch.save(weights_payload(trainer, epoch=5, value=final), path)
        rows.append({"experiment": "fake", "stage": stage, "trial_id": trial, "status": "completed",
                     "best_recall_at_1": best, "final_recall_at_1": final, "best_weights": str(path)})
    (root / "results").mkdir()
    pd.DataFrame(rows).to_parquet(root / "results" / "trials.parquet")
    (root / "results" / "sweep.json").write_text(json.dumps({"version": 1, "experiment": "fake",
                                                             "metric": "recall_at_1", "mode": "max"}))
    assert main(["export", str(root), "--stage", "refit", "--best", "--out", str(tmp_path / "e")]) == 0
    card, _ = exported(tmp_path / "e")
    assert card["provenance"]["trial"] == "r1" and card["provenance"]["stage"] == "refit"
