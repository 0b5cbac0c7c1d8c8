"""How long ``fit()`` takes to return after its last epoch, in 2-worker trainings.

Each run is ``python -m training.train`` as 2 worker processes on loopback (``TF_CONFIG``,
``MultiWorkerMirroredStrategy``), launched as ``make demo`` and the TFJobs run it. Every
replica logs ``fit() returned X s after training ended``: the time between the last callback
(``on_train_end``) and ``fit()``'s return, which is where tf-keras deletes its input iterators.
It once waited for tf.data's autotuning loop, up to 60 s a run (docs/training.md); the target
is at most 2 s on every replica of every run.

    python bench/fit_teardown.py --runs 10                       # bench/results/fit_teardown.json
    python bench/fit_teardown.py --runs 2 --budget quick --epochs 4

The default run is the full budget (the WorkflowTemplate's: batch, learning rate, precision,
validation) cut to 6 epochs, so that ``fit()`` ends between two of the autotuning loop's
wake-ups (about 41 s and 82 s after the input starts), where the old stall was longest.
Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import platform
import re
import statistics
import sys
import tempfile
from pathlib import Path

from fmnist_common import MODEL_TYPES
from fmnist_common.cli import number, positive_int, run_cli
from fmnist_pipeline.run import BUDGET_NAMES, budget_of, train_args
from training.launcher import LaunchError, launch
from training.precision import cpu_description

log = logging.getLogger("bench")
RESULTS = Path(__file__).resolve().parent / "results"
TEARDOWN_LINE = re.compile(r"\[[^/\]]+/(\S+)\] .*fit\(\) returned ([0-9.]+) s after training ended")
TARGET_SECONDS = 2.0


class LogTee(io.TextIOBase):
    """Keeps what the launcher writes and passes it on to stdout."""

    def __init__(self):
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        self.lines.append(text)
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


def teardowns(lines: list[str]) -> dict[str, float]:
    """``{replica: seconds}`` from the launcher's prefixed log lines.

    Raises:
        LaunchError: a replica did not log its teardown (so it cannot be judged).
    """
    found = {m[1]: float(m[2]) for m in map(TEARDOWN_LINE.search, "".join(lines).splitlines()) if m}
    if len(found) < 2:
        raise LaunchError(f"teardown logged by {sorted(found)} only, expected both workers")
    return found


def one_run(args: argparse.Namespace, run: int) -> dict:
    """Train once with 2 workers; the wall time and each replica's teardown seconds."""
    budget = {**budget_of(args.budget), "epochs": args.epochs}
    if args.train_examples:
        budget["train_examples"] = args.train_examples
    with tempfile.TemporaryDirectory(prefix="fit-teardown-") as tmp:
        tee = LogTee()
        argv = [
            *train_args(args.model_type, Path(tmp), f"r{run}", budget, None),
            "--seed",
            str(run),
        ]
        wall = launch(argv, num_workers=2, name=f"run{run}", out=tee)
    per_replica = teardowns(tee.lines)
    return {
        "run": run,
        "wall_seconds": round(wall, 1),
        "teardown_seconds": {k: round(v, 2) for k, v in sorted(per_replica.items())},
        "max_teardown_seconds": round(max(per_replica.values()), 2),
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/fit_teardown.py", description=__doc__)
    p.add_argument("--runs", type=positive_int, default=10)
    p.add_argument("--model-type", choices=MODEL_TYPES, default="batch_norm")
    p.add_argument("--budget", choices=BUDGET_NAMES, default="full")
    p.add_argument("--epochs", type=positive_int, default=6)
    p.add_argument("--train-examples", type=number(int, 0), default=0, help="0 = the budget's")
    p.add_argument("--output", type=Path, default=RESULTS / "fit_teardown.json")
    return p


def main(args: argparse.Namespace) -> int:
    rows = [one_run(args, run) for run in range(1, args.runs + 1)]
    worst = max(r["max_teardown_seconds"] for r in rows)
    result = {
        "cpu": cpu_description(),
        "python": platform.python_version(),
        "model_type": args.model_type,
        "budget": args.budget,
        "epochs": args.epochs,
        "train_examples": args.train_examples or budget_of(args.budget)["train_examples"],
        "target_seconds": TARGET_SECONDS,
        "runs": rows,
        "max_teardown_seconds": worst,
        "median_teardown_seconds": statistics.median(r["max_teardown_seconds"] for r in rows),
        "runs_within_target": sum(r["max_teardown_seconds"] <= TARGET_SECONDS for r in rows),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nrun  wall s  teardown s (per replica)   -> {args.output}")
    for r in rows:
        print(f"{r['run']:>3}  {r['wall_seconds']:>6}  {r['teardown_seconds']}")
    print(
        f"worst {worst:.2f} s; {result['runs_within_target']} of {len(rows)} runs within "
        f"{TARGET_SECONDS:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, build_parser(), (LaunchError,)))
