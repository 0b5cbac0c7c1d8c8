"""bench/profile_step.py's parts that need no training: the options it passes on, the file it
writes, and the step summary read from a trace (the profiling run itself is a benchmark)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import profile_step  # noqa: E402

from fmnist_pipeline.run import budget_of  # noqa: E402


def test_defaults_are_the_full_budget_and_one_pack():
    args = profile_step.build_parser().parse_args([])
    full = budget_of("full")
    assert args.batch_size_per_replica == full["batch_size_per_replica"]
    assert args.precision == full["precision"]
    assert args.bytes_per_pack == 0
    assert profile_step.result_name(args) == (
        f"profile_step-{full['precision']}-{full['batch_size_per_replica']}.json"
    )


def test_each_pack_size_has_its_own_file():
    argv = ["--precision", "float32", "--batch-size-per-replica", "64"]
    one = profile_step.build_parser().parse_args(argv)
    packed = profile_step.build_parser().parse_args([*argv, "--bytes-per-pack", "1048576"])
    assert profile_step.result_name(one) == "profile_step-float32-64.json"
    assert profile_step.result_name(packed) == "profile_step-float32-64-pack1048576.json"


@pytest.mark.parametrize("bad", ["-1", "1.5", "x"])
def test_bytes_per_pack_rejects_what_the_trainer_would(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        profile_step.build_parser().parse_args(["--bytes-per-pack", bad])
    assert exit_.value.code == 2 and "--bytes-per-pack" in capsys.readouterr().err


def test_summary_counts_concurrent_all_reduces_once_and_clips_to_the_step():
    """Times in microseconds, as the trace viewer's events: two steps; in the first, two
    all-reduces overlap (10 ms union, not 14); in the second one starts before the step."""
    events = [
        {"ph": "X", "name": "train_function", "ts": 0, "dur": 50_000},
        {"ph": "X", "name": "CollectiveReduceV2", "ts": 30_000, "dur": 8_000},
        {"ph": "X", "name": "CollectiveReduceV2", "ts": 34_000, "dur": 6_000},
        {"ph": "X", "name": "train_function", "ts": 100_000, "dur": 40_000},
        {"ph": "X", "name": "CollectiveReduceV2", "ts": 95_000, "dur": 10_000},
        {"ph": "X", "name": "Conv2D", "ts": 1_000, "dur": 20_000},
    ]
    assert profile_step.summarise(events) == [
        {"step_ms": 50.0, "all_reduce_ms": 10.0, "other_ms": 40.0},
        {"step_ms": 40.0, "all_reduce_ms": 5.0, "other_ms": 35.0},
    ]


def test_the_trainer_gets_the_profiled_setting(tmp_path):
    """What the profiled run trains, parsed by the TFJob trainer's own parser."""
    from training.train import build_parser

    argv = ["--precision", "float32", "--batch-size-per-replica", "64", "--bytes-per-pack", "4096"]
    args = profile_step.build_parser().parse_args(argv)
    train = build_parser().parse_args(profile_step.trainer_argv(args, tmp_path))
    assert (train.batch_size_per_replica, train.precision) == (64, "float32")
    assert train.bytes_per_pack == 4096
    assert train.epochs == 2 and train.train_examples == 2 * profile_step.STEPS_PER_EPOCH * 64
    first = profile_step.STEPS_PER_EPOCH + 1  # the second epoch's steps: the first traces
    assert tuple(train.profile_batches) == (first, first + profile_step.PROFILED - 1)
    assert train.validation_examples == 0
