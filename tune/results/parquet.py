"""Parquet tables of a sweep: stable schemas, written through ``analysis.location.Folder`` (atomic replacement,
any storage pyarrow.fs understands).

Layout under ``<storage>/<name>/results/`` (the contract ``analysis`` reads, see docs/ARCHITECTURE.md):
``epochs/<trial_id>.parquet`` (one row per (trial, epoch)), ``trials.parquet`` (one row per trial),
``sweep.json`` (the sweep's options and space).

Every column is nullable and its type fixed by name, never by the first value seen, so files written at
different times concatenate: the names and types are ``analysis.contract``'s (``column_type``); ``config.<name>``
columns take ``TrainConfig``'s field type (bool, int64, float64, string).

Buckets: ``s3://bucket/prefix`` works with AWS and any S3-compatible server (MinIO, Ceph, moto) through
the standard variables ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and
``AWS_DEFAULT_REGION``), which ``pyarrow.fs.S3FileSystem`` reads itself, as Ray Tune's storage (also
pyarrow.fs) does; ``check_storage`` turns a missing bucket or rejected credentials into one error
before anything runs.
"""
from __future__ import annotations

import functools
import math
import os
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.fs as pafs

from analysis.contract import (CONFIG_PREFIX, INT_COLUMNS, RESULTS, SWEEP_JSON, UnreadableFileError,  # noqa: F401
                               column_type, config_of, finite)
from analysis.location import Folder, is_uri
from tune.errors import SweepInputError
from xbm.config import TrainConfig

_ARROW = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}


def config_fields() -> list[pa.Field]:
    """One ``config.<dotted name>`` field per ``TrainConfig`` key, typed like the field (its default's type:
    every field has a bool, int, float or str default)."""
    return list(_config_fields())


@functools.cache
def _config_fields() -> tuple[pa.Field, ...]:  # the sink asks at every result; TrainConfig() costs ~1 ms
    defaults = TrainConfig().to_dict()
    return tuple(pa.field(CONFIG_PREFIX + k, _ARROW.get(type(v), pa.string())) for k, v in defaults.items())


def given_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The dotted keys of ``config`` that ``TrainConfig`` has, each value cleaned to its column's type, or None
    where it does not fit: the columns of a config ``TrainConfig`` refuses, written as it was given."""
    kinds = {field.name[len(CONFIG_PREFIX):]: field.type for field in _config_fields()}
    out = {}
    for key in kinds.keys() & config.keys():
        try:
            out[key] = clean(config[key], kinds[key])
        except (TypeError, ValueError):
            out[key] = None
    return out


def clean(value: Any, kind: pa.DataType) -> Any:
    """A Python value that fits ``kind`` (None stays None; numpy scalars become Python numbers)."""
    return None if value is None else _converter(kind)(value)


@functools.cache
def _converter(kind: pa.DataType):
    if pa.types.is_string(kind):
        return str
    if pa.types.is_boolean(kind):
        return bool
    if pa.types.is_integer(kind):
        return _to_int
    return float


def _to_int(value: Any) -> int | None:
    as_float = float(value)
    return None if math.isnan(as_float) else int(as_float)


def clean_row(row: Mapping[str, Any], fields: list[pa.Field]) -> tuple:
    """One row's values in ``fields`` order, each cleaned to its field's type (a missing key is null)."""
    return tuple(None if (v := row.get(f.name)) is None else _converter(f.type)(v) for f in fields)


def table_from_values(values: Iterable[tuple], fields: list[pa.Field]) -> pa.Table:
    """Rows already cleaned by ``clean_row`` (for the same ``fields``) -> a table with exactly ``fields``.

    One conversion of the rows as a struct array, not one ``pa.array`` per column: the sink calls this at
    every result with ~70 columns, where the per-column calls (and a transpose in Python) cost 3-4x more."""
    values = values if isinstance(values, list) else list(values)
    return pa.Table.from_struct_array(pa.array(values, type=pa.struct(fields)))


def build_table(rows: Iterable[Mapping[str, Any]], fields: list[pa.Field]) -> pa.Table:
    """Rows (dicts) -> a table with exactly ``fields``; a missing key is null."""
    return table_from_values([clean_row(r, fields) for r in rows], fields)


def check_storage(uri: str) -> None:
    """Raise ``SweepInputError`` (the CLI's exit 2) when ``uri`` names a bucket that does not exist or
    that the credentials cannot read; a local folder passes (it is created when needed)."""
    if not is_uri(uri):
        return
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SweepInputError(f"{uri!r} is not a storage URI pyarrow.fs understands (s3://bucket/prefix, "
                              f"gs://bucket/prefix, file:///folder): {exc}") from exc
    if isinstance(fs, pafs.LocalFileSystem):
        return
    bucket = path.split("/", 1)[0]
    endpoint = os.environ.get("AWS_ENDPOINT_URL") if fs.type_name == "s3" else None
    where = f" at {endpoint} (AWS_ENDPOINT_URL)" if endpoint else ""
    try:
        info = fs.get_file_info(bucket)
    except OSError as exc:
        keys = ("AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" if fs.type_name == "s3" else "the credentials")
        raise SweepInputError(f"cannot access bucket {bucket!r} of {uri}{where}: {str(exc).rstrip('.')}. Check {keys} "
                              f"(and AWS_ENDPOINT_URL for an S3-compatible server)") from exc
    if info.type == pafs.FileType.NotFound:
        raise SweepInputError(f"bucket {bucket!r} of {uri} does not exist{where}: create it first "
                              f"(e.g. `aws s3 mb s3://{bucket}`) or pass another --storage")


def check_new_experiment(storage: str, experiment: str) -> None:
    """Before anything runs (``SweepInputError``, exit 2): ``storage`` reachable (``check_storage``) and
    ``experiment`` not yet in it."""
    check_storage(storage)  # a missing bucket or rejected credentials: one error, now
    if Folder(storage).exists(experiment):
        raise SweepInputError(f"experiment {experiment!r} already exists in {storage}: choose another --name, or "
                              f"continue it with `xbm-tune resume {storage}/{experiment}`")
