"""``docs/results-h200.md``'s generated tables are what the committed dataset says."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import results_tables


def test_the_committed_document_is_up_to_date_with_the_generator() -> None:
    before = results_tables.DOC.read_text(encoding="utf-8")
    assert results_tables.render(before, results_tables.load()) == before, (
        "docs/results-h200.md is stale: run python -m benchmarks.results_tables"
    )
    assert before.count("<!-- generated:begin ") == len(results_tables.TABLES)


def test_the_tables_carry_the_records_figures() -> None:
    data = results_tables.load()
    commits = results_tables.fa3_commits(data)
    gqa = next(line for line in commits.splitlines() if "GQA 8" in line)
    assert [c.strip() for c in gqa.strip("|").split("|")][1:] == [
        "114.8 µs",
        "126.0 µs",
        "114.8 µs",
        "1.408",
    ]
    suite = results_tables.first_suite(data).splitlines()
    assert len(suite) == 2 + 16
    assert "| matmul | bfloat16 | k=4096, m=4096, n=4096 | pass |" in suite[6]
    assert "209.9 µs | 654.9 |" in suite[6]


def test_check_fails_on_a_hand_edited_table(tmp_path: Path) -> None:
    doc = tmp_path / "results.md"
    text = results_tables.DOC.read_text(encoding="utf-8")
    doc.write_text(text.replace("| 209.9 µs |", "| 199.9 µs |", 1), encoding="utf-8")
    assert results_tables.main(["--doc", str(doc), "--check"]) == 1
    assert results_tables.main(["--doc", str(doc)]) == 0  # rewrites it
    assert doc.read_text(encoding="utf-8") == text
    assert results_tables.main(["--doc", str(doc), "--check"]) == 0


def test_an_unknown_block_is_an_error() -> None:
    text = "<!-- generated:begin nonsense -->\n<!-- generated:end nonsense -->\n"
    with pytest.raises(KeyError, match="nonsense"):
        results_tables.render(text, results_tables.load())
