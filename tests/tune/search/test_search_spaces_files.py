"""Every shipped search_spaces/*.yaml loads, validates, cites its source, and yields runnable configs."""
from __future__ import annotations

import optuna
import pytest

from tune.search.spaces import SPACES_DIR, drop_absent, list_spaces, load_space
from xbm.config import TrainConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)

REQUIRED = ["quickstart", "variants", "pcxbn_lambdas", "scxbn_lambdas", "axbn_kalman", "delay", "miner_margins",
            "memory_ratio", "batch_size", "full", "moco_xbn", "neighbours", "losses"]
SHIPPED = sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))
CITATIONS = ("thesis", "paper")


def test_every_required_space_is_shipped_and_listed():
    assert set(REQUIRED) <= set(SHIPPED)
    assert [name for name, _ in list_spaces()] == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_space_loads_cites_its_source_and_yields_valid_configs(name):
    space = load_space(name)
    assert space.text == (SPACES_DIR / f"{name}.yaml").read_text() and space.params
    assert any(word in space.description for word in CITATIONS), space.description
    searches = [s for s in ("optuna", "random", "grid") if _accepts(space, s)]
    assert searches, f"{name} runs with no searcher"
    if "optuna" in searches:
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        for _ in range(20):
            trial = study.ask()
            constants = space.define_by_run(trial) or {}
            TrainConfig.from_dict(space.resolve({**constants, **trial.params}))
            study.tell(trial, 0.0)
    else:
        import itertools

        grids = {k: p.args for k, p in space.params.items()}
        for point in itertools.product(*grids.values()):
            TrainConfig.from_dict(drop_absent(space.resolve(dict(zip(grids, point)))))


def test_real_data_spaces_need_no_data_to_validate():
    # data_root is empty in every shipped file: validation must not look for files.
    for name in SHIPPED:
        assert load_space(name).fixed["data_root"] == ""


def test_quickstart_is_a_cpu_toy_sweep():
    base = load_space("quickstart").base
    assert base["dataset"] == "toy" and base["model"] == "mlp" and base["epochs"] <= 10


def _accepts(space, search):
    try:
        space.check_search(search)
    except ValueError:
        return False
    return True


def test_the_losses_space_gives_each_loss_its_own_parameters_and_the_memory_its_normaliser():
    """Bugs caught: a loss's parameters sampled for another loss (a triplet trial carrying contrastive margins
    would read as a contrastive effect in the analysis), MS's mining switch missing, or the normaliser swept
    for runs without a memory (the normaliser then does nothing and splits the no-memory arm in two)."""
    space = load_space("losses")
    own = {"supcon": {"loss.temperature"}, "ntxent": {"loss.temperature"},
           "contrastive": {"loss.pos_margin", "loss.neg_margin"}, "triplet": {"loss.margin"},
           "multi_similarity": {"loss.alpha", "loss.beta", "loss.base", "loss.ms_mining"}}
    every = set().union(*own.values())
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(80):
        trial = study.ask()
        space.define_by_run(trial)
        params = trial.params
        kind, memory = params["loss.kind"], params["memory.enabled"]
        assert set(params) & every == own[kind], params
        assert ("normaliser.kind" in params) == memory and ("memory.ratio" in params) == memory
        cfg = TrainConfig.from_dict(space.resolve(params))
        assert cfg.loss.kind == kind and cfg.miner.kind == "none"
        seen.add((kind, memory, params.get("normaliser.kind")))
        study.tell(trial, 0.0)
    assert {k for k, _, _ in seen} == set(own) and {n for _, m, n in seen if m} == {"none", "xbn"}
