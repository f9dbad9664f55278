"""``benchmarks.screen_cures`` counts the screen's cures from GPU logs as the paired
runner writes them (the line formats of ``kernels/paired.py``'s ``_Screen``)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from benchmarks import screen_cures

# the shape of docs/data/h100-2026-12-06-s53/call3-logs.tgz's gemm log
LOG = """\
KW-CASE-START 938bb6895ea14c27 gemm_fp8_rowwise {"m": 4096}
KW-PAIRED attempt 1: 8 pairs
KW-PAIRED screen round 0: 2 of 16 sides off ['B1 +5.7%', 'B5 +5.9%']
KW-PAIRED set 2 sides up again in 0.2 s
KW-PAIRED screen round 1: 2 of 16 sides off ['A1 +5.3%', 'B1 +12.5%']
KW-PAIRED new processes for ['B1'] in 5.0 s
KW-PAIRED set 2 sides up again in 6.0 s
KW-PAIRED screen round 2: 1 of 16 sides off ['A1 +40.0%']
KW-PAIRED stop (setup_bound) after 16 groups in 0.6 s: 0.9921 [0.9506, 1.0353] inconclusive
KW-PAIRED attempt 2: 8 pairs
KW-PAIRED screen round 0: 1 of 16 sides off ['A0 +16.5%']
KW-PAIRED stop (setup_bound) after 16 groups in 0.6 s: 0.9957 [0.9694, 1.0227] inconclusive
KW-PAIRED attempt 3: 8 pairs
KW-PAIRED screen round 0: 1 of 16 sides off ['A4 +31.0%']
KW-PAIRED new processes for ['A4'] in 5.6 s
KW-PAIRED screen round 1: 0 of 16 sides off []
"""


def test_each_re_level_counts_once_by_band_and_way() -> None:
    counts = screen_cures.cures(LOG.splitlines())
    # round 0 -> 1 in place: B5 cured, B1 still off; round 1 -> 2: B1 in a new process
    # cured, A1 in place still off; attempt 3: A4 in a new process cured
    assert counts == {
        ("+5-10 %", "in_place", True): 1,
        ("+5-10 %", "in_place", False): 2,
        ("+10-15 %", "new_process", True): 1,
        ("over +30 %", "new_process", True): 1,
    }
    # attempt 2's A0 was never re-levelled (the attempt stopped): not counted
    assert not any(key[0] == "+15-30 %" for key in counts)
    assert sum(counts.values()) == 5


def test_the_table_reads_archives_and_plain_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "gemm.log"
    plain.write_text(LOG)
    archive = tmp_path / "call1-logs.tgz"
    data = LOG.encode()
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("logs/suite-aa/gemm-torch-pass1.log")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        skip = tarfile.TarInfo("logs/suite-aa/gemm-torch-pass1.jsonl")  # not a log
        skip.size = len(data)
        tar.addfile(skip, io.BytesIO(data))
    assert screen_cures.main([str(plain), str(archive)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "2 logs with a screen round that set sides up again, from 2 files"
    rows = {line[:13].strip(): line[13:] for line in out[2:]}
    assert rows["+5-10 %"].split() == ["2", "of", "6", "(33", "%)", "-"]
    assert rows["+10-15 %"].split() == ["-", "2", "of", "2", "(100", "%)"]
    assert rows["+15-30 %"].split() == ["-", "-"]
    assert rows["over +30 %"].split() == ["-", "2", "of", "2", "(100", "%)"]
