# The names this package hands on, imported on first use: lazy_loader.attach_stub reads this file at run time,
# type checkers read it instead of __init__.py. One list: add a name here, nowhere else.
from .compare import (
    compare_variants as compare_variants, confirmation_table as confirmation_table, matched_pairs as matched_pairs,
    paired_differences as paired_differences, t_interval as t_interval,
)
from .curves import (
    asha_survival as asha_survival, drift_staleness as drift_staleness, learning_curves as learning_curves,
)
from .dominance import pareto as pareto, pareto_front as pareto_front
from .effects import (
    delay_curve as delay_curve, kalman_r_curve as kalman_r_curve, memory_ratio_curve as memory_ratio_curve,
    parallel_coordinates as parallel_coordinates, param_effect as param_effect, param_heatmap as param_heatmap,
)
from .errors import NotApplicable as NotApplicable
from .importance import param_importance as param_importance, rebuild_study as rebuild_study
from .loader import Problem as Problem, Sweep as Sweep, SweepReadWarning as SweepReadWarning, load as load
from .references import REFERENCES as REFERENCES, reference_for as reference_for
from .tables import (
    best_per_kind as best_per_kind, leaderboard as leaderboard, status_counts as status_counts,
    stop_reasons as stop_reasons,
)
