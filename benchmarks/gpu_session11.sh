#!/usr/bin/env bash
# Device call of 2026-11-30 for issues 3, 4 and 5, one archive back ($OUT/session11.tgz):
#  1. issue 3: paired mode with 8 fresh process pairs per trial (kernels/paired.py, m pairs,
#     interval over the pairs) on the bandwidth-bound fp32 add 64M: A/A and +0.5 %, 20 trials;
#  2. issue 5: benchmarks/gpu_fleet.sh (health check, kernelwatch worker --per-gpu, one run
#     through Celery on the GPU, heartbeats);
#  3. issue 4: why FlashInfer 0.5.3's FP8 prefill adapter test failed in session 10.
# Carry .whl (FlashInfer) and .svc (the service's wheels, see gpu_fleet.sh).
set -u
T0=$(date +%s)
ROOT=$PWD
mkdir -p /tmp/kw/kernelwatch "$OUT/r"
for p in kernels db jobs worker dashboard; do ln -sfn "$ROOT/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$ROOT PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT/r
left() { echo $(( ${1:-540} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv > "$OUT/r/nvidia-smi.txt"
timeout "$(left 300)" python3 benchmarks/measurement.py --part paired --only "fp32 add 64M" --pairs 8 \
  --condition A/A --condition +0.5% --trials 20 --paired-budget 2.5 --deadline-s 250 \
  --out "$OUT/r/measurement_pairs11.json" > "$OUT/r/measurement_pairs11.log" 2>&1
tail -4 "$OUT/r/measurement_pairs11.log"
OUT_MAIN=$OUT
mkdir -p /tmp/fleetout
OUT=/tmp/fleetout timeout "$(left 455)" bash benchmarks/gpu_fleet.sh > "$OUT_MAIN/r/fleet.log" 2>&1
cp /tmp/fleetout/fleet.tgz "$OUT_MAIN/r/" 2>/dev/null; tail -15 "$OUT_MAIN/r/fleet.log"
OUT=$OUT_MAIN
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fi \
  .whl/flashinfer_python-0.5.3-*.whl .whl/apache_tvm_ffi-*.whl .whl/nvidia_cudnn_frontend-*.whl
PYTHONPATH=$PYTHONPATH:/tmp/fi timeout "$(left 525)" python3 -m pytest -m gpu tests/kernels/test_gpu_adapters.py -q \
  -p no:cacheprovider -o addopts="" -rA --tb=short -k "flashinfer and (prefill_fp8 or NHD0)" \
  > "$OUT/r/pytest_fi_fp8_11.txt" 2>&1; tail -5 "$OUT/r/pytest_fi_fp8_11.txt"
tar -czf "$OUT/session11.tgz" -C "$OUT" r
echo "[$(( $(date +%s) - T0 ))s] done"
