from pathlib import Path

import numpy as np
import pytest

from suite.data.subsample import regression_strata, subsample_indices
from suite.data.tables import read_rows


def test_glue_quirks_read_exactly(shared_data: Path) -> None:
    glue = shared_data / "glue"
    rte = read_rows(glue / "RTE/train.tsv", "tsv")  # unbalanced quotes, quoting off
    assert len(rte) == 2490 and len(read_rows(glue / "RTE/dev.tsv", "tsv")) == 277
    mrpc = read_rows(glue / "MRPC/dev.tsv", "tsv")  # header starts with a BOM
    assert "Quality" in mrpc[0] and len(mrpc) == 408
    cola = read_rows(glue / "CoLA/dev.tsv", "tsv", header=False, columns=["s", "label", "m", "x"])
    assert len(cola) == 1043 and {r["label"] for r in cola} == {"0", "1"}
    sst = read_rows(glue / "SST-2/dev.tsv", "tsv")
    assert len(sst) == 872


def test_stratified_subsample_keeps_class_balance_and_depends_on_seed() -> None:
    labels = np.array([0] * 900 + [1] * 100)
    a = subsample_indices(len(labels), 100, seed=1, strata=labels)
    b = subsample_indices(len(labels), 100, seed=2, strata=labels)
    assert len(a) == 100 and len(set(a)) == 100
    assert np.bincount(labels[a]).tolist() == [90, 10]  # proportions kept exactly
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(100))  # never the first n rows
    assert np.array_equal(a, subsample_indices(len(labels), 100, seed=1, strata=labels))


def test_full_and_oversized_sizes_take_everything() -> None:
    assert len(subsample_indices(50, "full", 0)) == 50
    assert len(subsample_indices(50, 500, 0)) == 50


def test_regression_strata_keep_the_spread() -> None:
    values = np.linspace(0, 5, 1000)
    chosen = subsample_indices(1000, 50, seed=3, strata=regression_strata(values))
    counts = np.histogram(values[chosen], bins=5, range=(0, 5))[0]
    assert counts.tolist() == [10] * 5


def test_malformed_row_names_file_and_line(tmp_path: Path) -> None:
    from suite.errors import DataError

    path = tmp_path / "bad.tsv"
    path.write_text("a\tb\n1\t2\n3\n")
    with pytest.raises(DataError, match=r"bad\.tsv:3: expected 2 fields, found 1"):
        read_rows(path, "tsv")


def test_csv_and_jsonl_readers(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text('text,label\n"a, quoted",1\n')
    (tmp_path / "x.jsonl").write_text('{"text": "a", "label": 1}\n\n{"text": "b", "label": 0}\n')
    assert read_rows(tmp_path / "x.csv", "csv") == [{"text": "a, quoted", "label": "1"}]
    assert [r["text"] for r in read_rows(tmp_path / "x.jsonl", "jsonl")] == ["a", "b"]
