#!/usr/bin/env bash
# scripts/gpu_wheels.sh DIR [--bench]: the wheelhouse an air-gapped GPU node needs to run xbm-tune when its image
# has torch, timm and the usual scientific stack but not the rest (Python 3.12, x86-64, manylinux).
#
#   bash scripts/gpu_wheels.sh .whl            # here, with access to the package registry
#   bash scripts/gpu_check.sh OUT --wheels .whl  # there: installs the wheels it lacks into /tmp/xbm-site
#
#   bash scripts/gpu_wheels.sh .whl-bench --bench     # about 19 MiB: pytorch-metric-learning and faiss-cpu only,
#   bash scripts/gpu_check.sh OUT --wheels .whl-bench --parts normalisers,checkpoint,bench
#
# --bench: what the normalisers, checkpoint and bench parts import (xbm needs no Ray or Optuna) plus faiss-cpu,
# so that those parts evaluate as an install with faiss does (nmi's k-means: faiss's, not scikit-learn's, which
# was half of each evaluation on the H100). One call carries it, with no install from an earlier call.
#
# What it carries: pytorch-metric-learning, Ray (core + what `ray.tune` and the project's sweep import; no
# dashboard: gpu_check runs sweeps with --no-dashboard), Optuna with CMA-ES, TensorBoardX (Ray's
# TBXLoggerCallback) and the dependencies of these that such an image lacks (the list below), plus
# typing-extensions 4.16: pydantic-core (imported by ray.tune) needs its Sentinel, which older images lack;
# scripts/install_wheels.py installs a carried wheel only where the image's version is missing or older.
# faiss-cpu (an 18 MB wheel) is left out of the full wheelhouse: it would pass the 64 MiB a call carries. The
# full check then runs the paths of an install without faiss (torch's k-NN, scikit-learn's k-means), which is how
# such an install was found broken on 2026-11-26 (nmi's PML calculator built a FaissKNN); --bench carries it.
# Ray's wheel is repacked without ray/jars (31 MB of Java for Java workers, which Python sweeps never start),
# its RECORD entries dropped with the files. Versions: constraints.txt where it pins them, else PINS below
# (the versions the project's .venv is tested with). The total must stay under LIMIT_MIB (the wheelhouse
# travels with the working tree to the GPU machine, 64 MiB in all); over it, the script fails.
#
# The GPU image already has (not carried): absl-py aiohttp aiosignal attrs certifi charset-normalizer click
# cloudpickle filelock frozenlist fsspec grpcio h5py idna jinja2 joblib markupsafe matplotlib msgpack numpy
# packaging pandas pillow prometheus-client protobuf psutil pyarrow pyyaml requests rich scikit-learn scipy
# six sympy tensorboard threadpoolctl timm torch torchvision tqdm typing-extensions urllib3 yarl pytest
# pytest-xdist pytest-timeout hypothesis safetensors huggingface-hub numba.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ] || [[ "$1" == -* ]] || { [ $# -eq 2 ] && [ "$2" != --bench ]; }; then
  echo "usage: $0 DIR [--bench]   (writes the wheelhouse for an air-gapped GPU node into DIR)" >&2
  exit 2
fi
BENCH=$([ "${2:-}" = --bench ] && echo 1 || true)
cd "$(dirname "$0")/.."
DIR=$(mkdir -p "$1" && cd "$1" && pwd)
PY=${PYTHON:-python3}
LIMIT_MIB=56
# from constraints.txt (the project's tested pins)
FROM_CONSTRAINTS="pytorch-metric-learning ray optuna cmaes tensorboardX"
# what those need that the image lacks (versions of the project's .venv)
PINS="alembic==1.20.1 sqlalchemy==2.1.9 greenlet==3.5.6 mako==1.4.3 colorlog==6.12.0
jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
typing-extensions==4.16.0"
if [ -n "$BENCH" ]; then
  FROM_CONSTRAINTS="pytorch-metric-learning faiss-cpu"   # both need only what the image has (numpy, packaging)
  PINS=""
fi

specs=()
for name in $FROM_CONSTRAINTS; do
  pin=$(grep -i "^${name}==" constraints.txt || true)
  if [ -z "$pin" ]; then
    echo "constraints.txt pins no version of $name (expected a line $name==VERSION)" >&2
    exit 1
  fi
  specs+=("$pin")
done
specs+=($PINS)

download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
for spec in "${specs[@]}"; do
  echo "downloading $spec"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 -d "$download" "$spec"
done

# Replace DIR's wheels: a stale version left there would be installed beside the new one.
rm -f "$DIR"/*.whl
"$PY" - "$download" "$DIR" <<'EOF'
"""Copy the wheels to DIR; Ray's without ray/jars (and their RECORD lines)."""
import shutil
import sys
import zipfile
from pathlib import Path

source, target = Path(sys.argv[1]), Path(sys.argv[2])
for wheel in sorted(source.glob("*.whl")):
    if not wheel.name.startswith("ray-"):
        shutil.copy2(wheel, target / wheel.name)
        continue
    dropped = 0
    with zipfile.ZipFile(wheel) as old, zipfile.ZipFile(target / wheel.name, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():  # ZipInfo kept: file modes (the raylet's exec bit) and compression
            if info.filename.startswith("ray/jars/"):
                dropped += info.compress_size
                continue
            data = old.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not line.startswith("ray/jars/")).encode()
            new.writestr(info, data)
    print(f"repacked {wheel.name} without ray/jars ({dropped / 1e6:.0f} MB of Java left out)")
EOF

echo
ls -l "$DIR"/*.whl | awk '{printf "%8.1f MiB  %s\n", $5 / 2^20, $NF}'
total=$(cat "$DIR"/*.whl | wc -c)
echo "total: $(awk -v b="$total" 'BEGIN {printf "%.1f", b / 2^20}') MiB in $(ls "$DIR"/*.whl | wc -l) wheels (limit $LIMIT_MIB MiB)"
if [ "$total" -gt $((LIMIT_MIB * 1024 * 1024)) ]; then
  echo "the wheelhouse is over $LIMIT_MIB MiB: it would not travel with the working tree" >&2
  exit 1
fi
