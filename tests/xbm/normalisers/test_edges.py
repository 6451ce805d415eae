"""Edge cases: tiny memories and batches, a class with one memory row, errors with rule and value."""
from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from xbm.normalisers import NormaliserConfig, build_normaliser
from xbm.registries import NORMALISERS as KINDS
from xbm.normalisers.registry import NORMALISERS


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_memory,n_batch", [(0, 8), (1, 8), (6, 1)])
def test_fewer_than_two_rows_leave_the_memory_unchanged(kind, n_memory, n_batch):
    norm = build_normaliser(NormaliserConfig(kind=kind, unit_norm=True), superclass_of=torch.zeros(4, dtype=torch.long))
    memory, batch = torch.randn(n_memory, 3), torch.randn(n_batch, 3)
    out = norm(memory, torch.zeros(n_memory, dtype=torch.long), batch, torch.zeros(n_batch, dtype=torch.long))
    torch.testing.assert_close(out, memory, rtol=0, atol=0)


def test_class_with_one_memory_row_gets_the_global_transform_or_is_skipped():
    torch.manual_seed(0)
    memory = torch.randn(7, 4) * 2 + 1
    memory_labels = torch.tensor([0, 0, 0, 1, 1, 1, 2])    # class 2: a single memory row
    batch, batch_labels = torch.randn(6, 4), torch.tensor([0, 0, 1, 1, 2, 2])
    xbn = build_normaliser(NormaliserConfig(kind="xbn"))(memory, memory_labels, batch, batch_labels)
    pc = build_normaliser(NormaliserConfig(kind="pcxbn"))(memory, memory_labels, batch, batch_labels)
    skip = build_normaliser(NormaliserConfig(kind="pcxbn", absent="skip"))(memory, memory_labels, batch, batch_labels)
    torch.testing.assert_close(pc[6], xbn[6])
    torch.testing.assert_close(skip[6], memory[6], rtol=0, atol=0)
    assert not torch.allclose(pc[:6], xbn[:6])   # classes 0 and 1 were adapted per class


def test_per_class_target_moments_are_the_lambda_blend():
    """With lambda_mu = lambda_sigma = 0 each class is mapped exactly onto its batch moments."""
    torch.manual_seed(1)
    memory, memory_labels = torch.randn(40, 3) * 3 - 2, torch.arange(40) % 2
    batch, batch_labels = torch.randn(10, 3), torch.arange(10) % 2
    out = build_normaliser(NormaliserConfig(kind="pcxbn", lambda_mu=0.0, lambda_sigma=0.0))(
        memory, memory_labels, batch, batch_labels)
    for c in (0, 1):
        torch.testing.assert_close(out[memory_labels == c].mean(0), batch[batch_labels == c].mean(0))
        torch.testing.assert_close(out[memory_labels == c].std(0), batch[batch_labels == c].std(0))


def test_scxbn_requires_superclasses_and_labels_in_range_checked_once_per_data_set():
    """Bugs caught: a missing or malformed map accepted; a data set whose labels (bound ``num_labels``)
    overrun the map, or a negative super-class id, accepted at construction (the range is checked there,
    once per data set, not in every step)."""
    with pytest.raises(ValueError, match="superclass_of"):
        build_normaliser(NormaliserConfig(kind="scxbn"))
    with pytest.raises(ValueError, match="1-D integer"):
        build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 3\).*\[0, 5\]"):
        build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.tensor([0, 0, 1]), num_labels=6)
    with pytest.raises(ValueError, match=">= 0, but got -1"):
        build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.tensor([0, -1, 1]))
    ok = build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.tensor([0, 0, 1]), num_labels=3)
    assert ok.num_labels == 3


def test_unknown_kind_lists_the_valid_ones():
    cfg = NormaliserConfig()
    object.__setattr__(cfg, "kind", "bogus")   # bypass the config's own check to reach the registry's
    with pytest.raises(ValueError, match=r"normaliser.kind must be one of \['none', 'xbn', 'axbn', 'ema', 'pcxbn', 'scxbn'\].*'bogus'"):
        build_normaliser(cfg)


@pytest.mark.parametrize("field,value,rule", [
    ("kind", "pc-xbn", "one of ['none', 'xbn', 'axbn', 'ema', 'pcxbn', 'scxbn']"),
    ("absent", "drop", "one of ['global', 'skip']"), ("lambda_mu", 1.5, "0 <= lambda_mu <= 1"),
    ("lambda_mu", -0.1, "0 <= lambda_mu <= 1"), ("lambda_sigma", -0.1, "0 <= lambda_sigma <= 1"),
    ("lambda_sigma", 1.5, "0 <= lambda_sigma <= 1"), ("kalman_r", -1.0, ">= 0"), ("kalman_q", 0.0, "> 0"),
    ("kalman_p0", 0.0, "> 0"), ("kalman_interval", 0, ">= 1"), ("ema_momentum", 1.0, "0 <= ema_momentum < 1"),
    ("ema_momentum", -0.2, "0 <= ema_momentum < 1"), ("delay_epochs", -1, ">= 0"), ("eps", 0.0, "> 0"),
    ("centre_only", 1, "a boolean"), ("kalman_ratio", -0.5, "kalman_ratio >= 0, or -1.0 (not set: r is kalman_r)"),
])
def test_bad_configurations_raise_with_rule_and_value(field, value, rule):
    """Bug caught: a bound that lets a bad value through (e.g. lambda_sigma <= 2), or a message whose
    rule or value is garbled (matched whole, not as a substring)."""
    with pytest.raises(ValueError, match=f"^{re.escape(f'normaliser.{field} must satisfy {rule}, but got {value!r}')}$"):
        NormaliserConfig(**{field: value})


def test_mismatched_shapes_raise():
    norm = build_normaliser(NormaliserConfig(kind="xbn"))
    with pytest.raises(ValueError, match="same d"):
        norm(torch.randn(4, 3), torch.zeros(4, dtype=torch.long), torch.randn(2, 5), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="one label per row"):
        norm(torch.randn(4, 3), torch.zeros(3, dtype=torch.long), torch.randn(2, 3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="^cfg must be a NormaliserConfig, but got dict$"):
        NORMALISERS["xbn"](dataclasses.asdict(NormaliserConfig()))


def test_out_must_match_the_memory():
    norm = build_normaliser(NormaliserConfig(kind="xbn"))
    memory, labels = torch.randn(4, 3), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="out must match"):
        norm(memory, labels, memory, labels, out=torch.empty(4, 3, dtype=torch.float64))


def test_a_kind_without_hooks_names_itself_and_the_missing_hooks():
    """Bug caught (mutation testing): the base ``target_moments`` raising without saying which class
    lacks which hook (a new kind registered without ``target_moments`` or ``adapt``)."""
    from xbm.normalisers.base import Normaliser

    class Bare(Normaliser):
        kind = "bare"

    memory, labels = torch.randn(4, 2), torch.zeros(4, dtype=torch.long)
    with pytest.raises(NotImplementedError, match="^Bare must implement target_moments or adapt$"):
        Bare(NormaliserConfig(kind="xbn"))(memory, labels, memory, labels)


def test_the_bounds_of_every_range_are_accepted():
    """Bug caught (mutation testing): a closed bound made open (``<=`` -> ``<``): lambda 0 or 1 (pure
    per-group or pure whole-batch targets), r = 0 (AXBN = XBN), momentum 0, no delay, interval 1."""
    cfg = NormaliserConfig(lambda_mu=1.0, lambda_sigma=0.0, kalman_r=0.0, ema_momentum=0.0, delay_epochs=0,
                           kalman_interval=1)
    assert (cfg.lambda_mu, cfg.lambda_sigma) == (1.0, 0.0)
    assert NormaliserConfig(lambda_mu=0.0, lambda_sigma=1.0).lambda_mu == 0.0


@pytest.mark.parametrize("field,value", [("delay_epochs", 1.5), ("delay_epochs", True), ("kalman_interval", 2.0),
                                         ("kalman_interval", True), ("unit_norm", "yes")])
def test_counts_must_be_integers_and_switches_booleans(field, value):
    """Bug caught (mutation testing): the integer check loosened (``and not`` -> ``or not``), so a
    fractional delay or Kalman interval (or True) from a hand-written search space passes silently."""
    rule = "a boolean" if field == "unit_norm" else "an integer"
    with pytest.raises(ValueError, match=rf"normaliser\.{field} must satisfy {rule}, but got {value!r}"):
        NormaliserConfig(**{field: value})


def test_the_package_resolves_its_lazy_names_at_use_time():
    """Bug caught (mutation testing): the package's lazy ``__getattr__`` resolving a name from the wrong
    module (or to None), or an unknown name not raising the AttributeError that ``hasattr`` relies on.
    Looked up inside the test: names imported at collection time never reach ``__getattr__``."""
    import importlib

    package = importlib.import_module("xbm.normalisers")
    registry, stats, base = (importlib.import_module(f"xbm.normalisers.{m}") for m in ("registry", "stats", "base"))
    assert package.build_normaliser is registry.build_normaliser and package.NORMALISERS is registry.NORMALISERS
    assert package.Moments is stats.Moments and package.Normaliser is base.Normaliser
    with pytest.raises(AttributeError, match=r"xbm\.normalisers.*bogus"):
        package.bogus
    assert not hasattr(package, "bogus")


def test_scxbn_errors_say_what_to_pass():
    """Bug caught (mutation testing): the scxbn errors losing their advice (what ``superclass_of`` is,
    the alternative kind, the dtype and shape that were passed)."""
    with pytest.raises(ValueError, match=re.escape(
            "normaliser kind 'scxbn' needs superclass_of (a LongTensor mapping class id to super-class id), "
            "but got None; pass it or pick kind 'pcxbn'")):
        build_normaliser(NormaliserConfig(kind="scxbn"))
    with pytest.raises(ValueError, match=re.escape(
            "superclass_of must be a non-empty 1-D integer tensor, but got dtype torch.int64 and shape (3, 2)")):
        build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.zeros(3, 2, dtype=torch.long))


@pytest.mark.parametrize("superclass_of", [torch.tensor([0.0, 1.0, 1.0]), torch.tensor([0.7, 1.2]),
                                           torch.zeros(0, dtype=torch.long)])
def test_scxbn_refuses_float_or_empty_superclass_maps(superclass_of):
    """Bug caught (mutation testing): a float map accepted (``.long()`` would then silently truncate
    super-class ids such as 0.7 -> 0), or an empty map accepted (every label then fails later)."""
    with pytest.raises(ValueError, match="non-empty 1-D integer tensor"):
        build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=superclass_of)


def test_scxbn_accepts_one_superclass_and_keeps_the_map_out_of_checkpoints():
    """Bug caught (mutation testing): a one-element map refused (an ``== 1`` emptiness check), or the
    map saved in the state_dict (it is data-set metadata: a checkpoint would then refuse to load into
    an scxbn normaliser built for another data set split, and carry stale metadata)."""
    norm = build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.tensor([0]))
    assert "superclass_of" not in norm.state_dict()
    assert norm.groups(torch.tensor([0, 0])).tolist() == [0, 0]


def test_scxbn_refuses_a_label_bound_one_past_the_map():
    """Bug caught (mutation testing): the range check ``> n`` loosened to ``> n + 1``: label n then indexes
    past the map and fails with a bare index error instead of naming the range; a bound equal to the map's
    length refused."""
    with pytest.raises(ValueError, match=re.escape("labels must lie in [0, 3) to index superclass_of, but got "
                                                   "labels in [0, 3]")):
        build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.tensor([0, 0, 1]), num_labels=4)
    build_normaliser(NormaliserConfig(kind="scxbn"), superclass_of=torch.tensor([0, 0, 1]), num_labels=3)


def test_a_call_without_epoch_counts_as_epoch_0():
    """Bug caught (mutation testing): ``forward``'s default epoch other than 0, so a caller that does not
    pass the epoch skips the first epochs of the delay (or adapts during it)."""
    norm = build_normaliser(NormaliserConfig(kind="xbn", delay_epochs=1))
    memory, labels = torch.randn(4, 3) * 2 + 1, torch.zeros(4, dtype=torch.long)
    torch.testing.assert_close(norm(memory, labels, torch.randn(3, 3), labels[:3]), memory, rtol=0, atol=0)


def test_shape_errors_give_the_rule_and_the_shapes():
    """Bug caught (mutation testing): the shape checks' messages garbled or losing the shapes, or the
    2-D check weakened (``or`` -> ``and``) so a 1-D memory falls through to a bare IndexError."""
    norm = build_normaliser(NormaliserConfig(kind="xbn"))
    long = dict(dtype=torch.long)
    with pytest.raises(ValueError, match=re.escape("memory [N, d] and batch [B, d] must be 2-D with the same d, "
                                                   "but got memory (4,) and batch (2, 3)")):
        norm(torch.randn(4), torch.zeros(4, **long), torch.randn(2, 3), torch.zeros(2, **long))
    with pytest.raises(ValueError, match=re.escape(
            "labels must be 1-D with one label per row, but got memory_labels (3,) for memory (4, 3) and "
            "batch_labels (2,) for batch (2, 3)")):
        norm(torch.randn(4, 3), torch.zeros(3, **long), torch.randn(2, 3), torch.zeros(2, **long))
    with pytest.raises(ValueError, match=re.escape(
            "out must match memory's shape, dtype and device, but got (4, 3) torch.float64 cpu for memory "
            "(4, 3) torch.float32 cpu")):
        norm(torch.randn(4, 3), torch.zeros(4, **long), torch.randn(2, 3), torch.zeros(2, **long),
             out=torch.empty(4, 3, dtype=torch.float64))


def test_a_ratio_with_an_explicit_r_is_refused_naming_both():
    """Bug caught: kalman_r and kalman_ratio both given and one silently dropped (a sweep of r that the ratio
    overrides, or the reverse): the ratio fixes r = ratio q |B|, so a non-default r with it is refused."""
    rule = ("its default 0.01 when kalman_ratio=0.001 is set (the ratio fixes r = kalman_ratio * q * |B|): give "
            "kalman_r or kalman_ratio, not both")
    with pytest.raises(ValueError, match=f"^{re.escape(f'normaliser.kalman_r must satisfy {rule}, but got 0.5')}$"):
        NormaliserConfig(kind="axbn", kalman_r=0.5, kalman_ratio=0.001)
    assert NormaliserConfig(kind="axbn", kalman_ratio=0.001).measurement_noise(64) == pytest.approx(0.001)


def test_old_keys_still_load_and_mean_r_over_the_batch():
    """Bug caught: configs recorded before kalman_ratio (kalman_r, kalman_q, no ratio) refused on load, or
    their r read through the ratio: r / |B| must stay kalman_r / |B|, the paper's 0.01 / 64 by default."""
    from xbm.config import TrainConfig

    recorded = {k: v for k, v in TrainConfig().to_dict().items() if k != "normaliser.kalman_ratio"}
    recorded.update({"normaliser.kind": "axbn", "normaliser.kalman_r": 0.5, "normaliser.kalman_q": 2.0})
    cfg = TrainConfig.from_dict(recorded).normaliser
    assert (cfg.kalman_r, cfg.kalman_q, cfg.measurement_noise(32)) == (0.5, 2.0, 0.5 / 32)
    assert NormaliserConfig(kind="axbn").measurement_noise(64) == 0.01 / 64


def test_the_gain_interval_reaches_the_papers_100():
    """Bug caught: an upper bound on kalman_interval below the AXBN paper's 100 (§5.1, SOP and In-Shop)."""
    assert NormaliserConfig(kind="axbn", kalman_interval=100).kalman_interval == 100
