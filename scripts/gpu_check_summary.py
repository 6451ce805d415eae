"""``OUT/summary.md`` of ``scripts/gpu_check.sh``: one line per part (status, seconds, cap) from
``OUT/parts.tsv``, then each part's key figures and targets pulled from its log ``OUT/<part>.log``; a part
that did not end ok, or whose log has none of its key lines, adds its log's last lines.

    python scripts/gpu_check_summary.py OUT

Standard library only: it must write the summary whatever else failed.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Callable

TAIL = 8  # log lines shown for a part that did not end ok


def _starting(*prefixes: str) -> Callable[[list[str]], list[str]]:
    return lambda lines: [line for line in lines if line.lstrip().startswith(prefixes)]


def _pytest(lines: list[str]) -> list[str]:
    """The closing line (``== 3 failed, 60 passed in 41s ==``) and the short summary's FAILED/ERROR lines."""
    closing = [line for line in lines
               if re.match(r"^=+ .*\b(passed|failed|skipped|errors?|deselected|no tests ran)\b", line)]
    return [line for line in lines if re.match(r"^(FAILED|ERROR) ", line)] + closing[-1:]


EVAL_PARTS = "evaluation by part"  # bench_gpu.print_eval_parts' title


def _bench_gpu(lines: list[str]) -> list[str]:
    """Photos, a cut, the tables (rows, evaluation by part under its title, K trials) and the targets; each row's
    one-line result (images/s, status, seconds, first batch) instead of the tables when a killed run printed
    none."""
    keep = [line for line in lines if line.startswith(("photos:", "CUT", "warning"))]
    tables = [i for i, line in enumerate(lines) if line.startswith(("row ", "K trials on one GPU", EVAL_PARTS))
              and not (i and lines[i - 1].startswith(EVAL_PARTS))]   # a titled table starts at its title
    for start in tables:
        end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
        keep += lines[start:end] + [""]
    if not tables:
        keep += [line for line in lines if re.match(r"^  \S.*: .*images/s", line)]
    if any(line.startswith("Targets") for line in lines):
        start = max(i for i, line in enumerate(lines) if line.startswith("Targets"))
        keep += [line for line in lines[start:] if line.startswith("Targets") or " target " in line]
    return keep


def _sweep(lines: list[str]) -> list[str]:
    """The figures printed after the sweep command, and its best trial."""
    best = [line for line in lines if line.startswith(("best trial", "trials:"))]
    if any(line.startswith("sweep command:") for line in lines):
        start = max(i for i, line in enumerate(lines) if line.startswith("sweep command:"))
        return best[:1] + [line for line in lines[start:] if line.strip()]
    return best


KEY: dict[str, Callable[[list[str]], list[str]]] = {
    "wheels": _starting("install ", "installed "),
    "env": lambda lines: [line for line in lines if line.strip()],
    "cuda-tests": _pytest,
    "cuda-rerun": lambda lines: _pytest(lines) + [line for line in lines if line.startswith("E ")][:12],
    "normalisers": _starting("device=", "PairMarginMiner", "targets"),
    "checkpoint": _starting("state ", "torch.save", "CheckpointWriter", "the copy alone"),
    "bench-gpu": _bench_gpu,
    "sweep": _sweep,
}


def read_parts(out: Path) -> list[tuple[str, str, str, str]]:
    """(name, status, seconds, cap) of each part, as gpu_check.sh recorded them."""
    table = out / "parts.tsv"
    rows = [line.split("\t") for line in table.read_text().splitlines()] if table.is_file() else []
    return [tuple(row[:4]) for row in rows if len(row) >= 4]


def section(out: Path, name: str, status: str) -> list[str]:
    log = out / f"{name}.log"
    if not log.is_file():
        return [] if status.startswith("skipped") else [f"(no {log.name})"]
    lines = log.read_text(errors="replace").splitlines()
    key = KEY.get(name, lambda _: [])(lines)
    if status != "ok" or not key:
        key += [f"--- last lines of {log.name}:"] + lines[-TAIL:]
    return key


def summary(out: Path) -> str:
    parts = read_parts(out)
    gpu = "no CUDA (toy sizes)"
    env = out / "env.log"
    if env.is_file():
        named = [line for line in env.read_text().splitlines() if line.startswith("torch cuda:0")]
        gpu = named[0].split(": ", 1)[1] if named else gpu
    text = [f"# GPU check, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
            f"{gpu}; logs in {out}", "", "| part | status | seconds | cap (s) |", "| --- | --- | ---: | ---: |"]
    text += [f"| {name} | {status} | {seconds} | {cap} |" for name, status, seconds, cap in parts]
    for name, status, seconds, _ in parts:
        lines = section(out, name, status)
        if lines:
            text += ["", f"## {name}: {status}, {seconds} s", "", "```", *lines, "```"]
    return "\n".join(text) + "\n"


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: gpu_check_summary.py OUT", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    (out / "summary.md").write_text(summary(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
