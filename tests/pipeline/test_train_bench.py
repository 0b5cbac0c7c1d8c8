"""The training benchmark's bookkeeping (no training here: `make bench-train` runs it): seeds
are summarised per variant against the reference row, and the reference is the 2026-11-29
configuration run by today's trainer."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import reference_train  # noqa: E402
import train_bench  # noqa: E402

from training.train import build_parser  # noqa: E402


def _row(model_type: str, seed: int, acc: float, wall: float) -> dict:
    return {
        "model_type": model_type,
        "seed": seed,
        "epochs": 18,
        "precision": "float32",
        "global_batch_size": 512,
        "wall_seconds": wall,
        "fit_seconds": wall - 10,
        "images_per_second": 5000,
        "teardown_seconds": 0.05,
        "test_accuracy": acc,
        "test_loss": 0.3,
    }


def test_summary_gives_median_spread_and_ratio_to_the_reference():
    rows = [_row("cnn", s, a, w) for s, a, w in [(1, 0.92, 300), (2, 0.91, 100), (3, 0.93, 200)]]
    rows += [_row("batch_norm", 1, 0.94, 400)]
    reference = _row("reference", 42, 0.93, 100.0)
    cnn, bn = train_bench.summarize(rows, reference)
    assert (cnn["model_type"], cnn["seeds"]) == ("cnn", 3)
    assert (cnn["accuracy_median"], cnn["accuracy_min"], cnn["accuracy_max"]) == (0.92, 0.91, 0.93)
    assert cnn["wall_seconds_median"] == 200 and cnn["time_ratio"] == 2.0
    assert bn["time_ratio"] == 4.0
    assert train_bench.summarize(rows, None)[0]["time_ratio"] is None


def test_markdown_has_every_section_and_row():
    rows = [_row("batch_norm", s, 0.93 + s / 1000, 300) for s in (1, 2, 3)]
    reference = _row("reference", 42, 0.9286, 150.0)
    scaling = [
        {
            "model_type": "batch_norm",
            "batch_size_per_replica": 64,
            "two_workers_images_per_second": 1800,
            "limit_images_per_second": 2000,
            "efficiency": 0.9,
        }
    ]
    result = {
        "reference": reference,
        "rows": rows,
        "summary": train_bench.summarize(rows, reference),
        "scaling": scaling,
        "meta": {
            "cpu": {
                "model": "AMD EPYC 9B14",
                "cores": 2,
                "flags": ["avx2", "avx512_bf16"],
                "native_bfloat16": True,
            },
            "date": "2026-12-01",
            "budget": "full",
        },
    }
    md = train_bench.to_markdown(result)
    assert "CPU: AMD EPYC 9B14, 2 cores, flags avx2 avx512_bf16 (native bfloat16: yes)" in md
    assert "precision float32;" in md
    assert "| batch_norm | 1 | float32 | 18 | 512 | 300 | 290 | 0.05 | 5000 | 0.9310 |" in md
    assert "| batch_norm | 3 | 0.9320 (0.9310-0.9330) | 300 | 2.00 |" in md
    assert "| reference (2026-11-29 batch_norm) | 1 | 0.9286 | 150.0 | 1.00 |" in md
    assert md.count("| batch_norm | ") == 3 + 1 + 1  # runs, summary, scaling
    assert "| batch_norm | 64 | 1800 | 2000 | 90% |" in md


def test_reference_options_are_accepted_by_the_trainer_and_win_over_the_budget():
    argv = ["--model-type", "batch_norm", "--saved-model-dir", "s", "--checkpoint-dir", "c"]
    argv += ["--epochs", "3", "--augment", "shift-flip-erase"]
    argv += train_bench.options_argv(reference_train.REFERENCE_OPTIONS)
    args = build_parser().parse_args(argv)
    assert (args.epochs, args.augment, args.label_smoothing) == (18, "none", 0.0)
    assert (args.collective, args.validation_examples, args.warmup_epochs) == ("ring", 2000, 1)


def test_reference_model_is_the_2026_11_29_batch_norm():
    model = reference_train.build_reference_model(seed=0)
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds[0] == "RandomTranslation" and kinds.count("BatchNormalization") == 3
    assert model.count_params() == 422_314
