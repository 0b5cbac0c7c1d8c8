"""The training benchmark's bookkeeping (no training here: `make bench-train` runs it): seeds
are summarised per variant against the reference row, and the reference is the 2026-11-29
configuration run by today's trainer."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

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
            "precision": "float32",
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
    assert "| batch_norm | 64 | float32 | 1800 | 2000 | 90% |" in md


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


def _saved(tmp_path: Path, budget: str = "full", **cpu) -> Path:
    """A results file of an earlier run on this machine's CPU (``cpu`` overrides its fields)."""
    from training.precision import cpu_description

    full = train_bench.budget_of("full")
    rows = [{**_row("batch_norm", 1, 0.94, 300), "epochs": full["epochs"]}]
    rows[0]["global_batch_size"] = 2 * full["batch_size_per_replica"]  # 2 replicas
    result = {
        "reference": {**_row("batch_norm", 42, 0.93, 150.0), "model_type": "reference"},
        "rows": rows,
        "summary": train_bench.summarize(rows, None),
        "scaling": [],
        "meta": {"cpu": {**cpu_description(), **cpu}, "date": "2026-12-01", "budget": budget},
    }
    path = tmp_path / f"train_bench-{budget}.json"
    path.write_text(json.dumps(result))
    return path


def _with_meta(path: Path, saved: dict, **meta) -> None:
    """Write ``saved`` (a results dict) to ``path`` with ``meta``'s fields replaced."""
    path.write_text(json.dumps({**saved, "meta": {**saved["meta"], **meta}}))


def test_resume_keeps_the_runs_and_skips_them(tmp_path, monkeypatch):
    _saved(tmp_path)
    ran: list = []

    def fake_bench_one(model_type, budget, seed, *a, reference=False):
        ran.append(("reference" if reference else model_type, seed))
        row = _row(model_type, seed, 0.95, 310)
        return {
            **row,
            "epochs": budget["epochs"],
            "global_batch_size": 2 * budget["batch_size_per_replica"],
        }

    monkeypatch.setattr(train_bench, "bench_one", fake_bench_one)
    monkeypatch.setattr(
        "training.data.load_numpy", lambda split, d=None: (np.zeros((2, 28, 28, 1)), np.zeros(2))
    )
    monkeypatch.setattr("training.data.encode_images", lambda images, fmt: [b"", b""])
    argv = ["--budget", "full", "--model-types", "batch_norm", "--seeds", "1", "2", "--no-scaling"]
    args = train_bench.build_parser().parse_args(
        [*argv, "--results-dir", str(tmp_path), "--resume"]
    )
    assert train_bench.main(args) == 0
    assert ran == [("batch_norm", 2)]  # neither the reference nor seed 1 again
    result = json.loads((tmp_path / "train_bench-full.json").read_text())
    assert [r["seed"] for r in result["rows"]] == [1, 2]
    assert result["reference"]["wall_seconds"] == 150.0
    assert result["meta"]["dates"] == sorted({"2026-12-01", result["meta"]["date"]})
    assert result["meta"]["budget_params"] == train_bench.budget_meta(train_bench.budget_of("full"))
    assert train_bench.resumed(tmp_path / "train_bench-full.json", "full")  # its own file resumes
    ran.clear()  # without --resume an existing table is refused, nothing measured or lost
    before = (tmp_path / "train_bench-full.json").read_text()
    with pytest.raises(train_bench.ResumeError, match="exists: --resume goes on from it"):
        train_bench.main(
            train_bench.build_parser().parse_args([*argv, "--results-dir", str(tmp_path)])
        )
    assert ran == [] and (tmp_path / "train_bench-full.json").read_text() == before
    # --overwrite measures everything again
    argv += ["--results-dir", str(tmp_path), "--overwrite"]
    train_bench.main(train_bench.build_parser().parse_args(argv))
    assert ran == [("reference", 42), ("batch_norm", 1), ("batch_norm", 2)]


@pytest.mark.parametrize(
    ("budget", "cpu", "message"),
    [
        ("quick", {}, "budget 'quick'"),
        ("full", {"model": "Some Other CPU"}, "another CPU (model"),
        ("full", {"flags": ["sse2"]}, "another CPU (flags"),
        ("full", {"cores": 64}, "another CPU (cores"),  # other threads per replica
    ],
)
def test_resume_refuses_another_budget_or_cpu(tmp_path, budget, cpu, message):
    path = _saved(tmp_path, budget, **cpu)
    with pytest.raises(train_bench.ResumeError, match=re.escape(message)):
        train_bench.resumed(path, "full")


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: "{not json",
        lambda r: {**r, "meta": None},
        lambda r: {**r, "meta": {**r["meta"], "cpu": None}},
        lambda r: {**r, "rows": [{"model_type": "cnn"}]},  # no seed
        lambda r: {**r, "rows": [{**r["rows"][0], "seed": "1"}]},  # would run seed 1 again
        lambda r: {**r, "rows": [{**r["rows"][0], "model_type": ["cnn"]}]},
        lambda r: {**r, "rows": [{**r["rows"][0], "model_type": "resnet"}]},
        lambda r: {**r, "rows": [{k: v for k, v in r["rows"][0].items() if k != "test_loss"}]},
        lambda r: {**r, "rows": [{**r["rows"][0], "wall_seconds": True}]},
        lambda r: {**r, "reference": {**r["reference"], "wall_seconds": "150"}},
        lambda r: {**r, "reference": {**r["reference"], "wall_seconds": 0}},
        lambda r: {**r, "scaling": [{"model_type": "batch_norm", "batch_size_per_replica": 64}]},
        lambda r: {**r, "meta": {**r["meta"], "dates": "2026-12-01"}},
        lambda r: {**r, "rows": {}},
        lambda r: {**r, "scaling": None},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64), "repeats": 0}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64), "efficiency_runs": [0.9]}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64, 0.8, 0.9), "repeats": 3}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64, 0.8, "0.9"), "repeats": 2}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64, 0.8, 0.9), "limit_runs": None}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64, 0.8, 0.9), "limit_runs": [1]}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64, 0.8, float("nan"))}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64), "efficiency": float("inf")}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64), "limit_images_per_second": 0}]},
        lambda r: {**r, "scaling": [{**_scaling("batch_norm", 64), "two_workers_runs": [90]}]},
        lambda r: {**r, "scaling": [_scaling("batch_norm", 64), _scaling("batch_norm", 64)]},
        lambda r: [],
    ],
)
def test_resume_refuses_a_damaged_file_in_one_line(tmp_path, damage):
    path = _saved(tmp_path)
    bad = damage(json.loads(path.read_text()))
    path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
    with pytest.raises(train_bench.ResumeError, match="not a results file"):
        train_bench.resumed(path, "full")


def test_resume_refuses_a_changed_budget(tmp_path):
    """The full budget is read from the WorkflowTemplate: when its parameters changed since the
    file was written, its runs are not mixed with today's (recorded parameters, or a run's
    epochs and global batch in a file that predates them)."""
    path = _saved(tmp_path)
    saved = json.loads(path.read_text())
    params = train_bench.budget_meta(train_bench.budget_of("full"))
    _with_meta(path, saved, budget_params=params)
    assert train_bench.resumed(path, "full")["rows"] == saved["rows"]
    changed = {**params, "learning_rate": params["learning_rate"] * 2}
    _with_meta(path, saved, budget_params=changed)
    with pytest.raises(train_bench.ResumeError, match="budget changed since"):
        train_bench.resumed(path, "full")
    shorter = [{**saved["rows"][0], "epochs": saved["rows"][0]["epochs"] - 1}]
    path.write_text(json.dumps({**saved, "rows": shorter}))
    with pytest.raises(train_bench.ResumeError, match="run of .* epochs x"):
        train_bench.resumed(path, "full")


def test_resume_compares_the_validation_examples_and_accepts_older_files(tmp_path):
    """Validation runs every epoch, inside every timing: a changed validation-examples is a
    changed budget. A file of an older version, which did not record it, still resumes."""
    path = _saved(tmp_path)
    saved = json.loads(path.read_text())
    params = train_bench.budget_meta(train_bench.budget_of("full"))
    assert "validation_examples" in params
    older = {k: v for k, v in params.items() if k != "validation_examples"}
    _with_meta(path, saved, budget_params=older)
    assert train_bench.resumed(path, "full")["rows"] == saved["rows"]
    other = {**params, "validation_examples": params["validation_examples"] + 1000}
    _with_meta(path, saved, budget_params=other)
    with pytest.raises(train_bench.ResumeError, match="budget changed since"):
        train_bench.resumed(path, "full")


def test_resume_refuses_a_changed_trainer_default_or_network(tmp_path, monkeypatch):
    """What shapes a run besides the budget is recorded (the trainers' defaults, each network's
    parameters): a table measured before a default changed (2026-12-04's ``--augment``) or a
    network did (the stem) is not resumed with today's runs; a file without the record is."""
    from training import train as tf_train

    path = _saved(tmp_path)
    saved = json.loads(path.read_text())
    assert train_bench.resumed(path, "full")["rows"] == saved["rows"]  # older file: no record
    recipe = train_bench.trainer_recipe()
    assert recipe["defaults"]["training.train"]["augment"] == "shift-flip"
    assert recipe["parameters"]["batch_norm"] == recipe["parameters"]["pytorch"]  # one network
    _with_meta(path, saved, trainer_recipe=recipe)
    assert train_bench.resumed(path, "full")["rows"] == saved["rows"]

    build = tf_train.build_parser

    def other_default():
        parser = build()
        parser.set_defaults(augment="none")
        return parser

    monkeypatch.setattr(tf_train, "build_parser", other_default)
    train_bench.trainer_recipe.cache_clear()
    try:
        with pytest.raises(
            train_bench.ResumeError,
            match=r"defaults or networks changed .*\(defaults\.training\.train\.augment\)",
        ):
            train_bench.resumed(path, "full")
    finally:
        monkeypatch.undo()
        train_bench.trainer_recipe.cache_clear()
    wider = {**recipe, "parameters": {**recipe["parameters"], "cnn": 1}}
    _with_meta(path, saved, trainer_recipe=wider)
    with pytest.raises(train_bench.ResumeError, match=r"\(parameters\.cnn\)"):
        train_bench.resumed(path, "full")


def test_the_recorded_networks_change_with_the_architecture_not_the_process(monkeypatch):
    """A change that keeps the parameter count (a dropout rate) changes the network's digest;
    layer names (which depend on how many models a process built), the global dtype policy
    and the runtime's thread setting do not."""
    import tf_keras as keras

    train_bench.trainer_recipe.cache_clear()
    recipe = train_bench.trainer_recipe()
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "1")  # --intra-op-threads' default
    keras.mixed_precision.set_global_policy("mixed_bfloat16")  # what a trainer leaves set
    train_bench.trainer_recipe.cache_clear()
    try:
        assert train_bench.trainer_recipe() == recipe
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"  # restored
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # layers named by Keras (dense, dense_1, ...: how many a process built before)
    first, second = (keras.Sequential([keras.layers.Dense(2)]) for _ in range(2))
    assert first.layers[0].name != second.layers[0].name
    described = [train_bench.network_description(m) for m in (first, second)]
    assert described[0] == described[1]
    assert not set(train_bench.RUNTIME_ONLY) & set(recipe["defaults"]["training.train"])
    init = keras.layers.Dropout.__init__

    def rate_09(self, rate, *args, **kwargs):
        init(self, 0.9, *args, **kwargs)

    monkeypatch.setattr(keras.layers.Dropout, "__init__", rate_09)
    train_bench.trainer_recipe.cache_clear()
    try:
        other = train_bench.trainer_recipe()
    finally:
        monkeypatch.undo()
        train_bench.trainer_recipe.cache_clear()
    assert other["parameters"] == recipe["parameters"]
    assert other["networks"]["dropout"] != recipe["networks"]["dropout"]
    assert other["networks"]["batch_norm"] == recipe["networks"]["batch_norm"]


@pytest.mark.parametrize("key", ["trainer_recipe", "budget_params"])
@pytest.mark.parametrize("value", [None, [1], "x", 3])
def test_resume_refuses_a_recipe_or_budget_record_of_the_wrong_type(tmp_path, key, value):
    path = _saved(tmp_path)
    saved = json.loads(path.read_text())
    _with_meta(path, saved, **{key: value})
    with pytest.raises(train_bench.ResumeError, match=rf"not a results file .*meta\.{key}"):
        train_bench.resumed(path, "full")


def test_precision_option_reaches_every_run_and_guards_resume(tmp_path, monkeypatch):
    """``--precision float32`` replaces the budget's (``auto``) in every run and scaling row
    and in the recorded budget, so a float32 table is not resumed as an ``auto`` one."""
    budgets, scaled = [], []

    def fake_bench_one(model_type, budget, seed, *a, reference=False):
        budgets.append((model_type, seed, budget["precision"]))
        row = {**_row(model_type, seed, 0.95, 310), "epochs": budget["epochs"]}
        return {**row, "global_batch_size": 2 * budget["batch_size_per_replica"]}

    def fake_scaling_row(model_type, batch, precision, data_dir, repeats):
        scaled.append(precision)
        return {
            "model_type": model_type,
            "batch_size_per_replica": batch,
            "precision": precision,
            "two_workers_images_per_second": 90,
            "limit_images_per_second": 100,
            "efficiency": 0.9,
        }

    monkeypatch.setattr(train_bench, "bench_one", fake_bench_one)
    monkeypatch.setattr(train_bench, "scaling_row", fake_scaling_row)
    monkeypatch.setattr(
        "training.data.load_numpy", lambda split, d=None: (np.zeros((2, 28, 28, 1)), np.zeros(2))
    )
    monkeypatch.setattr("training.data.encode_images", lambda images, fmt: [b"", b""])
    assert train_bench.budget_of("full")["precision"] == "auto"  # else this test proves nothing
    argv = ["--model-types", "pytorch", "--seeds", "1", "--scaling-batches", "64"]
    argv += ["--results-dir", str(tmp_path), "--precision", "float32"]
    assert train_bench.main(train_bench.build_parser().parse_args(argv)) == 0
    assert budgets[-1] == ("pytorch", 1, "float32") and scaled == ["float32"]
    assert not (tmp_path / "train_bench-full.json").exists()  # the auto table's name is free
    path = tmp_path / "train_bench-full-float32.json"
    assert json.loads(path.read_text())["meta"]["budget_params"]["precision"] == "float32"
    assert train_bench.resumed(path, "full", "float32")["rows"]
    with pytest.raises(train_bench.ResumeError, match="; repeat --precision float32"):
        train_bench.resumed(path, "full")  # the budget's auto: another table
    # a float32 table under the auto table's name: the message says where it resumes from
    misplaced = tmp_path / "train_bench-full.json"
    misplaced.write_text(path.read_text())
    with pytest.raises(train_bench.ResumeError, match="move it to train_bench-full-float32.json"):
        train_bench.resumed(misplaced, "full")
    # the budget's own precision, named: the budget's file, not a second table
    args = train_bench.build_parser().parse_args(["--precision", "auto"])
    assert train_bench.results_stem(args).name == "train_bench-full"


def _summary(*variants: tuple[str, int, float]) -> list[dict]:
    return [{"model_type": m, "seeds": n, "accuracy_median": a} for m, n, a in variants]


def test_the_best_of_each_kind_is_chosen_among_the_variants_with_most_seeds():
    summary = _summary(
        ("batch_norm", 3, 0.942), ("cnn", 1, 0.950), ("dropout", 3, 0.941), ("pytorch", 3, 0.9)
    )
    assert train_bench.best_variants(summary) == {"tfjob": "batch_norm", "pytorchjob": "pytorch"}
    summary[1]["seeds"] = 3  # cnn measured as often: now it wins
    assert train_bench.best_variants(summary)["tfjob"] == "cnn"
    assert train_bench.best_variants(_summary(("pytorch", 2, 0.9))) == {"pytorchjob": "pytorch"}


def test_a_former_best_loses_its_scaling_rows(caplog):
    scaling = [
        {"model_type": m, "batch_size_per_replica": b}
        for m, b in (("batch_norm", 64), ("cnn", 64), ("pytorch", 64), ("batch_norm", 512))
    ]
    best = {"tfjob": "cnn", "pytorchjob": "pytorch"}
    kept = train_bench.scaling_of_the_best(scaling, best)
    assert [s["model_type"] for s in kept] == ["cnn", "pytorch"]
    assert "scaling rows of batch_norm dropped" in caplog.text
    assert train_bench.scaling_of_the_best(kept, best) == kept


def _scaling(model_type: str, batch: int, *runs) -> dict:
    """A scaling row; ``runs``: its pairs' efficiencies (none: a row of one pair, as before
    --scaling-repeats), each pair of 90 images/s with 2 replicas."""
    row = {
        "model_type": model_type,
        "batch_size_per_replica": batch,
        "precision": "float32",
        "two_workers_images_per_second": 90,
        "limit_images_per_second": 100,
        "efficiency": 0.9,
    }
    if not runs:
        return row
    pairs = {"two_workers_runs": [90] * len(runs), "efficiency_runs": list(runs)}
    pairs["limit_runs"] = [90 / r if isinstance(r, float) and r > 0 else 100 for r in runs]
    return {**row, "repeats": len(runs), **pairs}


def test_a_scaling_row_is_the_median_of_its_pairs(monkeypatch):
    """Each pair is a 2-replica run and its limit; the row's efficiency is the median of the
    pairs' ratios (here 0.8), not the ratio of the medians (90 / 110)."""
    pairs = iter([(80.0, 100.0, "float32"), (90.0, 200.0, "float32"), (95.0, 110.0, "float32")])
    calls = []

    def fake_pair(model_type, batch, precision, data_dir):
        calls.append((model_type, batch, precision))
        return next(pairs)

    monkeypatch.setattr(train_bench, "scaling_pair", fake_pair)
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        train_bench.scaling_row("batch_norm", 512, "auto", None, repeats=0)
    row = train_bench.scaling_row("batch_norm", 512, "auto", None, repeats=3)
    assert calls == [("batch_norm", 512, "auto")] * 3
    assert (row["two_workers_images_per_second"], row["limit_images_per_second"]) == (90, 110)
    assert row["efficiency"] == 0.8 and row["efficiency_runs"] == [0.8, 0.45, 0.864]
    assert (row["repeats"], row["two_workers_runs"]) == (3, [80, 90, 95])
    assert row["limit_runs"] == [100, 200, 110]
    result = {"rows": [], "summary": [], "scaling": [row], "reference": None}
    result["meta"] = {"cpu": {"model": "x", "cores": 2, "flags": [], "native_bfloat16": False}}
    result["meta"] |= {"date": "2026-12-04", "budget": "full"}
    md = train_bench.to_markdown(result)
    assert "| batch_norm | 512 | float32 | 90 | 110 | 80% (3: 45%-86%) |" in md


def test_resume_measures_again_the_scaling_rows_of_fewer_pairs(tmp_path, monkeypatch):
    """A kept row of one pair (a table from before --scaling-repeats) is measured again and
    replaced where it stood; a row of enough pairs is kept."""
    path = _saved(tmp_path)
    saved = json.loads(path.read_text())
    saved["scaling"] = [_scaling("batch_norm", 64), _scaling("batch_norm", 512, 0.8, 0.9)]
    path.write_text(json.dumps(saved))
    measured = []

    def fake_scaling_row(model_type, batch, precision, data_dir, repeats):
        measured.append((model_type, batch, repeats))
        return {**_scaling(model_type, batch, *[0.7] * repeats), "efficiency": 0.7}

    monkeypatch.setattr(train_bench, "scaling_row", fake_scaling_row)
    monkeypatch.setattr(
        "training.data.load_numpy", lambda split, d=None: (np.zeros((2, 28, 28, 1)), np.zeros(2))
    )
    monkeypatch.setattr("training.data.encode_images", lambda images, fmt: [b"", b""])
    argv = ["--model-types", "batch_norm", "--seeds", "1", "--scaling-batches", "64", "512"]
    argv += ["--results-dir", str(tmp_path), "--resume", "--scaling-repeats", "2"]
    assert train_bench.main(train_bench.build_parser().parse_args(argv)) == 0
    assert measured == [("batch_norm", 64, 2)]
    scaling = json.loads(path.read_text())["scaling"]
    assert [(s["batch_size_per_replica"], s["efficiency"]) for s in scaling] == [
        (64, 0.7),
        (512, 0.9),
    ]


def test_a_write_that_measured_nothing_keeps_the_date_and_load(tmp_path):
    """Only a measurement dates the table: writing a resumed table again (the summary, a
    dropped scaling row) keeps its meta.date and load average; a new run sets today's."""
    path = _saved(tmp_path)
    result = train_bench.resumed(path, "full")
    result["meta"]["load_average_1m"] = 9.99
    args = train_bench.build_parser().parse_args(["--results-dir", str(tmp_path)])
    budget = train_bench.budget_of("full")
    train_bench.write(result, args, budget, measured=False)
    meta = json.loads(path.read_text())["meta"]
    assert (meta["date"], meta["load_average_1m"], meta["dates"]) == (
        "2026-12-01",
        9.99,
        ["2026-12-01"],
    )
    train_bench.write(result, args, budget)
    meta = json.loads(path.read_text())["meta"]
    assert meta["date"] != "2026-12-01" and meta["load_average_1m"] != 9.99
    assert meta["dates"] == ["2026-12-01", meta["date"]]
