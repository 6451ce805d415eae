"""Where a sweep folder lives: a local path or any URI ``pyarrow.fs`` understands (``s3://``, ``gs://``,
``file://``, ...), as ``xbm-tune sweep --storage`` allows. Paths given to the methods are relative to
the sweep folder (``<storage>/<name>/``)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs


def is_uri(text: str) -> bool:
    """Whether ``text`` names a URI (``s3://...``, ``file:///...``) rather than a local path: the one test
    of it, so that every command reads ``--storage`` and sweep folders alike."""
    return "://" in text


def absolute(text: str) -> str:
    """A URI as given, a local path made absolute (``~`` expanded): how Tune and the records name a folder."""
    return text if is_uri(text) else os.path.abspath(os.path.expanduser(text))


def local_path(text: str) -> str | None:
    """The absolute local path ``text`` names (a plain path, or a ``file://`` URI), None for a bucket."""
    if not is_uri(text):
        return absolute(text)
    return text.removeprefix("file://") if text.startswith("file://") else None


def filesystem_of(text: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` for a local path (made absolute) or a URI ``pyarrow.fs`` understands."""
    return pafs.FileSystem.from_uri(text) if is_uri(text) else (pafs.LocalFileSystem(), absolute(text))


def read_file_bytes(text: str, what: str) -> bytes:
    """The bytes of the file at a local path or URI; ``FileNotFoundError`` naming ``what`` when it is gone."""
    fs, path = filesystem_of(text)
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{what} {text} does not exist (moved or deleted?)")
    with fs.open_input_stream(path) as stream:
        return stream.readall()


@dataclass(frozen=True)
class Location:
    fs: pafs.FileSystem
    root: str  # the folder's path inside ``fs``
    uri: str  # how to show it: the local absolute path, or the URI

    @classmethod
    def resolve(cls, path: str | Path) -> "Location":
        """The sweep folder at ``path`` (the folder itself or its ``results/``)."""
        text = str(path)
        fs, root = filesystem_of(text)
        scheme = text.split("://", 1)[0] if is_uri(text) else "file"
        make_uri = (lambda r: f"{scheme}://{r}") if scheme != "file" else (lambda r: r)
        root = root.rstrip("/") or "/"
        for candidate in (root, root.rsplit("/", 1)[0] if root.endswith("/results") else None):
            if candidate and _is_dir(fs, f"{candidate}/results"):
                return cls(fs, candidate, make_uri(candidate))
        raise FileNotFoundError(
            f"{text} is not a sweep folder: expected <storage>/<name>/results/ holding trials.parquet and "
            f"epochs/<trial_id>.parquet (as written by `xbm-tune sweep`). Pass the sweep folder or its results/.")

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def display(self, relative: str) -> str:
        return f"{self.uri}/{relative}"

    @property
    def local(self) -> Path | None:
        return Path(self.root) if isinstance(self.fs, pafs.LocalFileSystem) else None

    def exists(self, relative: str) -> bool:
        return self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound

    def is_dir(self, relative: str) -> bool:
        return _is_dir(self.fs, self.path(relative))

    def list(self, relative: str, suffix: str) -> list[str]:
        """Relative paths of the files in folder ``relative`` ending with ``suffix``, sorted. The sink's
        temporary files (``.<name>.<hex>.tmp``) do not end in ``.parquet`` and are never listed."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path(relative), allow_not_found=True))
        names = sorted(i.base_name for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(suffix))
        return [f"{relative}/{name}" for name in names]

    def read_bytes(self, relative: str) -> bytes:
        with self.fs.open_input_stream(self.path(relative)) as stream:
            return stream.readall()

    def write_bytes(self, relative: str, data: bytes) -> None:
        parent = self.path(relative).rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        with self.fs.open_output_stream(self.path(relative)) as out:
            out.write(data)


def _is_dir(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.Directory
