#!/usr/bin/env bash
# One device call: L2 flush probe, GPU tests (full log), corrected paired injection.
set -u
mkdir -p /tmp/kw/kernelwatch
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
python3 benchmarks/l2_probe.py $OUT/l2_probe.json
python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py -q -p no:cacheprovider -o addopts="" --timeout=300 > $OUT/pytest_gpu3.txt 2>&1; tail -3 $OUT/pytest_gpu3.txt
python3 benchmarks/measurement.py --part paired --trials ${TRIALS:-20} --paired-budget 2.5 --out $OUT/measurement_paired2.json 2>&1 | grep -v "trial " | tail -16
