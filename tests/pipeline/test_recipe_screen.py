"""bench/recipe_screen.py on the CPU, with tiny data (the screen itself runs on a CUDA machine):
its rounds, networks, scoring and summary."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import recipe_screen  # noqa: E402


def test_recipe_names_are_unique_across_rounds():
    """Results of several rounds are summarised together: a name used twice would merge runs."""
    names = collections.Counter(n for _, recipes in recipe_screen.ROUNDS.values() for n in recipes)
    assert [n for n, count in names.items() if count > 1] == []


@pytest.mark.parametrize("number", sorted(recipe_screen.ROUNDS))
def test_every_recipe_builds_and_gives_10_logits(number):
    import torch

    for cfg in recipe_screen.round_configs(number)[:: len(recipe_screen.SEEDS)]:
        net = recipe_screen.build_net(**cfg.get("arch", {}))
        assert tuple(net(torch.rand(2, 1, 28, 28) * 255).shape) == (2, 10), cfg["name"]


def test_a_run_is_scored_plain_mirrored_and_over_10_views():
    """One epoch on 512 random images: every score is a fraction, for the weights and their
    moving average. In a fresh interpreter: torch's optimiser imports triton on its first step,
    which aborts the process when a test before it on the same worker loaded TensorFlow."""
    code = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
import recipe_screen
gen = torch.Generator().manual_seed(0)
data = (
    torch.randint(0, 256, (512, 1, 28, 28), generator=gen).float(),
    torch.randint(0, 10, (512,), generator=gen),
    torch.randint(0, 256, (256, 1, 28, 28), generator=gen).float(),
    torch.randint(0, 10, (256,), generator=gen),
)
cfg = {"name": "t", "seed": 1, "epochs": 1, "batch": 128, "ema": 0.9, "arch": {"stem": 8}}
out = recipe_screen.train_and_score(cfg, data, "cpu")
print(json.dumps({"raw": out["raw"], "ema_acc": out["ema_acc"]}))
"""
    bench = str(Path(recipe_screen.__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", code, bench], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for scores in (out["raw"], out["ema_acc"]):
        assert set(scores) == {"jpeg", "jpeg_tta", "jpeg_tta10"}
        assert all(0.0 <= v <= 1.0 for v in scores.values()), scores


def test_the_summary_marks_what_older_runs_did_not_score():
    old = {"name": "a", "seed": 1, "train_s": 1.0, "raw": {"jpeg": 0.9, "jpeg_tta": 0.91}}
    new = {**old, "name": "b", "raw": {**old["raw"], "jpeg_tta10": 0.92}}
    rows = recipe_screen.summary([old, new, {"name": "c", "seed": 1, "error": "x"}]).splitlines()
    assert rows[2] == "| a | 90.00 | 91.00 | - | 1.0 |"
    assert rows[3] == "| b | 90.00 | 91.00 | 92.00 | 1.0 |"
    assert rows[4] == "| c | failed x1 | | | |"
