"""Training benchmark: 2 workers on loopback, images/s and test accuracy under a budget.

Runs ``python -m training.train`` through the local launcher (2 replicas, ``TF_CONFIG``, ring
all-reduce over loopback), exactly as ``make demo`` and the TFJobs do, then evaluates the exported
SavedModel on the whole test split through its serving signature (JPEG, as clients send).

    python bench/train_bench.py --budget full --model-types batch_norm
    python bench/train_bench.py --budget quick            # all three variants, demo budget

Writes ``bench/results/train_bench-<budget>.json`` and a markdown table beside it. Timings are
reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fmnist_common import MODEL_TYPES
from fmnist_common.cli import positive_int, run_cli
from fmnist_pipeline.run import BUDGET_NAMES, budget_of, train_args
from training.launcher import LaunchError, launch
from training.select import evaluate_candidate

log = logging.getLogger("bench")
RESULTS = Path(__file__).resolve().parent / "results"


def bench_one(model_type: str, budget: str, workers: int, data_dir: str | None, encoded, labels):
    """Train one variant with ``workers`` replicas and evaluate it on ``encoded`` images.

    Args:
        encoded: the whole test split as JPEG bytes; labels: ``int64 [N]``.

    Returns:
        A result row (dict: wall and fit seconds, steady images/s, test accuracy and loss).

    Raises:
        LaunchError: a replica failed.
    """
    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        work = Path(tmp)
        args = train_args(model_type, work, "bench", budget_of(budget), data_dir)
        wall = launch(args, num_workers=workers, name=model_type)
        saved = work / "candidates" / model_type
        hist = json.loads((saved / "training_history.json").read_text())
        metrics = evaluate_candidate(saved, encoded, labels, batch_size=500)
    ips = hist["history"]["images_per_second"]
    steady = ips[1:] or ips  # epoch 1 includes tracing and the collective ring set-up
    return {
        "model_type": model_type,
        "budget": budget,
        "workers": workers,
        "epochs": hist["epochs"],
        "train_examples": hist["train_examples"],
        "global_batch_size": hist["global_batch_size"],
        "wall_seconds": round(wall, 1),
        "fit_seconds": round(hist["train_seconds"], 1),
        "images_per_second_median": round(statistics.median(steady)),
        "images_per_second_max": round(max(ips)),
        "test_accuracy": round(metrics["accuracy"], 4),
        "test_loss": round(metrics["loss"], 4),
    }


def to_markdown(rows: list[dict], meta: dict) -> str:
    """A README-ready table of the rows."""
    head = (
        "| model | budget | workers | epochs | wall s | images/s (median, steady) "
        "| test accuracy (JPEG, signature) |\n|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['model_type']} | {r['budget']} | {r['workers']} | {r['epochs']} | "
        f"{r['wall_seconds']} | {r['images_per_second_median']} | {r['test_accuracy']:.4f} |\n"
        for r in rows
    )
    return f"{head}{body}\n{meta['cpu']}, {meta['cores']} cores, {meta['date']}\n"


def build_parser() -> argparse.ArgumentParser:
    """Options: budget, model types, workers, tfds data dir, results dir."""
    p = argparse.ArgumentParser(prog="bench/train_bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--budget", choices=BUDGET_NAMES, default="full")
    p.add_argument("--model-types", nargs="+", choices=MODEL_TYPES, default=list(MODEL_TYPES))
    p.add_argument("--workers", type=positive_int, default=2)
    p.add_argument("--data-dir", default=os.environ.get("TFDS_DATA_DIR"))
    p.add_argument("--results-dir", type=Path, default=RESULTS, help="default: bench/results")
    return p


def main(args: argparse.Namespace) -> int:
    """Run the benchmark and write the results; returns 0."""
    from training.data import encode_images, load_numpy

    images, labels = load_numpy("test", args.data_dir)
    encoded = encode_images(images, "jpeg")
    rows = []
    for model_type in args.model_types:
        rows.append(
            bench_one(model_type, args.budget, args.workers, args.data_dir, encoded, labels)
        )
        log.info("%s", json.dumps(rows[-1]))
    meta = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / f"train_bench-{args.budget}.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    md = to_markdown(rows, meta)
    (args.results_dir / f"train_bench-{args.budget}.md").write_text(md)
    print(md)
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``python bench/train_bench.py``); exit 1 when a replica fails or
    the dataset is missing."""
    return run_cli(main, build_parser(), (LaunchError, FileNotFoundError), argv)


if __name__ == "__main__":
    sys.exit(cli())
