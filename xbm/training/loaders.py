"""Data for a run: the M-per-class training loader, its worker processes, and batched embedding.

Training batches hold ``batch_size / samples_per_class`` classes with ``samples_per_class`` samples each
(PML ``MPerClassSampler``; it draws from NumPy's global RNG, seeded and checkpointed by the trainer). An
epoch has ``floor(n_train / batch_size)`` batches (the sampler's length is the training set size rounded
down to whole batches), so an epoch sees about as many images as the training set holds.

Each drawn sample carries its own augmentation seed (:class:`SeededSampler`), a function of the run's
seed, the pass over the data and the draw's position: augmentations do not depend on the number of
workers or on their processes' history, so persistent workers and a resumed run repeat exactly.
"""
from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence, cast

import numpy as np
import torch
from pytorch_metric_learning.samplers import MPerClassSampler
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler, Subset

from xbm.config import TrainConfig
from xbm.errors import SharedMemoryError
from xbm.runtime.cpus import available_cpus
from xbm.runtime.device import Runtime
from xbm.training.rng import seed_worker

EVAL_BATCH = 256
# Starting workers costs more than reading a few thousand already-decoded images in the main process, so
# smaller sets are embedded without workers; larger ones keep theirs from one evaluation to the next.
EVAL_WORKERS_FROM = 4096
# Evaluation loaders kept per Embedder (selection and test splits' query/gallery, the training view, the
# drift probe): built once per run. Staleness probes change every epoch and cycle through the oldest slot.
EVAL_LOADERS_KEPT = 8
# The input batches (uint8 images after the eval transform) a kept loader produced, kept with it while all
# of them fit in this many bytes of host memory per Embedder (pinned ones counted as allocated: host_bytes):
# a later evaluation of the same set decodes and transforms nothing (224-px images: 150 KB each, so a
# 1,200-image selection split takes 180 MB).
EVAL_INPUTS_BYTES = 2**30
TRAIN_PREFETCH, EVAL_PREFETCH = 4, 2  # batches each loader worker prepares ahead (torch's default: 2)
SHARED_MEMORY = "/dev/shm"


def host_bytes(t: torch.Tensor) -> int:
    """The host memory ``t`` holds: its bytes, or for a pinned tensor (a CUDA run's loader pins its batches) the
    block torch's caching host allocator gives it, rounded up to a power of two (a 256-image batch at 224 px,
    38.5 MB, takes 64 MiB of page-locked memory)."""
    n = t.nbytes
    return 1 << (n - 1).bit_length() if n > 1 and t.is_pinned() else n


def eval_workers(num_workers: int, size: int) -> int:
    """The workers an evaluation loader of ``size`` samples gets: none below :data:`EVAL_WORKERS_FROM`."""
    return num_workers if size >= EVAL_WORKERS_FROM else 0


def check_shared_memory(sample_bytes: int, workers: int, loaders: Sequence[tuple[int, int, int]],
                        folder: str = SHARED_MEMORY, at_once: bool = False) -> None:
    """Refuse a run whose loader workers cannot fit their batches in ``folder`` (torch's workers build each
    batch in shared memory): ``processes`` x ``workers`` x ``prefetch`` batches of ``batch`` samples of
    ``sample_bytes``, for the largest of ``loaders`` ((batch, prefetch, processes) triples, ``processes`` the
    data-parallel ranks on this node that run that loader at once, sharing the folder), or for all of them
    together when they hold their batches ``at_once`` (a training pass drawn ahead while evaluation runs).
    Checked against the folder's size, not its free space, so only a run that can never fit is refused:
    Docker gives containers 64 MB, where every image run with workers failed in its first batches ("unable to
    allocate shared memory")."""
    if workers == 0 or not loaders:
        return
    try:
        stats = os.statvfs(folder)
    except (OSError, AttributeError):  # no such folder (macOS), no statvfs (Windows): nothing to check
        return
    size = stats.f_blocks * stats.f_frsize
    held = [math.prod(loader) * sample_bytes for loader in loaders]   # per worker
    per_worker = sum(held) if at_once else max(held)
    need = workers * per_worker
    if need > size:
        fits = size // per_worker
        parts = [f"{processes} ranks x " * (processes > 1) + f"{workers} workers x {prefetch} batches x {batch} images"
                 for batch, prefetch, processes in (loaders if at_once else [max(loaders, key=math.prod)])]
        raise SharedMemoryError(
            f"loader workers hand their batches over in shared memory ({folder}), but "
            f"{' + '.join(parts)} x {sample_bytes / 1024:.0f} KiB need {need / 2**20:.0f} MiB and {folder} holds "
            f"{size / 2**20:.0f} MiB. In a container, give it more (docker run --shm-size=8g, or --ipc=host; "
            f"Kubernetes: an emptyDir with medium Memory at /dev/shm); or lower num_workers "
            f"(at most {fits} fit) or batch_size" + (", or set prefetch_next_epoch=false" if at_once else ""))


def resolve_workers(setting: str, input_kind: str, cpus: Optional[int] = None) -> int:
    """``num_workers``: an integer as given, or ``auto``: the trial's CPUs minus one (the main process
    trains) for image data, 0 for vectors (nothing to decode)."""
    if setting != "auto":
        return int(setting)
    if input_kind != "image":
        return 0
    return max((cpus if cpus is not None else available_cpus()) - 1, 0)


class SeededSampler(Sampler):
    """Yields ``(index, seed)`` for every index of ``sampler``; seeds come from ``(seed, epoch)``, where
    ``epoch`` counts passes over the data and is set by the trainer before each pass."""

    def __init__(self, sampler: Sampler, seed: int) -> None:
        self.sampler, self.seed, self.epoch = sampler, seed, 0

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        indices = list(self.sampler)
        seeds = np.random.default_rng([self.seed, self.epoch]).integers(0, 2**63 - 1, size=len(indices))
        return iter(zip(indices, seeds.tolist()))


@dataclass
class DrawnPass:
    """A main epoch's pass drawn before its epoch starts (``prefetch_next_epoch``): its 0-based epoch index,
    its batches (the loader's iterator, whose workers are already preparing them) and the trainer's pass
    state (sampler order, pass count, RNG streams) from before the draw, which a checkpoint keeps."""

    epoch_index: int
    batches: Iterator
    state_before: dict


def make_sampler(labels: torch.Tensor, cfg: TrainConfig) -> MPerClassSampler:
    n_classes = int(torch.unique(labels).numel())
    if cfg.samples_per_class * n_classes < cfg.batch_size:
        raise ValueError(f"batch_size must be <= samples_per_class x training classes "
                         f"= {cfg.samples_per_class} x {n_classes}, but got batch_size={cfg.batch_size}; "
                         "lower batch_size or samples_per_class")
    length = max(len(labels), cfg.batch_size)
    return MPerClassSampler(labels, cfg.samples_per_class, batch_size=cfg.batch_size,
                            length_before_new_iter=length)


def train_loader(dataset: Dataset, sampler: Sampler, cfg: TrainConfig, pin_memory: bool,
                 workers: int = 0, seeded: Optional[SeededSampler] = None) -> DataLoader:
    """Batches of ``(x, y, i)`` drawn by ``sampler`` (training-set indices, e.g. :func:`make_sampler`);
    ``loader.sampler`` is the :class:`SeededSampler` around it (``.sampler``: the given one). ``seeded``: another
    SeededSampler around ``sampler`` (a data-parallel rank's share, :class:`xbm.training.sharding.ShardedSampler`,
    whose batches hold ``batch_size / cfg.workers`` rows)."""
    seeded = SeededSampler(sampler, cfg.seed) if seeded is None else seeded
    return DataLoader(dataset, batch_size=cfg.batch_size // cfg.workers, sampler=seeded,
                      drop_last=True, num_workers=workers, pin_memory=pin_memory, worker_init_fn=seed_worker,
                      persistent_workers=workers > 0, prefetch_factor=TRAIN_PREFETCH if workers > 0 else None)


def start_persistent_workers(loader: DataLoader) -> None:
    """A loader with persistent workers draws its base seed from torch's RNG once, when its first iterator
    is made: in a fresh run at the warm-up's (or first epoch's) first pass. A run that restores an RNG state
    (a resumed checkpoint, a reused warm-up) makes it before restoring, so that the restored RNG is followed
    by no extra draw (the workers' own seeds do not matter: augmentations are seeded per sample). Its SeededSampler iterates
    nothing meanwhile: no sampler draws, shuffles or needs a candidate pool, and no batch is prefetched."""
    if loader.persistent_workers and getattr(loader, "_iterator", None) is None:
        seeded = loader.sampler  # xbm.training.loaders.SeededSampler
        drawn, seeded.sampler = seeded.sampler, ()
        try:
            iter(loader)
        finally:
            seeded.sampler = drawn


def stop_workers(loader: Optional[DataLoader]) -> None:
    """Stop ``loader``'s persistent workers now, as its iterator's ``__del__`` would, while their queues are
    whole. Left to the cyclic garbage collector (a trainer sits in reference cycles), the collector finalises
    the queues first, so the workers never hear that they should end and each is terminated after torch's
    5-s join timeout: 5.3 s a worker measured here, 75 s for a GPU trial's 15."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
        loader._iterator = None


class Embedder:
    """Embeds datasets in eval mode, batch by batch, under the run's autocast; returns fp32 on the device.

    Its loaders persist (per dataset and index subset, :data:`EVAL_LOADERS_KEPT` of them), with their worker
    processes: evaluating every epoch must not start workers and pickle the data set every epoch. Its data sets
    are evaluation views (deterministic transforms), so the input batches of a set are kept with its loader
    while they fit :data:`EVAL_INPUTS_BYTES`, and read again instead of decoded again. ``progress``: wraps each
    pass's batches, ``progress(batches, "embedding")`` (e.g. the CLI's bar, drawn once a pass lasts a few
    seconds: ``xbm.runtime.progress``); it must yield every batch."""

    def __init__(self, runtime: Runtime, num_workers: int, batch_size: int = EVAL_BATCH,
                 prepare: Callable = lambda x: x, progress: Optional[Callable[[Iterable, str], Iterable]] = None
                 ) -> None:
        self.runtime = runtime
        self.progress = progress
        self.num_workers = num_workers
        self.batch_size = batch_size
        self.prepare = prepare  # the batch on its device -> the model's input (the data set's eval statistics)
        # key -> [dataset (held so that its id is not reused), its loader (None once its batches are kept),
        #         its input batches or None, their bytes]
        self._loaders: "OrderedDict[tuple, list]" = OrderedDict()
        self._inputs_bytes = 0

    def _entry(self, dataset: Dataset, indices: Optional[torch.Tensor]) -> list:
        """The kept entry of ``dataset`` (or of its ``indices`` subset); its loader built on first use."""
        key = (id(dataset), None if indices is None else indices.cpu().numpy().tobytes())
        if key in self._loaders:
            self._loaders.move_to_end(key)
            return self._loaders[key]
        self._loaders[key] = [dataset, self._loader(dataset, indices), None, 0]
        while len(self._loaders) > EVAL_LOADERS_KEPT:
            self._inputs_bytes -= self._loaders.popitem(last=False)[1][3]
        return self._loaders[key]

    def _loader(self, dataset: Dataset, indices: Optional[torch.Tensor]) -> DataLoader:
        # The indices as a tensor of their own: workers receive it by handle, not as a list of any length.
        subset = dataset if indices is None else Subset(dataset, indices.detach().cpu().clone())
        workers = eval_workers(self.num_workers, len(subset))
        # An own generator: a DataLoader draws its base seed from the generator it is given, so evaluation
        # never moves the global torch RNG and evaluating more (evaluate_test) leaves training unchanged.
        return DataLoader(subset, batch_size=self.batch_size, shuffle=False, num_workers=workers,
                          pin_memory=self.runtime.device.type == "cuda", persistent_workers=workers > 0,
                          prefetch_factor=EVAL_PREFETCH if workers > 0 else None,
                          generator=torch.Generator().manual_seed(0))

    def close(self) -> None:
        """Stop the workers of every kept loader (:func:`stop_workers`)."""
        for entry in self._loaders.values():
            stop_workers(entry[1])

    @torch.no_grad()
    def __call__(self, model: nn.Module, dataset: Dataset, indices: Optional[torch.Tensor] = None,
                 keep: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings [N, d] (fp32) and labels [N] of ``dataset`` (or of its ``indices`` subset). ``keep=False``:
        a set embedded once (a staleness probe, new every epoch): neither its loader nor its inputs are kept."""
        entry = self._entry(dataset, indices) if keep else [dataset, self._loader(dataset, indices), None, 0]
        kept = entry[2]
        # this pass's batches, while they still fit the budget (then dropped: never all of a large set at once)
        batches, size = ([] if kept is None and keep else None), 0
        # every module's own mode, not the top one's: model.train(True) would also wake a backbone the
        # warm-up froze in eval mode (BatchNorm statistics moving; with sync_bn, rank 0 alone all-reducing)
        modes = {m: m.training for m in model.modules()}
        model.eval()
        out, labels = [], []
        source = cast(Iterable, kept if kept is not None else entry[1])   # the entry's kept batches or loader
        try:
            for x, y, *_ in source if self.progress is None else self.progress(source, "embedding"):
                with self.runtime.autocast():
                    out.append(model(self.prepare(self.runtime.to_device(x))).float())
                labels.append(y)
                if batches is not None:
                    size += host_bytes(x) + host_bytes(y)
                    if self._inputs_bytes + size > EVAL_INPUTS_BYTES:
                        batches = None
                    else:
                        batches.append((x, y))
        finally:
            for m, training in modes.items():
                m.training = training
        if batches is not None:   # the loader goes (its workers end): the set is read from memory from now on
            entry[1:] = None, batches, size
            self._inputs_bytes += size
        return torch.cat(out), torch.cat(labels).to(self.runtime.device)
