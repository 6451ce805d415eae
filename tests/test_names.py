"""Every public name (function, class, constant) of xbm, tune and analysis is defined in one module (issue 54)."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# names each module of a kind defines for itself, by design: the command interface (tune/cli.py), a data set
# module's protocol (xbm/data/registry.py reads them), a package's exports and a program's entry point
PROTOCOLS = {"add_arguments", "run", "LAYOUT", "NUM_TRAIN_CLASSES", "RECALL_KS", "main", "log"}


def definitions(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not n.startswith("_") and n not in PROTOCOLS]


def test_no_public_name_is_defined_in_two_modules():
    """Bug caught: a second BestWeights, parse_overrides or STARTS table (as there were) that drifts from the first,
    or one name meaning two things (MODES for metric modes and image modes) so a reader imports the wrong one."""
    homes = defaultdict(set)
    for package in ("xbm", "tune", "analysis"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in definitions(path):
                homes[name].add(str(path.relative_to(ROOT)))
    twice = {name: sorted(places) for name, places in homes.items() if len(places) > 1}
    assert twice == {}
