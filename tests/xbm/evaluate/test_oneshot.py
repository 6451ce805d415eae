"""xbm.evaluate.oneshot: Omniglot's one-shot runs read and scored, against hand computations
(tests/xbm/evaluate/oneshot_fixture.py explains the drawings and the identity embedder)."""
from __future__ import annotations

import math
import zipfile

import pytest
import torch

from tests.xbm.evaluate.oneshot_fixture import identity_export, polarity_run, two_runs, zip_runs
from xbm.evaluate.embedder import load_embedder
from xbm.evaluate.oneshot import RunResult, evaluate_runs, misclassified, read_run, read_runs, runs_folder


def errors_of(results: list[RunResult]) -> dict[str, int]:
    return {r.run: r.errors for r in results}


def test_errors_of_two_runs_match_the_hand_computation(tmp_path):
    """Bug caught: test i paired with training drawing i (sorted) instead of its listed answer, lines re-sorted
    apart from their answers, a run-relative path (run02) or a release path (run01) not found, the error
    divided by the wrong count."""
    expected = two_runs(tmp_path / "runs")
    embedder = load_embedder(identity_export(tmp_path / "export"), "cpu")
    results = evaluate_runs(read_runs(tmp_path / "runs"), lambda paths: embedder.embed(paths, device="cpu"))
    assert errors_of(results) == expected == {"run01": 1, "run02": 2}
    assert [(r.n_test, r.n_train) for r in results] == [(4, 4), (4, 4)]
    assert [r.error for r in results] == [0.25, 0.5]


def test_the_exports_recorded_polarity_is_used(tmp_path):
    """Bug caught: drawings read without the export's preprocessing (here its ``invert``: Omniglot's black
    strokes on white must enter as high strokes on 0), which gets item01 of the fixture wrong (hand
    computation in ``polarity_run``)."""
    polarity_run(tmp_path / "runs")
    runs = read_runs(tmp_path / "runs")
    for invert, errors in ((True, 0), (False, 1)):  # the second shows the fixture tells the two readings apart
        embedder = load_embedder(identity_export(tmp_path / f"export_{invert}", invert=invert), "cpu")
        assert errors_of(evaluate_runs(runs, lambda paths: embedder.embed(paths, device="cpu"))) == {"run01": errors}


def test_cosine_not_inner_product_and_ties_go_to_the_first_candidate():
    """Bug caught: raw inner products (the long candidate (3, 3) scores 3 > 1 against (1, 0), though its cosine
    is 0.71 < 1); an argmax that breaks ties towards the last candidate (the reference demo takes the first)."""
    test = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    train = torch.tensor([[2.0, 0.0], [3.0, 3.0], [0.0, 5.0], [0.0, 0.5]])
    assert misclassified(test, train, [0, 2]).tolist() == [False, False]  # row 1 ties 2 and 3: 2 wins
    assert misclassified(test, train, [1, 3]).tolist() == [True, True]


def test_a_folder_without_runs_is_named(tmp_path):
    """Bug caught: an empty result (mean of no runs: NaN) instead of an error naming the folder."""
    (tmp_path / "all_runs").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no run folder.*give .*all_runs"):
        read_runs(tmp_path)


def test_a_missing_label_file_or_drawing_is_named(tmp_path):
    """Bug caught: a run without class_labels.txt skipped silently; a listed drawing missing found only by
    the image reader (or not at all for a training drawing), without the line that lists it."""
    two_runs(tmp_path)
    (tmp_path / "run02" / "training" / "class03.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"class_labels.txt:3 lists .*run02/training/class03.png"):
        read_run(tmp_path / "run02")
    (tmp_path / "run01" / "class_labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match="run01 has no class_labels.txt"):
        read_runs(tmp_path)


def test_a_malformed_line_is_named(tmp_path):
    """Bug caught: a line of one path read as a pair with itself, or an IndexError without the file and line."""
    two_runs(tmp_path)
    labels = tmp_path / "run01" / "class_labels.txt"
    labels.write_text(labels.read_text() + "run01/test/item01.png\n")
    with pytest.raises(ValueError, match=r"class_labels.txt:5 must be two paths"):
        read_run(tmp_path / "run01")


def test_error_is_a_share_of_the_test_drawings():
    """Bug caught: errors divided by the training drawings' count (or a percentage where a fraction is kept)."""
    assert math.isclose(RunResult("run01", n_test=20, n_train=20, errors=3).error, 0.15)
    assert RunResult("run01", n_test=4, n_train=2, errors=1).error == 0.25


def test_a_zip_of_the_runs_scores_as_their_folder(tmp_path):
    """Bug caught: all_runs.zip read otherwise than its extracted folder (other runs, drawings, answers or
    errors), runs inside the zip's one top folder (all_runs/run01/...) not found, the drawings gone before
    the scoring (the temporary folder removed when read_runs returns), or that folder left behind."""
    two_runs(tmp_path / "runs")
    embedder = load_embedder(identity_export(tmp_path / "export"), "cpu")

    def embed(paths):
        return embedder.embed(paths, device="cpu")

    def shape(runs, root):  # each run with its paths relative to the folder that holds the runs
        return [(r.name, [p.relative_to(root) for p in (*r.tests, *r.training)], r.answers) for r in runs]

    with runs_folder(tmp_path / "runs") as folder:
        assert folder == tmp_path / "runs"
        runs = read_runs(folder)
        expected = (shape(runs, folder), evaluate_runs(runs, embed))
    assert [r.errors for r in expected[1]] == [1, 2]
    for top in ("", "all_runs"):
        archive = zip_runs(tmp_path / "runs", tmp_path / f"runs{top}.zip", top)
        with runs_folder(archive) as folder:
            runs = read_runs(folder)
            assert (shape(runs, folder), evaluate_runs(runs, embed)) == expected, top
        assert not folder.exists(), top


def test_a_zip_without_runs_or_damaged_is_named(tmp_path):
    """Bug caught: a zip that holds no run (or only another folder) read as zero runs or failing on a
    temporary path, a damaged zip (cut short, or a member's bytes changed) raising BadZipFile or zlib.error
    (no ValueError: a traceback from the command) without the zip's name, a file that is no zip not named."""
    two_runs(tmp_path / "runs")
    for name, members in (("readme.zip", ["README.txt"]), ("other.zip", ["other/run01.txt", "other/x/y.png"])):
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            for member in members:
                archive.writestr(member, "not a run")
        with pytest.raises(FileNotFoundError, match=f"{tmp_path / name} holds no run folder .run01 .. run20"):
            with runs_folder(tmp_path / name):
                pass
    good = zip_runs(tmp_path / "runs", tmp_path / "good.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(good[:len(good) // 2])
    info = zipfile.ZipFile(tmp_path / "good.zip").getinfo("run01/class_labels.txt")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)  # the member's data
    flipped = bytearray(good)
    flipped[start + 2] ^= 0xFF
    (tmp_path / "flipped.zip").write_bytes(bytes(flipped))
    (tmp_path / "labels.txt").write_text("run01/test/item01.png run01/training/class01.png\n")
    for name in ("cut.zip", "flipped.zip", "labels.txt"):
        with pytest.raises(ValueError, match=f"{tmp_path / name} is (a damaged zip|not a zip)"):
            with runs_folder(tmp_path / name):
                pass


def test_an_error_inside_a_zip_names_the_zip_not_the_temporary_folder(tmp_path):
    """Bug caught: a run of the zip without its labels (or a drawing missing) named by the temporary folder it
    was extracted to, a path the user never saw and that is deleted by the time the message is read."""
    two_runs(tmp_path / "runs")
    (tmp_path / "runs" / "run02" / "class_labels.txt").unlink()
    archive = zip_runs(tmp_path / "runs", tmp_path / "all_runs.zip", "all_runs")
    with pytest.raises(FileNotFoundError) as caught:
        with runs_folder(archive) as folder:
            read_runs(folder)
    assert f"the run {archive}/all_runs/run02 has no class_labels.txt" in str(caught.value)


def test_episodes_error_by_hand():
    """Bug caught: the episodes' error weighted by drawings (2 of 5 wrong: 40%) instead of per episode as the
    runs' mean is (1/2 and 1/3: 41.67%), a fraction instead of percent, or the answers not position-matched."""
    import numpy as np

    from xbm.data.episodes import Episodes
    from xbm.evaluate.oneshot import episodes_error

    rows = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [0.8, 0.2], [-1.0, 0.0], [-0.9, 0.1]])
    episodes = Episodes(train=(np.array([0, 1]), np.array([0, 1, 4])), test=(np.array([2, 3]), np.array([2, 3, 5])))
    scored = episodes_error(rows, episodes)
    assert scored["oneshot_error"] == pytest.approx(100 * (1 / 2 + 1 / 3) / 2)
    assert scored["oneshot_way"] == 2.5
