"""Ingestion: verification of split sizes, idempotence, no silent download."""

import logging

import pytest

from training import ingest


def test_prepared_dataset_is_verified_and_left_alone(data_dir, caplog):
    caplog.set_level(logging.INFO)
    args = ingest.build_parser().parse_args(
        ["--no-download"] + (["--data-dir", data_dir] if data_dir else [])
    )
    result = ingest.main(args)
    assert result == {
        "data_dir": result["data_dir"],
        "prepared": False,
        "splits": {"train": 60000, "test": 10000},
    }
    assert "nothing to do" in caplog.text
    assert ingest.main(args)["prepared"] is False  # idempotent: second run does nothing too


def test_wrong_split_sizes_are_an_error(data_dir, monkeypatch):
    monkeypatch.setitem(ingest.SPLIT_SIZES, "test", 9_999)
    args = ingest.build_parser().parse_args(["--data-dir", data_dir] if data_dir else [])
    with pytest.raises(ingest.IngestError, match="expected 9999"):
        ingest.main(args)


def test_missing_dataset_with_no_download_fails_clearly(tmp_path):
    rc = ingest.cli(["--data-dir", str(tmp_path / "empty"), "--no-download"])
    assert rc == 1
    assert not (tmp_path / "empty" / "fashion_mnist" / "3.0.1" / "dataset_info.json").exists()
