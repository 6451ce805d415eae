"""The training run's options: frozen dataclasses addressed by dotted names.

``TrainConfig`` here; its sections beside what they configure (``xbm.memory.config``, ``xbm.losses.config``,
``xbm.normalisers.config``); the text-to-value rules and the batch's split over workers in ``xbm.checks``.

Search spaces, the CLI's ``--set`` and the Parquet ``config.*`` columns all share these names, e.g.
``lr``, ``memory.ratio``, ``normaliser.lambda_mu``, ``miner.pos_margin``. ``TrainConfig.from_dict``
takes a flat dotted dict (or nested dicts), coerces strings from the command line to each field's
type, and rejects unknown keys listing the valid ones.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping, get_type_hints

from xbm.checks import batch_split_problem, checker, coerce, parse_ks, parse_milestones
from xbm.losses.config import LossConfig, MinerConfig, resolve_miner_kind
from xbm.memory.config import MemoryConfig
from xbm.normalisers.config import NormaliserConfig
from xbm.registries import AUGMENTS, OBJECTIVES, OPTIMIZERS

SCHEDULES = ("step", "cosine", "multistep")
AMP_MODES = ("off", "fp16", "bf16", "auto")
COMPILE_MODES = ("off", "default", "max-autotune")  # torch.compile of the model (mode), or none
SYNC_BN = ("auto", "on", "off")   # BatchNorm over the global batch of a data-parallel run (auto: on with workers > 1)
# augment: a preset of xbm.registries.AUGMENTS, or auto (the data set's own); normalize: the input statistics
AUGMENT = ("auto", *AUGMENTS)
NORMALIZE = ("auto", "imagenet", "dataset", "none")
# normalisers that read class (or super-class) labels: meaningless, or a label leak, without labels
LABELLED_NORMALISERS = ("pcxbn", "scxbn")
# keys a run takes mid-way, from its next step on (population-based training's explore): each is read
# when the trainer is built (normaliser, miner, loss, MoCo, clipping) or re-applied to the optimiser's
# groups after a checkpoint is loaded (lr, weight_decay). xbm.trainer.Trainer.load_state_dict(mutable=...)
MUTABLE_KEYS = ("lr", "weight_decay", "clip_grad", "normaliser.lambda_mu", "normaliser.lambda_sigma",
                "normaliser.kalman_r", "normaliser.kalman_ratio", "normaliser.ema_momentum", "miner.pos_margin",
                "miner.neg_margin", "loss.temperature", "moco.momentum", "memory.batch_loss_weight")
# why the keys most often asked for cannot change mid-run
IMMUTABLE_REASONS = {
    "memory.ratio": "the memory is a preallocated ring buffer: its size is fixed for the run",
    "memory.update": "the memory's layout (a ring, or one row per training sample) is fixed for the run",
    "model": "the weights belong to one architecture",
    "embedding_size": "the weights and the memory have one embedding width",
    "batch_size": "the sampler's batches and the memory's fill follow it",
    "objective": "the objective's state (key encoder, candidate pools) belongs to one objective",
    "dataset": "a data key: the data, its splits and the memory's indices belong to one data set",
    "data_root": "a data key: the data, its splits and the memory's indices belong to one data set",
    "val_fraction": "a data key: the data, its splits and the memory's indices belong to one data set",
    "samples_per_class": "a data key: the sampler's batches follow it",
    "sampler": "a data key: the sampler's batches follow it",
    "image_size": "a data key: the images and the decoded cache follow it",
    "train_on": "a data key: the data, its splits and the memory's indices belong to one data set",
    "val_by": "a data key: the data, its splits and the memory's indices belong to one data set",
    "omniglot_rotations": "a data key: the data, its splits and the memory's indices belong to one data set",
}
# what a file that cannot be decoded does (xbm.data.bad_images applies it; the exported embedder's on_error too)
ON_BAD_IMAGE = ("stop", "skip")
# how supervised batches are drawn: PML's class-balanced MPerClassSampler, or a plain shuffle of the training images
# (XBM paper Fig. 6: the memory helps without class-balanced batches); xbm.objectives.supervised builds them
SAMPLERS = ("m_per_class", "random")
# VehicleID's official test lists by their vehicles: small, medium, large (xbm.data.vehicleid reads them)
VEHICLEID_TEST_SIZES = (800, 1600, 2400)
# objectives whose memory prefill is defined: the memory holds the trained model's rows labelled by class or image id
PREFILL_OBJECTIVES = ("supervised", "instance")
# the classes a run trains on (xbm.data.splits.assemble): the training classes less the validation ones (a sweep),
# with them (a refit after the search, as scikit-learn's refit=True), or every class, test ones included (a data
# set whose test protocol is external, e.g. Omniglot's one-shot runs)
TRAIN_ON = ("train", "train+val", "all")
# how val_fraction holds classes out (xbm.data.splits): single classes, or whole super-classes (Omniglot's alphabets),
# so that validation sees super-classes never trained on, as a test on new alphabets does
VAL_BY = ("class", "superclass")
# Omniglot's classes: each character (1), or each of its four 90-degree rotations (4: Vinyals et al. 2016)
OMNIGLOT_ROTATIONS = (1, 4)


_check = checker()


@dataclass(frozen=True)
class MocoConfig:
    """``objective=moco`` (MoCo, He et al. 2020, as the AXBN paper App. B ran it): the key encoder is an
    exponential moving average of the query encoder, ``k <- momentum k + (1 - momentum) q``; keys are
    computed in ``bn_splits`` shuffled sub-batches (MoCo's shuffling BN on one device)."""

    momentum: float = 0.99
    bn_splits: int = 2

    def __post_init__(self) -> None:
        _check(0.0 <= self.momentum < 1.0, "moco.momentum", "0 <= momentum < 1", self.momentum)
        _check(self.bn_splits >= 1, "moco.bn_splits", ">= 1", self.bn_splits)


@dataclass(frozen=True)
class NeighboursConfig:
    """``objective=neighbours`` (thesis seed 004 §3.2): tuples of an anchor and its ``k`` nearest members of
    its candidate pool (the ``pool`` most similar training images, rebuilt every ``refresh_epochs``) whose
    cosine similarity is >= ``threshold``; contrastive loss (Eq. 3.9) with negative margin ``neg_margin``."""

    k: int = 3
    pool: int = 250
    threshold: float = 0.95
    refresh_epochs: int = 1
    neg_margin: float = 0.5

    def __post_init__(self) -> None:
        for name in ("k", "pool", "refresh_epochs"):
            _check(getattr(self, name) >= 1, f"neighbours.{name}", ">= 1", getattr(self, name))
        _check(-1.0 <= self.threshold <= 1.0, "neighbours.threshold", "-1 <= threshold <= 1 (a cosine similarity)",
               self.threshold)
        _check(-1.0 <= self.neg_margin <= 1.0, "neighbours.neg_margin", "-1 <= neg_margin <= 1 (a cosine similarity)",
               self.neg_margin)


@dataclass(frozen=True)
class TrainConfig:
    """One training run (thesis 5.2, AXBN paper 5.1). ``epochs`` counts main epochs after the
    ``warmup_epochs`` of head-only training. ``eval_every = k`` evaluates after every k-th main epoch and
    after the last (a sweep adds its scheduler's rung epochs); the other epochs report training figures only.
    ``eval_ks``: the K of the ``recall_at_K`` metrics, ``auto`` (the data set's papers' set) or a comma-separated
    list such as ``1,5,10``. ``eval_nmi``: compute ``nmi`` at each evaluation (k-means into as many clusters as
    classes: at SOP's 60,000 x 11,316 about half a minute with faiss-cpu on 2 cores, many minutes without);
    false leaves the column empty. ``train_on`` (``TRAIN_ON``): the classes trained on; with ``train+val`` or
    ``all`` nothing is held out to select on, so a trial keeps its last epoch's weights (``tune.trial.loop``).
    ``prefetch_next_epoch``: draw the next main epoch's batches when a training pass ends, so that the loader's
    workers prepare them during evaluation and the checkpoint (``xbm.trainer``; the same batches either way);
    false starts each epoch's loader when the epoch starts (its workers' batches then hold no shared memory
    while evaluation runs). ``val_by`` (``VAL_BY``): ``val_fraction`` holds out single training classes
    (``class``) or whole super-classes (``superclass``; never trained on, whatever ``train_on`` says, except
    ``train+val``). ``oneshot_episodes``: the seeded one-shot episodes scored on the evaluated splits
    (``val_oneshot_error``, ``oneshot_error``; 0: none; :mod:`xbm.data.episodes`). ``omniglot_rotations``
    (``OMNIGLOT_ROTATIONS``): 4 makes each 90-degree rotation of an Omniglot character a class of its own."""

    dataset: str = "toy"
    data_root: str = ""
    val_fraction: float = 0.0
    val_by: str = "class"
    train_on: str = "train"
    evaluate_test: bool = False
    eval_every: int = 1
    eval_ks: str = "auto"
    eval_nmi: bool = True
    oneshot_episodes: int = 20
    vehicleid_test_size: int = 800
    omniglot_rotations: int = 1
    model: str = "resnet50"
    embedding_size: int = 512
    pretrained: bool = False
    pretrained_path: str = ""
    image_size: int = 224
    augment: str = "auto"
    normalize: str = "auto"
    image_cache: str = ""
    on_bad_image: str = "stop"
    epochs: int = 50
    warmup_epochs: int = 2
    batch_size: int = 64
    samples_per_class: int = 4
    sampler: str = "m_per_class"
    lr: float = 1e-4
    weight_decay: float = 1e-4
    lr_step: int = 15
    lr_gamma: float = 0.33
    optimizer: str = "adamw"
    momentum: float = 0.9
    nesterov: bool = False
    schedule: str = "step"
    min_lr: float = 0.0
    milestones: str = ""
    warmup_lr_epochs: int = 0
    amp: str = "auto"
    compile: str = "off"
    clip_grad: float = 10.0
    seed: int = 0
    objective: str = "supervised"
    num_workers: str = "auto"
    prefetch_next_epoch: bool = True
    device: str = "auto"
    workers: int = 1
    sync_bn: str = "auto"
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    normaliser: NormaliserConfig = field(default_factory=NormaliserConfig)
    miner: MinerConfig = field(default_factory=MinerConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    moco: MocoConfig = field(default_factory=MocoConfig)
    neighbours: NeighboursConfig = field(default_factory=NeighboursConfig)

    def __post_init__(self) -> None:
        if self.miner.kind == "auto":   # resolved once, here, so to_dict (the recorded config) holds the kind run
            object.__setattr__(self, "miner", dataclasses.replace(
                self.miner, kind=resolve_miner_kind(self.miner.kind, self.loss)))
        _check(0.0 <= self.val_fraction < 1.0, "val_fraction", "0 <= val_fraction < 1", self.val_fraction)
        _check(self.train_on in TRAIN_ON, "train_on", f"one of {list(TRAIN_ON)}", self.train_on)
        _check(self.val_by in VAL_BY, "val_by", f"one of {list(VAL_BY)}", self.val_by)
        _check(self.oneshot_episodes >= 0, "oneshot_episodes", ">= 0 (0: no one-shot episodes)",
               self.oneshot_episodes)
        _check(self.omniglot_rotations in OMNIGLOT_ROTATIONS, "omniglot_rotations",
               f"one of {list(OMNIGLOT_ROTATIONS)}", self.omniglot_rotations)
        _check(self.omniglot_rotations == 1 or self.dataset == "omniglot", "omniglot_rotations",
               f"1 unless dataset=omniglot (rotated characters are Omniglot's classes; dataset is {self.dataset!r})",
               self.omniglot_rotations)
        for name in ("embedding_size", "image_size", "epochs", "batch_size", "samples_per_class", "lr_step",
                     "eval_every"):
            _check(getattr(self, name) >= 1, name, ">= 1", getattr(self, name))
        for name in ("warmup_epochs", "weight_decay", "clip_grad"):
            _check(getattr(self, name) >= 0, name, ">= 0", getattr(self, name))
        _check(self.eval_ks == "auto" or parse_ks(self.eval_ks) is not None, "eval_ks",
               "'auto' (the data set's K set) or a non-empty comma-separated list of distinct integers >= 1, "
               "e.g. 1,2,4,8", self.eval_ks)
        _check(self.vehicleid_test_size in VEHICLEID_TEST_SIZES, "vehicleid_test_size",
               f"one of {list(VEHICLEID_TEST_SIZES)} (VehicleID's small, medium and large test lists)",
               self.vehicleid_test_size)
        _check(self.augment in AUGMENT, "augment", f"one of {list(AUGMENT)}", self.augment)
        _check(self.normalize in NORMALIZE, "normalize", f"one of {list(NORMALIZE)}", self.normalize)
        _check(self.on_bad_image in ON_BAD_IMAGE, "on_bad_image", f"one of {list(ON_BAD_IMAGE)}", self.on_bad_image)
        _check(self.num_workers == "auto" or self.num_workers.isdigit(), "num_workers",
               "'auto' (the trial's CPUs minus one) or an integer >= 0", self.num_workers)
        _check(self.lr > 0.0, "lr", "> 0", self.lr)
        _check(0.0 < self.lr_gamma <= 1.0, "lr_gamma", "0 < lr_gamma <= 1", self.lr_gamma)
        self._check_optimisation()
        _check(self.amp in AMP_MODES, "amp", f"one of {list(AMP_MODES)}", self.amp)
        _check(self.compile in COMPILE_MODES, "compile", f"one of {list(COMPILE_MODES)}", self.compile)
        _check(self.sampler in SAMPLERS, "sampler", f"one of {list(SAMPLERS)}", self.sampler)
        # the M-per-class sampler's rule; label-free objectives and sampler=random draw images, not classes
        _check(self.objective != "supervised" or self.sampler == "random"
               or self.batch_size % self.samples_per_class == 0, "batch_size",
               f"a multiple of samples_per_class={self.samples_per_class} under sampler=m_per_class (sampler=random "
               "draws shuffled images, any batch size)", self.batch_size)
        _check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
               "device", "'auto', 'cpu' or 'cuda[:N]'", self.device)
        self._check_objective()
        self._check_workers()

    def _check_workers(self) -> None:
        """``workers`` data-parallel ranks share each global batch of ``batch_size`` (xbm.training.sharding)."""
        _check(self.workers >= 1, "workers", ">= 1 (data-parallel ranks per run)", self.workers)
        _check(self.sync_bn in SYNC_BN, "sync_bn", f"one of {list(SYNC_BN)}", self.sync_bn)
        problem = batch_split_problem(self.batch_size, self.workers, self.objective, self.samples_per_class,
                                      self.neighbours.k, self.moco.bn_splits, self.sampler)
        if problem is not None:
            _check(False, problem.field, problem.rule, problem.value)

    def _check_optimisation(self) -> None:
        """``optimizer``, ``schedule`` and the lr warm-up (xbm.training.optim)."""
        _check(self.optimizer in OPTIMIZERS, "optimizer", f"one of {list(OPTIMIZERS)}", self.optimizer)
        _check(0.0 <= self.momentum < 1.0, "momentum", "0 <= momentum < 1", self.momentum)
        _check(not self.nesterov or (self.optimizer == "sgd" and self.momentum > 0.0), "nesterov",
               f"false unless optimizer=sgd with momentum > 0 (got optimizer={self.optimizer}, "
               f"momentum={self.momentum})", self.nesterov)
        _check(self.schedule in SCHEDULES, "schedule", f"one of {list(SCHEDULES)}", self.schedule)
        _check(self.min_lr >= 0.0 and (self.schedule != "cosine" or self.min_lr <= self.lr), "min_lr",
               f"0 <= min_lr <= lr={self.lr} (the cosine schedule's floor)", self.min_lr)
        milestones = parse_milestones(self.milestones)
        _check(milestones is not None and (self.schedule != "multistep" or bool(milestones)), "milestones",
               "a comma-separated, strictly increasing list of main epochs >= 1 such as 30,60 (non-empty with "
               "schedule=multistep)", self.milestones)
        _check(self.warmup_lr_epochs >= 0, "warmup_lr_epochs", ">= 0", self.warmup_lr_epochs)

    def _check_objective(self) -> None:
        _check(self.objective in OBJECTIVES, "objective", f"one of {list(OBJECTIVES)}", self.objective)
        _check(not self.memory.prefill or self.objective in PREFILL_OBJECTIVES, "memory.prefill",
               f"false under objective={self.objective} (prefill is defined for {list(PREFILL_OBJECTIVES)}: moco's "
               "memory holds the key encoder's rows, the neighbours' rows their tuple's pseudo-label)",
               self.memory.prefill)
        if self.objective == "supervised":
            _check(not self.loss.mines_itself or self.miner.kind == "none", "miner.kind",
                   "none when loss.kind=multi_similarity with loss.ms_mining=true (MS mines its own pairs); set "
                   "miner.kind=none or auto, or loss.ms_mining=false to mine with miner.*", self.miner.kind)
            return
        _check(self.loss.kind == "supcon", "loss.kind", f"supcon (the default) under objective={self.objective}, "
               "which fixes its own loss (loss.kind chooses the loss of objective=supervised)", self.loss.kind)
        _check(self.normaliser.kind not in LABELLED_NORMALISERS, "normaliser.kind",
               f"not {' or '.join(LABELLED_NORMALISERS)} under objective={self.objective} (they need class labels, "
               "which a label-free objective never reads): use none, xbn, axbn or ema", self.normaliser.kind)
        if self.objective == "moco":
            _check(self.batch_size % self.moco.bn_splits == 0 and self.batch_size // self.moco.bn_splits >= 2,
                   "batch_size", f"a multiple of moco.bn_splits={self.moco.bn_splits} with >= 2 images per split",
                   self.batch_size)
        if self.objective == "neighbours":
            k = self.neighbours.k
            _check(k < self.batch_size, "neighbours.k", f"k < batch_size={self.batch_size} (a batch holds "
                   "batch_size / (k + 1) anchors with k neighbours each)", k)
            _check(self.batch_size % (k + 1) == 0, "batch_size", f"a multiple of neighbours.k + 1 = {k + 1} "
                   "(anchors with k neighbours each)", self.batch_size)

    @property
    def syncs_batchnorm(self) -> bool:
        """Whether the model's BatchNorm layers run over the global batch (``sync_bn``): ``auto`` is on with
        workers > 1, except under ``objective=moco``, whose per-worker BatchNorm is its shuffling BN (MoCo §3.3)."""
        if self.sync_bn == "auto":
            return self.workers > 1 and self.objective != "moco"
        return self.sync_bn == "on"

    def recall_ks(self, dataset_ks: tuple[int, ...]) -> tuple[int, ...]:
        """The K of Recall@K: ``eval_ks`` when given, else ``dataset_ks`` (the data set's papers' set)."""
        if self.eval_ks == "auto":
            return dataset_ks
        ks = parse_ks(self.eval_ks)
        assert ks is not None, f"eval_ks={self.eval_ks!r} passed the config's checks"
        return ks

    # ---- dotted-name interface -------------------------------------------------------------
    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """Every valid dotted name, e.g. ('dataset', ..., 'memory.ratio', 'normaliser.kind', ...)."""
        return tuple(_flat_types(cls))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrainConfig":
        """Build from a flat dotted dict or nested dicts, strings coerced to each field's type.

        Args:
            values: dotted keys (``{"memory.ratio": 0.5}``) or nested dicts (``{"memory": {"ratio": 0.5}}``), as a
                space's ``base``, ``--set`` or a Parquet row's ``config.*`` give them; keys left out keep their
                defaults.

        Returns:
            The validated, frozen config.

        Raises:
            ValueError: an unknown key (naming the closest valid ones), a value that does not coerce to its
                field's type, or a value its field's check refuses (naming the field and what it takes).
        """
        types = _flat_types(cls)
        groups: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for key, value in _flatten(values).items():
            if key not in types:
                close = difflib.get_close_matches(key, types, n=3)
                hint = f" Did you mean {', '.join(close)}?" if close else ""
                raise ValueError(f"unknown config key {key!r}.{hint} Valid keys: {', '.join(types)}")
            value = coerce(key, value, types[key])
            if "." in key:
                group, name = key.split(".", 1)
                groups.setdefault(group, {})[name] = value
            else:
                top[key] = value
        hints = _hints(cls)
        for group, kwargs in groups.items():
            top[group] = hints[group](**kwargs)
        return cls(**top)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as a flat dotted dict of plain Python values (YAML/JSON/Parquet ready)."""
        return _flatten(dataclasses.asdict(self))

    def replace(self, **dotted: Any) -> "TrainConfig":
        """A copy with some dotted values changed: ``cfg.replace(**{"memory.ratio": 0.1})``."""
        return TrainConfig.from_dict({**self.to_dict(), **dotted})


def _hints_of(cls: type) -> dict[str, type]:
    return get_type_hints(cls)


# Cached (get_type_hints resolves annotations each call: ~5 ms per config, a Parquet sink's hot spot), and typed as
# plain functions: mypy takes a frozen dataclass's class for unhashable (it reads the instances' __hash__), which
# functools.cache's wrapper would refuse.
_hints: Callable[[type], dict[str, type]] = functools.cache(_hints_of)


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _flat_types_of(cls: type) -> dict[str, type]:
    out: dict[str, type] = {}
    hints = _hints(cls)
    for f in fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            sub = _hints(hint)
            out.update({f"{f.name}.{g.name}": sub[g.name] for g in fields(hint)})
        else:
            out[f.name] = hint
    return out


_flat_types: Callable[[type], dict[str, type]] = functools.cache(_flat_types_of)
