"""Ingest Fashion-MNIST with tensorflow-datasets into a data directory (the PVC in the cluster).

Online, tfds downloads the four IDX archives and prepares ``fashion_mnist/3.0.1`` under
``--data-dir``. Offline, point ``--data-dir`` (or ``$TFDS_DATA_DIR``) at an already prepared
tree (CI: ``../shared/tfds``).

Every run first verifies what is there (:func:`training.data.verify_prepared`: every shard's
record count and bytes against ``dataset_info.json``, about 0.1 s, no TensorFlow): a complete
dataset is left alone (exit 0); a missing, truncated or inconsistent shard is a one-line error
naming the file and what to do (exit 1). Before downloading, one small request to the download
host checks that it answers within ``--timeout`` seconds, so an offline machine fails at once
with one line naming ``TFDS_DATA_DIR`` (exit 1); tfds' download itself then runs as usual, with
every HTTP request bounded by the same timeout.

    python -m training.ingest --data-dir /mnt/shared/tfds
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import sys
import time
from pathlib import Path

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from training.data import (
    DATASET_NAME,
    DATASET_VERSION,
    WHERE_TO_GET_IT,
    DatasetError,
    dataset_dir,
    resolve_data_dir,
    verify_prepared,
)

log = logging.getLogger("training.ingest")


class IngestError(RuntimeError):
    """The dataset cannot be downloaded (offline, host not answering) or was not prepared."""


def build_parser() -> argparse.ArgumentParser:
    """The ingestion CLI (used by the Argo Workflow's ``ingest`` step)."""
    p = argparse.ArgumentParser(
        prog="python -m training.ingest",
        description="Download and prepare fashion_mnist with tensorflow-datasets.",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="tfds data dir (default: $TFDS_DATA_DIR or ~/tensorflow_datasets)",
    )
    p.add_argument(
        "--no-download",
        action="store_true",
        help="fail instead of downloading when the dataset is not prepared yet",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds to connect, and to wait for data, on every download request",
    )
    return p


def download_urls() -> dict[str, int]:
    """The URLs tfds downloads ``fashion_mnist`` from, with their sizes in bytes, read from
    tfds' own registered checksums (``tensorflow_datasets/url_checksums/fashion_mnist.txt``)
    without importing TensorFlow."""
    spec = importlib.util.find_spec("tensorflow_datasets")
    (root,) = spec.submodule_search_locations
    table = Path(root) / "url_checksums" / f"{DATASET_NAME}.txt"
    rows = [line.split("\t") for line in table.read_text().splitlines() if line.strip()]
    return {row[0]: int(row[1]) for row in rows}


def check_reachable(url: str, timeout: float) -> None:
    """One GET to ``url`` (any HTTP answer counts); honours ``HTTP(S)_PROXY`` as tfds does.

    Raises:
        IngestError: no connection or no answer within ``timeout`` seconds.
    """
    import requests

    try:
        with requests.get(url, stream=True, timeout=(timeout, timeout)) as resp:
            next(resp.iter_content(256), b"")
    except requests.RequestException as exc:
        reason = type(exc).__name__
        raise IngestError(
            f"cannot download {DATASET_NAME}: no answer from {url} within {timeout:g} s "
            f"({reason}; offline?): {WHERE_TO_GET_IT} or pass --data-dir"
        ) from exc


@contextlib.contextmanager
def requests_timeout(seconds: float):
    """Give every ``requests`` call without a timeout (tfds' downloader passes none) a
    ``(connect, read)`` timeout of ``seconds`` while the context is active."""
    from requests.adapters import HTTPAdapter

    original = HTTPAdapter.send

    def send(self, request, *args, timeout=None, **kwargs):
        return original(self, request, *args, timeout=timeout or (seconds, seconds), **kwargs)

    HTTPAdapter.send = send
    try:
        yield
    finally:
        HTTPAdapter.send = original


def main(args: argparse.Namespace) -> int:
    """Verify the dataset; download and prepare it if it is absent.

    Returns:
        0 (already ingested, or ingested now).

    Raises:
        DatasetError: a prepared file is missing, truncated or inconsistent.
        IngestError: not prepared and ``--no-download``, or the download host does not answer.
    """
    where = dataset_dir(args.data_dir)
    t0 = time.perf_counter()
    try:
        sizes = verify_prepared(args.data_dir)
    except DatasetError:
        if (where / "dataset_info.json").exists():
            raise  # prepared but broken: never overwrite silently
    else:
        log.info(
            "%s already ingested at %s %s (verified in %.2f s): nothing to do",
            DATASET_NAME,
            where,
            sizes,
            time.perf_counter() - t0,
        )
        return 0
    if args.no_download:
        raise IngestError(
            f"{DATASET_NAME} is not prepared at {where} and --no-download is set: "
            + WHERE_TO_GET_IT
        )
    urls = download_urls()
    check_reachable(min(urls, key=urls.get), args.timeout)  # the smallest file
    import requests
    import tensorflow_datasets as tfds

    data_dir = resolve_data_dir(args.data_dir)
    builder = tfds.builder(f"{DATASET_NAME}:{DATASET_VERSION}", data_dir=data_dir)
    log.info("downloading and preparing %s into %s", DATASET_NAME, builder.data_dir)
    try:
        with requests_timeout(args.timeout):
            builder.download_and_prepare()  # tfds shows download/preparation progress bars
    except (requests.RequestException, tfds.download.DownloadError) as exc:
        raise IngestError(f"downloading {DATASET_NAME} failed: {exc}") from exc
    sizes = verify_prepared(args.data_dir)
    log.info("ingested %s at %s %s", DATASET_NAME, builder.data_dir, sizes)
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-ingest``); exit 1 with one line on a data/download error."""
    return training.run_cli(main, build_parser(), (IngestError, DatasetError), argv)


if __name__ == "__main__":
    sys.exit(cli())
