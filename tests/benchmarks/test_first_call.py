"""``benchmarks/first_call.py`` on the CPU: processes with a side's environment set each
case up twice, and the table says where the first set-up went."""

from __future__ import annotations

import json

import pytest

from benchmarks import first_call


def test_each_process_sets_every_case_up_twice_and_the_table_reads_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--suite", "gemm", "--size", "smoke", "--impl", "kernelwatch.kernels.adapters.gemm",
            "--backend", "torch", "--kernel", "gemm", "--procs", "2",
            "--generations", "2"]  # fmt: skip
    assert first_call.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [json.loads(x) for x in out if x.startswith("{")]
    starts = [r for r in rows if "import_s" in r]
    cases = [r for r in rows if "case" in r]
    # two generations of two processes, each with its start-up and every smoke GEMM case
    assert sorted((r["gen"], r["proc"]) for r in starts) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    per_process = {len([c for c in cases if (c["gen"], c["proc"]) == k]) for k in [(1, 0), (2, 1)]}
    assert len(per_process) == 1 and per_process.pop() >= 1
    for c in cases:
        assert "error" not in c, c
        assert c["first_s"] >= 0 and c["second_s"] >= 0
        assert c["first_new_cache"] == 0  # no Triton on the CPU path: nothing compiled
    # the first process of a generation profiles its first set-ups
    assert all(c.get("profile") for c in cases if c["proc"] == 0)
    assert not any(c.get("profile") for c in cases if c["proc"] == 1)
    table = "\n".join(first_call.table(rows))
    assert "(start)" in table and "gemm" in table
    # whether a process keeps the bytecode it compiles: the start rows say, the table reads it
    assert all(isinstance(r["dont_write_bytecode"], int) for r in starts)
    assert "bytecode written: " in table
    flagged = [{**r, "dont_write_bytecode": 1} for r in starts]
    assert "bytecode written: no (PYTHONDONTWRITEBYTECODE)" in "\n".join(first_call.table(flagged))
    frozen = [{**r, "dont_write_bytecode": 0, "site_writable": False} for r in starts]
    assert "no (torch's folder read-only)" in "\n".join(first_call.table(frozen))
    assert any(x.startswith("profile, generation 2") for x in out)
