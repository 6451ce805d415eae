"""Every plot function draws headless (Agg, no pyplot) and writes a PNG."""
import pytest

from analysis import (asha_survival, compare_variants, drift_staleness, kalman_r_curve, learning_curves, leaderboard,
                      load, memory_ratio_curve, paired_differences, parallel_coordinates, param_effect, param_heatmap,
                      param_importance)
from analysis import plots


@pytest.fixture
def sweep(finished_sweep):
    return load(finished_sweep)


def _drawings(sweep):
    return {
        "leaderboard": lambda: plots.plot_leaderboard(leaderboard(sweep), "recall_at_1"),
        "variants": lambda: plots.plot_variant_comparison(compare_variants(sweep)),
        "paired": lambda: plots.plot_paired_differences(paired_differences(sweep)),
        "importance": lambda: plots.plot_importance(param_importance(sweep)),
        "curves": lambda: plots.plot_learning_curves(learning_curves(sweep), "recall_at_1"),
        "survival": lambda: plots.plot_survival(asha_survival(sweep)),
        "effect_ref": lambda: plots.plot_param_effect(param_effect(sweep, "normaliser.lambda_mu")),
        "effect_log": lambda: plots.plot_param_effect(memory_ratio_curve(sweep)),
        "effect_cat": lambda: plots.plot_param_effect(param_effect(sweep, "normaliser.kind")),
        "heatmap": lambda: plots.plot_heatmap(param_heatmap(sweep)),
        "drift": lambda: plots.plot_drift_staleness(drift_staleness(sweep)),
        "parallel": lambda: plots.plot_parallel_coordinates(parallel_coordinates(sweep), "recall_at_1"),
        "retrieval": lambda: plots.plot_retrieval_grid(_grid()),
        "schedules": lambda: plots.plot_schedules(_schedules()),
        "pareto": lambda: plots.plot_pareto(_pareto()),
    }


def _pareto():
    import pandas as pd

    from analysis.dominance import pareto_front

    trials = pd.DataFrame({"status": "completed", "final_recall_at_1": [0.5, 0.6, 0.4],
                           "final_memory_bytes": [10.0, 20.0, 30.0]})
    return pareto_front(trials, ["recall_at_1", "memory_bytes"], ["max", "min"])


def _schedules():
    import pandas as pd

    return pd.DataFrame({"trial_id": ["a", "a", "b", "b", "a", "a"], "epoch": [1, 2, 1, 2, 1, 2],
                         "param": ["lr"] * 4 + ["normaliser.lambda_mu"] * 2, "value": [1e-3, 2e-3, 1e-3, 8e-4, 0.5, 0.6]})


def _grid():
    import numpy as np

    from analysis.retrieval import grid_from_neighbours

    image = np.zeros((4, 4, 3), np.uint8)
    return grid_from_neighbours([image], ["a"], ["q"], [[image, image]], [["a", "b"]], [["n0", "n1"]], [[0.9, 0.2]])


@pytest.mark.slow
def test_every_plot_writes_a_png(sweep, tmp_path):
    public = {name for name in dir(plots) if name.startswith("plot_")}
    drawn = set()
    for name, draw in _drawings(sweep).items():
        fig = draw()
        drawn.add(fig.__class__.__module__)
        path = plots.save(fig, tmp_path / "sub" / f"{name}.png", dpi=30)  # low dpi: rendering is the cost
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert fig.axes, name
    assert drawn == {"matplotlib.figure"}
    covered = {"plot_leaderboard", "plot_variant_comparison", "plot_paired_differences", "plot_importance",
               "plot_learning_curves", "plot_survival", "plot_param_effect", "plot_heatmap",
               "plot_drift_staleness", "plot_parallel_coordinates", "plot_retrieval_grid", "plot_schedules", "plot_pareto"}
    assert public == covered  # a new plot function must be added to this smoke test


def test_reference_drawn_on_its_own_axis(sweep):
    fig = plots.plot_param_effect(param_effect(sweep, "normaliser.lambda_mu"))
    assert len(fig.axes) == 2  # the paper's points never share the sweep's y axis
    assert "CIFAR-100" in fig.axes[1].get_ylabel()
    ratio = plots.plot_param_effect(memory_ratio_curve(sweep))
    assert len(ratio.axes) == 2 and "SOP" in ratio.axes[1].get_ylabel()  # XBM Table 2's points
    assert len(plots.plot_param_effect(kalman_r_curve(sweep)).axes) == 1  # no paper gives points for r alone


def test_parallel_lines_skip_absent_axes_but_reach_the_metric(sweep):
    coords = parallel_coordinates(sweep)
    fig = plots.plot_parallel_coordinates(coords, "recall_at_1")
    lines = fig.axes[0].lines
    assert len(lines) == len(coords.scaled) == 28
    last = len(coords.axes) - 1
    assert all(line.get_xdata()[-1] == last for line in lines)
    # none/xbn skip lambda_mu, lambda_sigma, kalman_r; axbn skips the lambdas; pcxbn skips kalman_r
    assert {len(line.get_xdata()) for line in lines} == {last - 2, last - 1, last}


def test_the_leaderboards_colours_have_a_legend_of_the_variants(sweep):
    """Bug caught (issue 33 item 4): leaderboard bars coloured by variant with no legend, so a reader cannot
    tell which colour is which variant: the legend's labels are the variants of the drawn bars, each with its
    bars' colour."""
    board = leaderboard(sweep)
    fig = plots.plot_leaderboard(board, "recall_at_1")
    legend = fig.axes[0].get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    drawn = board.dropna(subset=["best_recall_at_1"]).head(15)
    assert labels == sorted(set(map(str, drawn["variant"]))) and len(labels) > 1
    bar_colour = {str(v): bar.get_facecolor() for v, bar in zip(drawn["variant"].iloc[::-1], fig.axes[0].patches)}
    assert {t: h.get_facecolor() for t, h in zip(labels, legend.legend_handles)} == bar_colour


def _epoch_axes(sweep):
    curves = plots.plot_learning_curves(learning_curves(sweep), "recall_at_1").axes
    survival = plots.plot_survival(asha_survival(sweep)).axes
    drift = plots.plot_drift_staleness(drift_staleness(sweep)).axes
    return [*curves, *survival, *drift, *plots.plot_schedules(_schedules()).axes]


def test_epoch_axes_tick_at_whole_epochs_only(sweep):
    """Bug caught (issue 33 item 4): learning curves (and the other epoch axes) ticked at 1.25, 1.5, ...,
    epochs that do not exist: every tick in view is an integer and its label reads as one."""
    axes = _epoch_axes(sweep)
    assert len(axes) >= 5
    for ax in axes:
        low, high = sorted(ax.get_xlim())
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_xlabel(), ticks)
        labels = ax.xaxis.get_major_formatter().format_ticks(ticks)
        assert all(label.lstrip("−-").isdigit() for label in labels), labels


@pytest.mark.parametrize("modes, steps", [(["max", "min"], "steps-pre"), (["min", "min"], "steps-post"),
                                          (["max", "max"], "steps-pre"), (["min", "max"], "steps-post")])
def test_the_pareto_staircase_follows_the_first_objectives_mode(modes, steps):
    """Bug caught: the front joined as if its first objective (x) were always minimised. With recall_at_1 maximised,
    the staircase held the left point's value up to the next point, drawing as dominated the trials between two
    front points that neither dominates (recall 0.55 at 15 bytes between (0.5, 10) and (0.6, 20)). Between
    neighbours the edge of the dominated region holds the value of the one that is better on x: the right one
    when x is maximised (steps-pre), the left one when it is minimised (steps-post)."""
    import pandas as pd

    from analysis.dominance import pareto_front

    trials = pd.DataFrame({"status": "completed", "final_recall_at_1": [0.5, 0.6, 0.55],
                           "final_memory_bytes": [10.0, 20.0, 30.0]})
    result = pareto_front(trials, ["recall_at_1", "memory_bytes"], modes)
    (front,) = [line for line in plots.plot_pareto(result).axes[0].lines if line.get_label() == "Pareto front"]
    assert front.get_drawstyle() == steps
