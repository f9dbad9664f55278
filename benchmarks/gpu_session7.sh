#!/usr/bin/env bash
# Last short device call: FlashInfer 0.5.3 vs 0.6.0 paired on one GPU, the spin test,
# the GPU adapter tests that need no JIT library. Everything lands in one tarball
# (the device tool returns a limited number of files).
set -u
mkdir -p /tmp/kw/kernelwatch $OUT/r
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT/r
for v in 0.5.3 0.6.0; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fi$v \
    .whl/flashinfer_python-$v-*.whl .whl/apache_tvm_ffi-*.whl .whl/nvidia_cudnn_frontend-*.whl
done
timeout 150 python3 benchmarks/versions_paired.py --a /tmp/fi0.5.3 --b /tmp/fi0.6.0 --repeats 2 --out $OUT/r/versions_paired.json 2>&1 | tail -8
timeout 80 python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py tests/kernels/test_gpu_adapters.py -k "spin or adapter" -q -p no:cacheprovider -o addopts="" -rs > $OUT/r/pytest_gpu7.txt 2>&1; tail -4 $OUT/r/pytest_gpu7.txt
tar -czf $OUT/session7.tgz -C $OUT r
