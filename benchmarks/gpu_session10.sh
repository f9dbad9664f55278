#!/usr/bin/env bash
# Device call for issues 2 and 4 (2026-11-30; gpu_session9.sh plus the third FA3 commit):
#  1. probe v2 and the timer's GPU tests;
#  2. the FA3 lead of docs/results-h200.md (GQA-8 prefill with prefix 115.6 -> 249.4 us between
#     16c7f0f6 and 3e87e421) measured the way the merge gate does: both builds (trimmed,
#     by kernelwatch's environment cache) in one paired comparison on one GPU;
#  3. FA3 c75d019d (built third) benched alone on the prefill suite;
#  4. the FlashInfer/FA3 adapter GPU tests, with FA3 c75d019d.
# Carry .whl (FlashInfer 0.5.3 + companions) and .src (gpu_issue4.sh --prepare). One archive back.
set -u
T0=$(date +%s)
ROOT=$PWD
mkdir -p /tmp/kw/kernelwatch "$OUT/r" /tmp/kwenvs
for p in kernels db jobs worker dashboard; do ln -sfn "$ROOT/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$ROOT PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT/r
left() { echo $(( ${1:-560} - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fi \
  .whl/flashinfer_python-0.5.3-*.whl .whl/apache_tvm_ffi-*.whl .whl/nvidia_cudnn_frontend-*.whl
fa3() {  # fa3 SHORT -> JSON of the built environment on stdout
  local tarball full dir pin
  tarball=$(ls .src/fa3-"$1"*.tar.xz | head -1); full=$(basename "$tarball" .tar.xz); full=${full#fa3-}
  dir=/tmp/kwfa3/$full; rm -rf "$dir"; mkdir -p "$dir"; tar -xJf "$tarball" -C "$dir"
  pin=$(cat "$dir/.kw-cutlass-pin"); mkdir -p "/tmp/kwcutlass/$pin"
  [ -d "/tmp/kwcutlass/$pin/include" ] || tar -xJf ".src/cutlass-include-$pin.tar.xz" -C "/tmp/kwcutlass/$pin"
  python3 -m kernelwatch.worker.venvs --root /tmp/kwenvs --max-gb 40 build \
    --config docs/flash-attention.kernelwatch.toml --profile trimmed --offline --timeout 280 \
    --source-dir "$dir" --commit "$full" --vendor "csrc/cutlass=/tmp/kwcutlass/$pin"
}
# builds on the CPU while the GPU tests run
(fa3 16c7f0f6 > "$OUT/r/fa3-a.json" 2> "$OUT/r/fa3-a.log"; fa3 3e87e421 > "$OUT/r/fa3-b.json" 2> "$OUT/r/fa3-b.log"
 touch /tmp/kw-ab.done; fa3 c75d019d > "$OUT/r/fa3-c.json" 2> "$OUT/r/fa3-c.log") &
BUILDS=$!
timeout "$(left 200)" python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py -q -p no:cacheprovider -o addopts="" \
  > "$OUT/r/pytest_gpu_kernels10.txt" 2>&1; tail -3 "$OUT/r/pytest_gpu_kernels10.txt"
while [ ! -e /tmp/kw-ab.done ] && kill -0 $BUILDS 2>/dev/null; do sleep 2; done
path() { python3 -c "import json,sys; print(':'.join(json.load(open(sys.argv[1]))['pythonpath']))" "$1"; }
A=$(path "$OUT/r/fa3-a.json") B=$(path "$OUT/r/fa3-b.json")
if [ -n "$A" ] && [ -n "$B" ]; then
  # the trimmed profile's env tells the adapter which cases the build left out
  eval "$(python3 -c "
from pathlib import Path
from kernelwatch.worker import recipes
for k, v in recipes.parse(Path('docs/flash-attention.kernelwatch.toml').read_text()).select('trimmed').env.items():
    print(f'export {k}={v}')")"
  timeout "$(left 390)" python3 -m kernelwatch.kernels.paired_suite --baseline-path "$A" --candidate-path "$B" \
    --suite prefill --kernel prefill --impl kernelwatch.kernels.adapters.fa3 --backend fa3 --size quick \
    --min-effect 0.01 --out "$OUT/r/fa3_paired.jsonl" > "$OUT/r/fa3_paired.log" 2>&1
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); p = r['paired']
    print(r['status'], p.get('verdict'), p.get('ratio'), p.get('ci_low'), p.get('ci_high'), r['params'])" "$OUT/r/fa3_paired.jsonl"
fi
while kill -0 $BUILDS 2>/dev/null && [ "$(left 560)" -gt 150 ]; do sleep 2; done
C=$(path "$OUT/r/fa3-c.json")
if [ -n "$C" ]; then
  PYTHONPATH=$PYTHONPATH:$C timeout "$(left 465)" python3 -m kernelwatch.kernels.runner --suite prefill \
    --impl kernelwatch.kernels.adapters.fa3 --backend fa3 --size quick --budget 0.3 --kernel prefill \
    --library '{"name": "flash-attn-3", "commit": "c75d019dea9d910312974417bc28f190dfdda6d9", "profile": "trimmed"}' \
    --out "$OUT/r/fa3_c_bench.jsonl" > "$OUT/r/fa3_c_bench.log" 2>&1
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(r['status'], (r.get('timing') or {}).get('median'), (r.get('throughput') or {}).get('tflops'), r['params'])" "$OUT/r/fa3_c_bench.jsonl"
fi
PYTHONPATH=$PYTHONPATH:/tmp/fi:${C:-$A} timeout "$(left 560)" python3 -m pytest -m gpu tests/kernels/test_gpu_adapters.py -q \
  -p no:cacheprovider -o addopts="" -rs > "$OUT/r/pytest_gpu_adapters10.txt" 2>&1; tail -3 "$OUT/r/pytest_gpu_adapters10.txt"
tar -czf "$OUT/session10.tgz" -C "$OUT" r
echo "[$(( $(date +%s) - T0 ))s] done"
