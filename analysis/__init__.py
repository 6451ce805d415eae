"""analysis: read xbm-tune sweeps from Parquet, compare variants, explain what mattered, report.

Reads only the Parquet contract (docs/ARCHITECTURE.md); never imports Ray, ``tune`` or torch.
matplotlib and Optuna are imported lazily by the functions that need them.

    import analysis
    sweep = analysis.load("~/xbm_sweeps/quickstart-20261121-081500")
    analysis.leaderboard(sweep).head()
    analysis.compare_variants(sweep).table
"""
from analysis.compare import (compare_variants, confirmation_table, matched_pairs, paired_differences,
                              t_interval)
from analysis.curves import asha_survival, drift_staleness, learning_curves
from analysis.effects import (delay_curve, kalman_r_curve, memory_ratio_curve, parallel_coordinates, param_effect,
                              param_heatmap)
from analysis.errors import NotApplicable
from analysis.importance import param_importance, rebuild_study
from analysis.loader import Problem, Sweep, SweepReadWarning, load
from analysis.references import REFERENCES, reference_for
from analysis.tables import best_per_kind, leaderboard, status_counts, stop_reasons

__all__ = [
    "NotApplicable", "Problem", "REFERENCES", "Sweep", "SweepReadWarning",
    "asha_survival", "best_per_kind", "compare_variants", "confirmation_table", "delay_curve", "drift_staleness",
    "kalman_r_curve", "leaderboard", "learning_curves", "load", "matched_pairs", "memory_ratio_curve",
    "paired_differences", "parallel_coordinates", "param_effect", "param_heatmap", "param_importance",
    "rebuild_study", "reference_for", "status_counts", "stop_reasons", "t_interval",
]
