"""Ingest Fashion-MNIST with tensorflow-datasets into a data directory (the PVC in the cluster).

Online, tfds downloads the four IDX archives and prepares ``fashion_mnist/3.0.1`` under
``--data-dir``. Offline, point ``--data-dir`` (or ``$TFDS_DATA_DIR``) at an already prepared
tree (CI: ``../shared/tfds``): nothing is downloaded and the split sizes are still verified.
Idempotent: if the dataset is already prepared and its split sizes are right, it says so and
does nothing (exit 0).

    python -m training.ingest --data-dir /mnt/shared/tfds
"""

from __future__ import annotations

import argparse
import logging
import sys

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from training.data import DATASET_NAME, DATASET_VERSION, SPLIT_SIZES, resolve_data_dir

log = logging.getLogger("training.ingest")


class IngestError(RuntimeError):
    """The prepared dataset does not have the expected splits/sizes."""


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
    return p


def verify(builder) -> dict[str, int]:
    """Check the prepared split sizes against :data:`training.data.SPLIT_SIZES`.

    Returns:
        split name -> number of examples.

    Raises:
        IngestError: a split is missing or has the wrong size.
    """
    sizes = {name: int(info.num_examples) for name, info in builder.info.splits.items()}
    for split, expected in SPLIT_SIZES.items():
        if sizes.get(split) != expected:
            raise IngestError(
                f"{DATASET_NAME} split {split!r} has {sizes.get(split)} examples, "
                f"expected {expected}"
            )
    return sizes


def main(args: argparse.Namespace) -> dict:
    """Prepare (if needed) and verify the dataset.

    Returns:
        ``{"data_dir", "prepared": bool (True if this run prepared it), "splits": {...}}``.

    Raises:
        IngestError: wrong split sizes, or not prepared while ``--no-download`` is set.
    """
    import tensorflow_datasets as tfds

    data_dir = resolve_data_dir(args.data_dir)
    builder = tfds.builder(f"{DATASET_NAME}:{DATASET_VERSION}", data_dir=data_dir)
    where = builder.data_dir
    if builder.is_prepared():
        sizes = verify(builder)
        log.info("%s already ingested at %s %s: nothing to do", DATASET_NAME, where, sizes)
        return {"data_dir": str(where), "prepared": False, "splits": sizes}
    if args.no_download:
        raise IngestError(f"{DATASET_NAME} is not prepared at {where} and --no-download is set")
    log.info("downloading and preparing %s into %s", DATASET_NAME, where)
    builder.download_and_prepare()  # tfds shows download/preparation progress bars
    sizes = verify(builder)
    log.info("ingested %s at %s %s", DATASET_NAME, builder.data_dir, sizes)
    return {"data_dir": str(builder.data_dir), "prepared": True, "splits": sizes}


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-ingest``); exit 1 with a message on failure."""
    return training.run_cli(main, build_parser(), (IngestError,), argv)


if __name__ == "__main__":
    sys.exit(cli())
