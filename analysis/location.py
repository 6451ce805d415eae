"""Folders on a local disk or any URI ``pyarrow.fs`` understands (``s3://``, ``gs://``, ``file://``, ...), as
``xbm-tune sweep --storage`` allows: :class:`Folder`, the one class through which ``tune`` writes a sweep and
``analysis`` reads it. A file is written under a temporary name beside it and moved over the old one (``rename`` on
a local disk, atomic on POSIX; an object store publishes an object only once complete), so a crash leaves the old
file or the new one, never a torn one; the temporary name does not end in ``.parquet``, so no reader lists it."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from analysis.contract import UnreadableFileError, read_retried


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


class Folder:
    """A folder on a local disk or a bucket; the paths given to the methods are relative to it. ``root`` is a
    local path or a URI, or, with ``filesystem`` (Ray's storage context), the path inside that file system."""

    def __init__(self, root: str, filesystem: pafs.FileSystem | None = None) -> None:
        text = str(root)
        if filesystem is not None:
            self.fs, self.root = filesystem, text
        else:
            self.fs, self.root = filesystem_of(text)
        self.root = self.root.rstrip("/") or "/"
        # how a user names it: the URI's own scheme (gs://, not pyarrow's gcs://), a plain path for a local disk
        self._scheme = text.split("://", 1)[0] if is_uri(text) and filesystem is None else self.fs.type_name
        self._made: set[str] = set()

    @classmethod
    def sweep(cls, path: str | Path) -> "Folder":
        """The sweep folder at ``path`` (the folder itself or its ``results/``); FileNotFoundError otherwise."""
        folder = cls(str(path))
        candidates = [folder.root] + ([folder.root.rsplit("/", 1)[0]] if folder.root.endswith("/results") else [])
        for root in candidates:
            if _is_dir(folder.fs, f"{root}/results"):
                return folder if root == folder.root else cls(root, folder.fs)._named_like(folder)
        raise FileNotFoundError(
            f"{path} is not a sweep folder: expected <storage>/<name>/results/ holding trials.parquet and "
            f"epochs/<trial_id>.parquet (as written by `xbm-tune sweep`). Pass the sweep folder or its results/.")

    def _named_like(self, other: "Folder") -> "Folder":
        self._scheme = other._scheme
        return self

    def path(self, relative: str = "") -> str:
        return f"{self.root.rstrip('/')}/{relative}" if relative else self.root

    def display(self, relative: str = "") -> str:
        """``relative`` as a user would name it: a local path, or the URI on a bucket."""
        path = self.path(relative)
        return path if isinstance(self.fs, pafs.LocalFileSystem) else f"{self._scheme}://{path}"

    @property
    def uri(self) -> str:
        return self.display()

    @property
    def local(self) -> Path | None:
        return Path(self.root) if isinstance(self.fs, pafs.LocalFileSystem) else None

    def exists(self, relative: str = "") -> bool:
        return self.fs.get_file_info(self.path(relative)).type != pafs.FileType.NotFound

    def is_dir(self, relative: str = "") -> bool:
        return _is_dir(self.fs, self.path(relative))

    def makedirs(self, relative: str = "") -> None:
        self.fs.create_dir(self.path(relative), recursive=True)

    def list(self, relative: str, suffix: str = ".parquet") -> list[str]:
        """Names (not paths) of the files in folder ``relative`` ending with ``suffix``, sorted; none when the
        folder is absent."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path(relative), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.File and i.base_name.endswith(suffix))

    def read_bytes(self, relative: str) -> bytes:
        with self.fs.open_input_stream(self.path(relative)) as stream:
            return stream.readall()

    def read_json(self, relative: str) -> dict:
        data = self.read_bytes(relative)
        try:
            return json.loads(data.decode())
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise UnreadableFileError(self.display(relative), exc) from exc

    def read_table(self, relative: str) -> pa.Table | None:
        """The table, or None if the file is absent. An object store holds each version of a replaced file
        whole, but a read is a size lookup then a ranged GET, so a read racing a replacement can mix two versions
        (seen on S3 while the sink rewrote trials.parquet): read again (``read_retried``). Still unreadable:
        ``UnreadableFileError`` naming the file."""
        if not self.exists(relative):
            return None
        try:
            return read_retried(lambda: pq.read_table(pa.BufferReader(self.read_bytes(relative))), (pa.ArrowInvalid,))
        except pa.ArrowInvalid as exc:
            raise UnreadableFileError(self.display(relative), exc) from exc

    def write_bytes(self, relative: str, payload) -> None:
        """Replace ``relative`` atomically by ``payload`` (module docstring)."""
        final = self.path(relative)
        parent = final.rsplit("/", 1)[0]
        if parent not in self._made:
            self.fs.create_dir(parent, recursive=True)
            self._made.add(parent)
        tmp = f"{parent}/.{final.rsplit('/', 1)[1]}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            write_stream(self.fs, tmp, payload)
            self.fs.move(tmp, final)
        except BaseException:
            if self.fs.get_file_info(tmp).type != pafs.FileType.NotFound:
                self.fs.delete_file(tmp)
            raise

    def write_json(self, relative: str, data: Mapping[str, Any]) -> None:
        self.write_bytes(relative, json.dumps(data, indent=2, sort_keys=True, default=str).encode())

    def write_table(self, relative: str, table: pa.Table, **options: Any) -> None:
        """Replace ``relative`` atomically by ``table`` (``options`` go to ``pq.write_table``). Encoded in memory
        and written in one piece: a local file stream is unbuffered, and Parquet's many small writes cost more than
        the encoding."""
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, **options)
        self.write_bytes(relative, buffer.getvalue())

    def delete(self, relative: str) -> None:
        self.fs.delete_file(self.path(relative))


def write_stream(fs: pafs.FileSystem, path: str, payload) -> None:
    """``payload`` written to ``path`` (a plain write; :meth:`Folder.write_bytes` makes it atomic)."""
    with fs.open_output_stream(path) as out:
        out.write(payload)


def _is_dir(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.Directory
