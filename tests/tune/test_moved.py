"""The old module paths (before issue 31's layout) still unpickle, for ``xbm-tune resume`` of an old sweep."""
from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from tune import moved


def test_every_old_path_points_at_modules_that_exist():
    """Bug caught: a module moved again (or a typo in the map) leaving an old path pointing nowhere: its sweeps
    fail to resume with a ModuleNotFoundError that names a module the user never wrote."""
    root = Path(__file__).resolve().parents[2]
    for old, targets in moved.MOVED.items():
        path = root / old.replace(".", "/")
        assert not path.with_suffix(".py").exists() and not path.is_dir(), f"{old} exists again: drop it from MOVED"
        for target in targets:
            importlib.import_module(target)


def test_a_pickle_naming_an_old_module_loads_the_class_that_moved():
    """Bug caught (seen: `xbm-tune resume` of a sweep started before the layout move died with
    ``ModuleNotFoundError: No module named 'tune.schedulers'``): Tune's pickles name the classes' old modules.
    RecordingPBT moved from tune.schedulers to tune.search.pbt, ParquetSink from tune.sink to tune.results.sink;
    the old spaces package's submodules load too. Run in a fresh process, so the finder starts uninstalled."""
    from tune.results.sink import ParquetSink
    from tune.search.pbt import RecordingPBT
    from tune.search.spaces.errors import SpaceError

    old = pickle.dumps([RecordingPBT, ParquetSink, SpaceError], protocol=0)
    for new_path, old_path in ((b"tune.search.pbt", b"tune.schedulers"), (b"tune.results.sink", b"tune.sink"),
                               (b"tune.search.spaces.errors", b"tune.spaces.errors")):
        assert new_path in old
        old = old.replace(new_path, old_path)
    script = ("import pickle, sys\n"
              f"data = {old!r}\n"
              "try:\n    pickle.loads(data)\nexcept ModuleNotFoundError as exc:\n    print('before:', exc)\n"
              "from tune import moved\nmoved.install(); moved.install()\n"
              "classes = pickle.loads(data)\n"
              "print('after:', [c.__module__ + '.' + c.__name__ for c in classes])\n"
              "print('finders:', sum(isinstance(f, moved._Finder) for f in sys.meta_path))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "before: No module named 'tune.schedulers'" in out
    assert ("after: ['tune.search.pbt.RecordingPBT', 'tune.results.sink.ParquetSink', "
            "'tune.search.spaces.errors.SpaceError']") in out
    assert "finders: 1" in out


def test_a_name_in_none_of_the_new_modules_says_where_the_module_went():
    moved.install()
    import tune.guards as old_guards   # the old path, now an alias of tune.search.guards

    assert old_guards.__name__ == "tune.guards"
    with pytest.raises(AttributeError, match="'gone' was in tune.guards, which moved to tune.search.guards"):
        old_guards.gone


def test_no_code_imports_an_old_module_path():
    """Bug caught (seen: a test patched ``xbm.training.runtime.resolve_device``, an alias once ``moved.install()``
    had run in its process, so the real module kept its function and the test failed on a machine without CUDA):
    an old path imported by the code works only where the finder is installed and hands out a copy of the names,
    so patching or reading state through it misses the real module."""
    import ast

    root = Path(__file__).resolve().parents[2]
    found = []
    for folder in ("xbm", "tune", "analysis", "tests", "scripts", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == Path(__file__).resolve():   # this module imports an old path on purpose, above
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                found += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n in moved.MOVED]
    assert not found, found
