"""Model selection: evaluate every candidate through its serving signature, publish the best.

Each candidate is a SavedModel directory ``<candidates-dir>/<model-type>/`` exported by
:mod:`training.train`. The test split is encoded exactly as a client sends it (JPEG by default,
Pillow) and fed to the ``serving_default`` signature, so the accuracy measured here is the one
the server delivers. The winner (highest accuracy, ties -> lower loss) is copied to a staging
directory inside the models directory (``--serving-base-path``) and renamed to the next integer
version, a TF Serving base path that holds that one version and its selection record::

    <serving-base-path>/.staging-3-1a2b3c4d/    (not a version: not an integer)
    <serving-base-path>/3/3/saved_model.pb      (after one atomic rename)
    <serving-base-path>/3/selection.json        (what was chosen, from which run, its accuracy)

so a crash never leaves a partial version that TensorFlow Serving or KServe would load. Which
version serves is named in git (the InferenceService's ``storageUri``, ``.../fashion-mnist/3``;
``scripts/promote.sh``), never "the highest on the volume" (:mod:`serving.versions`).
Missing or corrupt candidates are reported and skipped; with no valid candidate (or none above
``--min-accuracy``) nothing is published and the exit code is 1.

    python -m training.select --data-dir /mnt/shared/tfds --candidates-dir /mnt/shared/candidates \
        --serving-base-path /mnt/shared/models/fashion-mnist \
        --report /mnt/shared/reports/selection.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import numpy as np

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from fmnist_common import (
    CANDIDATES,
    INPUT_NAME,
    MAX_VERSION,
    OUTPUT_NAME,
    SELECTION_RECORD,
    SIGNATURE_KEY,
    parse_version,
)
from fmnist_common.cli import number, positive_int
from training.data import DatasetError
from training.leftovers import make_owned_dir, release_dir, remove_stale_dirs

log = logging.getLogger("training.select")


class SelectionError(RuntimeError):
    """No candidate could be published."""


def build_parser() -> argparse.ArgumentParser:
    """The selection CLI (the Argo Workflow's ``select`` step)."""
    p = argparse.ArgumentParser(
        prog="python -m training.select",
        description="Evaluate candidate SavedModels on the test split and publish the best.",
    )
    p.add_argument("--data-dir", default=None, help="tfds data dir (default: $TFDS_DATA_DIR)")
    p.add_argument(
        "--candidates-dir", required=True, help="holds one SavedModel dir per model type"
    )
    p.add_argument(
        "--model-types",
        nargs="+",
        default=list(CANDIDATES),
        help="candidates to consider, TensorFlow and PyTorch alike (a missing one is reported "
        "and skipped)",
    )
    p.add_argument(
        "--serving-base-path",
        required=True,
        help="the models directory; the winner becomes <path>/<N>/<N>/ (N the next integer "
        "version: a TF Serving base path holding that one version) with <path>/<N>/"
        "selection.json",
    )
    p.add_argument("--report", required=True, help="JSON report to write")
    p.add_argument(
        "--run-id",
        type=run_ids,
        default=None,
        metavar="RUN[,RUN...]",
        help="accept only candidates trained by one of these runs (their "
        "training_history.json run_id; comma-separated, empty items ignored: the pipeline "
        "passes its own run and the candidates-runs parameter); stale candidates of other "
        "runs are reported and skipped",
    )
    p.add_argument(
        "--test-examples", type=number(int, 0), default=0, help="first N test images; 0 = all"
    )
    p.add_argument("--image-format", choices=("jpeg", "png"), default="jpeg")
    p.add_argument("--jpeg-quality", type=number(int, 1, 95), default=95, help="Pillow's 1..95")
    p.add_argument("--batch-size", type=positive_int, default=500, help="images per call")
    p.add_argument(
        "--min-accuracy",
        type=number(float, 0, 1),
        default=0.0,
        help="publish nothing if the best accuracy is below this (0..1)",
    )
    return p


def evaluate_candidate(
    path: Path, encoded: list[bytes], labels: np.ndarray, batch_size: int
) -> dict:
    """Accuracy and mean cross-entropy of one SavedModel through ``serving_default``.

    Args:
        path: SavedModel directory.
        encoded: encoded test images (``N`` byte strings).
        labels: ``int64 [N]`` true classes.
        batch_size: images per signature call.

    Returns:
        ``{"accuracy": float in [0,1], "loss": float (nats), "examples": N, "seconds": float}``.

    Raises:
        FileNotFoundError: no ``saved_model.pb`` in ``path``.
        Exception: whatever TensorFlow raises for a corrupt SavedModel or a wrong signature.
    """
    import tensorflow as tf

    if not (path / "saved_model.pb").is_file():
        raise FileNotFoundError(f"no saved_model.pb in {path}")
    t0 = time.perf_counter()
    sig = tf.saved_model.load(str(path)).signatures[SIGNATURE_KEY]
    probs = []
    for i in range(0, len(encoded), batch_size):
        out = sig(**{INPUT_NAME: tf.constant(encoded[i : i + batch_size])})
        probs.append(out[OUTPUT_NAME].numpy())
    p = np.concatenate(probs)
    if p.shape != (len(labels), 10):
        raise ValueError(f"signature returned shape {p.shape}, expected ({len(labels)}, 10)")
    if not (np.all(np.isfinite(p)) and p.min() >= 0 and p.max() <= 1):
        raise ValueError("signature outputs are not probabilities (outside [0, 1] or not finite)")
    if not np.allclose(p.sum(axis=1), 1.0, atol=1e-3):
        raise ValueError("signature outputs do not sum to 1 per image")
    picked = np.clip(p[np.arange(len(labels)), labels], 1e-7, 1.0)
    return {
        "accuracy": float(np.mean(np.argmax(p, axis=1) == labels)),
        "loss": float(-np.mean(np.log(picked))),
        "examples": int(len(labels)),
        "seconds": time.perf_counter() - t0,
    }


def run_ids(text: str) -> tuple[str, ...]:
    """``--run-id``'s value: comma-separated run ids (a Workflow's name, a ``scripts/train.sh``
    run's), blanks and empty items dropped, e.g. ``"wf-a,"`` -> ``("wf-a",)``.

    Raises:
        argparse.ArgumentTypeError: no run id at all.
    """
    ids = tuple(dict.fromkeys(i.strip() for i in text.split(",") if i.strip()))
    if not ids:
        raise argparse.ArgumentTypeError(f"no run id in {text!r}")
    return ids


def check_run_id(path: Path, accepted: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``path`` was trained by one of the runs ``accepted``
    (:func:`run_ids`): a stale candidate, or one without a readable history."""
    history = path / "training_history.json"
    try:
        found = json.loads(history.read_text()).get("run_id")
    except (OSError, ValueError) as exc:
        raise ValueError(f"no readable {history.name}: cannot tell which run trained it") from exc
    if found not in accepted:
        wanted = repr(accepted[0]) if len(accepted) == 1 else f"one of {list(accepted)}"
        raise ValueError(f"stale candidate: trained by run {found!r}, not {wanted}")


def _placeholder(path: Path) -> bool:
    """An empty directory: what the kubelet makes for a ``storageUri`` subPath that names a
    version before it is published (a promotion ahead of its run)."""
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def next_version(base: Path) -> int:
    """1 + the largest integer name (ASCII digits, file or directory) in ``base``; 1 if none.

    An empty directory does not take its number (:func:`_placeholder`): publishing that number
    replaces it.

    Raises:
        SelectionError: the next version would not fit TF Serving's int64 versions.
    """
    entries = list(base.iterdir()) if base.exists() else []
    versions = [parse_version(e.name) for e in entries if not _placeholder(e)]
    version = max((v for v in versions if v is not None), default=0) + 1
    if version > MAX_VERSION:
        raise SelectionError(f"next version {version} in {base} exceeds int64")
    return version


def publish(candidate: Path, base: Path, record: dict | None = None) -> tuple[int, Path]:
    """Copy ``candidate`` to ``base/<N>/<N>`` with ``record`` as ``base/<N>/selection.json``,
    atomically (stage, then one rename); ``N`` is :func:`next_version`.

    First removes the ``.staging-*`` copies of selections that were killed while publishing
    (provably stale: see :mod:`training.leftovers`).

    Args:
        candidate: a SavedModel directory.
        base: the models directory.
        record: the selection record (``version`` is added).

    Returns:
        ``(version, path)``: ``path`` is ``base/<N>``, the TF Serving base path of the version.

    Raises:
        SelectionError: another publisher took that version in the meantime.
        FileNotFoundError: the copy holds no ``saved_model.pb``.
    """
    base.mkdir(parents=True, exist_ok=True)
    remove_stale_dirs(base, ".staging-*")  # copies of selections killed while publishing
    version = next_version(base)
    staging = make_owned_dir(base, f".staging-{version}-", private=False)  # published as is
    try:
        shutil.copytree(candidate, staging / str(version))
        if not (staging / str(version) / "saved_model.pb").is_file():
            raise FileNotFoundError(f"staged copy {staging} has no saved_model.pb")
        write_json_atomic(staging / SELECTION_RECORD, {**(record or {}), "version": version})
        target = base / str(version)
        if target.exists() and not _placeholder(target):
            raise SelectionError(f"version {version} appeared at {target} while publishing")
        release_dir(staging)  # its lock file must not be published
        os.rename(staging, target)  # atomic on one filesystem; replaces an empty directory
    finally:
        release_dir(staging)
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return version, target


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write JSON to ``path`` via a temporary file and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def main(args: argparse.Namespace) -> dict:
    """Evaluate, pick, publish, write the report; returns the report dict.

    Raises:
        SelectionError: no valid candidate, or the best is below ``--min-accuracy`` (the report
            is still written, with ``"published": false``).
    """
    from training.data import encode_images, load_numpy

    images, labels = load_numpy("test", args.data_dir, args.test_examples or None)
    encoded = encode_images(images, args.image_format, args.jpeg_quality)
    results: dict[str, dict] = {}
    for model_type in args.model_types:
        path = Path(args.candidates_dir) / model_type
        try:
            if args.run_id is not None:
                check_run_id(path, args.run_id)
            metrics = evaluate_candidate(path, encoded, labels, args.batch_size)
            results[model_type] = {"status": "ok", "path": str(path), **metrics}
            log.info(
                "%-10s accuracy=%.4f loss=%.4f", model_type, metrics["accuracy"], metrics["loss"]
            )
        except Exception as exc:  # a corrupt/missing candidate must not stop the others
            results[model_type] = {
                "status": "invalid",
                "path": str(path),
                "error": f"{type(exc).__name__}: {exc}"[:1000],
            }
            log.warning("%-10s skipped: %s", model_type, results[model_type]["error"])

    valid = {k: v for k, v in results.items() if v["status"] == "ok" and math.isfinite(v["loss"])}
    report = {
        "test_examples": int(len(labels)),
        "image_format": args.image_format,
        "candidates": results,
        "chosen_model": None,
        "version": None,
        "published": False,
        "serving_base_path": str(args.serving_base_path),
    }
    try:
        if not valid:
            raise SelectionError("no valid candidate to publish")
        best = max(valid, key=lambda k: (valid[k]["accuracy"], -valid[k]["loss"]))
        report["chosen_model"] = best
        if valid[best]["accuracy"] < args.min_accuracy:
            raise SelectionError(
                f"best candidate {best} has accuracy {valid[best]['accuracy']:.4f} "
                f"< --min-accuracy {args.min_accuracy}"
            )
        write_json_atomic(Path(args.report), report)  # fail before publishing, not after
        record = {"model": best, "run_id": args.run_id and list(args.run_id), **valid[best]}
        record.update(published_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        version, target = publish(Path(valid[best]["path"]), Path(args.serving_base_path), record)
        report.update(version=version, published=True, model_path=str(target))
        log.info("published %s as version %d at %s", best, version, target)
    except Exception as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        raise
    finally:
        write_json_atomic(Path(args.report), report)
    return report


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-select``); exit 1 when nothing is published."""
    return training.run_cli(main, build_parser(), (SelectionError, DatasetError), argv)


if __name__ == "__main__":
    sys.exit(cli())
