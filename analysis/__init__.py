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

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)   # the names: __init__.pyi
