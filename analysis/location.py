"""Where a sweep folder lives: a local path or any URI ``pyarrow.fs`` understands (``s3://``, ``gs://``,
``file://``, ...), as ``xbm-tune sweep --storage`` allows. Paths given to the methods are relative to
the sweep folder (``<storage>/<name>/``)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs


@dataclass(frozen=True)
class Location:
    fs: pafs.FileSystem
    root: str  # the folder's path inside ``fs``
    uri: str  # how to show it: the local absolute path, or the URI

    @classmethod
    def resolve(cls, path: str | Path) -> "Location":
        """The sweep folder at ``path`` (the folder itself or its ``results/``)."""
        text = str(path)
        if "://" in text:
            fs, root = pafs.FileSystem.from_uri(text)
            scheme = text.split("://", 1)[0]
            make_uri = (lambda r: f"{scheme}://{r}") if scheme != "file" else (lambda r: r)
        else:
            fs, root, make_uri = pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(text)), (lambda r: r)
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
