"""Every TrainConfig key provably reaches the computation.

A sweep's worst failure is a swept key that silently stops reaching the code: every trial still runs and
the study is wrong. ``EFFECTS`` maps each dotted key of ``TrainConfig.keys()`` to the effect a non-default
value must have on the built trainer (an attribute of the component it configures: the normaliser's
config, the miner's distance class and margins, the memory size, the scheduler's step, ...) or on a short
seeded toy run. The test is parametrised over ``TrainConfig.keys()``, so a key added without an entry
fails. Keys that cannot change the numbers (paths, devices, worker processes) are ``RuntimeOnly`` with the
reason, and still checked to reach the part that uses them.

Adding a key: add ``"group.name": Attribute(value, read)`` (or ``Check(fn)`` for anything else), where
``read(trainer)`` must give ``value`` (or ``expected``) once ``key=value`` is set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pytest
import torch

from xbm.config import TrainConfig
from xbm.errors import BadImageError, DatasetNotFoundError

from ..conftest import cuda_run_settings_kept
from .conftest import TINY, TINY_TRAIN_SAMPLES, tiny_trainer
from .data.conftest import _write_image, make_drawings, truncate
from .data.test_vehicleid import listed, make_vehicleid

DEFAULTS = TrainConfig.from_dict(TINY).to_dict()


@dataclass(frozen=True)
class Attribute:
    """Building with ``key=value`` (plus ``extra``) makes ``read(trainer) == expected`` (default: value)."""

    value: Any
    read: Callable[[Any], Any]
    expected: Any = None
    extra: dict = field(default_factory=dict)

    def verify(self, key: str, fixtures) -> None:
        assert self.value != DEFAULTS[key], f"{key}: the check must use a non-default value"
        want = self.value if self.expected is None else self.expected
        got = self.read(tiny_trainer(**{**self.extra, key: self.value}))
        assert got == want, f"{key}={self.value!r} must give {want!r} but the built trainer has {got!r}"


@dataclass(frozen=True)
class Check:
    """Any other evidence: ``fn(key, fixtures)`` asserts the effect."""

    fn: Callable[[str, Any], None]

    def verify(self, key: str, fixtures) -> None:
        self.fn(key, fixtures)


@dataclass(frozen=True)
class RuntimeOnly:
    """A key that cannot change the numbers (``reason``); ``check`` still shows that it reaches its user."""

    reason: str
    check: Optional[Callable[[str, Any], None]] = None

    def verify(self, key: str, fixtures) -> None:
        assert self.reason
        if self.check is not None:
            self.check(key, fixtures)


@dataclass
class Fixtures:
    monkeypatch: pytest.MonkeyPatch
    tmp_path: Any


# ---- the custom checks ---------------------------------------------------------------------------
def _normaliser_field(name: str) -> Callable[[Any], Any]:
    return lambda t: getattr(t.xbm.normaliser.cfg, name)


def _descriptions(**values) -> list[str]:
    seen: list[str] = []
    trainer = tiny_trainer(progress=lambda batches, desc: seen.append(desc) or batches, **values)
    list(trainer.fit())
    return seen


def _epochs(key, fx):
    assert _descriptions(epochs=3) == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]


def _warmup_epochs(key, fx):
    assert _descriptions(warmup_epochs=2) == ["warm-up 1/2", "warm-up 2/2", "epoch 1/1"]


def _evaluate_test(key, fx):
    with_test = list(tiny_trainer(val_fraction=0.25, evaluate_test=True).fit())[0]
    without = list(tiny_trainer(val_fraction=0.25).fit())[0]
    assert 0.0 <= with_test["test_recall_at_1"] <= 1.0 and "test_recall_at_1" not in without


def _train_on(key, fx):
    """The classes a run trains on reach the training set and its row's ``train_classes``; with nothing held out
    the row says what it evaluated on (all: the trained-on test classes)."""
    split = tiny_trainer(val_fraction=0.25)
    rows = {on: list(tiny_trainer(val_fraction=0.25, train_on=on).fit())[0] for on in ("train", "train+val", "all")}
    train, val = (len(s.labels.unique()) for s in (split.splits.train, split.splits.val.query))
    assert rows["train"]["train_classes"] == train and rows["train+val"]["train_classes"] == train + val
    # all: every class but the validation ones (val_fraction > 0 holds them out), then every class (0)
    assert rows["all"]["train_classes"] == split.splits.num_classes - val > train
    every = list(tiny_trainer(val_fraction=0.0, train_on="all").fit())[0]
    assert every["train_classes"] == split.splits.num_classes
    assert [rows[on]["eval_split"] for on in ("train", "train+val", "all")] == ["val", "test", "val"]
    assert every["eval_split"] == "train"


def _omniglot(fx, **values):
    """A tiny trainer on an Omniglot-layout fixture of 4 alphabets x 4 characters x 4 drawers."""
    root = fx.tmp_path / "omniglot4"
    if not root.exists():
        make_drawings(root, alphabets=("Alpha", "Beta", "Gamma", "Delta"), characters=4, drawers=4)
    return tiny_trainer(dataset="omniglot", data_root=str(root), image_size=16, batch_size=8, samples_per_class=2,
                        **values)


def _val_by(key, fx):
    """``val_by=superclass`` holds out whole alphabets (named in the row); ``class`` single characters."""
    by_alphabet = _omniglot(fx, val_fraction=0.5, val_by="superclass", train_on="all")
    sup = by_alphabet.splits.superclass_of
    held = set(sup[by_alphabet.splits.val.query.labels].tolist())
    assert len(held) == 2 and held.isdisjoint(sup[by_alphabet.splits.train.labels].tolist())
    assert list(by_alphabet.fit())[0]["val_superclasses"] == ",".join(by_alphabet.splits.val_superclasses)
    by_class = _omniglot(fx, val_fraction=0.5, train_on="all")
    assert by_class.splits.val_superclasses == () and len(by_class.splits.val.query.labels.unique()) == 4


def _oneshot_episodes(key, fx):
    """The number of one-shot episodes reaches the validation split and its row's ``val_oneshot_error``; 0: none."""
    three = _omniglot(fx, val_fraction=0.5, val_by="superclass", train_on="all", oneshot_episodes=3)
    row = list(three.fit())[0]
    assert len(three.splits.val.episodes) == 3 and 0.0 <= row["val_oneshot_error"] <= 100.0
    none = _omniglot(fx, val_fraction=0.5, val_by="superclass", train_on="all", oneshot_episodes=0)
    assert none.splits.val.episodes is None and "val_oneshot_error" not in list(none.fit())[0]


def _omniglot_rotations(key, fx):
    """Four rotations: four classes per character, the drawings four times over."""
    plain, turned = (_omniglot(fx, omniglot_rotations=k) for k in (1, 4))
    assert turned.splits.num_classes == 4 * plain.splits.num_classes
    assert len(turned.splits.train) == 4 * len(plain.splits.train)


def _eval_every(key, fx):
    rows = list(tiny_trainer(epochs=4, eval_every=2).fit())
    assert ["recall_at_1" in r for r in rows] == [False, True, False, True]


def _eval_nmi(key, fx):
    """``eval_nmi=false`` leaves out the k-means (minutes a evaluation at SOP scale without faiss)."""
    on, off = (list(tiny_trainer(eval_nmi=flag).fit())[0] for flag in (True, False))
    assert 0.0 <= on["nmi"] <= 1.0 and "nmi" not in off and off["recall_at_1"] == on["recall_at_1"]


def _eval_ks(key, fx):
    default = list(tiny_trainer(val_fraction=0.25, evaluate_test=True).fit())[0]   # toy: (1, 10)
    row = list(tiny_trainer(val_fraction=0.25, evaluate_test=True, eval_ks="1,3,40").fit())[0]
    recalls = sorted(name for name in row if "recall_at_" in name and not name.startswith("reference"))
    assert recalls == ["recall_at_1", "recall_at_3", "recall_at_40", "test_recall_at_1", "test_recall_at_3",
                       "test_recall_at_40"]
    assert "recall_at_10" in default and "recall_at_3" not in default
    assert row["recall_at_1"] <= row["recall_at_3"] <= row["recall_at_40"]


def _vehicleid_test_size(key, fx):
    root = fx.tmp_path / "vehicleid"
    make_vehicleid(root, _write_image)
    vehicleid = {"dataset": "vehicleid", "data_root": str(root), "image_size": 8, "batch_size": 4,
                 "samples_per_class": 2}
    for size in (800, 2400):
        trainer = tiny_trainer(**vehicleid, vehicleid_test_size=size)
        assert len(trainer.splits.test.query) == len(listed(size)) and trainer.splits.test.gallery is None


def _memory_prefill(key, fx):
    trainer = tiny_trainer(**{"memory.prefill": True})
    trainer.prepare()
    first_step: list[int] = []
    trainer.xbm.register_forward_pre_hook(lambda module, args: first_step.append(len(module.memory)))
    trainer.train_epoch(1)
    assert first_step[0] == trainer.xbm.memory.size   # full before the memory's first step (else empty)


def _sampler(key, fx):
    trainer = tiny_trainer(sampler="random", batch_size=30)   # 30: no whole classes of samples_per_class=4
    assert type(trainer.loader.sampler.sampler).__name__ == "ShuffledIndices"
    drawn = [int(i) for _, _, indices in trainer.loader for i in indices]
    assert len(drawn) == len(set(drawn)) == TINY_TRAIN_SAMPLES // 30 * 30   # each image at most once a pass
    assert len(list(trainer.fit())) == 1


def _seed(key, fx):
    a, b = tiny_trainer(), tiny_trainer(seed=1)
    assert not torch.equal(a.model.head.weight, b.model.head.weight)  # initial weights follow the seed
    assert list(a.fit())[0]["loss"] != list(b.fit())[0]["loss"]


def _clip_grad(key, fx):
    norms: list[float] = []
    real = torch.nn.utils.clip_grad_norm_
    fx.monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda p, max_norm, **kw: norms.append(max_norm)
                           or real(p, max_norm, **kw))
    list(tiny_trainer(clip_grad=0.25).fit())
    assert norms and set(norms) == {0.25}


def _pretrained(key, fx):
    import timm

    asked: list[bool] = []
    real = timm.create_model
    fx.monkeypatch.setattr(timm, "create_model", lambda name, pretrained=False, **kw: asked.append(pretrained)
                           or real(name, pretrained=False, **kw))
    tiny_trainer(dataset="digits", model="test_resnet", image_size=16, batch_size=20, pretrained=True)
    assert asked == [True]


def _pretrained_path(key, fx):
    from xbm.models import MLPBackbone

    backbone = MLPBackbone(40)
    torch.nn.init.constant_(backbone.layers[1].weight, 0.125)
    path = fx.tmp_path / "backbone.pth"
    torch.save(backbone.state_dict(), path)
    loaded = tiny_trainer(pretrained_path=str(path)).model.backbone
    assert torch.equal(loaded.layers[1].weight, backbone.layers[1].weight)


def _image_size(key, fx):
    trainer = tiny_trainer(dataset="digits", image_size=12, batch_size=20)
    image = trainer.splits.train[0][0]
    assert tuple(image.shape[-2:]) == (12, 12)
    assert trainer.model.backbone.layers[1].in_features == 1 * 12 * 12  # digits: one grey channel


def _data_root(key, fx):
    with pytest.raises(DatasetNotFoundError) as info:
        tiny_trainer(dataset="sop", data_root=str(fx.tmp_path / "sop"))
    assert info.value.path.startswith(str(fx.tmp_path / "sop"))


def _num_workers(key, fx):
    assert tiny_trainer(num_workers=1).loader.num_workers == 1


def _prefetch_next_epoch(key, fx):
    images = {"dataset": "digits", "model": "test_resnet", "image_size": 16, "batch_size": 20, "epochs": 2,
              "warmup_epochs": 0, "num_workers": "1"}
    for flag, drawn in ((True, True), (False, False)):
        trainer = tiny_trainer(**images, prefetch_next_epoch=flag)
        trainer.prepare()
        trainer._main_epoch(1)
        assert (trainer.ahead is not None) == drawn, f"prefetch_next_epoch={flag}"


def _normalize(key, fx):
    digits = {"dataset": "digits", "image_size": 16, "batch_size": 20}
    assert tiny_trainer(**digits, normalize="none").splits.statistics is None
    imagenet = tiny_trainer(**digits, normalize="imagenet").splits.statistics
    assert imagenet.mean[0] == pytest.approx((0.485 + 0.456 + 0.406) / 3)
    own = tiny_trainer(**digits).splits.statistics  # auto, from scratch: the digits' own statistics
    assert own.mean[0] != pytest.approx(imagenet.mean[0])


def _image_cache(key, fx):
    from xbm.data import cache

    fx.monkeypatch.setattr(cache, "MEMORY_BUDGET", 1)  # nothing fits in memory: the folder is used
    folder = fx.tmp_path / "decoded"
    trainer = tiny_trainer(dataset="digits", image_size=13, batch_size=20, image_cache=str(folder))
    assert isinstance(trainer.splits.transforms.images.pixels, np.memmap)
    assert [p.name.startswith("digits-13-") for p in folder.iterdir() if not p.name.startswith(".")] == [True]


def _on_bad_image(key, fx):
    root = fx.tmp_path / "omniglot"
    bad = truncate(make_drawings(root)[0])  # a training drawing: 16 train, 16 test
    omniglot = {"dataset": "omniglot", "data_root": str(root), "image_size": 16, "batch_size": 8,
                "samples_per_class": 2}
    with pytest.raises(BadImageError, match=str(bad)):
        tiny_trainer(**omniglot)  # stop, the default
    with pytest.warns(UserWarning, match="1 image"):
        trainer = tiny_trainer(**omniglot, on_bad_image="skip")
    assert len(trainer.splits.train) == 15 and list(trainer.fit())[0]["skipped_images"] == 1


def _compile(key, fx):
    assert tiny_trainer(compile="default").model._compiled_call_impl is not None
    assert tiny_trainer().model._compiled_call_impl is None


def _device(key, fx):
    if torch.cuda.is_available():
        with cuda_run_settings_kept():   # the CUDA runtime sets TF32 and cuDNN's benchmark mode for the process
            assert tiny_trainer(device="cuda").runtime.device.type == "cuda"
    else:
        with pytest.raises(ValueError, match="device must be available"):
            tiny_trainer(device="cuda")
    assert tiny_trainer(device="cpu").runtime.device == torch.device("cpu")


def _workers(key, fx):
    # a run of 2 workers needs the process group's Ranks: the key reaches the trainer's check
    with pytest.raises(ValueError, match="workers=2 must equal the data-parallel world size"):
        tiny_trainer(workers=2)


def _sync_bn(key, fx):
    from xbm.training.sync_bn import count_sync_batchnorm
    images = {"dataset": "digits", "model": "test_resnet", "image_size": 32, "batch_size": 20}
    assert count_sync_batchnorm(tiny_trainer(**images, sync_bn="on").model) > 0
    assert count_sync_batchnorm(tiny_trainer(**images).model) == 0   # auto with one worker: plain BatchNorm


def _neighbours_pool(key, fx):
    trainer = tiny_trainer(**{**NEIGHBOURS, "neighbours.pool": 7})
    trainer._batches("epoch 1/1", epoch_index=0)
    assert trainer.objective.pool_indices.shape == (TINY_TRAIN_SAMPLES, 7)


def _neighbours_refresh_epochs(key, fx):
    from xbm.objectives import neighbours

    built: list[int] = []
    real = neighbours.build_pool
    fx.monkeypatch.setattr(neighbours, "build_pool", lambda e, size: built.append(1) or real(e, size))
    list(tiny_trainer(**NEIGHBOURS, epochs=4, **{"neighbours.refresh_epochs": 3}).fit())
    assert len(built) == 2  # before epochs 1 and 4 (0-based 0 and 3)


NEIGHBOURS = {"objective": "neighbours", "neighbours.threshold": 0.3, "neighbours.pool": 10}
MOCO = {"objective": "moco"}
MS = {"loss.kind": "multi_similarity", "miner.kind": "none"}

NORMALISER_VALUES = {
    "centre_only": True, "unit_norm": True, "delay_epochs": 3, "lambda_mu": 0.25, "lambda_sigma": 0.75,
    "absent": "skip", "kalman_r": 0.5, "kalman_ratio": 0.05, "kalman_q": 2.0, "kalman_p0": 3.0, "kalman_interval": 4,
    "ema_momentum": 0.3, "eps": 1e-4,
}

EFFECTS: dict[str, Any] = {
    "dataset": Attribute("digits", lambda t: (t.splits.input_kind, t.splits.num_train_classes), ("image", 5),
                         extra={"image_size": 16, "batch_size": 20}),
    "data_root": RuntimeOnly("where the data set's files are read from: the numbers follow the files, not "
                             "their path (toy ignores it)", _data_root),
    "val_fraction": Attribute(0.25, lambda t: (t.splits.val is not None, len(list(t.fit())) and t.epoch),
                              (True, 1)),
    "evaluate_test": Check(_evaluate_test),
    "train_on": Check(_train_on),
    "val_by": Check(_val_by),
    "oneshot_episodes": Check(_oneshot_episodes),
    "omniglot_rotations": Check(_omniglot_rotations),
    "eval_every": Check(_eval_every),
    "eval_ks": Check(_eval_ks),
    "eval_nmi": Check(_eval_nmi),
    "vehicleid_test_size": Check(_vehicleid_test_size),
    "model": Attribute("test_resnet", lambda t: t.model.backbone.pretrained_cfg["architecture"],
                       extra={"dataset": "digits", "image_size": 16, "batch_size": 20}),
    "embedding_size": Attribute(24, lambda t: (t.model.head.out_features, t.xbm.memory.dim), (24, 24)),
    "pretrained": Check(_pretrained),
    "pretrained_path": Check(_pretrained_path),
    "image_size": Check(_image_size),
    "augment": Attribute("none", lambda t: t.splits.augment, extra={"dataset": "digits", "image_size": 16,
                                                                    "batch_size": 20}),
    "normalize": Check(_normalize),
    "image_cache": RuntimeOnly("where decoded images are kept: the same pixels as decoding them each time "
                               "(tests/xbm/data/test_cache.py)", _image_cache),
    "on_bad_image": Check(_on_bad_image),
    "epochs": Check(_epochs),
    "warmup_epochs": Check(_warmup_epochs),
    "batch_size": Attribute(16, lambda t: (t.loader.batch_size, t.loader.sampler.sampler.batch_size), (16, 16)),
    "samples_per_class": Attribute(2, lambda t: t.loader.sampler.sampler.m_per_class),
    "sampler": Check(_sampler),
    "lr": Attribute(3e-3, lambda t: {g["lr"] for g in t.optimizer.param_groups}, {3e-3}),
    "weight_decay": Attribute(0.05, lambda t: {g["weight_decay"] for g in t.optimizer.param_groups}, {0.05}),
    "lr_step": Attribute(3, lambda t: t.scheduler.step_size),
    "lr_gamma": Attribute(0.5, lambda t: t.scheduler.gamma),
    "optimizer": Attribute("sgd", lambda t: type(t.optimizer).__name__, "SGD"),
    "momentum": Attribute(0.5, lambda t: {g["momentum"] for g in t.optimizer.param_groups}, {0.5},
                          extra={"optimizer": "sgd"}),
    "nesterov": Attribute(True, lambda t: {g["nesterov"] for g in t.optimizer.param_groups}, {True},
                          extra={"optimizer": "sgd"}),
    "schedule": Attribute("cosine", lambda t: t.scheduler.lr_lambdas[0].schedule),
    "min_lr": Attribute(1e-5, lambda t: t.scheduler.lr_lambdas[0].min_factor, 1e-5 / 2e-4,
                        extra={"schedule": "cosine", "lr": 2e-4}),
    "milestones": Attribute("2,5", lambda t: t.scheduler.lr_lambdas[0].milestones, (2, 5),
                            extra={"schedule": "multistep"}),
    "warmup_lr_epochs": Attribute(3, lambda t: (t.scheduler.lr_lambdas[0].warmup, t.optimizer.param_groups[0]["lr"]),
                                  (3, 1e-3 / 4), extra={"lr": 1e-3}),
    "amp": Attribute("bf16", lambda t: t.runtime.amp_dtype, torch.bfloat16),
    "clip_grad": Check(_clip_grad),
    "seed": Check(_seed),
    "objective": Attribute("instance", lambda t: (t.objective.name, type(t.loader.sampler.sampler).__name__,
                                                  type(t.batch_loss.loss).__name__, t.batch_loss.miner),
                           ("instance", "ShuffledIndices", "NTXentLoss", None)),
    "num_workers": RuntimeOnly("worker processes only load batches; vector data has no augmentation to draw",
                               _num_workers),
    "prefetch_next_epoch": RuntimeOnly("when the next epoch's batches are drawn, not which: the same batches "
                                       "(tests/xbm/trainer/test_trainer_ahead.py)", _prefetch_next_epoch),
    "device": RuntimeOnly("where the run computes, not what (CPU and CUDA agree up to rounding)", _device),
    "workers": RuntimeOnly("N data-parallel workers compute the one-worker run, split N ways (equal memory, "
                           "loss and weights: tests/xbm/training/test_distributed.py)", _workers),
    "sync_bn": Check(_sync_bn),
    "compile": RuntimeOnly("torch.compile of the same model: the loss agrees within 1e-4 (tests/xbm/test_models.py)",
                           _compile),
    "memory.enabled": Attribute(False, lambda t: (t.xbm, t.criterion(5) is t.batch_loss), (None, True)),
    # ceil, not floor: 0.3 x 192 = 57.6 rows -> 58.
    "memory.ratio": Attribute(0.3, lambda t: t.xbm.memory.size, math.ceil(0.3 * TINY_TRAIN_SAMPLES)),
    "memory.start_epoch": Attribute(2, lambda t: (t.criterion(1) is t.batch_loss, t.criterion(2) is t.xbm),
                                    (True, True)),
    "memory.batch_loss_weight": Attribute(0.5, lambda t: t.xbm.batch_loss_weight),
    "memory.prefill": Check(_memory_prefill),
    "memory.update": Attribute("indexed", lambda t: (type(t.xbm.memory).__name__, t.xbm.memory.size),
                               ("IndexedMemory", TINY_TRAIN_SAMPLES), extra={"memory.ratio": 1.0}),
    "normaliser.kind": Attribute("pcxbn", lambda t: (t.xbm.normaliser.kind, t.xbm.normaliser.cfg.kind),
                                 ("pcxbn", "pcxbn")),
    **{f"normaliser.{name}": Attribute(value, _normaliser_field(name)) for name, value in NORMALISER_VALUES.items()},
    "miner.kind": Attribute("none", lambda t: (t.xbm.miner, t.batch_loss.miner), (None, None)),
    "miner.distance": Attribute("cosine", lambda t: {type(m.distance).__name__ for m in (t.xbm.miner, t.batch_loss.miner)},
                                {"CosineSimilarity"}),
    "miner.pos_margin": Attribute(0.35, lambda t: {t.xbm.miner.pos_margin, t.batch_loss.miner.pos_margin}, {0.35}),
    "miner.neg_margin": Attribute(0.65, lambda t: {t.xbm.miner.neg_margin, t.batch_loss.miner.neg_margin}, {0.65}),
    "moco.momentum": Attribute(0.9, lambda t: t.objective.momentum, extra=MOCO),
    "moco.bn_splits": Attribute(4, lambda t: t.objective.bn_splits, extra=MOCO),
    "neighbours.k": Attribute(1, lambda t: (t.objective.k, t.loader.sampler.sampler.k), (1, 1), extra=NEIGHBOURS),
    "neighbours.pool": Check(_neighbours_pool),
    "neighbours.threshold": Attribute(0.5, lambda t: t.loader.sampler.sampler.threshold, extra=NEIGHBOURS),
    "neighbours.refresh_epochs": Check(_neighbours_refresh_epochs),
    "neighbours.neg_margin": Attribute(0.25, lambda t: {t.xbm.loss.neg_margin, t.batch_loss.loss.neg_margin},
                                       {0.25}, extra=NEIGHBOURS),
    "loss.temperature": Attribute(0.3, lambda t: {t.xbm.loss.temperature, t.batch_loss.loss.temperature,
                                                  t.warmup_loss.loss.temperature}, {0.3}),
    "loss.kind": Attribute("triplet", lambda t: {type(c.loss).__name__ for c in (t.xbm, t.batch_loss, t.warmup_loss)},
                           {"TripletMarginLoss"}),
    "loss.distance": Attribute("lp", lambda t: {type(c.loss.distance).__name__ for c in (t.xbm, t.batch_loss)},
                               {"LpDistance"}, extra={"loss.kind": "triplet"}),
    "loss.pos_margin": Attribute(0.8, lambda t: {t.xbm.loss.pos_margin, t.batch_loss.loss.pos_margin}, {0.8},
                                 extra={"loss.kind": "contrastive"}),
    "loss.neg_margin": Attribute(0.2, lambda t: {t.xbm.loss.neg_margin, t.batch_loss.loss.neg_margin}, {0.2},
                                 extra={"loss.kind": "contrastive"}),
    # the XBM paper's sum per anchor on both losses (the memory's and the batch's), not PML's mean over pairs
    "loss.reduction": Attribute("per_anchor", lambda t: {type(r).__name__ for c in (t.xbm, t.batch_loss)
                                                         for r in c.loss.reducer.reducers.values()},
                                {"PerAnchorSumReducer"}, extra={"loss.kind": "contrastive"}),
    "loss.margin": Attribute(0.3, lambda t: {t.xbm.loss.margin, t.batch_loss.loss.margin}, {0.3},
                             extra={"loss.kind": "triplet"}),
    **{f"loss.{name}": Attribute(value, lambda t, name=name: {getattr(t.xbm.loss, name),
                                                              getattr(t.batch_loss.loss, name)}, {value}, extra=MS)
       for name, value in (("alpha", 3.0), ("beta", 20.0), ("base", 0.3))},
    # MS's own miner on both losses (the config requires miner.kind=none with it), and none without it
    "loss.ms_mining": Attribute(False, lambda t: (t.xbm.miner, t.batch_loss.miner), (None, None), extra=MS),
    "loss.ms_epsilon": Attribute(0.3, lambda t: {t.xbm.miner.epsilon, t.batch_loss.miner.epsilon}, {0.3}, extra=MS),
}


# `device` builds a trainer on the GPU where there is one (scripts/gpu_check.sh's CUDA tests)
@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.cuda(optional=True)) if k == "device" else k
                                 for k in TrainConfig.keys()])
def test_every_config_key_reaches_the_computation(key, monkeypatch, tmp_path):
    """Bug caught: a key that stops reaching the component it configures (e.g. the trainer building the
    normaliser from kind and delay only, batch_loss_weight forced to 0, cosine silently becoming Lp, lr_step
    ignored, the memory size floored), or a new key added without a documented effect."""
    assert key in EFFECTS, f"{key} has no entry in EFFECTS: say what it must change (or why nothing)"
    EFFECTS[key].verify(key, Fixtures(monkeypatch, tmp_path))


def test_the_table_names_only_real_keys():
    """Bug caught: an entry left behind for a renamed or removed key (the rename would go unchecked)."""
    assert set(EFFECTS) - set(TrainConfig.keys()) == set()
