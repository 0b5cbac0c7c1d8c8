"""Ingestion: the "already ingested" check reads every shard; offline and stalled networks fail
fast with one line (loopback only: a refused port and a socket that never answers)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from training import ingest
from training.data import DatasetError, dataset_dir, load_numpy, verify_prepared

SHARD = "fashion_mnist-train.tfrecord-00000-of-00001"


@pytest.fixture
def copy_dir(data_dir, tmp_path) -> Path:
    """A writable copy of the prepared tfds dir; returns the data dir (its parent's parent)."""
    src = dataset_dir(data_dir)
    dst = tmp_path / "tfds" / src.parent.name / src.name
    shutil.copytree(src, dst)
    for f in dst.iterdir():
        f.chmod(0o644)
    return tmp_path / "tfds"


def _run(args: list[str], env_extra: dict | None = None, timeout: float = 120):
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.pop("TFDS_DATA_DIR", None)
    env.update(env_extra or {})
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "training.ingest", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return proc, time.perf_counter() - t0


def _error_lines(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if "error:" in ln or "Traceback" in ln]


def test_prepared_dataset_is_verified_and_left_alone(data_dir, caplog):
    caplog.set_level(logging.INFO)
    args = ingest.build_parser().parse_args(
        ["--no-download"] + (["--data-dir", data_dir] if data_dir else [])
    )
    assert ingest.main(args) == 0
    assert "nothing to do" in caplog.text and "'train': 60000" in caplog.text
    assert ingest.main(args) == 0  # idempotent: second run does nothing too


def _record_starts(data: bytes) -> list[int]:
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += 16 + int.from_bytes(data[pos : pos + 8], "little")
    return starts


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        ("truncate", f"{SHARD} is truncated: it ends inside record"),
        ("delete", f"{SHARD} is missing"),
        ("cut-at-record-boundary", f"{SHARD} holds 59999 records, dataset_info.json says 60000"),
        ("bad-info", "dataset_info.json is unreadable"),
        # one bit of one image, mid-file: framing and counts still agree, only the CRC sees it
        ("alter-record-data", rf"{SHARD} is corrupt: record 30001 \(at byte \d+\) fails its data"),
        ("alter-length", rf"{SHARD} is corrupt: record 2 \(at byte \d+\) fails its length"),
        ("alter-last-data-crc", rf"{SHARD} is corrupt: record 60000 \(at byte \d+\) fails"),
    ],
)
def test_broken_shards_are_one_line_errors_naming_the_file(copy_dir, damage, match):
    root = dataset_dir(copy_dir)
    shard = root / SHARD
    data = shard.read_bytes()
    if damage == "truncate":
        shard.write_bytes(data[: len(data) // 2])
    elif damage == "delete":
        shard.unlink()
    elif damage == "cut-at-record-boundary":  # drop exactly the last record
        shard.write_bytes(data[: _record_starts(data)[-1]])
    elif damage == "alter-record-data":
        shard.write_bytes(_flip(data, _record_starts(data)[30_000] + 12 + 100))
    elif damage == "alter-length":  # length 2^k larger: the length's own CRC catches it
        shard.write_bytes(_flip(data, _record_starts(data)[1] + 5))
    elif damage == "alter-last-data-crc":
        shard.write_bytes(_flip(data, len(data) - 2))
    else:
        (root / "dataset_info.json").write_text("{not json")
    with pytest.raises(DatasetError, match=match):
        verify_prepared(copy_dir)
    with pytest.raises(DatasetError, match=match):  # training and selection stop the same way
        load_numpy("test", copy_dir, 1)
    proc, _ = _run(["--data-dir", str(copy_dir)])
    assert proc.returncode == 1, proc.stderr
    (line,) = _error_lines(proc)
    assert line.startswith("python -m training.ingest: error: "), line
    assert SHARD in line or "dataset_info.json" in line, line
    assert f"delete {root}" in line and "python -m training.ingest" in line


def test_truncated_train_shard_is_not_reported_as_ingested(copy_dir, caplog):
    """The reported failure: a truncated train tfrecord used to pass as "already ingested"."""
    shard = dataset_dir(copy_dir) / SHARD
    shard.write_bytes(shard.read_bytes()[:-1000])
    args = ingest.build_parser().parse_args(["--data-dir", str(copy_dir)])
    with pytest.raises(DatasetError, match="truncated"):
        ingest.main(args)
    assert "nothing to do" not in caplog.text


@pytest.mark.parametrize(("key", "value"), [("shardLengths", ["x"]), ("numBytes", "abc")])
def test_info_with_non_numeric_sizes_is_one_error(copy_dir, key, value):
    info_path = dataset_dir(copy_dir) / "dataset_info.json"
    info = json.loads(info_path.read_text())
    info["splits"][0][key] = value
    info_path.write_text(json.dumps(info))
    with pytest.raises(DatasetError, match="has bad .* shard sizes"):
        verify_prepared(copy_dir)


def test_info_that_disagrees_with_the_shards_is_an_error(copy_dir):
    info_path = dataset_dir(copy_dir) / "dataset_info.json"
    info = json.loads(info_path.read_text())
    info["splits"][0]["numBytes"] = str(int(info["splits"][0]["numBytes"]) + 1)
    info_path.write_text(json.dumps(info))
    with pytest.raises(DatasetError, match="bytes of records, dataset_info.json says"):
        verify_prepared(copy_dir)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Blackhole:
    """A loopback TCP server that accepts connections and never answers."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)  # keep it open, read nothing, send nothing

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def blackhole():
    hole = Blackhole()
    yield hole
    hole.close()


def _proxy_env(port: int) -> dict:
    url = f"http://127.0.0.1:{port}"
    return {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url}


@pytest.mark.parametrize("network", ["refused", "blackhole"])
def test_offline_fails_in_seconds_with_one_line_naming_tfds_data_dir(tmp_path, network, blackhole):
    port = _closed_port() if network == "refused" else blackhole.port
    proc, seconds = _run(
        ["--data-dir", str(tmp_path / "empty"), "--timeout", "2"], _proxy_env(port), timeout=60
    )
    assert proc.returncode == 1, proc.stderr
    (line,) = _error_lines(proc)
    assert "TFDS_DATA_DIR" in line and "MIRROR_DIR=../shared" in line, line
    assert seconds < 30, seconds
    assert not (tmp_path / "empty" / "fashion_mnist").exists()


def test_tfds_downloads_are_bounded_by_the_timeout(blackhole):
    """tfds' downloader calls requests without a timeout; inside requests_timeout it has one."""
    import requests

    session = requests.Session()
    session.trust_env = False
    t0 = time.perf_counter()
    with ingest.requests_timeout(1.0), pytest.raises(requests.ReadTimeout):
        session.get(f"http://127.0.0.1:{blackhole.port}/x")
    assert time.perf_counter() - t0 < 10


def test_missing_dataset_with_no_download_fails_clearly(tmp_path):
    proc, _ = _run(["--data-dir", str(tmp_path / "empty"), "--no-download"])
    assert proc.returncode == 1
    (line,) = _error_lines(proc)
    assert "--no-download" in line and "TFDS_DATA_DIR" in line
    assert not (tmp_path / "empty" / "fashion_mnist" / "3.0.1" / "dataset_info.json").exists()


def test_download_urls_come_from_tfds_checksums():
    urls = ingest.download_urls()
    assert len(urls) == 4 and all(u.startswith("http") and u.endswith(".gz") for u in urls)
    assert min(urls, key=urls.get).endswith("t10k-labels-idx1-ubyte.gz")  # what the probe gets
