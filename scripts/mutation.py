"""Mutation testing of the core modules, one module group at a time (``make mutation``; not part of CI).

Each group runs mutmut in its own scratch copy of the repository whose ``[tool.mutmut]`` mutates only the
group's files and selects only the group's own test files, so every mutant runs a few fast tests instead
of the whole suite (the full suite under mutmut would take hours on a 2-core machine). Per mutant, mutmut
runs only the selected tests that reach the mutated function. Prints and writes (``--out``) a table of
killed / survived / no-test / timeout counts and the kill rate per group; ``mutmut results`` inside
``<workdir>/<group>`` lists the survivors, ``mutmut show NAME`` shows one.

    python scripts/mutation.py                       # every group
    python scripts/mutation.py memory loss           # some groups
    python scripts/mutation.py --workdir /tmp/mut --out mutation.md
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# group -> (files to mutate, the group's own test files)
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "normalisers": (["xbm/normalisers/*.py"], ["tests/xbm/normalisers"]),
    "memory": (["xbm/memory/ring.py"], ["tests/xbm/memory/test_ring.py"]),
    # the loss folder: the valid negatives and the indexed memory test XBMLoss in their own files
    "loss": (["xbm/losses/xbm_loss.py"], ["tests/xbm/losses"]),
    # the trainer tests that reach the loop are slow (full toy epochs): only the NaN-check one is selected
    "training": (["xbm/training/epoch.py", "xbm/training/optim.py"],
                 ["tests/xbm/training/test_epoch.py", "tests/xbm/training/test_epoch_loop.py",
                  "tests/xbm/training/test_optim.py", "tests/xbm/trainer/test_trainer_mutable.py",  # rescale_optimizer
                  "tests/xbm/test_config_wiring.py",
                  "tests/xbm/trainer/test_trainer.py::test_non_finite_loss_names_epoch_and_iteration_before_any_step_uses_it"]),
    "objectives": (["xbm/objectives/*.py"], ["tests/xbm/objectives"]),
    "sink": (["tune/results/sink.py"], ["tests/tune/results/test_sink.py", "tests/tune/results/test_sink_rows.py"]),
    "compare": (["analysis/compare.py"], ["tests/analysis/test_compare.py"]),
}
COPIED = ("xbm", "tune", "analysis", "search_spaces", "tests", "pyproject.toml")
def prepare(group: str, workdir: Path) -> Path:
    """A scratch copy of the repository whose [tool.mutmut] covers ``group`` only."""
    files, tests = GROUPS[group]
    root = workdir / group
    root.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        source, target = REPO / name, root / name
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target)
    text = (REPO / "pyproject.toml").read_text()
    base = tomllib.loads(text)["tool"]["mutmut"]
    head = text.split("[tool.mutmut]")[0]
    config = {**base, "only_mutate": files, "pytest_add_cli_args_test_selection": tests}
    lines = ["[tool.mutmut]"] + [f"{key} = {json.dumps(value)}" for key, value in config.items()]
    (root / "pyproject.toml").write_text(head + "\n".join(lines) + "\n")
    return root


def counts(root: Path) -> dict[str, int]:
    """Status counts from mutmut's per-file ``.meta`` results."""
    from mutmut.stats import status_by_exit_code

    out: dict[str, int] = {}
    for meta in (root / "mutants").rglob("*.meta"):
        for code in json.loads(meta.read_text()).get("exit_code_by_key", {}).values():
            status = status_by_exit_code[code]
            out[status] = out.get(status, 0) + 1
    return out


def row(group: str, c: dict[str, int]) -> str:
    """One table row; the kill rate is killed / checked (timeouts are not counted as kills)."""
    total = sum(c.values())
    checked = total - c.get("not checked", 0)
    killed, survived = c.get("killed", 0), c.get("survived", 0)
    other = checked - killed - survived - c.get("no tests", 0) - c.get("timeout", 0)
    rate = f"{killed / checked:.0%}" if checked else "-"
    files, tests = GROUPS[group]
    return (f"| {group} | {', '.join(files)} | {', '.join(tests)} | {total} | {checked} | {killed} | {survived} | "
            f"{c.get('no tests', 0)} | {c.get('timeout', 0)} | {other} | {rate} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", nargs="*", help=f"groups to run (default: all): {', '.join(GROUPS)}")
    parser.add_argument("--workdir", default=os.environ.get("TMPDIR", "/tmp") + "/xbm-mutation", type=Path)
    parser.add_argument("--max-children", default=str(os.cpu_count() or 2))
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--report", action="store_true", help="only print the table of the runs in --workdir")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        parser.error(f"groups must be among {', '.join(GROUPS)}, but got {', '.join(unknown)}")
    mutmut = Path(sys.executable).with_name("mutmut")
    rows = ["| group | files | tests | mutants | checked | killed | survived | no tests | timeout | other | kill rate |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for group in args.groups or list(GROUPS):
        if args.report:
            if (args.workdir / group / "mutants").exists():
                rows.append(row(group, counts(args.workdir / group)))
            continue
        root = prepare(group, args.workdir)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
        print(f"== {group}: mutmut run in {root}", flush=True)
        with open(root / "mutmut.log", "w") as log:
            code = subprocess.call([str(mutmut), "run", "--max-children", args.max_children], cwd=root, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
        rows.append(row(group, counts(root)))
        print(rows[-1] + ("" if code == 0 else f"  (mutmut exit {code}, see {root / 'mutmut.log'})"), flush=True)
    table = "\n".join(rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
