#!/usr/bin/env bash
# One device call (issues 2 and 3): the first suite natively, the GPU tests of the
# timer, the L2 probe with the spin keep-busy, the paired injections of the right size,
# and the CV of the graph-timed kernels (their keep-busy changed). Each step is bounded.
set -u
T0=$(date +%s)
mkdir -p /tmp/kw/kernelwatch
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT
# FlashInfer 0.5.3 only (two versions of one project stop the install)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
  .whl/flashinfer_python-0.5.3-*.whl .whl/apache_tvm_ffi-*.whl .whl/nvidia_cudnn_frontend-*.whl \
  && export PYTHONPATH=$PYTHONPATH:/tmp/site
left() { echo $(( ${1:-570} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/nvidia-smi.txt
s=$(date +%s)
timeout 120 python3 -m kernelwatch.kernels.runner --out $OUT/bench_h200.jsonl 2>$OUT/bench_stderr.log; echo "bench rc=$? $(( $(date +%s)-s ))s"
timeout 200 python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py -q -p no:cacheprovider -o addopts="" --timeout=150 > $OUT/pytest_gpu_kernels.txt 2>&1; tail -4 $OUT/pytest_gpu_kernels.txt
timeout 40 python3 benchmarks/l2_probe.py $OUT/l2_probe.json 2>&1 | tail -4
echo "[$(( $(date +%s)-T0 ))s] paired"
timeout $(left 480) python3 benchmarks/measurement.py --part paired --trials 20 --paired-budget 2.5 --out $OUT/measurement_paired5.json 2>&1 | grep -v "trial " | tail -16
echo "[$(( $(date +%s)-T0 ))s] cv"
timeout $(left 575) python3 benchmarks/measurement.py --part cv --budget 1.7 --only "2048" --only "64K" --only "FlashInfer" --only "SDPA" --out $OUT/measurement_cv5.json 2>&1 | tail -6
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench_h200.jsonl"):
    r = json.loads(l); t = r.get("throughput") or {}; tm = r.get("timing") or {}
    print(f"{r['kernel']:<10} {r['params'].get('dtype'):<9} {r['status']:<5} "
          f"{(tm.get('median') or 0)*1e6:9.1f}us {t.get('tflops') or 0:7.1f}TF {t.get('gbps') or 0:7.0f}GB/s "
          f"{t.get('pct_of_peak') or 0:5.1f}% {tm.get('stop_reason')} n={tm.get('n')}")
PY
echo "[$(( $(date +%s)-T0 ))s] done"
