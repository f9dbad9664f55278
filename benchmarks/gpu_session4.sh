#!/usr/bin/env bash
# Final measurement call: paired (two processes, cold L2), CV table, GPU tests.
set -u
mkdir -p /tmp/kw/kernelwatch
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
python3 benchmarks/measurement.py --part paired --trials 20 --paired-budget 2.5 --out $OUT/measurement_paired3.json 2>&1 | grep -v "trial " | tail -15
python3 benchmarks/measurement.py --part cv --budget 1.7 --out $OUT/measurement_cv3.json 2>&1 | tail -8
python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py -q -p no:cacheprovider -o addopts="" --timeout=200 > $OUT/pytest_gpu4.txt 2>&1; tail -3 $OUT/pytest_gpu4.txt
