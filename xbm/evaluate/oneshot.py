"""Omniglot's one-shot classification runs (Lake, Salakhutdinov and Tenenbaum, "Human-level concept learning
through probabilistic program induction", Science 350, 2015): read them, score an embedder on them.

Layout (``python/one-shot-classification/all_runs.zip`` of github.com/brendenlake/omniglot, extracted)::

    DIR/run01/class_labels.txt     20 lines "run01/test/item01.png run01/training/class12.png":
    DIR/run01/test/item01.png ...            a test drawing, then its class's one training drawing
    DIR/run01/training/class01.png ...
    ...
    DIR/run20/...

A listed path is relative to ``DIR`` when it begins with the run's folder name (the release's form, as
its ``demo_classification.py`` reads it from ``DIR``), else relative to the run folder (``test/item01.png``).
As that demo, a run's candidates are the training drawings its ``class_labels.txt`` lists (sorted).

``all_runs.zip`` itself is read as its extracted folder: :func:`runs_folder` extracts it into a temporary
folder that lasts as long as its ``with`` block (the embedder reads drawings by path), the runs at the zip's
top (the release: ``run01/class_labels.txt`` ...) or inside its one top folder (``all_runs/run01/...``).

Scoring: with embeddings ``z`` (any scale), test drawing ``i`` is assigned the candidate

    yhat_i = argmax_c  cos(z_test_i, z_train_c)        (the first such c on a tie, as numpy's argmax)

and the run's error is the share of its test drawings whose ``yhat_i`` is not their listed training drawing.
No Ray, no ``tune``: the command is ``tune/commands/oneshot.py``.
"""
from __future__ import annotations

import re
import tempfile
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator, Sequence

import torch

LABELS = "class_labels.txt"
RUN_NAME = re.compile(r"run\d+")
EXPECTED = f"run01 .. run20, each with {LABELS}"


@dataclass(frozen=True)
class OneShotRun:
    """One run: ``tests`` in ``class_labels.txt`` order, ``answers[i]`` the index in ``training`` (the
    distinct listed training drawings, sorted) of test ``i``'s correct drawing."""

    name: str
    tests: tuple[Path, ...]
    training: tuple[Path, ...]
    answers: tuple[int, ...]


@dataclass(frozen=True)
class RunResult:
    """A run's outcome: ``errors`` of its ``n_test`` test drawings misclassified among ``n_train`` drawings."""

    run: str
    n_test: int
    n_train: int
    errors: int

    @property
    def error(self) -> float:
        return self.errors / self.n_test


def _run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and RUN_NAME.fullmatch(p.name))


def find_runs(folder: str | Path) -> list[Path]:
    """The run folders (``run01`` ...) of ``folder``, by name; FileNotFoundError naming ``folder`` when none
    (a zip is read through :func:`runs_folder`)."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"--runs {root} is not a folder; give all_runs.zip or the folder it extracts to")
    runs = _run_dirs(root)
    if not runs:
        hint = f" (it holds all_runs/: give {root / 'all_runs'})" if (root / "all_runs").is_dir() else ""
        raise FileNotFoundError(f"--runs {root} holds no run folder ({EXPECTED}){hint}")
    return runs


@contextmanager
def runs_folder(path: str | Path) -> Iterator[Path]:
    """The folder that holds the runs: ``path`` itself when it is a folder; when it is a zip file
    (``all_runs.zip``), a temporary folder it is extracted into, removed when the block ends, descending into
    the zip's one top folder when the runs are not at its top. For a zip, errors raised in the block name
    ``<zip>/run02/...`` instead of the temporary folder. ValueError naming a damaged zip or a file that is
    neither; FileNotFoundError naming a zip that holds no run."""
    given = Path(path)
    if given.is_dir() or not given.exists():
        yield given  # find_runs names what is missing
        return
    if not zipfile.is_zipfile(given):
        what = "a damaged zip file (it cannot be opened)" if given.suffix.lower() == ".zip" else "not a zip file"
        raise ValueError(f"--runs {given} is {what}; give all_runs.zip or the folder it extracts to")
    with tempfile.TemporaryDirectory(prefix="xbm-oneshot-") as tmp:
        try:
            with zipfile.ZipFile(given) as archive:
                archive.extractall(tmp)
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise ValueError(f"--runs {given} is a damaged zip file: {exc}") from exc
        root = Path(tmp)
        tops = [p for p in root.iterdir() if p.name != "__MACOSX" and not p.name.startswith(".")]
        if not _run_dirs(root) and len(tops) == 1 and tops[0].is_dir():
            root = tops[0]  # all_runs/run01/...
        if not _run_dirs(root):
            raise FileNotFoundError(f"--runs {given} holds no run folder ({EXPECTED}) at its top or inside "
                                    "its one top folder")
        try:
            yield root
        except Exception as exc:  # name the zip, not the temporary folder that is gone once this ends
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (exc.args[0].replace(tmp, str(given)), *exc.args[1:])
            raise


def read_run(run_dir: Path) -> OneShotRun:
    """A run folder's ``class_labels.txt``, every listed drawing checked to exist (else FileNotFoundError
    naming it and its line); a line that is not two paths raises ValueError naming it."""
    labels = run_dir / LABELS
    if not labels.is_file():
        raise FileNotFoundError(f"the run {run_dir} has no {LABELS} (lines 'test drawing, its training drawing')")
    pairs = []
    for number, line in enumerate(labels.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2:
            raise ValueError(f"{labels}:{number} must be two paths (a test drawing and its training drawing), "
                             f"but is {line!r}")
        pair = tuple(_resolve(run_dir, text) for text in fields)
        for path in pair:
            if not path.is_file():
                raise FileNotFoundError(f"{labels}:{number} lists {path}, which does not exist")
        pairs.append(pair)
    if not pairs:
        raise ValueError(f"{labels} lists no drawing")
    training = tuple(sorted({train for _, train in pairs}))
    index = {path: c for c, path in enumerate(training)}
    return OneShotRun(run_dir.name, tuple(t for t, _ in pairs), training, tuple(index[a] for _, a in pairs))


def _resolve(run_dir: Path, text: str) -> Path:
    parts = PurePosixPath(text).parts
    return (run_dir.parent if parts[0] == run_dir.name else run_dir).joinpath(*parts)


def read_runs(folder: str | Path) -> list[OneShotRun]:
    """Every run of ``folder`` (:func:`find_runs`, :func:`read_run`): all input checked before any embedding.
    For ``all_runs.zip`` itself: ``with runs_folder(zip) as folder: read_runs(folder)``, and score inside."""
    return [read_run(run_dir) for run_dir in find_runs(folder)]


def misclassified(test: torch.Tensor, train: torch.Tensor, answers: Sequence[int]) -> torch.Tensor:
    """Bool [n_test]: test row ``i`` (of ``test`` [n_test, d]) has its highest cosine similarity with a row of
    ``train`` [n_train, d] other than ``answers[i]``."""
    similarity = torch.nn.functional.normalize(test.double(), dim=1) @ torch.nn.functional.normalize(
        train.double(), dim=1).T  # [n_test, n_train], float64 so that near-ties break as exactly as possible
    return similarity.argmax(dim=1) != torch.as_tensor(answers, dtype=torch.long)


def episodes_error(embeddings: torch.Tensor, episodes) -> dict[str, float]:
    """``oneshot_error``: the mean over ``episodes`` (:class:`xbm.data.episodes.Episodes`, positions into the rows
    of ``embeddings``) of each episode's share of misclassified test drawings, in percent, each scored as a real
    run is (:func:`misclassified`); ``oneshot_way``: the episodes' mean number of ways (20 when all are 20-way)."""
    errors = [float(misclassified(embeddings[torch.as_tensor(test)], embeddings[torch.as_tensor(train)],
                                  range(len(train))).double().mean())
              for train, test in zip(episodes.train, episodes.test)]
    return {"oneshot_error": 100.0 * sum(errors) / len(errors),
            "oneshot_way": sum(episodes.ways) / len(episodes)}


def evaluate_runs(runs: Sequence[OneShotRun], embed: Callable[[list[str]], torch.Tensor]) -> list[RunResult]:
    """Each run's :class:`RunResult`; ``embed(paths)`` -> rows [n, d], e.g. an export's ``ImageEmbedder.embed``
    (which reads the drawings with the export's own preprocessing: mode, polarity, size, statistics)."""
    results = []
    for run in runs:
        rows = embed([str(p) for p in (*run.tests, *run.training)])
        wrong = misclassified(rows[:len(run.tests)], rows[len(run.tests):], run.answers)
        results.append(RunResult(run.name, len(run.tests), len(run.training), int(wrong.sum())))
    return results
