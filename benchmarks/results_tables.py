"""The tables of ``docs/results-h200.md``, generated from the committed H200 dataset.

Why: a table typed by hand from a JSON file drifts from it (a rounding, a row
forgotten, a figure from another run). Each table here is computed from the
record files that ``docs/data/h200-dataset.toml`` names, and written into the
document between ``<!-- generated:begin NAME -->`` and ``<!-- generated:end NAME -->``;
text outside the markers is left as it is.

    python -m benchmarks.results_tables            # rewrite docs/results-h200.md
    python -m benchmarks.results_tables --check    # exit 1 if it is out of date

``tests/benchmarks/test_results_tables.py`` runs ``--check``'s function in CI. What this
module does not do: measure anything, or judge (the paired verdicts are the ones
recorded; the ratios are the records' own).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu.cutlass_dsl import case_label
from kernelwatch.jobs.planning.dataset import DatasetRun, Manifest, load_manifest
from kernelwatch.jobs.planning.importer import read_records
from kernelwatch.kernels.record import PairedSection, ResultRecord

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "docs" / "data" / "h200-dataset.toml"
DOC = ROOT / "docs" / "results-h200.md"
_BLOCK = re.compile(
    r"(<!-- generated:begin (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- generated:end (?P=name) -->)",
    re.DOTALL,
)


@dataclass(frozen=True)
class Dataset:
    """The manifest with each run's records, read once."""

    manifest: Manifest
    records: dict[str, list[ResultRecord]]  # by manifest file

    def run(self, file: str) -> DatasetRun:
        (row,) = [r for r in self.manifest.run if r.file == file]
        return row


def load(manifest_path: Path = MANIFEST) -> Dataset:
    manifest = load_manifest(manifest_path)
    records = {}
    for row in manifest.run:
        records[row.file] = read_records(manifest_path.parent / row.file)
    return Dataset(manifest, records)


# ----------------------------------------------------------------------------- formatting


def _us(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e6:.1f} µs"


def _span(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """``fastest – slowest`` of sorted ``values`` (a time, a rate), or a dash for none."""
    return f"{fmt(values[0])} – {fmt(values[-1])}" if values else "—"


def _shape(record: ResultRecord) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(record.params.items()) if k != "dtype")


def _short(commit: str) -> str:
    """A full sha as its first 8 digits; a label as it is."""
    return commit[:8] if re.fullmatch(r"[0-9a-f]{40}", commit) else commit


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- tables


def first_suite(data: Dataset, file: str = "bench-h200-2026-11-29.jsonl") -> str:
    """The basic suite natively: error against its bound, time, rates, how sampling stopped."""
    rows = []
    for r in data.records[file]:
        c, t, p = r.correctness, r.timing, r.throughput
        err = f"{c.errors['rel_l2']:.2e} (bound {c.bound:.2e})" if c else "—"
        peak = f"{p.pct_of_peak:.1f} % {p.bound_by}" if p and p.pct_of_peak is not None else "—"
        stop = f"{t.stop_reason}, n={t.n}" + (", graph" if t.cuda_graph else "") if t else "—"
        rows.append(
            [
                r.kernel,
                str(r.params.get("dtype", "")),
                _shape(r),
                r.status,
                err,
                _us(t.median if t else None),
                f"{p.tflops:.1f}" if p else "—",
                f"{p.gbps:.0f}" if p else "—",
                peak,
                stop,
            ]
        )
    header = ["kernel", "dtype", "shape", "status", "rel. L2 error", "median", "TFLOP/s",
              "GB/s", "% of measured peak", "stop"]  # fmt: skip
    return _table(header, rows)


def _prefill_case(r: ResultRecord) -> str:
    p = r.params
    kind = "causal" if p.get("causal") else "non-causal"
    if p.get("seq_q") != p.get("seq_k"):
        what = f"q {p['seq_q']}, kv {p['seq_k']}, GQA {p['heads'] // p['kv_heads']}"
        return f"{p['model']} prefill with prefix ({what}), {kind}"
    return f"{p['model']} prefill {p['batch']} × {p['seq_q']}, {kind}"


def fa3_paired(data: Dataset, file: str = "session10/fa3_paired.jsonl") -> str:
    """The paired comparison as the gate saw it: ratio, its interval, the verdict."""
    rows = []
    for r in data.records[file]:
        s = r.paired
        if r.status == "skip" or s is None or s.ratio is None:
            continue
        level = f"{(s.confidence or 0) * 100:.0f} %"
        interval = f"[{s.ci_low:.4f}, {s.ci_high:.4f}]" if s.ci_low and s.ci_high else "—"
        rows.append([_prefill_case(r), f"{s.ratio:.4f}", f"{interval} ({level})", str(s.verdict)])
    return _table(["case", "ratio 3e87e421 / 16c7f0f6", "interval", "verdict"], rows)


def fa3_commits(
    data: Dataset,
    paired: str = "session10/fa3_paired.jsonl",
    alone: str = "session10/fa3_c_bench.jsonl",
) -> str:
    """FA3's median per case at its three commits, from the two record files of 2026-11-30.

    16c7f0f6 has no records of its own: its column is the baseline side of the paired
    file (block medians, warm L2, interleaved); 3e87e421 is the candidate side;
    c75d019d was benched alone (cold L2). The paired ratio is the comparison to trust.
    """
    later = {r.case_id: r for r in data.records[alone]}
    rows = []
    for r in data.records[paired]:
        s, c = r.paired, later.get(r.case_id)
        if r.status == "skip" or s is None:
            continue
        c_time = c.timing.median if c is not None and c.timing else None
        rows.append(
            [
                _prefill_case(r),
                _us(s.baseline_median),
                _us(s.candidate_median),
                _us(c_time),
                f"{s.ratio:.3f}" if s.ratio else "—",
            ]
        )
    header = ["case", "16c7f0f6 (paired, baseline side)", "3e87e421 (paired, candidate side)",
              "c75d019d (alone)", "paired ratio 3e87e421 / 16c7f0f6"]  # fmt: skip
    return _table(header, rows)


def dataset_index(data: Dataset) -> str:
    """What ``kernelwatch import docs/data/h200-dataset.toml`` loads, file by file."""
    rows = []
    for row in data.manifest.run:
        recs = data.records[row.file]
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.status] = counts.get(r.status, 0) + 1
        status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        parent = "—" if row.parent is None else _short(row.parent)
        rows.append(
            [
                f"`{row.file}`",
                row.repo,
                _short(row.commit),
                parent,
                str(row.measured)[:16].replace("T", " "),
                row.card[:12],
                f"{len(recs)} ({status})",
                f"`{row.command}`",
            ]
        )
    header = ["file", "repository", "commit", "compared with", "measured (UTC)", "card", "records",
              "made by"]  # fmt: skip
    return _table(header, rows)


BISECTION_STEPS = (
    ("establish", "h200-2026-12-01-s21/call1/step0_3e87e421_vs_16c7f0f6.jsonl"),
    ("search", "h200-2026-12-01-s21/call1/step1_59df2f9b_vs_16c7f0f6.jsonl"),
    ("search", "h200-2026-12-01-s21/call1/step2_3effce82_vs_16c7f0f6.jsonl"),
    ("confirm", "h200-2026-12-01-s21/call2/step3_59df2f9b_vs_3effce82.jsonl"),
    ("residual", "h200-2026-12-01-s21/call2/step4_3e87e421_vs_59df2f9b.jsonl"),
)


def _interval(s: PairedSection) -> str:
    level = f" ({(s.confidence or 0) * 100:.0f} %)" if s.confidence else ""
    return f"[{s.ci_low:.3f}, {s.ci_high:.3f}]{level}" if s.ci_low and s.ci_high else "—"


def fa3_bisection(data: Dataset, steps: Sequence[tuple[str, str]] = BISECTION_STEPS) -> str:
    """The FA3 bisection's steps, one paired run each (``benchmarks/gpu/bisect.py``)."""
    rows = []
    for purpose, file in steps:
        row = data.run(file)
        for r in data.records[file]:
            s = r.paired
            if s is None:
                continue
            rows.append(
                [
                    purpose,
                    f"{_short(row.commit)} vs {_short(row.parent or '')}",
                    _us(s.baseline_median),
                    _us(s.candidate_median),
                    f"{s.ratio:.3f}" if s.ratio else "—",
                    _interval(s),
                    f"{len(s.group_ratios)}",
                    str(s.verdict),
                ]
            )
    header = ["step", "commit vs build", "median, build", "median, commit", "ratio",
              "interval", "groups", "verdict"]  # fmt: skip
    return _table(header, rows)


def fa2_versions(
    data: Dataset,
    paired: str = "h200-2026-12-01-s21/call4/fa2_paired.jsonl",
    alone: str = "h200-2026-12-01-s21/call4/fa2_060c9188_bench.jsonl",
) -> str:
    """FA2 (flash-attn) v2.8.3 against v2.8.2, paired, beside v2.8.3 benched alone."""
    later = {r.case_id: r for r in data.records[alone]}
    rows = []
    for r in data.records[paired]:
        s, c = r.paired, later.get(r.case_id)
        if s is None:
            continue
        tflops = c.throughput.tflops if c is not None and c.throughput else None
        rows.append(
            [
                _prefill_case(r) + f", {r.params.get('dtype')}",
                f"{s.ratio:.4f}" if s.ratio else "—",
                _interval(s),
                str(s.verdict),
                _us(c.timing.median if c is not None and c.timing else None),
                f"{tflops:.0f}" if tflops else "—",
            ]
        )
    header = ["case", "ratio v2.8.3 / v2.8.2", "interval", "verdict", "v2.8.3 alone",
              "TFLOP/s"]  # fmt: skip
    return _table(header, rows)


LIGER_PREFIX = "service-h200-2026-12-02/liger-run"


def _numbered(data: Dataset, prefix: str) -> list[str]:
    """The dataset's files ``<prefix><n>.jsonl`` (or ``.jsonl.gz``), by ``n``."""
    files = (f for f in data.records if f.startswith(prefix))
    return sorted(files, key=lambda f: int(f.removeprefix(prefix).split(".", 1)[0]))


def _upstream(data: Dataset, sha: str) -> str:
    """A replayed commit's upstream sha, from its commit row's message (else its own)."""
    message = next((c.message for c in data.manifest.commit if c.sha == sha), "")
    m = re.search(r"upstream ([0-9a-f]{8})", message)
    return m.group(1) if m else _short(sha)


def liger_history(data: Dataset, prefix: str = LIGER_PREFIX) -> str:
    """Liger-Kernel's replayed commits through the sandboxed worker: each case's median
    per commit (upstream sha, from the commit rows' messages) and its correctness."""
    files = _numbered(data, prefix)
    heads = [_upstream(data, data.run(f).commit) for f in files]
    cells: dict[str, list[str]] = {}
    for i, f in enumerate(files):
        for r in data.records[f]:
            key = f"{r.kernel} {r.params.get('rows')}x{r.params.get('cols')}"
            row = cells.setdefault(key, ["—"] * len(files))
            median = r.timing.median if r.timing and r.status == "pass" else None
            row[i] = r.status if median is None else f"{median * 1e6:.1f}"
    rows = [[k, *v] for k, v in sorted(cells.items())]
    return _table(["case (bf16), median µs", *heads], rows)


LIGER_PAIRED_PREFIX = "service-h200-2026-12-03/liger-paired-run"


def liger_paired(data: Dataset, prefix: str = LIGER_PAIRED_PREFIX) -> str:
    """Liger-Kernel's commits paired with the commit before through the sandboxed worker:
    each case's ratio, interval and verdict per pair (upstream shas)."""

    def key(r: ResultRecord) -> str:
        return f"{r.kernel} {r.params.get('rows')}x{r.params.get('cols')}"

    return paired_history(data, prefix, key, "case (bf16): ratio, interval, verdict")


def paired_history(
    data: Dataset,
    prefix: str,
    key: Callable[[ResultRecord], str],
    head: str,
    *,
    with_median: bool = False,
    measured_only: bool = False,
) -> str:
    """Runs ``<prefix><n>``, each a commit paired with the one before through the worker:
    one row per case, one column per pair (upstream shas), the ratio, its interval and the
    verdict; with ``with_median`` the candidate side's median too. A case without a ratio
    reads its status (``skip``: the build left it out); ``measured_only`` leaves out the
    cases no pair measured."""
    files = _numbered(data, prefix)
    heads = [f"{_upstream(data, data.run(f).commit)} / {_upstream(data, data.run(f).parent or '')}"
             for f in files]  # fmt: skip
    cells: dict[str, list[str]] = {}
    measured: set[str] = set()
    for i, f in enumerate(files):
        for r in data.records[f]:
            row = cells.setdefault(key(r), ["—"] * len(files))
            s = r.paired
            if s is None or not s.ratio:
                row[i] = r.status
                continue
            measured.add(key(r))
            row[i] = f"{s.ratio:.4f} {_interval(s)} {s.verdict}"
            if with_median:
                row[i] += f", {_us(s.candidate_median)}"
    rows = [[k, *v] for k, v in sorted(cells.items()) if k in measured or not measured_only]
    return _table([head, *heads], rows)


def _prefill_case_dtype(r: ResultRecord) -> str:
    p = r.params
    if r.kernel == "prefill_varlen":
        what = f"{len(p['seq_lens'])} sequences, GQA {p['heads'] // p['kv_heads']}"
        return f"{p['model']} varlen prefill ({what}), {p.get('dtype')}"
    return f"{_prefill_case(r)}, {p.get('dtype')}" if r.kernel == "prefill" else r.kernel


FA_SERVICE_PREFIX = "service-h200-2026-12-06/{}-run"


def fa_service(data: Dataset, library: str) -> str:
    """FA3's or FA2's commits paired through the sandboxed worker (2026-12-06): the cases
    the trimmed builds hold (the ones they leave out skip, saying why, and are not rows)."""
    return paired_history(
        data,
        FA_SERVICE_PREFIX.format(library),
        _prefill_case_dtype,
        "case: ratio, interval, verdict, candidate median",
        with_median=True,
        measured_only=True,
    )


def _gemm_case(r: ResultRecord) -> str:
    """A GEMM case as the CuTe DSL driver's tables name it (``case_label``: m x n x k,
    model and layer), after its kernel and before its dtype."""
    return f"{r.kernel} {case_label(r.params)}, {r.params.get('dtype')}"


def cutlass_dsl_service(
    data: Dataset, prefix: str = "service-h200-2026-12-06/cutlass-dsl-run"
) -> str:
    """CUTLASS's CuTe DSL GEMM through the sandboxed worker: the adapter's default tiles
    paired against the recipe's 64x64 (the cases the example cannot compute skip, saying
    why, and are not rows)."""
    return paired_history(
        data,
        prefix,
        _gemm_case,
        "case: ratio, interval, verdict, candidate median",
        with_median=True,
        measured_only=True,
    )


def sdpa_reference(
    data: Dataset, file: str = "service-h200-2026-12-02/sdpa-flash-run9.jsonl.gz"
) -> str:
    """A PyTorch SDPA backend through the sandboxed worker, the reference row: per
    kernel and mask, how many cases ran, their time range and TFLOP/s range."""
    groups: dict[tuple[str, str], list[ResultRecord]] = {}
    skipped: dict[str, int] = {}
    for r in data.records[file]:
        if r.status == "skip":
            skipped[r.kernel] = skipped.get(r.kernel, 0) + 1
            continue
        mask = "causal" if r.params.get("causal") else "non-causal"
        groups.setdefault((r.kernel, mask), []).append(r)
    rows = []
    for (kernel, mask), recs in sorted(groups.items()):
        ok = [r for r in recs if r.status == "pass" and r.timing]
        times = sorted(r.timing.median for r in ok if r.timing)
        rates = sorted(r.throughput.tflops for r in ok if r.throughput and r.throughput.tflops)
        rows.append([kernel, mask, f"{len(ok)} of {len(recs)}", _span(times, _us),
                     _span(rates, lambda x: f"{x:.0f}")])  # fmt: skip
    for kernel, n in sorted(skipped.items()):
        rows.append([kernel, "skipped", str(n), "the backend cannot run these cases", ""])
    return _table(["kernel", "mask", "passed", "median, fastest – slowest", "TFLOP/s"], rows)


def flashinfer_reference(
    data: Dataset, file: str = "service-h200-2026-12-04/flashinfer-run1.jsonl.gz"
) -> str:
    """FlashInfer's decode suite through the sandboxed worker: per kernel and the query's
    and KV cache's dtypes, how many cases passed, their time range and bandwidth range
    (decode reads its KV cache once: memory-bound, so GB/s and % of the measured copy
    peak are its rates)."""
    groups: dict[tuple[str, str], list[ResultRecord]] = {}
    for r in data.records[file]:
        dtype = str(r.params.get("dtype", ""))
        kv = str(r.params.get("kv_dtype", dtype))
        groups.setdefault((r.kernel, dtype if kv == dtype else f"{dtype}, KV {kv}"), []).append(r)
    rows = []
    for (kernel, dtypes), recs in sorted(groups.items()):
        ok = [r for r in recs if r.status == "pass" and r.timing]
        times = sorted(r.timing.median for r in ok if r.timing)
        rates = sorted(r.throughput.gbps for r in ok if r.throughput and r.throughput.gbps)
        peaks = sorted(
            r.throughput.pct_of_peak
            for r in ok
            if r.throughput and r.throughput.pct_of_peak is not None
        )
        rows.append([kernel, dtypes, f"{len(ok)} of {len(recs)}", _span(times, _us),
                     _span(rates, lambda x: f"{x:.0f}"),
                     _span(peaks, lambda x: f"{x:.0f} %")])  # fmt: skip
    header = ["kernel", "dtype", "passed", "median, fastest – slowest", "GB/s", "of copy peak"]
    return _table(header, rows)


def flashinfer_versions(
    data: Dataset, prefix: str = "service-h200-2026-12-04/flashinfer-subset-run"
) -> str:
    """FlashInfer 0.6.0 beside 0.5.3, the same cases on one card through the sandboxed
    worker: each release's median and their ratio (the runs' verdicts are the service's,
    from both runs' samples; the text beside the table gives them)."""
    old, new = (data.records[f] for f in _numbered(data, prefix))
    before = {r.case_id: r for r in old}
    rows = []
    for r in sorted(new, key=lambda r: (r.kernel, r.timing.median if r.timing else 0.0)):
        b = before.get(r.case_id)
        t0 = b.timing.median if b is not None and b.timing else None
        t1 = r.timing.median if r.timing else None
        shape = ", ".join(f"{k}={r.params[k]}" for k in ("batch", "heads", "kv_heads", "kv_len")
                          if k in r.params)  # fmt: skip
        ratio = f"{t1 / t0:.4f}" if t0 and t1 else "—"
        rows.append([r.kernel, shape, _us(t0), _us(t1), ratio, r.status])
    header = ["kernel (bf16)", "case", "0.5.3 median", "0.6.0 median", "0.6.0 / 0.5.3",
              "0.6.0 check"]  # fmt: skip
    return _table(header, rows)


def flashinfer_suites(
    data: Dataset,
    old: str = "service-h200-2026-12-04/flashinfer-run1.jsonl.gz",
    new: str = "service-h200-2026-12-05/flashinfer-0.6.0-run1.jsonl.gz",
) -> str:
    """FlashInfer 0.6.0's whole decode suite beside 0.5.3's, two cards: per GQA group
    (query heads per KV head: above 4 the adapter asks for tensor cores, as FlashInfer
    advises), KV dtype and batch x length, the cases, both releases' median times and the
    range of the ratios of matching cases, and how 0.6.0's checks ended."""
    before = {r.case_id: r for r in data.records[old]}
    groups: dict[tuple[int, str, int, int], list[ResultRecord]] = {}
    for r in data.records[new]:
        p = r.params
        key = (int(p["heads"]) // int(p["kv_heads"]), str(p.get("kv_dtype", p["dtype"])),
               int(p["batch"]), int(p["kv_len"]))  # fmt: skip
        groups.setdefault(key, []).append(r)
    rows = []
    for (group, kv, batch, length), recs in sorted(groups.items()):
        pairs = [(b.timing.median, r.timing.median) for r in recs
                 if r.status == "pass" and r.timing and (b := before.get(r.case_id)) is not None
                 and b.timing]  # fmt: skip
        ratios = sorted(t1 / t0 for t0, t1 in pairs)
        ends = Counter(r.status for r in recs)
        rows.append([str(group), "16-bit" if kv in ("bfloat16", "float16") else kv,
                     f"{batch} x {length}", str(len(recs)),
                     _span(sorted(t0 for t0, _ in pairs), _us),
                     _span(sorted(t1 for _, t1 in pairs), _us),
                     _span(ratios, lambda x: f"{x:.3f}"),
                     ", ".join(f"{n} {k}" for k, n in sorted(ends.items()))])  # fmt: skip
    header = ["GQA group", "KV", "batch x tokens", "cases", "0.5.3 median", "0.6.0 median",
              "0.6.0 / 0.5.3", "0.6.0 check"]  # fmt: skip
    return _table(header, rows)


TABLES: dict[str, Callable[[Dataset], str]] = {
    "liger-history": liger_history,
    "liger-paired": liger_paired,
    "sdpa-reference": sdpa_reference,
    "sdpa-cudnn": lambda data: sdpa_reference(
        data, "service-h200-2026-12-03/sdpa-cudnn-run4.jsonl.gz"
    ),
    "sdpa-efficient": lambda data: sdpa_reference(
        data, "service-h200-2026-12-03/sdpa-efficient-run9.jsonl.gz"
    ),
    "flashinfer-reference": flashinfer_reference,
    "flashinfer-versions": flashinfer_versions,
    "flashinfer-suites": flashinfer_suites,
    "first-suite": first_suite,
    "fa3-paired": fa3_paired,
    "fa3-commits": fa3_commits,
    "fa3-bisection": fa3_bisection,
    "fa2-versions": fa2_versions,
    "fa3-service": lambda data: fa_service(data, "fa3"),
    "fa2-service": lambda data: fa_service(data, "fa2"),
    "cutlass-dsl-service": cutlass_dsl_service,
    "dataset": dataset_index,
}


def render(text: str, data: Dataset) -> str:
    """``text`` with every generated block rewritten; an unknown block name is an error."""

    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise KeyError(f"unknown generated block {name!r}; known: {', '.join(TABLES)}")
        return m.group(1) + TABLES[name](data) + "\n" + m.group(4)  # blank: the table ends

    return _BLOCK.sub(fill, text)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.results_tables", description=__doc__)
    ap.add_argument("--doc", type=Path, default=DOC)
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument("--check", action="store_true", help="exit 1 if the document is stale")
    args = ap.parse_args(argv)
    before = args.doc.read_text(encoding="utf-8")
    after = render(before, load(args.manifest))
    if args.check:
        if after != before:
            print(f"{args.doc} is stale: python -m benchmarks.results_tables", file=sys.stderr)
            return 1
        return 0
    if after != before:
        args.doc.write_text(after, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
