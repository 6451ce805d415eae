"""analysis: read xbm-tune sweeps from Parquet, compare variants, explain what mattered, report.

Reads only the Parquet contract (docs/ARCHITECTURE.md); never imports Ray, ``tune`` or torch.
matplotlib and Optuna are imported lazily by the functions that need them.

    import analysis
    sweep = analysis.load("~/xbm_sweeps/quickstart-20261121-081500")
    analysis.leaderboard(sweep).head()
    analysis.compare_variants(sweep).table
"""
# Imported on first use (lazy_loader), so that ``tune`` can import ``analysis.contract`` without loading the
# analyses themselves.
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "compare": ["compare_variants", "confirmation_table", "matched_pairs", "paired_differences", "t_interval"],
    "curves": ["asha_survival", "drift_staleness", "learning_curves"],
    "dominance": ["pareto", "pareto_front"],
    "effects": ["delay_curve", "kalman_r_curve", "memory_ratio_curve", "parallel_coordinates", "param_effect",
                "param_heatmap"],
    "errors": ["NotApplicable"],
    "importance": ["param_importance", "rebuild_study"],
    "loader": ["Problem", "Sweep", "SweepReadWarning", "load"],
    "references": ["REFERENCES", "reference_for"],
    "tables": ["best_per_kind", "leaderboard", "status_counts", "stop_reasons"],
})
