"""``xbm-tune oneshot`` (tune/commands/oneshot.py): printed errors and interval, the Parquet, all_runs.zip as its
folder, bad input exits 2."""
from __future__ import annotations

import json
import re
import shutil
import zipfile

import pyarrow.parquet as pq
import pytest

from tests.xbm.evaluate.oneshot_fixture import identity_export, polarity_run, two_runs, zip_runs
from tune.cli import main
from xbm.evaluate.embedder import WEIGHTS

# two runs, errors 1/4 and 2/4 (oneshot_fixture.two_runs): mean 0.375, s = 0.25 / sqrt(2) = 0.1768,
# s / sqrt(2) = 0.125, t_{0.975, 1} = 12.706: 37.50% +- 158.83%
T_975_1 = 12.706204736


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("oneshot")
    two_runs(root / "runs")
    return identity_export(root / "embedder"), root


def printed(out: str) -> tuple[dict[str, tuple[float, int, int]], tuple[float, float, float]]:
    runs = {m[1]: (float(m[2]), int(m[3]), int(m[4]))
            for m in re.finditer(r"^  (run\d+)  error +([\d.]+)%  \((\d+)/(\d+) wrong", out, re.M)}
    mean = re.search(r"^mean error ([\d.]+)% \(95% t-interval over runs (-?[\d.]+)% to (-?[\d.]+)%\)", out, re.M)
    return runs, tuple(float(v) for v in mean.groups())


def test_prints_each_run_and_the_mean_with_its_t_interval(setup, capsys):
    """Bug caught: runs' errors not the hand computation, the mean weighted by drawings, the interval not the
    Student-t one the help names (a normal quantile, 1.96, gives +-24.50%), fractions printed as percentages."""
    export, root = setup
    out = root / "a.parquet"
    assert main(["oneshot", str(export), "--runs", str(root / "runs"), "--out", str(out), "--device", "cpu"]) == 0
    runs, (mean, low, high) = printed(capsys.readouterr().out)
    assert runs == {"run01": (25.0, 1, 4), "run02": (50.0, 2, 4)}
    half = 100 * T_975_1 * 0.125
    assert (mean, low, high) == (37.5, round(37.5 - half, 2), round(37.5 + half, 2))


def test_the_parquet_rows_match_the_printed_numbers(setup, capsys):
    """Bug caught: rows in another order or unit than printed, a column missing, the summary's mean not the
    printed one, the file written anywhere but beside the export by default."""
    export, root = setup
    assert main(["oneshot", str(export), "--runs", str(root / "runs"), "--device", "cpu"]) == 0
    runs, (mean, low, high) = printed(capsys.readouterr().out)
    table = pq.read_table(root / "embedder.oneshot.parquet")
    rows = table.to_pylist()
    assert [r["run"] for r in rows] == list(runs)
    for row in rows:
        assert (round(100 * row["error"], 2), row["errors"], row["n_test"]) == runs[row["run"]]
        assert row["error"] == row["errors"] / row["n_test"] and row["n_train"] == 4
    summary = json.loads(table.schema.metadata[b"oneshot"])
    assert round(100 * summary["mean"], 2) == mean and summary["confidence"] == 0.95
    assert (round(100 * summary["low"], 2), round(100 * summary["high"], 2)) == (low, high)
    assert json.loads(table.schema.metadata[b"embedder"]) == {"run": "identity"}


def test_the_exports_polarity_reaches_the_command(tmp_path, capsys):
    """Bug caught: the command reading drawings its own way instead of through the export's preprocessing
    (without the recorded ``invert``, item01 of polarity_run is wrong: 50%); one run prints no interval."""
    polarity_run(tmp_path / "runs")
    export = identity_export(tmp_path / "embedder")
    assert main(["oneshot", str(export), "--runs", str(tmp_path / "runs"), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "run01  error   0.00%  (0/2 wrong, 2-way)" in out and "mean error 0.00% (no interval" in out


def test_the_zip_gives_what_its_folder_gives(setup, tmp_path, capsys):
    """Bug caught: ``--runs all_runs.zip`` (the release as downloaded, runs at its top, or inside one top folder)
    refused, or printing or writing other runs or errors than its extracted folder; the Parquet's ``runs``
    not the path given (the temporary folder it was extracted to)."""
    export, root = setup
    given = [root / "runs", zip_runs(root / "runs", tmp_path / "all_runs.zip"),
             zip_runs(root / "runs", tmp_path / "top.zip", "all_runs")]
    outputs = []
    for i, runs in enumerate(given):
        out = tmp_path / f"{i}.parquet"
        assert main(["oneshot", str(export), "--runs", str(runs), "--out", str(out), "--device", "cpu"]) == 0
        printed_lines = capsys.readouterr().out.splitlines()
        assert printed_lines[0].endswith(f"on 2 run(s) of {runs}:") and printed_lines[-1] == f"wrote {out}"
        table = pq.read_table(out)
        summary = json.loads(table.schema.metadata[b"oneshot"])
        assert summary.pop("runs") == str(runs)
        outputs.append((printed_lines[1:-1], table.to_pylist(), summary, table.schema.metadata[b"embedder"]))
    assert outputs[0][1] == [{"run": "run01", "n_test": 4, "n_train": 4, "errors": 1, "error": 0.25},
                             {"run": "run02", "n_test": 4, "n_train": 4, "errors": 2, "error": 0.5}]
    assert outputs[1] == outputs[0] and outputs[2] == outputs[0]


def bad_inputs(root, export):
    """(argv's EXPORT and --runs, text the error must hold) for each kind of bad input."""
    no_labels = root / "no_labels"
    shutil.copytree(root / "runs", no_labels)
    (no_labels / "run02" / "class_labels.txt").unlink()
    no_drawing = root / "no_drawing"
    shutil.copytree(root / "runs", no_drawing)
    (no_drawing / "run01" / "test" / "item04.png").unlink()
    (root / "empty").mkdir()
    partial = root / "partial"
    partial.mkdir()
    (partial / "embedder.yaml").write_bytes((export / "embedder.yaml").read_bytes())
    with zipfile.ZipFile(root / "no_runs.zip", "w") as archive:
        archive.writestr("README.txt", "no run here")
    good = zip_runs(root / "runs", root / "good.zip").read_bytes()
    (root / "cut.zip").write_bytes(good[:len(good) // 2])
    return [(export, root / "empty", f"{root / 'empty'} holds no run folder"),
            (export, root / "no_runs.zip", f"{root / 'no_runs.zip'} holds no run folder (run01 .. run20"),
            (export, root / "cut.zip", f"{root / 'cut.zip'} is a damaged zip file"),
            (export, zip_runs(no_labels, root / "no_labels.zip"), f"{root / 'no_labels.zip'}/run02 has no"),
            (export, no_labels, f"{no_labels / 'run02'} has no class_labels.txt"),
            (export, no_drawing, f"lists {no_drawing / 'run01' / 'test' / 'item04.png'}, which does not exist"),
            (partial, root / "runs", f"{partial} lacks {WEIGHTS}")]


def test_bad_input_exits_2_naming_it_and_writes_nothing(setup, tmp_path, capsys):
    """Bug caught: a folder or zip without runs, a damaged zip, a run without its labels (in a folder or a zip),
    a missing drawing or an export folder without weights failing with a traceback (exit 1), naming nothing
    (or a zip's temporary folder), or leaving a Parquet behind."""
    export, root = setup
    shutil.copytree(root / "runs", tmp_path / "runs")
    for given, runs, named in bad_inputs(tmp_path, export):
        out = tmp_path / "o.parquet"
        assert main(["oneshot", str(given), "--runs", str(runs), "--out", str(out), "--device", "cpu"]) == 2, named
        assert named in capsys.readouterr().err
        assert not out.exists()


def test_a_bad_export_is_named_even_when_the_runs_are_bad_too(setup, tmp_path, capsys):
    """Bug caught: --runs checked before the export, so a missing or partial EXPORT with a bad --runs named
    only the runs (the export's error surfaced only after the runs were fixed); a bad EXPORT with good runs
    not named."""
    export, root = setup
    missing, out = tmp_path / "no_export", tmp_path / "o.parquet"
    for runs in (tmp_path / "no_runs", root / "runs"):
        assert main(["oneshot", str(missing), "--runs", str(runs), "--out", str(out), "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert f"the export folder {missing} does not exist" in err, err
        assert (str(runs) in err) == (runs.name == "no_runs"), err  # both named when both are wrong
        assert not out.exists()


def write_episodes_as_runs(split, folder):
    """``split``'s one-shot episodes in the real runs' layout (runNN/training/classNN.png, runNN/test/itemNN.png,
    runNN/class_labels.txt), the drawings copied from the data set's own files."""
    source, indices = split.query.source, split.query.indices
    for e, (train, test) in enumerate(zip(split.episodes.train, split.episodes.test), start=1):
        run = folder / f"run{e:02d}"
        (run / "training").mkdir(parents=True)
        (run / "test").mkdir()
        lines = []
        for i, (a, b) in enumerate(zip(train, test), start=1):
            shutil.copy(source.where(int(indices[a])), run / "training" / f"class{i:02d}.png")
            shutil.copy(source.where(int(indices[b])), run / "test" / f"item{i:02d}.png")
            lines.append(f"{run.name}/test/item{i:02d}.png {run.name}/training/class{i:02d}.png")
        (run / "class_labels.txt").write_text("\n".join(lines) + "\n")
    return folder


def test_val_oneshot_error_is_oneshot_on_the_same_episodes(tmp_path, capsys):
    """Bug caught: the per-epoch ``val_oneshot_error`` scoring the episodes otherwise than ``xbm-tune oneshot``
    scores the real runs (another similarity, the drawings fed another way than the export feeds them, a
    fraction instead of percent, a mean weighted other than per episode): the validation episodes written out in
    the runs' layout and scored by the command on the trainer's export give the same mean error."""
    from tests.xbm.embedder_fixture import export_trainer, omniglot_mlp_trainer

    trainer = omniglot_mlp_trainer(tmp_path / "data", val_fraction=0.5, val_by="superclass", train_on="all",
                                   oneshot_episodes=6)
    metrics = next(trainer.fit())
    runs = write_episodes_as_runs(trainer.splits.val, tmp_path / "runs")
    export = export_trainer(trainer, tmp_path / "embedder")
    out = tmp_path / "episodes.parquet"
    assert main(["oneshot", str(export), "--runs", str(runs), "--out", str(out), "--device", "cpu"]) == 0
    summary = json.loads(pq.read_table(out).schema.metadata[b"oneshot"])
    assert 0.0 < metrics["val_oneshot_error"] < 100.0 and metrics["oneshot_way"] == 4.0
    assert metrics["val_oneshot_error"] == pytest.approx(100 * summary["mean"], abs=1e-9)
    trainer.close()
