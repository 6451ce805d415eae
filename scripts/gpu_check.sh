#!/usr/bin/env bash
# scripts/gpu_check.sh OUT_DIR [--wheels DIR] [--work DIR] [--parts LIST]: the first command on a CUDA machine.
#
#   bash scripts/gpu_check.sh gpu_check                 # a machine with the project installed (.venv) or its deps
#   bash scripts/gpu_check.sh $OUT --wheels .whl        # an air-gapped image with torch and timm (scripts/gpu_wheels.sh)
#   bash scripts/gpu_check.sh $OUT --parts tests,sweep  # a short lease: these parts (and wheels, env) only
#
# Runs its parts in this order, each under `timeout` (its cap) so one slow part cannot eat the rest, each
# writing OUT_DIR/<part>.log as it goes (phases, tables flushed line by line), then OUT_DIR/summary.md last:
# one line per part (status: ok / failed (exit N) / cut at CAP s / skipped; seconds) and the key figures and
# targets pulled from its log (scripts/gpu_check_summary.py). Exit status 0 when every part ended ok (or
# was skipped: no failed test to rerun).
#
#   part         what                                                   H100 (s): run F / runs H-J  cap (s)
#   wheels       (--wheels) install what the image lacks into $XBM_SITE                 13 / 1-13      30
#   env          GPU (nvidia-smi, torch), driver, memory; versions; CPUs, /dev/shm;      7 / 7-11      40
#                nmi's k-means (faiss or scikit-learn's, proven by a small nmi); its
#                imports from a cold disk (a new machine) take most of it: 5 s warm on
#                the 2-core CI machine, over 15 s on its first run of a session
#   cuda-tests   pytest -v -n auto -m cuda over the test files that touch CUDA          51 / 48-49     80
#   cuda-rerun   the failed ones again, one process, --tb=long (when any failed)          - / -        25
#   normalisers  benchmarks/bench_normalisers.py at full size (60,000 x 512)            10 / 13-16     35
#   checkpoint   benchmarks/bench_checkpoint.py: what an epoch of `xbm-tune train`        - / 18       30
#                waits for its checkpoint (300 MB on the GPU), torch.save against the
#                background writer (pinned buffers, kept after its first save), on
#                WORK's disk
#   bench-gpu    benchmarks/bench_gpu.py: its rows, then K = 1, 2, 4, at 4,000 photos   200 / -       200
#                (2,000 training images), 1 timed epoch, --row-timeout 60. A row takes
#                20-45 s (its start: CUDA, image cache, references, 15 workers), all of
#                them and K about 390 s: the cap ends after the rows the targets need
#                first (ceiling, timm, trainer cache, XBN, PC-XBN); the rest is a second
#                command (README, "GPU check"; run H: 4 rows and K = 1, 2, 4 in 273 s)
#   sweep        xbm-tune sweep on the synthetic CUB set, resnet50 224 px, batch 128,    82 / 87      115
#                --gpus-per-trial 0.5 (2 trials on the GPU at once, each capped), ASHA,
#                8 samples x 4 epochs, --time-budget 65s; then trials per hour, trials
#                at once, GPU utilisation, memory vs caps (the budget starts once Ray
#                is up: ~8 s, then trials end their epoch)
#   in all, one H100 with 16 cores (run F, docs/trainer.md "GPU check", and the     ~380          555
#   checkpoint part's 18 s from run H)
#   (plus ~10 s uncapped: the CUDA probe, the sweep's photo check, the summary; 9.5 minutes at worst)
#
# Without CUDA the same parts run at toy size (bench_gpu --quick with K = 1, 2, bench_normalisers --quick,
# bench_checkpoint with 3 rounds, a CPU sweep of test_resnet at 32 px for ~20 s; the CUDA tests skip, in one process; caps
# doubled): 3 to 6 minutes on 2 cores (3 min 13 s beside a CI run, 2026-11-29), exit status 0.
# --parts takes a comma-separated subset of tests (cuda-tests and cuda-rerun), normalisers, checkpoint, bench
# (bench-gpu) and sweep; the others are listed as skipped. Two short leases can split the check, or a rerun
# after a fix take only the part it fixed. Caps can be changed: CAP_TESTS=150 bash scripts/gpu_check.sh OUT (CAP_WHEELS, CAP_ENV, CAP_TESTS,
# CAP_RERUN, CAP_NORMALISERS, CAP_CHECKPOINT, CAP_BENCH, CAP_SWEEP).
#
# Python: $PYTHON if set, else the clone's .venv/bin/python if present, else python3. PYTHONPATH starts
# with the clone, so `xbm` and `tune` import without installing (the CLI runs as `python -m tune.cli`);
# with --wheels, scripts/install_wheels.py installs the wheels whose package is missing or older into
# $XBM_SITE (default /tmp/xbm-site), which follows on PYTHONPATH. Photos, the image cache and the sweep's
# checkpoints go to --work DIR (default /tmp/xbm-gpu-check: a second run reuses the photos), never to
# OUT_DIR, which gets only logs, tables and the sweep's Parquet (small enough to copy back).
set -uo pipefail

usage() {
  echo "usage: $0 OUT_DIR [--wheels DIR] [--work DIR] [--parts tests,normalisers,checkpoint,bench,sweep]" >&2
  exit 2
}
[ $# -ge 1 ] && [[ "$1" != -* ]] || usage
OUT=$1
shift
WHEELS=""
WORK=${XBM_CHECK_WORK:-/tmp/xbm-gpu-check}
ALL_PARTS=tests,normalisers,checkpoint,bench,sweep
PARTS=$ALL_PARTS
while [ $# -gt 0 ]; do
  case $1 in
    --wheels) [ $# -ge 2 ] || usage; WHEELS=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --work) [ $# -ge 2 ] || usage; WORK=$2; shift 2 ;;
    --parts) [ $# -ge 2 ] || usage; PARTS=$2; shift 2 ;;
    *) usage ;;
  esac
done

for part in ${PARTS//,/ }; do
  [[ ",$ALL_PARTS," == *",$part,"* ]] || { echo "--parts: unknown part '$part' (choose from $ALL_PARTS)" >&2; exit 2; }
done
wanted() { [[ ",$PARTS," == *",$1,"* ]]; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" "$WORK" || exit 2
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
cd "$ROOT"
rm -f "$OUT/parts.tsv" "$OUT/summary.md" "$OUT/bench_gpu.jsonl"

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python
else PY=python3
fi
SITE=${XBM_SITE:-/tmp/xbm-site}
export PYTHONPATH="$ROOT${WHEELS:+:$SITE}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

CAP_WHEELS=${CAP_WHEELS:-30}
CAP_ENV=${CAP_ENV:-40}

# run_part NAME CAP SIGNAL COMMAND...: COMMAND under timeout into OUT/NAME.log; a line in OUT/parts.tsv.
run_part() {
  local name=$1 cap=$2 sig=$3 start=$SECONDS rc status
  shift 3
  echo "== $name (cap $cap s): $*"
  timeout -s "$sig" -k 15 "$cap" "$@" > "$OUT/$name.log" 2>&1 < /dev/null
  rc=$?
  case $rc in
    0) status=ok ;;
    124|137) status="cut at $cap s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" "$cap" >> "$OUT/parts.tsv"
  echo "   $name: $status, $((SECONDS - start)) s"
  return $rc
}

skip_part() {  # skip_part NAME REASON
  printf '%s\t%s\t%s\t%s\n' "$1" "skipped ($2)" 0 0 >> "$OUT/parts.tsv"
  echo "== $1: skipped ($2)"
}

has() { "$PY" -c "import $1" > /dev/null 2>&1; }

echo "gpu_check: $PY, clone $ROOT, results in $OUT, work files in $WORK"
if [ -n "$WHEELS" ]; then
  run_part wheels "$CAP_WHEELS" TERM "$PY" scripts/install_wheels.py "$WHEELS" "$SITE"
fi
run_part env "$CAP_ENV" TERM "$PY" scripts/gpu_check_env.py

if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
  CUDA=1
else
  CUDA=0
  echo "no CUDA here: toy sizes, the CUDA tests skip, the caps doubled (no lease to fit; a shared CPU is slow)"
fi
SCALE=$((2 - CUDA))
CAP_TESTS=${CAP_TESTS:-$((80 * SCALE))}
CAP_RERUN=${CAP_RERUN:-$((25 * SCALE))}
CAP_NORMALISERS=${CAP_NORMALISERS:-$((35 * SCALE))}
CAP_CHECKPOINT=${CAP_CHECKPOINT:-$((30 * SCALE))}
CAP_BENCH=${CAP_BENCH:-$((200 * SCALE))}
CAP_SWEEP=${CAP_SWEEP:-$((115 * SCALE))}

# ---- the tests that touch CUDA (mark `cuda`: tests/xbm/conftest.py) ------------------------------------
mapfile -t TEST_FILES < <(grep -rlE "needs_cuda|mark\.cuda" tests --include='test_*.py' | sort)
PYTEST=("$PY" -m pytest -o "cache_dir=$WORK/pytest_cache")
has pytest_timeout && PYTEST+=(--timeout 60)
PARALLEL=()
# without CUDA every test skips: two xdist workers would only import the test files twice (24 s in all here)
has xdist && [ $CUDA = 1 ] && PARALLEL=(-n auto)
# a file that fails to import is reported (ERROR) and the other files still run
if wanted tests; then
  run_part cuda-tests "$CAP_TESTS" TERM "${PYTEST[@]}" -v -rfE --continue-on-collection-errors "${PARALLEL[@]}" \
    -m cuda "${TEST_FILES[@]}"
  mapfile -t FAILED < <(grep -oE '^(\[gw[0-9]+\] \[ *[0-9]+%\] )?(FAILED|ERROR) tests/[^ ]+' "$OUT/cuda-tests.log" \
                        | grep -oE 'tests/[^ ]+' | sort -u)
  if [ ${#FAILED[@]} -gt 0 ]; then
    run_part cuda-rerun "$CAP_RERUN" TERM "${PYTEST[@]}" -v --tb=long -m cuda "${FAILED[@]}"
  else
    skip_part cuda-rerun "no test failed"
  fi
else
  skip_part cuda-tests "not in --parts"
  skip_part cuda-rerun "not in --parts"
fi

# ---- benchmarks ------------------------------------------------------------------------------------------
if [ $CUDA = 1 ]; then
  NORMALISERS=("$PY" benchmarks/bench_normalisers.py --profile xbn,pcxbn)  # then where their time goes
  CHECKPOINT=("$PY" benchmarks/bench_checkpoint.py --folder "$WORK")
  BENCH=(--images 4000 --epochs 1 --row-timeout 60)
  CUB=(--images 4000)
else
  # one thread: two threads spinning on 2 busy cores ran this 15x slower (35 s against 2.5 s)
  NORMALISERS=(env OMP_NUM_THREADS=1 "$PY" benchmarks/bench_normalisers.py --quick)
  CHECKPOINT=("$PY" benchmarks/bench_checkpoint.py --folder "$WORK" --rounds 3)
  BENCH=(--quick --shares 1,2 --row-timeout 120)  # K=4 on a laptop's few cores measures nothing
  CUB=(--images 960 --classes 24 --size 80 60)  # bench_gpu.py's QUICK tree, reused
fi
if wanted normalisers; then
  run_part normalisers "$CAP_NORMALISERS" TERM "${NORMALISERS[@]}"
else
  skip_part normalisers "not in --parts"
fi
if wanted checkpoint; then
  run_part checkpoint "$CAP_CHECKPOINT" TERM "${CHECKPOINT[@]}"
else
  skip_part checkpoint "not in --parts"
fi
# XBM_BENCH_ARGS: more bench_gpu.py flags (later ones win), e.g. --rows and --shares for a short lease
if wanted bench; then
  # shellcheck disable=SC2086
  run_part bench-gpu "$CAP_BENCH" TERM "$PY" benchmarks/bench_gpu.py "${BENCH[@]}" --keep "$WORK/bench" \
    --json "$OUT/bench_gpu.jsonl" ${XBM_BENCH_ARGS:-}
else
  skip_part bench-gpu "not in --parts"
fi

# ---- a real sweep through Ray: two trials sharing the GPU ------------------------------------------------
NAME=gpu-check-$(date -u +%Y%m%d-%H%M%S)
# The time budget follows the cap: it starts once Ray is up (~8 s), then running trials end their epoch (a
# trial started late also its set-up) and Ray shuts down. At least 10 s, whatever cap was asked for.
if [ $CUDA = 1 ]; then
  BUDGET=$((CAP_SWEEP - 50))  # 65 s in the default 115
  # lr 1e-4, not the space's 1e-3: on 2026-11-27 a from-scratch ResNet50 at 1e-3 pulled every positive pair
  # inside the miner's pos_margin (0.2) after one 15-step epoch (embedding spread 0.016-0.026), so SupCon had
  # no anchor and its loss was exactly 0 from epoch 2 in every trial that got there (3 of 8). On the CPU
  # (64 px) 1e-3 went the same way (positives per step 638 -> 4 in 3 epochs) and 1e-4 kept them (1,490).
  # A check of throughput, not learning.
  SIZES=(--set model=resnet50 --set image_size=224 --set batch_size=128 --set embedding_size=512 --set lr=1e-4
         --gpus-per-trial 0.5 --num-samples 8 --max-epochs 4)
  GPUS=0.5
else
  BUDGET=$((CAP_SWEEP / 2 - 95))  # 20 s in the doubled 230: enough for each trial started to end an epoch
  SIZES=(--set model=test_resnet --set image_size=32 --set batch_size=16 --set embedding_size=64
         --gpus-per-trial 0 --num-samples 6 --max-epochs 3)
  GPUS=0
fi
SIZES+=(--time-budget "$((BUDGET > 10 ? BUDGET : 10))s")
SWEEP_CMD=("$PY" -m tune.cli sweep quickstart --set dataset=cub200 --set "data_root=$WORK/bench/data"
           --set "image_cache=$WORK/bench/cache" --set warmup_epochs=0 "${SIZES[@]}" --scheduler asha
           --grace-period 1 --storage "$WORK/sweeps" --name "$NAME" --no-dashboard)
if ! wanted sweep; then
  skip_part sweep "not in --parts"
elif "$PY" benchmarks/cub_fixture.py "$WORK/bench/data" "${CUB[@]}" > "$OUT/sweep-data.log" 2>&1; then
  run_part sweep "$CAP_SWEEP" INT "$PY" scripts/gpu_check_sweep.py run --out "$OUT" --sweep "$WORK/sweeps/$NAME" \
    --gpus-per-trial "$GPUS" -- "${SWEEP_CMD[@]}"
else
  skip_part sweep "no data: see sweep-data.log"
fi

"$PY" scripts/gpu_check_summary.py "$OUT"
echo
cat "$OUT/summary.md"
awk -F'\t' '$2 != "ok" && $2 !~ /^skipped/ {bad = 1} END {exit bad}' "$OUT/parts.tsv"
