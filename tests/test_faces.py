"""The lazy package faces (``lazy_loader.attach_stub`` over each ``__init__.pyi``): one list of names per package."""
from __future__ import annotations

import ast
import importlib
import importlib.resources

import pytest

FACES = ("xbm", "xbm.data", "xbm.evaluate", "xbm.memory", "xbm.normalisers", "analysis")


@pytest.mark.parametrize("face", FACES)
def test_every_name_a_face_lists_is_the_object_its_module_defines(face):
    """Bugs caught: a stub line naming a module or a name that does not exist, or a name re-exported from the
    wrong module (lazy_loader fails or differs only when the name is first used, in a user's notebook); a stub
    line lazy_loader does not read (the name missing from ``__all__``); the stub missing from the package
    (attach_stub raises on import; package-data ``*.pyi``)."""
    package = importlib.import_module(face)
    stub = ast.parse(importlib.resources.files(face).joinpath("__init__.pyi").read_text())
    listed = {}
    for node in stub.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, f"{face}/__init__.pyi: only `from .x import`"
        for alias in node.names:
            assert alias.asname == alias.name, f"{face}: `{alias.name} as {alias.name}` (a stub re-exports so)"
            listed[alias.name] = node.module
    assert sorted(package.__all__) == sorted(listed)
    for name, module in listed.items():
        assert getattr(package, name) is getattr(importlib.import_module(f"{face}.{module}"), name), name
