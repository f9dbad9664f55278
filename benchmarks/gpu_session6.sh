#!/usr/bin/env bash
# One device call (issue 3): is placement a fixed effect (probe), the spin and paired GPU
# tests, and the paired injections again with placements randomized per side.
set -u
T0=$(date +%s)
mkdir -p /tmp/kw/kernelwatch
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT
left() { echo $(( ${1:-570} - ($(date +%s) - T0) )); }
timeout 60 python3 benchmarks/placement_probe.py $OUT/placement_probe.json 2>&1 | tail -4
timeout 90 python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py -k "spin or paired or warm" -q -p no:cacheprovider -o addopts="" > $OUT/pytest_gpu_kernels6.txt 2>&1; tail -3 $OUT/pytest_gpu_kernels6.txt
echo "[$(( $(date +%s)-T0 ))s] paired"
timeout $(left 520) python3 benchmarks/measurement.py --part paired --trials 20 --paired-budget 2.5 --out $OUT/measurement_paired6.json 2>&1 | grep -v "trial " | tail -16
echo "[$(( $(date +%s)-T0 ))s] done"
