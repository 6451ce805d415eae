"""analysis/retrieval.py: compute first (the grid), draw second."""
from __future__ import annotations

import numpy as np
from analysis import plots
from analysis.retrieval import grid_from_neighbours, grid_size


def test_grid_marks_a_neighbour_right_when_it_has_the_querys_label():
    """Bug caught: correctness compared with the wrong query's label, or unknown labels counted as wrong."""
    image = np.zeros((4, 4), np.uint8)
    grid = grid_from_neighbours([image, image], ["a", "b"], ["q0", "q1"], [[image, image], [image, image]],
                                [["a", "b"], ["a", None]], [["n0", "n1"], ["n2", "n3"]], [[0.9, 0.5], [0.8, 0.1]])
    assert [[t.correct for t in n] for _, n in grid.rows] == [[True, False], [False, None]]
    assert grid.rows[0][1][0].caption == "n0\n0.900" and grid_size(grid) == (2, 3)
    fig = plots.plot_retrieval_grid(grid)
    assert plots.png_bytes(fig, dpi=20)[:4] == b"\x89PNG"
