"""Query -> top-k neighbour grids (compute first: :class:`RetrievalGrid`; drawn by
:func:`analysis.plots.plot_retrieval_grid`). Used by ``xbm-tune retrieve --grid`` and the report's
"Retrieval examples" (the best trial's best weights on 8 test queries, borders green/red for a neighbour of
the query's class or not). Embedding the queries needs the model (torch): the caller passes it in as
``neighbours`` (``tune.commands.report.trial_neighbours``), so analysis itself reads only Parquet."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from analysis.errors import NotApplicable


@dataclass(frozen=True)
class Tile:
    """One image of a grid: uint8 pixels [H, W] or [H, W, 3]; ``correct`` True/False: of the query's class or
    not (None: unknown, and for the query itself)."""

    image: np.ndarray
    caption: str
    correct: Optional[bool] = None


@dataclass(frozen=True)
class RetrievalGrid:
    """One row per query: the query tile, then its neighbours nearest first."""

    rows: tuple[tuple[Tile, tuple[Tile, ...]], ...]
    title: str = ""


def grid_from_neighbours(query_images: Sequence[np.ndarray], query_labels: Sequence, query_names: Sequence[str],
                         neighbour_images: Sequence[Sequence[np.ndarray]], neighbour_labels, neighbour_names,
                         similarities, title: str = "") -> RetrievalGrid:
    """A grid from the search's output; labels None (or a None entry) leave correctness unknown."""
    rows = []
    for q, image in enumerate(query_images):
        label = None if query_labels is None else query_labels[q]
        tiles = []
        for j, neighbour in enumerate(neighbour_images[q]):
            other = None if neighbour_labels is None else neighbour_labels[q][j]
            correct = None if label is None or other is None else bool(other == label)
            tiles.append(Tile(_pixels(neighbour), f"{neighbour_names[q][j]}\n{float(similarities[q][j]):.3f}", correct))
        rows.append((Tile(_pixels(image), f"query {query_names[q]}"), tuple(tiles)))
    return RetrievalGrid(tuple(rows), title)


def _pixels(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image)
    return image[..., 0] if image.ndim == 3 and image.shape[2] == 1 else image


#: (best-weights URI, queries, k) -> that model's test queries and their neighbours, as
#: ``xbm.evaluate.retrieval.split_neighbours`` returns them plus the weights' ``epoch``
NeighboursOf = Callable[[str, int, int], Mapping[str, Any]]


def best_trial_grid(sweep, neighbours: NeighboursOf, queries: int = 8, k: int = 5) -> RetrievalGrid:
    """The best sweep-stage trial that kept best weights, on ``queries`` test queries and their top ``k``.
    Raises NotApplicable (with the reason) when no trial kept weights, the file is gone or the data are not
    images."""
    trials = sweep.stage_trials("sweep")
    column = f"best_{sweep.metric}"
    if "best_weights" not in trials or column not in trials:
        raise NotApplicable("the trials kept no best weights (a sweep from before best weights were kept)")
    kept = trials[trials["best_weights"].notna() & trials[column].notna()]
    if kept.empty:
        raise NotApplicable("no trial kept best weights")
    best = kept.loc[kept[column].astype(float).sort_values(ascending=not sweep.higher_is_better(sweep.metric)).index[0]]
    try:
        found = neighbours(str(best["best_weights"]), queries, k)
    except FileNotFoundError as exc:  # the weights are gone
        raise NotApplicable(str(exc)) from None
    except ValueError as exc:  # the data set moved, or vectors
        raise NotApplicable(f"the test split of trial {best['trial_id']} could not be embedded: {exc}") from None
    return grid_from_neighbours(found["query_images"], list(found["query_labels"]),
                                [f"class {label}" for label in found["query_labels"]], found["neighbour_images"],
                                found["neighbour_labels"].tolist(),
                                [[f"class {n}" for n in row] for row in found["neighbour_labels"]],
                                found["similarities"],
                                title=f"trial {best['trial_id']} (best {sweep.metric} {float(best[column]):.4g}, "
                                      f"epoch {found.get('epoch')}): {found['dataset']} test "
                                      f"queries and their top {k}")


def grid_size(grid: RetrievalGrid) -> tuple[int, int]:
    """(rows, columns) of the drawing: one column for the query, one per neighbour."""
    return len(grid.rows), 1 + max((len(n) for _, n in grid.rows), default=0)
