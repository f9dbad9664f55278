#!/usr/bin/env bash
# Issue 4 on the H200, in one call of at most 10 minutes: the prefill, decode and GEMM
# suites for PyTorch SDPA (FLASH / cuDNN / EFFICIENT), kernelwatch's Triton kernels and
# the CUTLASS path (torch._scaled_mm row-wise), FlashInfer 0.5.3 against 0.6.0 (two
# pip --target environments made by kernelwatch.worker.venvs), and FlashAttention-3
# built by kernelwatch (trimmed profile of docs/flash-attention.kernelwatch.toml) at
# the commits given as arguments. Every bench goes through the worker's suite process
# (crash isolation, per-case timeouts); records are JSON lines under $OUT/records.
#
#   benchmarks/gpu_issue4.sh [FA_COMMIT ...]        on the GPU host (no network)
#   FA_REPO=... CUTLASS_REPO=... benchmarks/gpu_issue4.sh --prepare FA_COMMIT ...
#                                                   on a machine with both repositories
#
# What the GPU host needs next to the repository (carried, at most 64 MiB in all):
#   .whl/   flashinfer_python-0.5.3-*.whl, flashinfer_python-0.6.0-*.whl,
#           apache_tvm_ffi-*.whl, nvidia_cudnn_frontend-*.whl (any other wheel there is
#           installed next to FlashInfer too)
#   .src/fa3-<sha>.tar.xz and .src/cutlass-include-<pin>.tar.xz  made by --prepare:
#           each commit's hopper/ with its CUTLASS pin, and CUTLASS include/ per pin.
#           Else .src/flash-attention as a git repository holding the commits (CUTLASS
#           from .src/cutlass.git through the submodule mirror, or the tarballs), or as
#           a plain snapshot with csrc/cutlass/include (built once, labelled "snapshot").
# Default commits (all build with CUDA 13's own nvcc; two CUTLASS pins):
#   16c7f0f6 (2025-10-21, CUTLASS v4.3.0)  3e87e421 (2026-01-08, CUTLASS update)
#   c75d019d (2026-07-29)
# Each step is checked and logged; a failing step never stops the next one. The last
# thing printed is a short table; everything else is in $OUT (run.log, steps.jsonl,
# logs/, records/, summary.md, meta.json).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DEFAULT_COMMITS="16c7f0f6 3e87e421 c75d019d"
CUTLASS_URL=https://github.com/NVIDIA/cutlass.git

# ------------------------------------------------------------------ --prepare (networked side)
# Compressed sources only (the carry limit is 64 MiB): per commit hopper/ + README.md
# (what hopper/setup.py reads) with the commit's CUTLASS pin, and per pin CUTLASS's
# include/ (the only part the build reads). About 6 MB for the three default commits.
if [ "${1:-}" = "--prepare" ]; then
  shift
  set -eo pipefail
  : "${FA_REPO:?FA_REPO=path of a flash-attention clone}" "${CUTLASS_REPO:?CUTLASS_REPO=path of a cutlass clone}"
  mkdir -p .src
  commits=("$@"); [ ${#commits[@]} -gt 0 ] || read -ra commits <<< "$DEFAULT_COMMITS"
  for c in "${commits[@]}"; do
    full=$(git -C "$FA_REPO" rev-parse "$c^{commit}")
    pin=$(git -C "$FA_REPO" rev-parse "$full:csrc/cutlass")
    tmp=$(mktemp -d)
    git -C "$FA_REPO" archive "$full" hopper README.md | tar -x -C "$tmp"
    echo "$pin" > "$tmp/.kw-cutlass-pin"
    echo "$full" > "$tmp/.kw-commit"
    tar -cJf ".src/fa3-$full.tar.xz" -C "$tmp" .
    rm -rf "$tmp"
    if [ ! -f ".src/cutlass-include-$pin.tar.xz" ]; then
      git -C "$CUTLASS_REPO" archive --format=tar "$pin" include | xz -6 > ".src/cutlass-include-$pin.tar.xz"
    fi
    n=$(tar -tJf ".src/cutlass-include-$pin.tar.xz" | grep -vc '/$')
    [ "$n" -eq "$(git -C "$CUTLASS_REPO" ls-tree -r --name-only "$pin" include | wc -l)" ]
    echo "prepared $c = $full (CUTLASS $pin, $n headers)"
  done
  du -ch .src/fa3-*.tar.xz .src/cutlass-include-*.tar.xz | tail -1
  exit 0
fi

# ------------------------------------------------------------------ the GPU host
OUT=${OUT:-$ROOT/out-issue4}
export OUT
mkdir -p "$OUT/logs" "$OUT/records"
T0=$(date +%s)
BUDGET=${KW_ISSUE4_BUDGET_S:-575}          # the run tool stops us at 600 s
COMMITS=${*:-$DEFAULT_COMMITS}
PY=python3
KW=/tmp/kw                                  # kernelwatch.* as a namespace over the folders
ENVS=/tmp/kwenvs                            # kernelwatch.worker.venvs cache
mkdir -p "$KW/kernelwatch" "$ENVS"
for p in kernels db jobs worker dashboard; do ln -sfn "$ROOT/$p" "$KW/kernelwatch/$p"; done
export PYTHONPATH=$KW PYTHONUNBUFFERED=1
SIZE=${KW_ISSUE4_SIZE:-quick}              # smoke: a dry run of this script on a CPU machine

elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
log() { echo "[$(elapsed)s] $*" | tee -a "$OUT/run.log"; }
record_step() {  # name status seconds note (the note is cut to printable, quote-free text)
  local note; note=$(printf '%s' "$4" | tr '\n\t' '  ' | tr -cd '[:print:]' | tr -d '"\\' | cut -c1-300)
  printf '{"step": "%s", "status": "%s", "seconds": %s, "at_s": %s, "note": "%s"}\n' \
    "$1" "$2" "$3" "$(elapsed)" "$note" >> "$OUT/steps.jsonl"
}
# run_step NAME MAX_SECONDS CMD...: bounded by the time left, logged, never fatal.
run_step() {
  local name=$1 want=$2; shift 2
  local t; t=$(left); t=$(( t - 15 ))
  [ "$t" -gt "$want" ] && t=$want
  if [ "$t" -lt 20 ]; then log "SKIP $name (only $(left)s left)"; record_step "$name" skipped 0 "no time left"; return 0; fi
  local s; s=$(date +%s)
  log "START $name (limit ${t}s)"
  timeout -k 5 "$t" "$@" > "$OUT/logs/$name.log" 2>&1
  local rc=$? d=$(( $(date +%s) - s ))
  local status=ok; [ $rc -ne 0 ] && status="failed rc=$rc"; [ $rc -eq 124 ] && status=timeout
  log "END $name: $status in ${d}s ($(tail -1 "$OUT/logs/$name.log" | cut -c1-160))"
  record_step "$name" "$status" "$d" "$(tail -3 "$OUT/logs/$name.log")"
  return 0
}

# The bench driver: the worker's suite process (crash isolation, case timeouts) around
# `python -m kernelwatch.kernels.runner`, in a sandboxed environment, records copied out.
cat > "$KW/issue4_bench.py" <<'PYEOF'
import argparse, json, os, shutil, sys, time
from pathlib import Path
from kernelwatch.worker.sandbox import clean_env
from kernelwatch.worker.suite_process import SuiteRequest, run_suite

p = argparse.ArgumentParser()
p.add_argument("--name", required=True); p.add_argument("--out", required=True)
p.add_argument("--suite", action="append", required=True); p.add_argument("--impl", required=True)
p.add_argument("--backend", required=True); p.add_argument("--library", default="{}")
p.add_argument("--pythonpath", action="append", default=[]); p.add_argument("--env", action="append", default=[])
p.add_argument("--recipe"); p.add_argument("--profile")
p.add_argument("--case-timeout", type=float, default=90); p.add_argument("--suite-timeout", type=float, default=300)
p.add_argument("bench_args", nargs=argparse.REMAINDER)
a = p.parse_args()
extra = dict(e.split("=", 1) for e in a.env)
if a.recipe:
    from kernelwatch.worker import recipes
    extra.update(recipes.parse(Path(a.recipe).read_text()).select(a.profile).env)
work = Path("/tmp/kwbench") / a.name
shutil.rmtree(work, ignore_errors=True)
req = SuiteRequest(python=sys.executable, pythonpath=tuple([os.environ["KW_ROOT_PATH"], *a.pythonpath]),
                   env=clean_env(extra), workdir=work, suites=a.suite, impl=a.impl, backend=a.backend,
                   library=json.loads(a.library), case_timeout_s=a.case_timeout,
                   suite_timeout_s=a.suite_timeout, extra_args=[x for x in a.bench_args if x != "--"])
t = time.time()
outcome = run_suite(req)
with open(Path(a.out) / f"{a.name}.jsonl", "w") as fh:
    for r in outcome.records:
        fh.write(json.dumps(r, sort_keys=True) + "\n")
counts = {}
for r in outcome.records:
    counts[r["status"]] = counts.get(r["status"], 0) + 1
for r in outcome.records:
    if r["status"] in ("fail", "error"):
        print("  ", r["status"], r["kernel"], json.dumps(r["params"])[:120], "|", r["error"][:200])
print(f"{a.name}: {len(outcome.records)} records {counts} in {time.time() - t:.0f}s"
      + (f" ABORTED: {outcome.aborted}" if outcome.aborted else ""))
PYEOF
export KW_ROOT_PATH=$KW
bench() {  # bench NAME MAX_SECONDS DRIVER_ARGS... -- RUNNER_ARGS...
  local name=$1 want=$2; shift 2
  local t; t=$(left); t=$(( t - 20 )); [ "$t" -gt "$want" ] && t=$want
  run_step "$name" "$want" $PY "$KW/issue4_bench.py" --name "$name" --out "$OUT/records" \
    --suite-timeout "$t" "$@"
}
A=kernelwatch.kernels.adapters

log "issue 4 on $(hostname), commits: $COMMITS, budget ${BUDGET}s"
ls -la .whl .src 2>&1 | head -30 >> "$OUT/run.log"
{
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.max.sm,memory.total --format=csv
  $PY -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"
  nvcc --version | tail -2; command -v ccache || echo "no ccache"; nproc; date -u +%FT%TZ
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt" | head -8 | tee -a "$OUT/run.log"
if ! $PY -m kernelwatch.kernels.runner --size "$SIZE" --list --out /dev/null > /dev/null 2>&1; then
  log "WARNING: this runner has no '--size $SIZE' (integration pending): full grids, cut by step timeouts"
  SIZE=full
fi

# ------------------------------------------------------------------ FA3 builds, in the background
# Builds use the CPU (3 translation units x NVCC_THREADS=4), benchmarks the GPU; they
# overlap so the session fits its 10 minutes. The overlap is recorded in meta.json.
fa3_build() {  # fa3_build LABEL VENVS_BUILD_ARGS...
  local label=$1 s; shift; s=$(date +%s)
  log "FA3 build $label starts"
  timeout -k 5 300 $PY -m kernelwatch.worker.venvs --root "$ENVS" --max-gb 40 build \
    --config docs/flash-attention.kernelwatch.toml --profile trimmed --offline --timeout 280 "$@" \
    > "$OUT/fa3-build-$label.json" 2> "$OUT/logs/fa3-build-$label.log"
  local rc=$? d=$(( $(date +%s) - s ))
  log "FA3 build $label: rc=$rc in ${d}s: $(cut -c1-240 "$OUT/fa3-build-$label.json")"
  record_step "fa3-build-$label" "rc=$rc" "$d" "$(cut -c1-200 "$OUT/fa3-build-$label.json")"
}
cutlass_for() {  # cutlass_for PIN -> a directory holding include/, or nothing
  local pin=$1
  if [ -f ".src/cutlass-include-$pin.tar.xz" ]; then
    mkdir -p "/tmp/kwcutlass/$pin"
    [ -d "/tmp/kwcutlass/$pin/include" ] || tar -xJf ".src/cutlass-include-$pin.tar.xz" -C "/tmp/kwcutlass/$pin"
    echo "/tmp/kwcutlass/$pin"
  fi
}
fa3_builds() {
  local fa=.src/flash-attention c
  for c in $COMMITS; do
    local tarball full pin dir vend
    tarball=$(ls .src/fa3-"$c"*.tar.xz 2> /dev/null | head -1)
    if [ -n "$tarball" ]; then
      full=$(basename "$tarball" .tar.xz); full=${full#fa3-}
      dir=/tmp/kwfa3/$full; rm -rf "$dir"; mkdir -p "$dir"; tar -xJf "$tarball" -C "$dir"
      pin=$(cat "$dir/.kw-cutlass-pin"); vend=$(cutlass_for "$pin")
      if [ -z "$vend" ]; then log "FA3 $c: CUTLASS $pin not carried"; record_step "fa3-build-$c" missing 0 "no CUTLASS $pin"; continue; fi
      fa3_build "$c" --source-dir "$dir" --commit "$full" --vendor "csrc/cutlass=$vend"
    elif full=$(git -C "$fa" rev-parse --verify -q "$c^{commit}" 2> /dev/null) && [ -n "$full" ]; then
      pin=$(git -C "$fa" rev-parse "$full:csrc/cutlass"); vend=$(cutlass_for "$pin")
      if [ -n "$vend" ]; then
        fa3_build "$c" --repo "$fa" --commit "$full" --vendor "csrc/cutlass=$vend"
      else
        fa3_build "$c" --repo "$fa" --commit "$full" --mirror "$CUTLASS_URL=$ROOT/.src/cutlass.git"
      fi
    else
      log "FA3: commit $c not carried (.src/fa3-$c*.tar.xz or .src/flash-attention)"
      record_step "fa3-build-$c" missing 0 "commit not carried"
    fi
  done
  if ! ls "$OUT"/fa3-build-*.json > /dev/null 2>&1 && [ -d "$fa/csrc/cutlass/include" ] \
     && [ -d "$fa/hopper" ]; then
    log "FA3: no commit carried; building the snapshot in $fa once"
    fa3_build snapshot --source-dir "$fa" --commit snapshot
  fi
}
fa3_builds > /dev/null 2>&1 &
FA3_PID=$!

# ------------------------------------------------------------------ torch GEMMs: cuBLAS and CUTLASS
bench gemm-torch 75 --suite gemm --impl $A.gemm --backend torch \
  --library "$($PY -c 'import json, torch; print(json.dumps({"name": "torch", "version": torch.__version__}))')" \
  -- --size $SIZE --budget 0.3

# Which kernels _scaled_mm runs (the CUTLASS claim is checked, not assumed).
run_step cutlass-kernels 40 $PY - <<'PYEOF'
import json, os, torch
from torch.profiler import ProfilerActivity, profile
dev = "cuda"
m = n = k = 4096
a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
w = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn)
calls = {
    "fp8_rowwise": lambda: torch._scaled_mm(a, w.t(), scale_a=torch.ones(m, 1, device=dev),
                                            scale_b=torch.ones(1, n, device=dev), out_dtype=torch.bfloat16),
    "fp8_tensorwise": lambda: torch._scaled_mm(a, w.t(), scale_a=torch.tensor(1.0, device=dev),
                                               scale_b=torch.tensor(1.0, device=dev), out_dtype=torch.bfloat16),
    "bf16_mm": lambda: a.to(torch.bfloat16) @ w.to(torch.bfloat16).t(),
}
found = {}
for name, fn in calls.items():
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(); torch.cuda.synchronize()
    found[name] = sorted({e.name for e in prof.events() if not e.name.startswith(("aten::", "cuda"))})
json.dump(found, open(os.path.join(os.environ["OUT"], "gemm_kernel_names.json"), "w"), indent=1)
for name, names in found.items():
    print(name, "cutlass" if any("cutlass" in x.lower() for x in names) else "NOT cutlass", names[:3])
PYEOF

# ------------------------------------------------------------------ SDPA backends and Triton
TORCH_LIB=$($PY -c 'import json, torch; print(json.dumps({"name": "torch", "version": torch.__version__}))')
for be in flash cudnn efficient; do
  bench "prefill-sdpa-$be" 50 --suite prefill --impl "$A.sdpa_$be" --backend "sdpa-$be" --library "$TORCH_LIB" \
    -- --size $SIZE --budget 0.3 --kernel prefill --kernel prefill_varlen
done
TRITON_LIB=$($PY -c 'import json, triton; print(json.dumps({"name": "kernelwatch-triton", "version": triton.__version__}))')
bench triton 70 --suite prefill --suite gemm --impl $A.triton --backend triton --library "$TRITON_LIB" \
  -- --size $SIZE --budget 0.3 --kernel prefill --kernel gemm

# ------------------------------------------------------------------ FlashInfer 0.5.3 vs 0.6.0
fi_env() {  # fi_env VERSION -> prints the JSON of the environment
  # Companions proven on the H200 (docs/gpu.md), one wheel per project; FlashInfer's own
  # add-on wheels only at the same version.
  local v=$1 w pat with=()
  for pat in "apache_tvm_ffi-*" "nvidia_cudnn_frontend-*" "nvidia_cutlass_dsl-*" \
             "flashinfer_cubin-$v-*" "flashinfer_jit_cache-$v-*"; do
    for w in .whl/$pat.whl; do [ -f "$w" ] && { with+=(--with "$ROOT/$w"); break; }; done
  done
  $PY -m kernelwatch.worker.venvs --root "$ENVS" --max-gb 40 install --spec "flashinfer-python==$v" \
    --find-links "$ROOT/.whl" "${with[@]}"
}
for v in 0.5.3 0.6.0; do
  run_step "flashinfer-$v-install" 60 bash -c "$(declare -f fi_env); ROOT=$ROOT PY=$PY ENVS=$ENVS; fi_env $v > $OUT/flashinfer-$v-env.json"
  FI_PATH=$($PY -c "import json,sys; print(':'.join(json.load(open('$OUT/flashinfer-$v-env.json'))['pythonpath']))" 2>/dev/null)
  if [ -z "$FI_PATH" ]; then log "flashinfer $v: no environment ($(cut -c1-200 "$OUT/flashinfer-$v-env.json" 2>/dev/null))"; continue; fi
  PYTHONPATH=$KW:$FI_PATH $PY -c "import flashinfer; print('flashinfer', flashinfer.__version__)" >> "$OUT/run.log" 2>&1
  bench "decode-flashinfer-$v" 110 --suite decode --impl $A.flashinfer --backend flashinfer \
    --library "{\"name\": \"flashinfer-python\", \"version\": \"$v\"}" --pythonpath "$FI_PATH" --case-timeout 120 \
    -- --size $SIZE --budget 0.3
  # Short decode cases are timed as CUDA graphs; if a wrapper refuses capture, time
  # those cases again with plain launches (a separate file, so nothing is mixed).
  if grep -qi "captur" "$OUT/records/decode-flashinfer-$v.jsonl" 2> /dev/null; then
    bench "decode-flashinfer-$v-nograph" 60 --suite decode --impl $A.flashinfer --backend flashinfer \
      --library "{\"name\": \"flashinfer-python\", \"version\": \"$v\"}" --pythonpath "$FI_PATH" --case-timeout 120 \
      -- --size $SIZE --budget 0.3 --cuda-graph off
  fi
done

# ------------------------------------------------------------------ FlashAttention-3 at commits
waited=$(date +%s)
while kill -0 $FA3_PID 2> /dev/null && [ "$(left)" -gt 90 ]; do sleep 5; done
kill -0 $FA3_PID 2> /dev/null && log "FA3 builds still running after $(( $(date +%s) - waited ))s of waiting: benching what is built"
for j in "$OUT"/fa3-build-*.json; do
  [ -s "$j" ] || continue
  label=$(basename "$j" .json); label=${label#fa3-build-}
  fa_path=$($PY -c "import json; d=json.load(open('$j')); print(':'.join(d['pythonpath']))" 2>/dev/null)
  [ -n "$fa_path" ] || { log "FA3 $label: build failed: $(cut -c1-300 "$j")"; continue; }
  sha=$($PY -c "import json; print(json.load(open('$j'))['spec'].rsplit('@', 1)[-1])")
  build_s=$($PY -c "import json; print(json.load(open('$j'))['seconds'])")
  bench "prefill-fa3-$label" 45 --suite prefill --impl $A.fa3 --backend fa3 \
    --library "{\"name\": \"flash-attn-3\", \"commit\": \"$sha\", \"source\": \"https://github.com/Dao-AILab/flash-attention\", \"profile\": \"trimmed\", \"build_s\": $build_s}" \
    --pythonpath "$fa_path" --recipe docs/flash-attention.kernelwatch.toml --profile trimmed \
    -- --size $SIZE --budget 0.3 --kernel prefill
done

# ------------------------------------------------------------------ with the time left
if [ -n "${FI_PATH:-}" ]; then
  bench prefill-flashinfer-0.6.0 70 --suite prefill --impl $A.flashinfer --backend flashinfer \
    --library '{"name": "flashinfer-python", "version": "0.6.0"}' --pythonpath "$FI_PATH" --case-timeout 90 \
    -- --size $SIZE --budget 0.3
fi
FA3_ANY=$(for j in "$OUT"/fa3-build-*.json; do $PY -c "import json; print(':'.join(json.load(open('$j'))['pythonpath']))" 2>/dev/null; done | head -1)
run_step pytest-gpu-adapters 100 env PYTHONPATH="$KW:$ROOT:${FI_PATH:-}:${FA3_ANY:-}" \
  $PY -m pytest -q -m gpu tests/kernels/test_gpu_adapters.py tests/kernels/test_gpu_kernels.py -k "adapter or spin" \
  -p no:cacheprovider -o addopts="" -rs
cp "$OUT/logs/pytest-gpu-adapters.log" "$OUT/pytest-gpu-adapters.txt" 2> /dev/null
cp ~/.cache/kernelwatch/peaks-*.json "$OUT/" 2> /dev/null
wait $FA3_PID 2> /dev/null

# ------------------------------------------------------------------ summary (printed last)
$PY - "$OUT" "$COMMITS" <<'PYEOF' || log "summary failed"
import glob, json, os, sys, time
out, commits = sys.argv[1], sys.argv[2]
rows, counts = [], {}
for path in sorted(glob.glob(os.path.join(out, "records", "*.jsonl"))):
    step = os.path.basename(path)[:-6]
    for line in open(path):
        r = json.loads(line)
        counts.setdefault(step, {}).setdefault(r["status"], 0)
        counts[step][r["status"]] += 1
        t, thr, p = r.get("timing") or {}, r.get("throughput") or {}, r["params"]
        lib = r.get("library", {})
        short = ",".join(f"{k}={p[k]}" for k in ("model", "tp", "batch", "seq_q", "seq_k", "kv_len", "m", "n", "k",
                         "layer", "tokens", "page_size", "layout", "kv_dtype", "dtype", "causal") if k in p)
        rows.append((step, lib.get("version") or (lib.get("commit") or "")[:8], r["kernel"], short, r["status"],
                     t.get("median"), thr.get("tflops"), thr.get("gbps"), thr.get("pct_of_peak"), thr.get("bound_by")))
meta = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "fa3_commits": commits.split(),
        "machine": open(os.path.join(out, "machine.txt")).read(), "steps": [json.loads(l) for l in open(os.path.join(out, "steps.jsonl"))],
        "counts": counts, "note": "FA3 builds ran on the CPU while the GPU benchmarks ran"}
json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)
with open(os.path.join(out, "summary.md"), "w") as fh:
    fh.write("| step | lib | kernel | case | status | median us | TFLOP/s | GB/s | % peak |\n|---|---|---|---|---|---|---|---|---|\n")
    for s, lib, k, short, st, med, tf, gb, pct, bound in rows:
        f = lambda x, d=1: "" if x is None else f"{x:.{d}f}"
        fh.write(f"| {s} | {lib} | {k} | {short} | {st} | {f(med * 1e6 if med else None)} | {f(tf)} | {f(gb, 0)} | {f(pct)} {bound or ''} |\n")
for step, c in counts.items():
    print(f"{step:34s} {c}")
print()
for s, lib, k, short, st, med, tf, gb, pct, bound in rows:
    if st == "pass":
        print(f"{s[:26]:26s} {k[:18]:18s} {short[:64]:64s} {med * 1e6:9.1f}us {tf:7.1f}TF {gb:6.0f}GB/s {pct or 0:5.1f}% {bound or ''}")
PYEOF
log "done in $(elapsed)s; records: $(cat "$OUT"/records/*.jsonl 2> /dev/null | wc -l)"
# The device tool returns a limited number of files (2026-11-29: records/ was left out):
# everything that matters travels as one archive.
tar -czf "$OUT/issue4.tgz" -C "$OUT" records logs steps.jsonl run.log summary.md meta.json 2> /dev/null
