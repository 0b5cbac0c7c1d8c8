"""Where a 2-worker training step's time goes: a TensorBoard profile of the chief, summarised.

    python bench/profile_step.py                      # the full budget's batch and precision
    python bench/profile_step.py --batch-size-per-replica 64 --precision float32
    python bench/profile_step.py --precision float32 --bytes-per-pack 1048576

Trains the ``--model-type`` variant as 2 worker processes on loopback (``TF_CONFIG``, as every
benchmark and TFJob runs it) for 2 short epochs with ``--profile-batches`` set to batches of the
second epoch (the first traces and sets up the ring), then reads the chief's profile (the
``.xplane.pb`` that TensorBoard's profile plugin shows) with TensorFlow's own converter to the
trace-viewer format and reports, per profiled step (one ``train_function`` call):

* ``step_ms``: wall time of the step;
* ``all_reduce_ms``: wall time inside the gradient all-reduce op (``CollectiveReduceV2``),
  which includes waiting for the other worker;
* ``other_ms``: the rest (forward, backward, optimizer update, input).

``--bytes-per-pack`` is passed to the trainer (:mod:`training.train`: the gradient all-reduce
in packs of about that many bytes, last layer first, so that the first packs can overlap the
rest of the backward pass; 0 = one pack).

Writes ``bench/results/profile_step-<precision>-<batch>[-pack<bytes>].json``; the profile
directory is kept under ``--keep`` when given, for ``tensorboard --logdir``. Timings are
reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from fmnist_common import MODEL_TYPES
from fmnist_common.cli import ConfigError, number, positive_int, run_cli
from fmnist_pipeline.run import budget_of, train_args
from training.launcher import LaunchError, launch
from training.precision import PRECISION_CHOICES

RESULTS = Path(__file__).resolve().parent / "results"
STEPS_PER_EPOCH = 30
PROFILED = 10  # steps of the second epoch


def build_parser() -> argparse.ArgumentParser:
    """Options: the model, per-replica batch and precision (default: the full budget's)."""
    full = budget_of("full")
    p = argparse.ArgumentParser(prog="python bench/profile_step.py", description=__doc__)
    p.add_argument("--model-type", choices=MODEL_TYPES, default="batch_norm")
    p.add_argument(
        "--batch-size-per-replica", type=positive_int, default=full["batch_size_per_replica"]
    )
    p.add_argument("--precision", choices=PRECISION_CHOICES, default=full["precision"])
    p.add_argument(
        "--bytes-per-pack",
        type=number(int, 0),
        default=0,
        help="the trainer's --bytes-per-pack (0 = the gradients in one all-reduce)",
    )
    p.add_argument("--data-dir", default=None, help="tfds data dir (default: $TFDS_DATA_DIR)")
    p.add_argument("--keep", default=None, help="copy the TensorBoard directory here")
    return p


def trace_events(xplane: Path) -> list[dict]:
    """The complete events (``ph == "X"``, times in microseconds) of one profile file, through
    TensorFlow's converter (``xspace_to_tools_data``, what TensorBoard's trace viewer uses)."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    data, ok = plugin.xspace_to_tools_data([str(xplane)], "trace_viewer@", {})
    if not ok:
        raise ConfigError(f"TensorFlow could not convert {xplane}")
    return [e for e in json.loads(data)["traceEvents"] if e.get("ph") == "X"]


def _union_us(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals (concurrent ops count once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summarise(events: list[dict]) -> list[dict]:
    """Per ``train_function`` call: step, all-reduce and other wall time in milliseconds. The
    all-reduce time is the union of the ``CollectiveReduceV2`` op spans in the step (the
    gradients' and the metrics' reductions; several can run at once)."""
    steps = sorted((e for e in events if e["name"] == "train_function"), key=lambda e: e["ts"])
    ops = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "CollectiveReduceV2"]
    rows = []
    for s in steps:
        start, end = s["ts"], s["ts"] + s["dur"]
        reduce_us = _union_us(
            [(max(a, start), min(b, end)) for a, b in ops if a < end and b > start]
        )
        rows.append(
            {
                "step_ms": round(s["dur"] / 1000, 2),
                "all_reduce_ms": round(reduce_us / 1000, 2),
                "other_ms": round((s["dur"] - reduce_us) / 1000, 2),
            }
        )
    return rows


def result_name(args: argparse.Namespace) -> str:
    """``profile_step-<precision>-<batch>[-pack<bytes>].json``: one file per setting."""
    pack = f"-pack{args.bytes_per_pack}" if args.bytes_per_pack else ""
    return f"profile_step-{args.precision}-{args.batch_size_per_replica}{pack}.json"


def trainer_argv(args: argparse.Namespace, work: Path) -> list[str]:
    """The ``python -m training.train`` arguments of the profiled run: the full budget with
    ``args``' batch and precision, 2 epochs of :data:`STEPS_PER_EPOCH` steps, no validation,
    the profile over :data:`PROFILED` steps of the second epoch, ``args.bytes_per_pack``."""
    budget = {
        **budget_of("full"),
        "epochs": 2,
        "batch_size_per_replica": args.batch_size_per_replica,
        "train_examples": 2 * STEPS_PER_EPOCH * args.batch_size_per_replica,
        "validation_examples": 0,
        "precision": args.precision,
    }
    first = STEPS_PER_EPOCH + 1
    return [
        *train_args(args.model_type, work, "profile", budget, args.data_dir),
        "--profile-batches", str(first), str(first + PROFILED - 1),
        "--bytes-per-pack", str(args.bytes_per_pack),
    ]  # fmt: skip


def main(args: argparse.Namespace) -> int:
    """Run, profile, summarise, write the result; 0 on success."""
    with tempfile.TemporaryDirectory(prefix="profile-") as tmp:
        work = Path(tmp)
        argv = trainer_argv(args, work)
        launch(argv, num_workers=2, name="profile")
        found = sorted((work / "tensorboard").rglob("*.xplane.pb"))
        if args.keep:
            shutil.copytree(work / "tensorboard", args.keep, dirs_exist_ok=True)
        if not found:
            raise ConfigError("the chief wrote no profile (*.xplane.pb)")
        rows = summarise(trace_events(found[-1]))
    if not rows:
        raise ConfigError("no train_function step in the profile")
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    result = {
        "model_type": args.model_type,
        "batch_size_per_replica": args.batch_size_per_replica,
        "precision": args.precision,
        "bytes_per_pack": args.bytes_per_pack,
        "steps": rows,
        "median": med,
        "all_reduce_share": round(med["all_reduce_ms"] / med["step_ms"], 3),
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / result_name(args)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "steps"}))
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point; exit 1 when a replica fails or no profile was written."""
    return run_cli(main, build_parser(), (LaunchError, ConfigError, FileNotFoundError), argv)


if __name__ == "__main__":
    sys.exit(cli())
