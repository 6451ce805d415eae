"""analysis: read xbm-tune sweeps from Parquet, compare variants, explain what mattered, report.

Reads only the Parquet contract (docs/ARCHITECTURE.md); never imports Ray, ``tune`` or torch.
matplotlib and Optuna are imported lazily by the functions that need them.

    import analysis
    sweep = analysis.load("~/xbm_sweeps/quickstart-20261121-081500")
    analysis.leaderboard(sweep).head()
    analysis.compare_variants(sweep).table
"""
# Imported on first use (PEP 562), so that ``tune`` can import ``analysis.contract`` without loading the
# analyses themselves.
_HOMES = {
    "compare_variants": "compare", "confirmation_table": "compare", "matched_pairs": "compare",
    "paired_differences": "compare", "t_interval": "compare",
    "asha_survival": "curves", "drift_staleness": "curves", "learning_curves": "curves",
    "delay_curve": "effects", "kalman_r_curve": "effects", "memory_ratio_curve": "effects",
    "parallel_coordinates": "effects", "param_effect": "effects", "param_heatmap": "effects",
    "NotApplicable": "errors", "param_importance": "importance", "rebuild_study": "importance",
    "pareto": "dominance", "pareto_front": "dominance",
    "Problem": "loader", "Sweep": "loader", "SweepReadWarning": "loader", "load": "loader",
    "REFERENCES": "references", "reference_for": "references",
    "best_per_kind": "tables", "leaderboard": "tables", "status_counts": "tables", "stop_reasons": "tables",
}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"analysis.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "NotApplicable", "Problem", "REFERENCES", "Sweep", "SweepReadWarning",
    "asha_survival", "best_per_kind", "compare_variants", "confirmation_table", "delay_curve", "drift_staleness",
    "kalman_r_curve", "leaderboard", "learning_curves", "load", "matched_pairs", "memory_ratio_curve",
    "paired_differences", "parallel_coordinates", "param_effect", "param_heatmap", "param_importance", "pareto",
    "pareto_front",
    "rebuild_study", "reference_for", "status_counts", "stop_reasons", "t_interval",
]
