"""The stages of ``make demo``, its training budgets and its command line.

    python -m fmnist_pipeline --work-dir work --budget quick [--model-types cnn] [--no-serve]

Exit 0 when every stage passed; 1 with one line on stderr when a stage failed (no dataset, a
replica crashed, nothing valid to publish, the server did not start); see
:mod:`fmnist_common.cli`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import ModuleType

from fmnist_common import CANDIDATES, CLASS_NAMES, MODEL_NAME, TORCH_MODEL_TYPES
from fmnist_common.cli import options_argv, positive_int, run_cli

log = logging.getLogger(__name__)

# Local training budgets. "quick" is the demo default; "smoke" is the end-to-end test's minute
# of training; "full" is the cluster's budget, read from the one place it is written: the
# training parameters of the pipeline's WorkflowTemplate (also the training benchmark's budget).
BUDGETS: dict[str, dict] = {
    "smoke": {
        "epochs": 1,
        "train_examples": 2_048,
        "validation_examples": 512,
        "batch_size_per_replica": 64,
        "learning_rate": 0.003,
        "precision": "float32",
    },
    # sized for the whole of `make demo` in 3 min on 2 cores (docs/results.md: 175 s, 84 %)
    "quick": {
        "epochs": 2,
        "train_examples": 12_000,
        "validation_examples": 2_000,
        "batch_size_per_replica": 128,
        "learning_rate": 0.005,
        "precision": "float32",
    },
}
BUDGET_NAMES = (*BUDGETS, "full")
WORKFLOW_TEMPLATE = Path(__file__).resolve().parents[2] / "base/ml/pipeline/workflowtemplate.yaml"


def cluster_budget(path: Path = WORKFLOW_TEMPLATE) -> dict:
    """The cluster's training budget: the WorkflowTemplate's parameter defaults ``epochs``,
    ``batch-size-per-replica``, ``learning-rate``, ``precision``, ``validation-examples`` and
    ``train-examples`` (0: all training images).

    Raises:
        PipelineError: the template (a repository checkout's ``base/ml``) is missing or has
            no such parameter.
    """
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
        params = {p["name"]: p.get("value") for p in doc["spec"]["arguments"]["parameters"]}
        return {
            "epochs": int(params["epochs"]),
            "train_examples": int(params["train-examples"]),
            "validation_examples": int(params["validation-examples"]),
            "batch_size_per_replica": int(params["batch-size-per-replica"]),
            "learning_rate": float(params["learning-rate"]),
            "precision": params["precision"],
        }
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise PipelineError(f"the full budget is read from {path}: {e!r}") from e


def budget_of(name: str) -> dict:
    """A training budget by name (:data:`BUDGET_NAMES`): epochs, examples, batch size per
    replica, learning rate. Raises KeyError for an unknown name."""
    return cluster_budget() if name == "full" else BUDGETS[name]


class PipelineError(RuntimeError):
    """A stage reported failure through its exit code."""


def train_args(
    model_type: str, work: Path, run_id: str, budget: dict, data_dir: str | None
) -> list[str]:
    """The trainer arguments for one variant, as the TFJob and PyTorchJob manifests pass them
    (``python -m training.train`` and ``python -m training.torch_train`` take the same ones).

    Args:
        model_type: one of :data:`fmnist_common.CANDIDATES`.
        work: the work dir (plays the PVC): checkpoints, TensorBoard logs and the candidate
            SavedModel go below it.
        run_id: names this run's checkpoint and TensorBoard directories.
        budget: one of :data:`BUDGETS` (epochs, examples, batch size per replica, learning rate).
        data_dir: tfds data dir, or ``None`` for ``$TFDS_DATA_DIR``.
    """
    options = {
        "--model-type": model_type,
        "--epochs": budget["epochs"],
        "--batch-size-per-replica": budget["batch_size_per_replica"],
        "--learning-rate": budget["learning_rate"],
        "--precision": budget["precision"],
        "--lr-schedule": "cosine",
        "--train-examples": budget["train_examples"],
        "--validation-examples": budget["validation_examples"],
        "--checkpoint-dir": work / "checkpoints",
        "--tensorboard-dir": work / "tensorboard",
        "--saved-model-dir": work / "candidates" / model_type,
        "--run-id": run_id,
    }
    if data_dir:
        options["--data-dir"] = data_dir
    return options_argv(options)


def job_of(model_type: str) -> str:
    """The training job kind of a variant: ``pytorchjob`` for :data:`TORCH_MODEL_TYPES`, else
    ``tfjob`` (:func:`training.launcher.launch`)."""
    return "pytorchjob" if model_type in TORCH_MODEL_TYPES else "tfjob"


def run_stage(module: ModuleType, argv: list[str]) -> None:
    """Run a stage module's ``main`` on ``argv`` parsed by the module's own parser
    (``training.ingest``, ``training.select``: the :mod:`fmnist_common.cli` convention).

    The stage's own exceptions propagate unchanged.

    Raises:
        PipelineError: ``main`` returned a non-zero exit code.
    """
    code = module.main(module.build_parser().parse_args(argv))
    if isinstance(code, int) and code != 0:
        raise PipelineError(f"{module.__name__} exited with code {code}")


def keep_samples(jpegs: list[bytes], samples: Path) -> None:
    """Write the classified images as ``samples/test-NNNN.jpg`` (NNNN: index in the test split),
    replacing those of an earlier run. A convenience only: a failure is logged, not raised."""
    try:
        samples.mkdir(parents=True, exist_ok=True)
        for old in samples.glob("test-*.jpg"):
            old.unlink()
        for i, jpeg in enumerate(jpegs):
            (samples / f"test-{i:04d}.jpg").write_bytes(jpeg)
    except OSError as exc:
        log.warning("the sample images were not kept in %s: %s", samples, exc)


def serve_and_predict(base: Path, work: Path, data_dir: str | None, n_images: int) -> list[dict]:
    """Serve ``base`` (the TF Serving base path of the version just published) on loopback,
    classify ``n_images`` test images, stop.

    The JPEGs it sends are kept as ``<work>/reports/samples/test-NNNN.jpg`` (NNNN: the index in
    the test split), for trying ``python -m serving.client`` by hand.

    Returns:
        One ``{"true", "predicted", "probability"}`` row per image (class names, float).

    Raises:
        ServerStartError: the server did not become ready; PredictError / OSError: the
        prediction request failed.
    """
    from serving.client import predict, top_k
    from serving.launch import LocalServer
    from training.data import encode_images, load_numpy

    images, labels = load_numpy("test", data_dir, n_images)
    jpegs = encode_images(images, "jpeg")
    server_log = work / "reports" / "server.log"
    server = LocalServer(base, log_path=server_log, ready_timeout=120)
    log.info("starting the model server (log: %s): %s", server_log, " ".join(server.command()))
    try:
        server.start()
        predictions = predict(server.url, jpegs)
    finally:
        code = server.stop()  # -15: ended by the SIGTERM that stop() sends, as asked
        how = "by SIGTERM" if code == -signal.SIGTERM else f"exit code {code}"
        log.info("model server stopped (%s)", how)
    keep_samples(jpegs, work / "reports" / "samples")
    rows = []
    for probs, label in zip(predictions, labels, strict=True):
        (name, p), *_ = top_k(probs, 1)
        rows.append({"true": CLASS_NAMES[label], "predicted": name, "probability": p})
    return rows


def format_summary(report: dict, histories: dict[str, dict], predictions: list[dict]) -> str:
    """The table ``make demo`` prints at the end (selection report, training speed, answers)."""
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
    """The pipeline's options (``make demo``)."""
    p = argparse.ArgumentParser(
        prog="python -m fmnist_pipeline",
        description="ingest -> train x4 (3 TFJobs + 1 PyTorchJob, 2 replicas each) -> select -> "
        "serve -> predict",
    )
    p.add_argument("--work-dir", default="work", help="plays the role of the PVC")
    p.add_argument("--data-dir", default=None, help="tfds data dir (default: $TFDS_DATA_DIR)")
    p.add_argument("--budget", choices=BUDGET_NAMES, default="quick")
    p.add_argument("--num-workers", type=positive_int, default=2)
    p.add_argument("--model-types", nargs="+", default=list(CANDIDATES), choices=CANDIDATES)
    p.add_argument("--predict-images", type=positive_int, default=8)
    p.add_argument("--no-serve", action="store_true", help="stop after selection")
    p.add_argument("--run-id", default=None, help="default: demo-<timestamp>")
    return p


def main(args: argparse.Namespace) -> int:
    """Run every stage and print the summary; returns 0.

    Raises:
        The first failing stage's error (see :func:`cli` for the list).
    """
    import tensorflow_datasets as tfds

    from fmnist_pipeline.plots import load_histories, plot_training_curves
    from training import ingest
    from training import select as selection
    from training.data import DATASET_NAME, DATASET_VERSION
    from training.launcher import launch

    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    budget = budget_of(args.budget)
    run_id = args.run_id or time.strftime("demo-%Y%m%d-%H%M%S")
    data_dir = args.data_dir or os.environ.get("TFDS_DATA_DIR") or None
    data_args = ["--data-dir", data_dir] if data_dir else []
    t_start = time.perf_counter()

    log.info("== 1/5 ingest")
    run_stage(ingest, data_args)

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
            job=job_of(model_type),
        )
        log.info("%s trained in %.1f s", model_type, seconds)

    log.info("== 3/5 select")
    report_path = work / "reports" / "selection.json"
    select_options = {
        "--candidates-dir": work / "candidates",
        "--serving-base-path": work / "models" / MODEL_NAME,
        "--report": report_path,
        "--run-id": run_id,
    }
    select_args = [*options_argv(select_options), "--model-types", *args.model_types]
    run_stage(selection, [*select_args, *data_args])
    report = json.loads(report_path.read_text())
    histories = load_histories(work / "candidates", args.model_types)
    curves = plot_training_curves(histories, work / "reports" / "training_curves.png")
    log.info("training curves: %s", curves)

    predictions: list[dict] = []
    if not args.no_serve:
        log.info("== 4/5 serve and predict")
        base = Path(report["model_path"])
        predictions = serve_and_predict(base, work, data_dir, args.predict_images)

    log.info("== 5/5 summary")
    dataset = tfds.builder(f"{DATASET_NAME}:{DATASET_VERSION}", data_dir=data_dir).data_dir
    print(format_summary(report, histories, predictions))
    print(f"\nreport: {report_path}\ncurves: {curves}\ndata:   {dataset}")
    print(f"total: {time.perf_counter() - t_start:.0f} s")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-pipeline``, ``make demo``); exit 1 with one line on stderr
    when a stage fails."""
    from serving.client import PredictError
    from serving.launch import ServerStartError
    from training.ingest import IngestError
    from training.launcher import LaunchError
    from training.select import SelectionError

    expected = (IngestError, LaunchError, SelectionError, ServerStartError, PredictError)
    return run_cli(main, build_parser(), (*expected, PipelineError, OSError), argv)


if __name__ == "__main__":
    sys.exit(cli())
