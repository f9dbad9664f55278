"""Two released versions of a library, paired on one GPU: the gate's mode for versions.

Each side is a process whose PYTHONPATH holds one version (``--a DIR --b DIR``:
``pip --target`` directories); the same case factory runs in both; blocks
alternate ABBA/BAAB (``kernels/paired.py``). Prints and writes one row per case
and repeat: ratio B/A with its interval and the verdict.

    python benchmarks/versions_paired.py --a /tmp/fi053 --b /tmp/fi060 --out OUT.json

On the GPU host ``python -m benchmarks.gpu libraries --part flashinfer`` installs the
carried versions and runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelwatch.kernels.paired import PairedConfig, Side, compare  # noqa: E402

CASES = {
    "single decode 8K tok fp16": "benchmarks.measurement_cases:flashinfer_decode",
    "single prefill 4K causal bf16": "benchmarks.measurement_cases:flashinfer_prefill",
}


def side(name: str, site: str) -> Side:
    path = os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(ROOT), site])
    return Side(name, env={"PYTHONPATH": path})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rows = []
    a, b = side("A", args.a), side("B", args.b)
    try:
        cfg = PairedConfig(min_effect=0.01, budget_s=3.0, placements=4)
        for name, factory in CASES.items():
            for rep in range(args.repeats):
                t = time.perf_counter()
                r = compare(a, b, factory, {}, {}, cfg)
                wall = time.perf_counter() - t
                rows.append({"case": name, "repeat": rep, **r.to_dict(), "wall_s": wall})
                print(
                    f"{name:<32} B/A {r.ratio:.4f} [{r.ci_low:.4f}, {r.ci_high:.4f}] "
                    f"{r.verdict:<12} A {r.a_median * 1e6:8.2f} us  B {r.b_median * 1e6:8.2f} us",
                    flush=True,
                )
                Path(args.out).write_text(json.dumps({"a": args.a, "b": args.b, "rows": rows}))
    finally:
        a.close()
        b.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
