"""TrainConfig: dotted names, round trips, coercion of command-line strings, rejections."""
import dataclasses

import pytest

from xbm.config import TrainConfig

ISSUE_KEYS = (
    "dataset", "data_root", "val_fraction", "model", "embedding_size", "pretrained", "pretrained_path",
    "image_size", "epochs", "warmup_epochs", "batch_size", "samples_per_class", "lr", "weight_decay",
    "lr_step", "lr_gamma", "amp", "clip_grad", "seed", "num_workers", "device", "memory.ratio",
    "memory.start_epoch", "memory.batch_loss_weight", "miner.kind", "miner.distance", "miner.pos_margin",
    "miner.neg_margin", "loss.temperature", "normaliser.kind", "normaliser.lambda_mu", "normaliser.kalman_r",
)


def test_issue_names_exist_with_the_issue_defaults():
    keys = TrainConfig.keys()
    assert set(ISSUE_KEYS) <= set(keys)
    flat = TrainConfig().to_dict()
    assert set(flat) == set(keys)
    expected = {"embedding_size": 512, "epochs": 50, "warmup_epochs": 2, "batch_size": 64, "samples_per_class": 4,
                "lr": 1e-4, "lr_step": 15, "lr_gamma": 0.33, "clip_grad": 10.0, "device": "auto", "model": "resnet50",
                "memory.ratio": 0.5, "miner.kind": "pair_margin", "miner.distance": "lp", "miner.pos_margin": 0.2,
                "miner.neg_margin": 0.8, "loss.temperature": 0.1, "memory.enabled": True}
    assert {k: flat[k] for k in expected} == expected


def test_round_trip_flat_and_nested():
    cfg = TrainConfig.from_dict({"lr": 3e-4, "memory.ratio": 0.1, "normaliser": {"kind": "pcxbn", "lambda_mu": 0.2}})
    assert cfg.memory.ratio == 0.1 and cfg.normaliser.kind == "pcxbn" and cfg.normaliser.lambda_mu == 0.2
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(**{"miner.kind": "none"}).miner.kind == "none"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0


def test_strings_from_the_command_line_are_coerced():
    cfg = TrainConfig.from_dict({"epochs": "5", "lr": "1e-3", "pretrained": "false", "memory.enabled": "no",
                                 "normaliser.centre_only": "true", "normaliser.delay_epochs": "2.0"})
    assert (cfg.epochs, cfg.lr, cfg.pretrained, cfg.memory.enabled) == (5, 1e-3, False, False)
    assert cfg.normaliser.centre_only is True and cfg.normaliser.delay_epochs == 2


def test_unknown_key_lists_valid_ones_and_suggests():
    with pytest.raises(ValueError, match="unknown config key 'memory.ration'") as info:
        TrainConfig.from_dict({"memory.ration": 0.3})
    assert "memory.ratio" in str(info.value) and "Valid keys" in str(info.value)


@pytest.mark.parametrize("values, fragment", [
    ({"epochs": "five"}, "epochs must be of type int"),
    ({"epochs": 2.5}, "epochs must be of type int"),
    ({"memory.ratio": 0.0}, "memory.ratio"),
    ({"batch_size": 30}, "multiple of samples_per_class"),
    ({"sampler": "balanced"}, r"sampler must satisfy one of \['m_per_class', 'random'\], but got 'balanced'"),
    ({"vehicleid_test_size": 1000}, r"vehicleid_test_size must satisfy one of \[800, 1600, 2400\]"),
    ({"miner.distance": "manhattan"}, "miner.distance"),
    ({"normaliser.lambda_mu": 2.0}, "lambda_mu"),
    ({"amp": "fp8"}, "amp"),
    ({"device": "tpu"}, "device"),
])
def test_bad_values_state_the_rule_and_value(values, fragment):
    with pytest.raises(ValueError, match=fragment):
        TrainConfig.from_dict(values)


def test_sampler_random_lifts_only_the_whole_class_rules():
    """Bug caught: sampler=random still refusing batches that hold no whole classes (batch_size 30 at 4 samples
    per class; 8 rows per rank of 4 ranks at 16 samples per class), or the relaxation reaching the default
    sampler or the equal-shares rule every data-parallel batch needs."""
    from xbm.checks import batch_split_problem

    TrainConfig.from_dict({"sampler": "random", "batch_size": 30})
    TrainConfig.from_dict({"sampler": "random", "batch_size": 32, "samples_per_class": 16, "workers": 4})
    with pytest.raises(ValueError, match="multiple of workers=3"):
        TrainConfig.from_dict({"sampler": "random", "batch_size": 32, "workers": 3})
    with pytest.raises(ValueError, match="whole multiple of samples_per_class=16"):
        TrainConfig.from_dict({"batch_size": 32, "samples_per_class": 16, "workers": 4})
    assert batch_split_problem(32, 4, "supervised", 16, 1, 1, "random") is None
    assert batch_split_problem(32, 4, "supervised", 16, 1, 1).unit == 16   # default m_per_class: whole classes


def test_the_memory_warm_start_and_update_keys_take_strings_and_default_to_todays_memory():
    """Bug caught: a default that changes every existing run (prefill on, or the indexed layout)."""
    assert (TrainConfig().memory.prefill, TrainConfig().memory.update) == (False, "ring")
    cfg = TrainConfig.from_dict({"memory.prefill": "true", "memory.update": "indexed", "memory.ratio": "1"})
    assert (cfg.memory.prefill, cfg.memory.update, cfg.memory.ratio) == (True, "indexed", 1.0)


@pytest.mark.parametrize("values, message", [
    ({"memory.update": "fifo"}, "memory.update must satisfy one of ['ring', 'indexed'], but got 'fifo'"),
    ({"memory.update": "indexed", "memory.ratio": 0.5},
     "memory.ratio must satisfy 1.0 under memory.update=indexed (one row per training sample: the memory is the "
     "training set's size), but got 0.5"),
    ({"memory.prefill": True, "objective": "moco", "batch_size": 32},
     "memory.prefill must satisfy false under objective=moco (prefill is defined for ['supervised', 'instance']"),
    ({"memory.prefill": True, "objective": "neighbours", "batch_size": 32, "neighbours.k": 3},
     "memory.prefill must satisfy false under objective=neighbours"),
])
def test_contradictory_memory_settings_are_refused_with_the_rule(values, message):
    """Bug caught: an indexed memory silently resized while the sweep's config.memory.ratio column says 0.5, or a
    prefill whose rows would not be what the objective's memory holds (MoCo's key encoder, tuple pseudo-labels)."""
    with pytest.raises(ValueError) as info:
        TrainConfig.from_dict(values)
    assert message in str(info.value)
