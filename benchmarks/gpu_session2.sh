#!/usr/bin/env bash
# One device call: measurement part 2 (paired, two processes) then part 1 (CV) again.
set -u
mkdir -p /tmp/kw/kernelwatch
for p in kernels db jobs worker dashboard; do ln -sfn "$PWD/$p" "/tmp/kw/kernelwatch/$p"; done
export PYTHONPATH=/tmp/kw:$PWD PYTHONUNBUFFERED=1 KW_PEAKS_DIR=$OUT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
python3 benchmarks/measurement.py --part paired --trials ${TRIALS:-20} --paired-budget 2.5 --out $OUT/measurement_paired.json 2>&1 | grep -v "trial " | tail -30
python3 benchmarks/measurement.py --part cv --out $OUT/measurement_cv2.json 2>&1 | tail -9
python3 -m pytest -m gpu tests/kernels/test_gpu_kernels.py -q -p no:cacheprovider -o addopts="" --timeout=300 2>&1 | tail -4 | tee $OUT/pytest_gpu2.txt
