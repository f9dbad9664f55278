#!/usr/bin/env bash
# Next device call for issue 3 (prepared 2026-11-29, not yet run): do the per-process
# offsets of paired mode follow the process or the set-up? Paired GEMM / add / launch-bound
# injections with the roles of the two processes swapped on odd trials. One archive back.
set -u
T0=$(date +%s)
mkdir -p /tmp/kw/kernelwatch "$OUT/r"
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT/r
left() { echo $(( ${1:-560} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > "$OUT/r/nvidia-smi.txt"
timeout "$(left 540)" python3 benchmarks/measurement.py --part paired --trials 20 --paired-budget 2.5 \
  --swap-roles --out "$OUT/r/measurement_paired8.json" 2>&1 | grep -v "trial " | tail -16
tar -czf "$OUT/session8.tgz" -C "$OUT" r
echo "[$(( $(date +%s) - T0 ))s] done"
