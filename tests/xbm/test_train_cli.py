"""``xbm-tune train`` / ``python -m xbm.train_cli``: files written, exit codes, YAML under --set."""
import io
import json
import sys

import pytest
import torch
import yaml

from xbm import train_cli
from xbm.config import TrainConfig

TOY = ["--set", "dataset=toy", "--set", "model=mlp", "--set", "embedding_size=16", "--set", "warmup_epochs=0",
       "--set", "lr=1e-3", "--no-progress"]


def test_writes_config_metrics_and_checkpoint(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"epochs": 5, "memory.ratio": 0.25, "normaliser": {"kind": "xbn"}}))
    out = tmp_path / "out"
    assert train_cli.main([*TOY, "--config", str(config), "--set", "epochs=2", "--output", str(out)]) == 0
    resolved = TrainConfig.from_dict(yaml.safe_load((out / "config.yaml").read_text()))
    assert (resolved.epochs, resolved.memory.ratio, resolved.normaliser.kind) == (2, 0.25, "xbn")  # --set wins
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2] and rows[0]["drift_mean"] is None  # NaN written as null
    csv_lines = (out / "metrics.csv").read_text().splitlines()
    assert csv_lines[0].split(",")[:3] == ["epoch", "loss", "lr"] and len(csv_lines) == 3
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 2
    printed = capsys.readouterr().out
    assert "epoch 1/2" in printed and "recall_at_1" in printed
    # A folder holding a run is never overwritten.
    assert train_cli.main([*TOY, "--output", str(out)]) == 2


@pytest.mark.parametrize("args, message", [
    (["--set", "memory.ration=0.3"], "unknown config key 'memory.ration'"),
    (["--set", "epochs"], "--set must satisfy the form key=value"),
    (["--set", "lr=fast"], "lr must be of type float"),
    (["--config", "/nonexistent/run.yaml"], "--config must name a readable YAML file"),
    (["--set", "dataset=sop", "--set", "data_root=/nonexistent"], "data set 'sop': missing"),
    (["--set", "augment=bogus"],
     "augment must satisfy one of ['auto', 'none', 'shift', 'metric', 'randaugment', 'papers'], but got 'bogus'"),
    (["--set", "normalize=bogus"], "normalize must satisfy one of ['auto', 'imagenet', 'dataset', 'none'], but got 'bogus'"),
    (["--set", "num_workers=many"], "num_workers must satisfy 'auto' (the trial's CPUs minus one) or an integer >= 0"),
    (["--set", "objective=moco", "--set", "moco.momentum=1.0"], "moco.momentum must satisfy 0 <= momentum < 1"),
    (["--set", "objective=neighbours", "--set", "batch_size=8", "--set", "neighbours.k=8"],
     "neighbours.k must satisfy k < batch_size=8"),
    (["--set", "objective=neighbours", "--set", "neighbours.threshold=1.5"],
     "neighbours.threshold must satisfy -1 <= threshold <= 1"),
    (["--set", "objective=instance", "--set", "normaliser.kind=pcxbn"],
     "normaliser.kind must satisfy not pcxbn or scxbn under objective=instance"),
    (["--set", "objective=supervisd"], "objective must satisfy one of ['supervised', 'instance', 'moco', 'neighbours']"),
    (["--set", "on_bad_image=bogus"], "on_bad_image must satisfy one of ['stop', 'skip'], but got 'bogus'"),
    (["--set", "loss.kind=bogus"], "loss.kind must satisfy one of ['supcon', 'contrastive', 'triplet', "
                                   "'multi_similarity', 'ntxent'], but got 'bogus'"),
    (["--set", "loss.kind=contrastive", "--set", "loss.distance=lp", "--set", "loss.neg_margin=0.1",
      "--set", "loss.pos_margin=0.2"], "loss.neg_margin must satisfy neg_margin > pos_margin=0.2 in distance form"),
    (["--set", "loss.kind=ntxent", "--set", "loss.temperature=0"], "loss.temperature must satisfy > 0"),
    (["--set", "loss.reduction=per_anchor"], "loss.reduction must satisfy nonzero_pairs (the default) with "
                                             "loss.kind=supcon: per_anchor is the XBM paper's contrastive loss"),
    (["--set", "eval_ks="], "eval_ks must satisfy 'auto' (the data set's K set) or a non-empty comma-separated list"),
    (["--set", "eval_ks=0,1"], "eval_ks must satisfy 'auto' (the data set's K set) or a non-empty comma-separated list"
                               " of distinct integers >= 1, e.g. 1,2,4,8, but got '0,1'"),
    (["--set", "schedule=multistep", "--set", "milestones=20,10"],
     "milestones must satisfy a comma-separated, strictly increasing list of main epochs >= 1"),
])
def test_bad_input_exits_2_with_the_message_and_no_traceback(tmp_path, capsys, args, message):
    assert train_cli.main([*TOY, *args, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_non_finite_loss_exits_1_and_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    from xbm.training import epoch as epoch_module

    real = epoch_module.run_epoch

    def nan_in_epoch_2(step, batches, runtime, epoch, epoch_index):
        if epoch == 2:
            step.model.head.bias.data.fill_(float("nan"))
        return real(step, batches, runtime, epoch, epoch_index)

    monkeypatch.setattr("xbm.trainer.run.run_epoch", nan_in_epoch_2)
    out = tmp_path / "out"
    assert train_cli.main([*TOY, "--set", "epochs=3", "--output", str(out)]) == 1
    assert "non-finite loss" in capsys.readouterr().err
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and all(torch.isfinite(v).all() for v in state["model"].values())


def test_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit):
        train_cli.main(["--help"])
    text = capsys.readouterr().out
    for flag in ("--set", "--config", "--output", "examples:"):
        assert flag in text


def test_a_collapsed_epoch_prints_one_warning_line(tmp_path, capsys):
    """Bug caught: a run whose loss saw no positive pair finishing quietly (issue 8)."""
    assert train_cli.main([*TOY, "--set", "epochs=2", "--set", "miner.pos_margin=2.5", "--set", "memory.enabled=false",
                           "--output", str(tmp_path / "out")]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and "epoch 1 collapsed: the loss saw no positive pair" in warnings[0]


@pytest.mark.parametrize("args, message", [
    (["--set", "dataset=digits", "--set", "image_size=8", "--set", "batch_size=20", "--set", "normaliser.kind=scxbn"],
     "normaliser.kind=scxbn needs a data set with super-classes, but dataset 'digits' has none"),
    (["--set", "samples_per_class=2", "--set", "batch_size=402"],  # toy trains on 200 classes: 2 x 200 < 402
     "batch_size must be <= samples_per_class x training classes = 2 x 200, but got batch_size=402"),
])
def test_a_run_the_data_set_cannot_serve_exits_2_before_writing(tmp_path, capsys, args, message):
    """Bug caught: scxbn without super-classes or a batch larger than the classes allow crashing later
    (exit 1 with a traceback, or a folder written) instead of being refused as bad input."""
    assert train_cli.main([*TOY, *args, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unfetchable_pretrained_weights_exit_1_with_the_offline_advice(tmp_path, capsys, monkeypatch):
    """Bug caught: a hub failure surfacing as a traceback, or as bad input (2) although the input was valid."""
    import timm

    def offline(name, pretrained=False, **kwargs):
        if pretrained:
            raise OSError("could not reach the hub")
        raise AssertionError("only the pretrained download is expected here")

    monkeypatch.setattr(timm, "create_model", offline)
    args = ["--set", "dataset=digits", "--set", "model=resnet18", "--set", "pretrained=true", "--set", "image_size=8",
            "--set", "batch_size=20"]
    assert train_cli.main([*TOY, *args, "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "pretrained=True could not fetch timm's weights for model 'resnet18'" in err
    assert "pretrained_path=FILE" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_metrics_first_seen_at_a_later_epoch_keep_their_csv_column(tmp_path):
    """Bug caught: metrics.csv's columns fixed by the first row, so that with eval_every=2 (epoch 1 not
    evaluated) recall_at_1 of every later epoch was silently dropped from the CSV."""
    import csv

    out = tmp_path / "out"
    assert train_cli.main([*TOY, "--set", "epochs=3", "--set", "eval_every=2", "--output", str(out)]) == 0
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [r["epoch"] for r in rows] == ["1", "2", "3"]
    assert rows[0]["recall_at_1"] == "" and float(rows[1]["recall_at_1"]) > 0 and float(rows[2]["recall_at_1"]) > 0


def test_a_corrupt_pretrained_path_exits_2_naming_the_file(tmp_path, capsys):
    """Bug caught: a truncated weights file failing with torch's "PytorchStreamReader failed reading zip
    archive" (exit 1), which names no file."""
    from xbm.models import MLPBackbone

    weights = tmp_path / "backbone.pth"
    torch.save(MLPBackbone(40).state_dict(), weights)
    weights.write_bytes(weights.read_bytes()[:200])
    assert train_cli.main([*TOY, "--set", f"pretrained_path={weights}", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"cannot read checkpoint {weights}" in err and "Traceback" not in err


def test_the_printed_line_shows_every_k_of_the_runs_set():
    """Bug caught: the epoch line naming a fixed recall_at_10, absent from CUB's or SOP's set, so that those runs
    printed no Recall@K beyond 1 (and test_ or reference values mixed in)."""
    metrics = {"epoch": 2, "loss": 0.5, "recall_at_1": 0.25, "recall_at_100": 0.75, "test_recall_at_1": 0.1,
               "reference_raw_recall_at_1": 0.2, "map_at_r": 0.125}
    assert train_cli.format_line(metrics, 3) == ("epoch 2/3  loss 0.5  recall_at_1 0.25  recall_at_100 0.75  "
                                                 "map_at_r 0.125")


@pytest.mark.parametrize("kind", ["supcon", "contrastive", "triplet", "multi_similarity", "ntxent"])
def test_every_loss_kind_trains_from_its_set_alone(tmp_path, kind):
    """Bug caught (issue 32 item 7): ``--set loss.kind=multi_similarity`` alone exited 2 (the default
    pair-margin miner conflicted with MS's own mining); every loss kind must train from ``--set loss.kind=K``
    alone and record the miner kind it ran (none for MS, pair_margin otherwise) in config.yaml."""
    out = tmp_path / "out"
    assert train_cli.main([*TOY, "--set", f"loss.kind={kind}", "--set", "epochs=1", "--output", str(out)]) == 0
    recorded = yaml.safe_load((out / "config.yaml").read_text())["miner.kind"]
    assert recorded == ("none" if kind == "multi_similarity" else "pair_margin")


@pytest.mark.parametrize("value", ["1,3", "[1,3]", "[1, 3]"])
def test_list_valued_keys_take_commas_and_brackets(tmp_path, value):
    """Bug caught (issue 32 item 7): ``--set eval_ks=[1,3]`` refused (only ``1,3`` was read): both forms
    must give Recall@1 and Recall@3, and milestones take brackets as well."""
    out = tmp_path / "out"
    assert train_cli.main([*TOY, "--set", f"eval_ks={value}", "--set", "epochs=1", "--output", str(out)]) == 0
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert sorted(k for k in row if k.startswith("recall_at_")) == ["recall_at_1", "recall_at_3"]
    assert TrainConfig.from_dict({"eval_ks": [1, 3], "milestones": "[10, 20]"}).milestones == "10,20"


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm draws only there)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("flags, terminal, drawn", [([], True, True), (["--no-progress"], True, False),
                                                    ([], False, False)])
def test_the_epochs_and_the_evaluations_embedding_get_bars_only_on_a_terminal_without_no_progress(
        tmp_path, monkeypatch, flags, terminal, drawn):
    """Bugs caught (issue 55): bars drawn into a log file or a pipe (tqdm built without ``disable=None``), bars
    despite ``--no-progress``, or an evaluation's embedding without a bar however long it takes (the trainer's
    ``eval_progress`` not wired). The evaluation's delay is 0 here, so that the toy run's short pass draws."""
    import xbm.runtime.progress

    monkeypatch.setattr(xbm.runtime.progress, "DELAY_S", 0.0)
    stream = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    toy = [arg for arg in TOY if arg != "--no-progress"]
    assert train_cli.main([*toy, *flags, "--set", "epochs=1", "--output", str(tmp_path / "out")]) == 0
    err = stream.getvalue()
    assert ("epoch 1/1:" in err, "embedding:" in err) == (drawn, drawn), err
