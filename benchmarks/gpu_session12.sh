#!/usr/bin/env bash
# Next device call (prepared 2026-11-30, not yet run). Carry .whl (FlashInfer 0.5.3 and
# companions). One archive back: $OUT/session12.tgz.
#  1. issue 4: the grouped (MoE) GEMMs' GPU tests (correctness, and a CUTLASS kernel by
#     name), and FlashInfer's FP8 prefill with and without GQA (run 11 failed the GQA case:
#     rel L2 0.718 against 0.022);
#  2. issue 3: run 11 again with 16 process pairs (predicted from run 11's pair SD of
#     0.38 %: +0.5 % flagged in ~99 % of trials; measured: 11/14 with 8 pairs);
#  3. issue 4: the FlashInfer decode adapter tests that run 10 had no time for.
. benchmarks/gpu_prelude.sh
with_flashinfer
PYTHONPATH=$PYTHONPATH:/tmp/fi timeout "$(left 100)" python3 -m pytest -m gpu tests/kernels/test_gpu_adapters.py -q \
  -p no:cacheprovider -o addopts="" -rA --tb=short -k "grouped or (flashinfer and prefill_fp8)" \
  > "$OUT/r/pytest_grouped_fp8_12.txt" 2>&1; tail -8 "$OUT/r/pytest_grouped_fp8_12.txt"
timeout "$(left 430)" python3 benchmarks/measurement.py --part paired --only "fp32 add 64M" --pairs 16 \
  --condition A/A --condition +0.5% --trials 20 --paired-budget 2.5 --deadline-s 290 \
  --out "$OUT/r/measurement_pairs12.json" > "$OUT/r/measurement_pairs12.log" 2>&1
tail -4 "$OUT/r/measurement_pairs12.log"
PYTHONPATH=$PYTHONPATH:/tmp/fi timeout "$(left 530)" python3 -m pytest -m gpu tests/kernels/test_gpu_adapters.py -q \
  -p no:cacheprovider -o addopts="" -rA --tb=short -k "flashinfer and (decode or NHD or HND)" \
  > "$OUT/r/pytest_fi_decode_12.txt" 2>&1; tail -4 "$OUT/r/pytest_fi_decode_12.txt"
tar -czf "$OUT/session12.tgz" -C "$OUT" r
echo "[$(( $(date +%s) - T0 ))s] done"
