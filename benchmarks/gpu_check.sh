#!/usr/bin/env bash
# GPU check: on a machine with CUDA and torch's CUDA build, in under 5 minutes:
#   1. every test file that mentions CUDA (a CUDA skip that is not expected fails the check);
#   2. `asyncnet train --tensor torch --device cuda` for each zoo model, local and sync with 2 threads;
#   3. each zoo model trained one epoch on cuda and on cpu (local, sync 2 threads, async_scheduling
#      with 2 executor threads = two CUDA streams): the parameters must match within float32
#      tolerance (benchmarks/_gpu_check.py), printed as a table.
# Without a CUDA device it prints one line and exits with status 77 (not run).
# Usage: benchmarks/gpu_check.sh   (PYTHON=path/to/python to choose the interpreter)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
HELPER="$ROOT/benchmarks/_gpu_check.py"
DEADLINE=$((SECONDS + 300))

status=0
"$PYTHON" "$HELPER" probe || status=$?
[ "$status" -eq 0 ] || exit "$status"

left() { local s=$((DEADLINE - SECONDS)); [ "$s" -gt 5 ] || { echo "gpu_check: FAILED: out of the 5-minute budget"; exit 1; }; echo "$s"; }

echo "== CUDA tests"
timeout "$(left)" "$PYTHON" "$HELPER" tests

echo "== asyncnet train --tensor torch --device cuda"
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT
printf '%-6s %-16s %s\n' model mode result
for model in mlp cnn lstm dlrm; do
  for mode in "local 1" "sync 2"; do
    set -- $mode
    out="$RUNS/$model-$1"
    if line=$(timeout "$(left)" "$PYTHON" -m asyncnet train --model "$model" --mode "$1" --workers "$2" \
        --tensor torch --device cuda --epochs 1 --out "$out" --quiet 2>&1); then
      printf '%-6s %-16s %s\n' "$model" "$1 $2" "$(echo "$line" | tail -n 1)"
    else
      printf '%-6s %-16s FAILED: %s\n' "$model" "$1 $2" "$(echo "$line" | tail -n 1)"
      status=1
    fi
  done
done

echo "== cuda vs cpu, one epoch, float32"
timeout "$(left)" "$PYTHON" "$HELPER" compare || status=1
[ "$status" -eq 0 ] && echo "gpu_check: passed in ${SECONDS} s" || echo "gpu_check: FAILED"
exit "$status"
