"""Errors the xbm layer raises on purpose, each naming the rule, the value and what to do."""
from __future__ import annotations

from os import PathLike
from typing import Any

PathArg = str | PathLike[str]  # a path as the errors take it: str() makes it text


class DatasetNotFoundError(FileNotFoundError):
    """A data set's root or one of its files is missing under ``data_root``.

    The message names the data set, the missing path, the official layout expected there (a short tree)
    and what to do. Nothing is ever downloaded. Picklable with its arguments (Ray ships errors between
    processes).
    """

    def __init__(self, dataset: str, path: PathArg, layout: str, advice: str = "") -> None:
        self.dataset = dataset
        self.path = str(path)
        self.layout = layout
        self.advice = advice
        todo = advice or (f"Download the official release yourself (xbm never downloads), extract it, and "
                          f"pass its folder as data_root (--set data_root=/path/to/{dataset}).")
        message = (f"data set {dataset!r}: missing {self.path}\n"
                   f"Expected this official layout under data_root:\n{layout.rstrip()}\n{todo}")
        super().__init__(message)
        self.filename = self.path  # as FileNotFoundError's own attribute, for callers that read it

    def __str__(self) -> str:
        return str(self.args[0])  # OSError would print "[Errno None] None: <filename>" once filename is set

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), (self.dataset, self.path, self.layout, self.advice)


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite (raised before any optimiser step uses it, so the model
    holds no non-finite weight and the last checkpoint stays the last good one).

    ``epoch`` is the 1-based main epoch (0 during the head-only warm-up), ``iteration`` the 1-based batch
    within it, ``value`` the loss. Picklable with its arguments (Ray ships errors between processes).
    """

    def __init__(self, epoch: int, iteration: int, value: float) -> None:
        self.epoch = int(epoch)
        self.iteration = int(iteration)
        self.value = float(value)
        super().__init__(
            f"non-finite loss {self.value} at epoch {self.epoch}, iteration {self.iteration} "
            f"(epoch 0 is the warm-up): the loss must stay finite. Lower lr, enable clip_grad, use amp=bf16 "
            f"or amp=off instead of fp16, or raise loss.temperature")

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), (self.epoch, self.iteration, self.value)


class PretrainedWeightsError(RuntimeError):
    """``pretrained=True`` could not obtain timm's weights (e.g. offline); the message names pretrained_path."""


class SharedMemoryError(RuntimeError):
    """The loader workers' batches cannot fit in shared memory (``/dev/shm``) even with nothing else there:
    every run with this config fails the same way, so it is refused before any work. The message names the
    sizes and what to change (the container's ``--shm-size``, ``num_workers``, ``batch_size``)."""


class BadImageError(ValueError):
    """An image file of a data set cannot be decoded (truncated, corrupt, not an image): ``on_bad_image=stop``.

    The message names the file, the data set's root and what to do. ``BadImageError(message)`` alone also
    works: a DataLoader worker's error is rebuilt in the training process from its message only.
    Picklable with its arguments (Ray ships errors between processes).
    """

    def __init__(self, message: str, path: PathArg = "", root: PathArg = "") -> None:
        super().__init__(message)
        self.path, self.root = str(path), str(root)

    @classmethod
    def of(cls, dataset: str, path: PathArg, root: PathArg, cause: BaseException) -> "BadImageError":
        return cls(f"data set {dataset!r}: cannot decode image {path} (data_root {root}): "
                   f"{type(cause).__name__}: {cause}. Replace or delete the file, or set on_bad_image=skip "
                   "to train without it", path, root)

    @classmethod
    def unreadable_file(cls, dataset: str, path: PathArg, root: PathArg, cause: BaseException) -> "BadImageError":
        """A file holding many images (an archive, a pickled batch): no single sample can be skipped."""
        return cls(f"data set {dataset!r}: cannot read {path} (data_root {root}): {type(cause).__name__}: "
                   f"{cause}. The file is truncated or corrupt: download and extract the release again", path, root)

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), (self.args[0], self.path, self.root)


class BadCheckpointError(ValueError):
    """A checkpoint or weights file exists but cannot be read (truncated, corrupt, not a checkpoint).
    Picklable with its arguments."""

    def __init__(self, path: PathArg, cause: str) -> None:
        self.path, self.cause = str(path), str(cause)
        super().__init__(f"cannot read checkpoint {self.path}: {self.cause}. The file is truncated or corrupt: "
                         "use another checkpoint, or write it again")

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return type(self), (self.path, self.cause)
