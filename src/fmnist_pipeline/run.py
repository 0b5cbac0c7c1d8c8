"""The whole pipeline on one machine: ``make demo``.

ingest -> train ``cnn``, ``dropout``, ``batch_norm`` (each as 2 worker processes with
``TF_CONFIG`` over loopback, one after the other: this machine has 2 cores) -> select ->
serve (the ``serving`` model server on a free loopback port) -> predict real test images ->
summary table -> stop the server.

The work dir mirrors the PVC layout the cluster uses (``/mnt/shared``)::

    work/checkpoints/<model-type>/<run-id>/   work/tensorboard/<model-type>/<run-id>/
    work/candidates/<model-type>/             work/models/fashion-mnist/<version>/
    work/reports/selection.json               work/reports/training_curves.png
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import training  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from training.models import MODEL_TYPES

log = logging.getLogger("training.pipeline")
MODEL_NAME = "fashion-mnist"

# Training budgets. "quick" is the demo default (~5 min on 2 cores); "full" is the budget the
# benchmark and the cluster use (see bench/train_bench.py and README).
BUDGETS: dict[str, dict] = {
    "smoke": {  # the end-to-end test: a minute of training in all
        "epochs": 1,
        "train_examples": 2_048,
        "validation_examples": 512,
        "batch_size_per_replica": 64,
        "learning_rate": 0.003,
    },
    "quick": {
        "epochs": 3,
        "train_examples": 15_000,
        "validation_examples": 2_000,
        "batch_size_per_replica": 128,
        "learning_rate": 0.003,
    },
    "full": {
        "epochs": 18,
        "train_examples": 0,
        "validation_examples": 2_000,
        "batch_size_per_replica": 256,
        "learning_rate": 0.003,
    },
}


def train_args(model_type: str, work: Path, run_id: str, budget: dict, data_dir: str | None):
    """The ``python -m training.train`` arguments for one variant (as in the TFJob manifests)."""
    args = [
        "--model-type", model_type,
        "--epochs", str(budget["epochs"]),
        "--batch-size-per-replica", str(budget["batch_size_per_replica"]),
        "--learning-rate", str(budget["learning_rate"]),
        "--lr-schedule", "cosine",
        "--train-examples", str(budget["train_examples"]),
        "--validation-examples", str(budget["validation_examples"]),
        "--checkpoint-dir", str(work / "checkpoints"),
        "--tensorboard-dir", str(work / "tensorboard"),
        "--saved-model-dir", str(work / "candidates" / model_type),
        "--run-id", run_id,
    ]  # fmt: skip
    if data_dir:
        args += ["--data-dir", data_dir]
    return args


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Poll ``GET url`` until it answers 200 with ``"ready": true`` (KServe V1 model status).

    Raises:
        RuntimeError: the server exited or did not become ready within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"model server exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200 and json.loads(r.read()).get("ready", False):
                    return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"model server not ready at {url} after {timeout:.0f} s")


def predict(base_url: str, images: list[bytes]) -> list[list[float]]:
    """``POST /v1/models/fashion-mnist:predict`` with ``{"instances": [{"b64": ...}]}``."""
    body = json.dumps(
        {"instances": [{"b64": base64.b64encode(b).decode("ascii")} for b in images]}
    ).encode()
    req = urllib.request.Request(
        f"{base_url}/v1/models/{MODEL_NAME}:predict",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())["predictions"]


def serve_and_predict(work: Path, data_dir: str | None, n_images: int) -> list[dict]:
    """Start the model server on the published versions, classify test images, stop it."""
    from training.data import CLASS_NAMES, encode_images, load_numpy
    from training.launcher import free_ports

    port = free_ports(1)[0]
    cmd = [
        sys.executable, "-m", "serving.server",
        "--model_name", MODEL_NAME,
        "--model_base_path", str(work / "models" / MODEL_NAME),
        "--http_port", str(port),
        "--http_host", "127.0.0.1",  # the demo server is for this machine only
    ]  # fmt: skip
    log.info("starting the model server: %s", " ".join(cmd))
    proc = subprocess.Popen(cmd)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/v1/models/{MODEL_NAME}", proc)
        images, labels = load_numpy("test", data_dir, n_images)
        preds = predict(base, encode_images(images, "jpeg"))
        rows = []
        for probs, label in zip(preds, labels, strict=True):
            k = max(range(len(probs)), key=probs.__getitem__)
            rows.append(
                {"true": CLASS_NAMES[label], "predicted": CLASS_NAMES[k], "probability": probs[k]}
            )
        return rows
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.info("model server stopped (exit code %s)", proc.returncode)


def format_summary(report: dict, histories: dict[str, dict], predictions: list[dict]) -> str:
    """The table ``make demo`` prints at the end."""
    lines = [
        "",
        f"{'model':<11}{'test acc':>9}{'test loss':>10}{'fit s':>9}{'img/s':>8}  status",
    ]
    for name, c in report["candidates"].items():
        h = histories.get(name, {})
        ips = h.get("history", {}).get("images_per_second", [])
        ips_s = f"{max(ips):>8.0f}" if ips else f"{'-':>8}"
        if c["status"] == "ok":
            lines.append(
                f"{name:<11}{c['accuracy']:>9.4f}{c['loss']:>10.4f}"
                f"{h.get('train_seconds', float('nan')):>9.1f}{ips_s}  ok"
            )
        else:
            lines.append(f"{name:<11}{'-':>9}{'-':>10}{'-':>9}{'-':>8}  {c['error']}")
    lines.append(
        f"\nchosen: {report['chosen_model']} -> version {report['version']} "
        f"({report['serving_base_path']}/{report['version']})"
    )
    if predictions:
        lines.append(f"\n{'true label':<14}{'predicted':<14}{'p':>6}")
        for r in predictions:
            mark = "" if r["true"] == r["predicted"] else "   <- wrong"
            lines.append(f"{r['true']:<14}{r['predicted']:<14}{r['probability']:>6.3f}{mark}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The pipeline CLI (``make demo``)."""
    p = argparse.ArgumentParser(
        prog="python -m training.pipeline",
        description="ingest -> train x3 (2 workers each) -> select -> serve -> predict",
    )
    p.add_argument("--work-dir", default="work", help="plays the role of the PVC")
    p.add_argument("--data-dir", default=None, help="tfds data dir (default: $TFDS_DATA_DIR)")
    p.add_argument("--budget", choices=sorted(BUDGETS), default="quick")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--model-types", nargs="+", default=list(MODEL_TYPES), choices=MODEL_TYPES)
    p.add_argument("--predict-images", type=int, default=8)
    p.add_argument("--no-serve", action="store_true", help="stop after selection")
    p.add_argument("--run-id", default=None, help="default: demo-<timestamp>")
    return p


def main(args: argparse.Namespace) -> dict:
    """Run every stage; returns the selection report. Raises on the first failing stage."""
    from training import ingest
    from training import select as selection
    from training.launcher import launch
    from training.plots import load_histories, plot_training_curves

    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    budget = BUDGETS[args.budget]
    run_id = args.run_id or time.strftime("demo-%Y%m%d-%H%M%S")
    t_start = time.perf_counter()

    log.info("== 1/5 ingest")
    ingested = ingest.main(argparse.Namespace(data_dir=args.data_dir, no_download=False))
    data_dir = args.data_dir or os.environ.get("TFDS_DATA_DIR") or None

    log.info(
        "== 2/5 train %s (%d workers each, budget %s)",
        args.model_types,
        args.num_workers,
        args.budget,
    )
    for model_type in args.model_types:
        seconds = launch(
            train_args(model_type, work, run_id, budget, data_dir),
            num_workers=args.num_workers,
            name=model_type,
        )
        log.info("%s trained in %.1f s", model_type, seconds)

    log.info("== 3/5 select")
    report_path = work / "reports" / "selection.json"
    sel_args = selection.build_parser().parse_args(
        [
            "--candidates-dir",
            str(work / "candidates"),
            "--serving-base-path",
            str(work / "models" / MODEL_NAME),
            "--report",
            str(report_path),
            "--model-types",
            *args.model_types,
            "--run-id",
            run_id,
        ]  # fmt: skip
        + (["--data-dir", data_dir] if data_dir else [])
    )
    report = selection.main(sel_args)
    histories = load_histories(work / "candidates", args.model_types)
    curves = plot_training_curves(histories, work / "reports" / "training_curves.png")
    log.info("training curves: %s", curves)

    predictions: list[dict] = []
    if not args.no_serve:
        log.info("== 4/5 serve and predict")
        predictions = serve_and_predict(work, data_dir, args.predict_images)

    log.info("== 5/5 summary")
    print(format_summary(report, histories, predictions))
    print(f"\nreport: {report_path}\ncurves: {curves}\ndata:   {ingested['data_dir']}")
    print(f"total: {time.perf_counter() - t_start:.0f} s")
    return report


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-pipeline``); exit 1 with a message when a stage fails."""
    training.configure_logging()
    from training.ingest import IngestError
    from training.launcher import LaunchError
    from training.select import SelectionError

    try:
        main(build_parser().parse_args(argv))
    except (IngestError, LaunchError, SelectionError, RuntimeError, FileNotFoundError) as exc:
        log.error("pipeline failed: %s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
