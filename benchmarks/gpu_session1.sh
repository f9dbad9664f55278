#!/usr/bin/env bash
# One device call: the first suite natively, the GPU tests, and measurement part 1 (CV).
set -u
mkdir -p /tmp/kw/kernelwatch
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/nvidia-smi.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
t0=$(date +%s)
python3 -m kernelwatch.kernels.runner --out $OUT/bench_h200.jsonl 2>$OUT/bench_stderr.log; echo "bench rc=$? $(( $(date +%s)-t0 ))s"
python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py -q -p no:cacheprovider -o addopts="" --timeout=500 2>&1 | tail -25 | tee $OUT/pytest_gpu.txt
python3 benchmarks/measurement.py --part cv --out $OUT/measurement_cv.json 2>&1 | tail -20
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/bench_h200.jsonl"):
    r = json.loads(l); t = r.get("throughput") or {}; tm = r.get("timing") or {}
    print(f"{r['kernel']:<10} {r['params'].get('dtype'):<9} {r['status']:<5} "
          f"{(tm.get('median') or 0)*1e6:9.1f}us {t.get('tflops') or 0:7.1f}TF {t.get('gbps') or 0:7.0f}GB/s "
          f"{t.get('pct_of_peak') or 0:5.1f}% {tm.get('stop_reason')} n={tm.get('n')} err={r['correctness']['errors']['rel_l2'] if r.get('correctness') else None}")
PY
