# Sourced by the device-call scripts from gpu_session12.sh on (the earlier ones keep their
# own copy: they are the record of what ran). On the GPU host, from the repository root:
# kernelwatch importable from the checkout (not installed there), $OUT/r for results,
# `left N` = seconds until N seconds after the start, `with_flashinfer` installs the
# carried FlashInfer 0.5.3 into /tmp/fi.
set -u
T0=$(date +%s)
ROOT=$PWD
mkdir -p /tmp/kw/kernelwatch "$OUT/r"
for p in kernels db jobs worker dashboard; do ln -sfn "$ROOT/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$ROOT PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT/r
left() { echo $(( ${1:-540} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,temperature.gpu,power.draw \
  --format=csv > "$OUT/r/nvidia-smi.txt"
with_flashinfer() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fi \
    .whl/flashinfer_python-0.5.3-*.whl .whl/apache_tvm_ffi-*.whl .whl/nvidia_cudnn_frontend-*.whl
}
