"""The short table ``cutlass-dsl`` prints last: what ran, CuTe DSL against cuBLAS, kernel names.

Kept apart from the steps so that the JSON stays the record and this only what a
person reads at the end of a device call.
"""

from __future__ import annotations

from typing import Any


def _time(row: dict[str, Any]) -> str:
    if row.get("status") != "pass" or row.get("median_us") is None:
        return f"{row.get('status', '-'):>15}"
    tf = row.get("tflops")
    return f"{row['median_us']:>9.1f} {tf:5.0f}" if tf else f"{row['median_us']:>9.1f}     -"


def _install(inst: dict[str, Any]) -> str:
    ex = inst.get("example") or {}
    where = f"example CUTLASS {ex.get('ref')} {str(ex.get('commit'))[:8]}" if ex else "no example"
    if "version" not in inst:
        return f"nvidia-cutlass-dsl: {inst.get('wheel')}; {where}"
    mib = inst["wheel_bytes"] / 2**20
    return (
        f"nvidia-cutlass-dsl {inst['version']} in {inst['target']} ({mib:.1f} MiB wheel, "
        f"{inst['install_s']} s); {where}"
    )


def _bench(result: dict[str, Any]) -> list[str]:
    # lazily: this module is imported while the driver builds its parser, before
    # ``host.ensure_kernelwatch`` has put kernelwatch on the path of a bare host
    from kernelwatch.kernels.adapters.cutlass_dsl import tile_config

    head = f"{'gemm m x n x k':<32} {'cuBLAS us  TF/s':>15} | {'CuTe DSL us TF/s':>15}"
    lines = [f"{head} tile        CuTe/cuBLAS"]
    for r in result.get("compare", []):
        p = r["params"]
        tile = tile_config(int(p["m"]), int(p["n"]), k=int(p["k"])).label
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
        lines.append(
            f"{r['case']:<32} {_time(r['cublas'])} | {_time(r['cutlass_dsl'])} {tile:<11} {ratio}"
        )
        err = r["cutlass_dsl"].get("error")
        if r["cutlass_dsl"].get("status") != "pass" and err:
            lines.append(f"    CuTe DSL: {err[:110]}")
    for side, b in result.get("bench", {}).items():
        if b["rc"] != 0 or b["timed_out"]:
            lines.append(f"bench {side}: rc {b['rc']}{' (timed out)' if b['timed_out'] else ''}")
    compiles = result.get("compiles") or []
    if compiles:
        secs = ", ".join(f"{c['tile'][0]}x{c['tile'][1]} {c['seconds']:.1f} s" for c in compiles)
        lines.append(f"compiles in the bench (cold cache): {secs}")
    return lines


def _probe(probe: dict[str, Any]) -> list[str]:
    if "skipped" in probe or "error" in probe:
        return [f"probe: {probe.get('skipped') or probe.get('error')}"]
    lines = []
    for call, names in (probe.get("kernel_names") or {}).items():
        shown = " ".join(names)[:100] if isinstance(names, list) else str(names)[:100]
        lines.append(f"kernels {call:<14} {shown}")
    for r in probe.get("fp8", []):
        if "error" in r:
            lines.append(f"fp8 {r['case']}: {r['error'][:100]}")
            continue
        lines.append(
            f"fp8 e4m3 unscaled {r['case']:<16} "
            f"CuTe {r['cute_us']:8.1f} us {r['cute_tflops']:5.0f} TF/s"
            f" | cuBLASLt {r['cublas_us']:8.1f} us {r['cublas_tflops']:5.0f} TF/s"
            f" | rel err {r['cute_rel_l2']:.1e} / {r['cublas_rel_l2']:.1e}"
        )
    for r in probe.get("sweep", []):
        what = (
            f"{r['us']:8.1f} us {r['tflops']:5.0f} TF/s" if "us" in r else r.get("error", "")[:80]
        )
        lines.append(f"sweep {r['case']:<16} {r['label']:<12} {what}")
    for key, err in (probe.get("errors") or {}).items():
        lines.append(f"probe {key}: {err[:110]}")
    return lines


def table(result: dict[str, Any]) -> list[str]:
    lines = [_install(result["install"])]
    lines += [f"  note: {n}" for n in result["install"].get("notes", [])]
    if "imports" in result:
        lines.append(f"cutlass.cute imports with the carried path: {result['imports']}")
    tests = result.get("tests")
    if tests is not None:
        counts = "  ".join(f"{k} {v}" for k, v in sorted(tests.get("counts", {}).items()))
        lines.append(f"GPU tests: {counts or 'none ran'} (pytest rc {tests.get('rc')})")
        for c in tests.get("cases", []):
            if c["outcome"] in ("failed", "error"):
                lines.append(f"  {c['outcome']} {c['test'][-70:]}  {c['message'][:60]}")
    lines += _bench(result)
    if "probe" in result:
        lines += _probe(result["probe"])
    return lines
