"""Search spaces: YAML study files (``search_spaces/``) validated and converted for Optuna and Ray.

Contract with the sweep layer (``tune/cli.py``, ``tune/driver/plan.py``, ``tune/trial/trainable.py``)::

    from tune.search.spaces import SearchSpace, SpaceError, list_spaces, load_space   # SpaceError(ValueError)
    space = load_space("quickstart")          # a name from search_spaces/ or a path; fully validated
    space = load_space("delay", overrides={"epochs": 10})   # --set pins keys (a pinned param -> base)
    space = pin_space(space, {"seed": 3})     # pins more keys without reading the file again
    space.name, space.description, space.path, space.text   # text = the YAML source
    space.base            # dict dotted -> value (fixed TrainConfig values, coerced)
    space.params          # dict dotted -> Param (kind, args, when; .branches), dependency order
    space.is_grid         # only grid params
    space.check_search(search)        # SpaceError: grid params with "optuna", non-grid with "grid"
    space.grid_size()                 # grid points; Ray runs each num_samples times
    space.to_param_space(seed=None)   # "random"/"grid": Tuner(param_space=...); conditional params
                                      #   are tune.sample_from(...) giving None when absent
    space.define_by_run(trial)        # "optuna": OptunaSearch(space=space.define_by_run, metric, mode,
                                      #   sampler=TPESampler(seed=seed)); absent params never suggested
    space.resolve(sampled)            # base + sampled minus absent params (and None values)
    drop_absent(config)               # the trainable: TrainConfig.from_dict(drop_absent(config))
    space.fairness_warnings(grace_period, scheduler) -> list[str]   # --strict refuses when non-empty
    space.combination_warning() -> str | None   # some swept values' combinations break a cross rule
    space.describe() -> str           # xbm-tune show-space
    list_spaces() -> list[(name, description)]

Absent parameters: under "random" a conditional param whose condition is off arrives as ``None``;
the trainable drops ``None`` values (``drop_absent``) and the sink writes null. Under "optuna" it is
not in the config at all. TrainConfig has no field whose value may be None, so None always means absent.

Layout: ``errors`` (SpaceError), ``distributions`` (registry), ``param`` (Param/Branch, conditions),
``schema`` (YAML shape), ``validation`` (against TrainConfig), ``combinations`` (cross rules between
swept keys), ``space`` (SearchSpace, conversion),
``fairness`` (ASHA rung check), ``loader`` (load_space, list_spaces).
"""
from tune.search.spaces.distributions import DISTRIBUTIONS
from tune.search.spaces.errors import SpaceError
from tune.search.spaces.loader import SPACES_DIR, list_spaces, load_space, pin_space
from tune.search.spaces.param import Branch, Param
from tune.search.spaces.space import SEARCHES, SearchSpace, drop_absent

__all__ = ["DISTRIBUTIONS", "SEARCHES", "SPACES_DIR", "Branch", "Param", "SearchSpace", "SpaceError",
           "drop_absent", "list_spaces", "load_space", "pin_space"]
