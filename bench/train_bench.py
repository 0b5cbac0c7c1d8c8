"""Training benchmark: accuracy per seed, time against a fixed reference, and scaling efficiency.

Every run is its job's trainer as 2 replicas on loopback, launched exactly as ``make demo`` and
the cluster run it: ``python -m training.train`` as a TFJob's 2 workers (``TF_CONFIG``,
``MultiWorkerMirroredStrategy``), ``python -m training.torch_train`` as a PyTorchJob's Master
and Worker (the operator's environment, DDP); each exported SavedModel is then evaluated on the
whole test split **as JPEG through its serving signature** (what selection and the server
compute).

    python bench/train_bench.py --budget full --seeds 1 2 3   # the budget's own precision
    python bench/train_bench.py --budget full --precision float32 --scaling-batches 64 512
    #   ^ 1 h 15 min on 2 cores (AVX-512); --results-dir DIR keeps bench/results/ as it is
    python bench/train_bench.py --budget quick --seeds 1 --no-reference --no-scaling

Three sections, all in one run so that their timings are comparable (machines of this kind
differ by up to 3x in speed; only ratios are targets):

* ``reference``: today's yardstick, the batch_norm variant and budget of 2026-11-29
  (``bench/reference_train.py``), one run; ``time_ratio`` = a variant's median wall time
  divided by the reference's.
* ``rows``: every variant x seed under ``--budget``; ``summary``: median, min and max test
  accuracy and median wall time per variant.
* ``scaling``: for each per-replica batch, 2-replica throughput against its no-communication
  limit, for the best TensorFlow variant and for the PyTorch one where benched: the same model
  and batch as 2 independent 1-replica jobs (no collective) with the launcher's threads per
  replica (1 each on 2 cores), at the same time; a pair's efficiency = 2-replica images/s / the
  two processes' images/s together (``two_workers_images_per_second`` counts both replicas,
  Master and Worker for PyTorch); a row is ``--scaling-repeats`` pairs (3), its
  ``efficiency`` their median.

Writes ``bench/results/train_bench-<budget>.json`` (``train_bench-<budget>-<precision>.json``
where ``--precision`` differs from the budget's) and a markdown table beside it after every
run. Timings are reported, never asserted. ``--resume`` goes on from that file (same budget,
precision, trainer defaults and networks, CPU model and flags, else it refuses): the runs it
holds are kept, not repeated, so a table of several hours can be measured in parts (each
part's dates are recorded); without ``--resume`` an existing file is refused unless
``--overwrite`` says to start a new table.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fit_teardown import LogTee, teardowns  # bench/, the script's own folder (sys.path[0])

from fmnist_common import CANDIDATES, free_ports
from fmnist_common.cli import options_argv, positive_int, run_cli
from fmnist_pipeline.run import BUDGET_NAMES, budget_of, job_of, train_args
from training.data import SPLIT_SIZES
from training.launcher import JOBS, LaunchError, launch, thread_env
from training.precision import PRECISION_CHOICES, cpu_description
from training.pytorchjob import make_dist_env
from training.select import evaluate_candidate

log = logging.getLogger("bench")
BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
SCALING_EPOCHS = 3  # the first epoch traces and sets up the ring; the others are timed
# Images per timed epoch (both workers together): at least 20,480 and at least 60 steps, so
# that per-epoch costs stay small against the steps at every batch, at most the training split
# (which is 58 steps of 512 per replica).
SCALING_MIN_EXAMPLES, SCALING_MIN_STEPS = 20_480, 60
# 2-replica/limit pairs per scaling row (--scaling-repeats): on an idle machine the pairs of
# one row differed by up to 14 points (bench/results/2026-12-04-32-epochs/); the row gives the
# median of its pairs
SCALING_REPEATS = 3


def history_of(saved: Path) -> dict:
    """The ``training_history.json`` that the chief wrote beside its export."""
    return json.loads((saved / "training_history.json").read_text())


def steady_ips(hist: dict) -> float:
    """Median training images/s over the epochs after the first (tracing, ring set-up)."""
    ips = hist["history"]["images_per_second"]
    return statistics.median(ips[1:] or ips)


def bench_one(model_type, budget, seed, data_dir, encoded, labels, reference=False) -> dict:
    """Train one variant with 2 replicas and evaluate it on ``encoded`` images.

    Args:
        budget: a budget dict (:func:`fmnist_pipeline.run.budget_of`).
        encoded: the whole test split as JPEG bytes; labels: ``int64 [N]``.
        reference: run ``bench/reference_train.py`` (the fixed yardstick) instead.

    Returns:
        A result row (dict: wall and fit seconds, steady images/s, test accuracy and loss).

    Raises:
        LaunchError: a replica failed.
    """
    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        work = Path(tmp)
        args = [*train_args(model_type, work, "bench", budget, data_dir), "--seed", str(seed)]
        env, module = None, None  # the job's trainer (training.launcher.JOBS)
        if reference:
            from reference_train import REFERENCE_OPTIONS

            args += options_argv(REFERENCE_OPTIONS)  # later options win in argparse
            env = {
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(BENCH), os.environ.get("PYTHONPATH")])
                )
            }
            module = "reference_train"
        tee = LogTee()
        job = "tfjob" if reference else job_of(model_type)
        wall = launch(
            args, num_workers=2, name=model_type, env=env, module=module, out=tee, job=job
        )
        saved = work / "candidates" / model_type
        hist = history_of(saved)
        metrics = evaluate_candidate(saved, encoded, labels, batch_size=500)
    return {
        "model_type": "reference" if reference else model_type,
        "seed": seed,
        "epochs": hist["epochs"],
        "precision": hist["precision"],  # as the trainer resolved it (--precision auto)
        "global_batch_size": hist["global_batch_size"],
        "wall_seconds": round(wall, 1),
        "fit_seconds": round(hist["train_seconds"], 1),
        "images_per_second": round(steady_ips(hist)),
        # fit()'s return after its last epoch, the slower replica (bench/fit_teardown.py); the
        # PyTorch trainer has no fit()
        "teardown_seconds": (
            round(max(teardowns(tee.lines).values()), 2) if job == "tfjob" else None
        ),
        "test_accuracy": round(metrics["accuracy"], 4),
        "test_loss": round(metrics["loss"], 4),
    }


def scaling_row(
    model_type: str,
    batch: int,
    precision: str,
    data_dir: str | None,
    repeats: int = SCALING_REPEATS,
) -> dict:
    """2-replica throughput at ``batch`` per replica against the no-communication limit,
    measured ``repeats`` times (:func:`scaling_pair`), each 2-replica run followed at once by
    its limit run, so that slow drifts of the machine (seen: the same 2-replica run at 4,131 and
    4,999 images/s minutes apart) fall alike on both halves of a pair.

    Returns:
        The row: the medians of the 2-replica and of the limit images/s, ``efficiency`` the
        median of the pairs' ratios (so not always the ratio of the two medians), ``repeats``,
        and every pair's values (``two_workers_runs``, ``limit_runs``, ``efficiency_runs``).

    Raises:
        ValueError: ``repeats`` is below 1.
        LaunchError: a replica failed, or a run reported no images/s.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    pairs = [scaling_pair(model_type, batch, precision, data_dir) for _ in range(repeats)]
    two, limit = [p[0] for p in pairs], [p[1] for p in pairs]
    ratios = [t / lim for t, lim in zip(two, limit, strict=True)]
    return {
        "model_type": model_type,
        "batch_size_per_replica": batch,
        "precision": pairs[0][2],  # as the trainer resolved it (--precision auto)
        "two_workers_images_per_second": round(statistics.median(two)),
        "limit_images_per_second": round(statistics.median(limit)),
        "efficiency": round(statistics.median(ratios), 3),
        "repeats": repeats,
        "two_workers_runs": [round(t) for t in two],
        "limit_runs": [round(lim) for lim in limit],
        "efficiency_runs": [round(r, 3) for r in ratios],
    }


def scaling_pair(
    model_type: str, batch: int, precision: str, data_dir: str | None
) -> tuple[float, float, str]:
    """One 2-replica run and its no-communication limit: ``(2-replica images/s, limit
    images/s, the precision the trainer resolved)``.

    Both train ``model_type`` with its job's trainer (:func:`job_of`: the TFJob's
    ``training.train``, the PyTorchJob's ``training.torch_train``) for :data:`SCALING_EPOCHS`
    epochs (no validation) of :data:`SCALING_MIN_EXAMPLES` images or :data:`SCALING_MIN_STEPS`
    steps, whichever is more (at most the training split), and report the median images/s of
    the epochs after the first. The limit runs 2 processes at the same time, each a job of its
    own with one replica (TFJob: ``TF_CONFIG`` unset, a one-replica strategy; PyTorchJob: world
    size 1, so DDP has no peer), with the intra-op threads the launcher gives each of 2
    replicas (:func:`training.launcher.thread_env`); their images/s are added.

    Raises:
        LaunchError: a replica failed.
    """
    examples = min(SPLIT_SIZES["train"], max(SCALING_MIN_EXAMPLES, SCALING_MIN_STEPS * batch * 2))
    budget = {
        "epochs": SCALING_EPOCHS,
        "train_examples": examples,  # both workers' shards together
        "validation_examples": 0,
        "batch_size_per_replica": batch,
        "learning_rate": 0.001,
        "precision": precision,
    }
    job = job_of(model_type)
    with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
        work = Path(tmp)
        argv = train_args(model_type, work / "mw", "mw", budget, data_dir)
        launch(argv, 2, name="2-replicas", job=job)
        hist = history_of(work / "mw" / "candidates" / model_type)
        two_replicas, resolved = steady_ips(hist), hist["precision"]  # --precision auto's pick
        solo = {**budget, "train_examples": examples // 2}
        procs = []
        ports = free_ports(2)  # the PyTorchJobs' MASTER_PORTs: two at once, never the same
        try:
            for i in range(2):
                env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
                env = {**thread_env(2), **env}  # each of 2 processes, as launch() gives them
                if job == "pytorchjob":  # world size 1: DDP has no peer
                    env.update(make_dist_env("127.0.0.1", ports[i], 1, 0))
                argv = train_args(model_type, work / f"p{i}", f"p{i}", solo, data_dir)
                with open(work / f"p{i}.log", "w") as out:
                    procs.append(
                        subprocess.Popen(
                            [sys.executable, "-m", JOBS[job], *argv],
                            env=env,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                        )
                    )
            for i, proc in enumerate(procs):
                if proc.wait():
                    tail = (work / f"p{i}.log").read_text()[-2000:]
                    raise LaunchError(f"limit process exited {proc.returncode}: {tail}")
        finally:
            for proc in procs:  # a failure must not leave the other one running
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        limit = sum(
            steady_ips(history_of(work / f"p{i}" / "candidates" / model_type)) for i in range(2)
        )
    if not (two_replicas > 0 and limit > 0):
        raise LaunchError(f"no images/s measured: {two_replicas} with 2 replicas, limit {limit}")
    return two_replicas, limit, resolved


def summarize(rows: list[dict], reference: dict | None) -> list[dict]:
    """Per variant: median/min/max test accuracy over seeds, median wall time, and the ratio of
    that wall time to the reference's (``None`` without a reference row)."""
    out = []
    for model_type in dict.fromkeys(r["model_type"] for r in rows):
        mine = [r for r in rows if r["model_type"] == model_type]
        accs = [r["test_accuracy"] for r in mine]
        wall = statistics.median(r["wall_seconds"] for r in mine)
        out.append(
            {
                "model_type": model_type,
                "seeds": len(mine),
                "accuracy_median": round(statistics.median(accs), 4),
                "accuracy_min": min(accs),
                "accuracy_max": max(accs),
                "wall_seconds_median": round(wall, 1),
                "time_ratio": round(wall / reference["wall_seconds"], 2) if reference else None,
            }
        )
    return out


def to_markdown(result: dict) -> str:
    """README-ready tables of a result (reference, summary, runs, scaling)."""
    lines = [
        "| model | seeds | test accuracy median (min-max) | wall s median | x reference |",
        "|---|---|---|---|---|",
    ]
    ref = result.get("reference")
    if ref:
        lines.append(
            f"| reference (2026-11-29 batch_norm) | 1 | {ref['test_accuracy']:.4f} | "
            f"{ref['wall_seconds']} | 1.00 |"
        )
    for s in result["summary"]:
        ratio = f"{s['time_ratio']:.2f}" if s["time_ratio"] is not None else "-"
        lines.append(
            f"| {s['model_type']} | {s['seeds']} | {s['accuracy_median']:.4f} "
            f"({s['accuracy_min']:.4f}-{s['accuracy_max']:.4f}) | "
            f"{s['wall_seconds_median']} | {ratio} |"
        )
    lines += [
        "",
        "| model | seed | precision | epochs | global batch | wall s | fit s | teardown s | "
        "images/s | accuracy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ([ref] if ref else []) + result["rows"]:
        lines.append(
            f"| {r['model_type']} | {r['seed']} | {r['precision']} | {r['epochs']} | "
            f"{r['global_batch_size']} | {r['wall_seconds']} | {r['fit_seconds']} | "
            f"{r['teardown_seconds'] if r['teardown_seconds'] is not None else '-'} | "
            f"{r['images_per_second']} | {r['test_accuracy']:.4f} |"
        )
    if result.get("scaling"):
        lines += [
            "",
            "| model | per-replica batch | precision | 2 replicas img/s | limit img/s "
            "| efficiency (pairs: min-max) |",
            "|---|---|---|---|---|---|",
        ]
        for s in result["scaling"]:
            runs = s.get("efficiency_runs") or []  # rows measured before 2026-12-04 13:35: one pair
            spread = f" ({len(runs)}: {min(runs):.0%}-{max(runs):.0%})" if len(runs) > 1 else ""
            lines.append(
                f"| {s['model_type']} | {s['batch_size_per_replica']} | {s['precision']} | "
                f"{s['two_workers_images_per_second']} | {s['limit_images_per_second']} | "
                f"{s['efficiency']:.0%}{spread} |"
            )
    meta, cpu = result["meta"], result["meta"]["cpu"]
    lines += [
        "",
        f"CPU: {cpu['model']}, {cpu['cores']} cores, flags {' '.join(cpu['flags'])} "
        f"(native bfloat16: {'yes' if cpu['native_bfloat16'] else 'no'}); precision "
        f"{', '.join(sorted({r['precision'] for r in result['rows']})) or '-'}; "
        f"{', '.join(meta.get('dates') or [meta['date']])}, budget {meta['budget']}",
    ]
    return "\n".join(lines) + "\n"


class ResumeError(RuntimeError):
    """The results file to resume is unreadable or from another budget, recipe or CPU, or a new
    run would overwrite it."""


# The fields every stored run must have, with their types (what summarize and to_markdown read).
RUN_FIELDS = {
    "model_type": str,
    "seed": int,
    "epochs": int,
    "precision": str,
    "global_batch_size": int,
    "wall_seconds": (int, float),
    "fit_seconds": (int, float),
    "images_per_second": (int, float),
    "teardown_seconds": (int, float, type(None)),
    "test_accuracy": (int, float),
    "test_loss": (int, float),
}
SCALING_FIELDS = {
    "model_type": str,
    "batch_size_per_replica": int,
    "precision": str,
    "two_workers_images_per_second": (int, float),
    "limit_images_per_second": (int, float),
    "efficiency": (int, float),
}


def _check_fields(row: object, fields: dict, what: str) -> None:
    """Raise ValueError unless ``row`` is a dict with every field of ``fields`` of its type
    (``bool`` is not taken for a number)."""
    if not isinstance(row, dict):
        raise ValueError(f"{what} is not an object: {row!r}")
    for key, kind in fields.items():
        value = row.get(key, KeyError)
        if value is KeyError or isinstance(value, bool) or not isinstance(value, kind):
            raise ValueError(f"{what} has no valid {key!r}: {value!r}")


PAIR_FIELDS = ("two_workers_runs", "limit_runs", "efficiency_runs")


def _check_pairs(row: dict) -> None:
    """Raise ValueError unless a scaling row's images/s and efficiency are finite and positive
    and its optional pairs (measured since 2026-12-04) are consistent: ``repeats`` a positive
    count, each of :data:`PAIR_FIELDS` a list of that many finite positive numbers."""
    for key in ("two_workers_images_per_second", "limit_images_per_second", "efficiency"):
        if not _positive(row[key]):
            raise ValueError(f"a scaling row's {key} is not a positive number: {row[key]!r}")
    if "repeats" not in row and not any(key in row for key in PAIR_FIELDS):
        return  # one pair, before --scaling-repeats
    n = row.get("repeats")
    if not (isinstance(n, int) and _positive(n)):
        raise ValueError(f"a scaling row has no valid repeats: {n!r}")
    for key in PAIR_FIELDS:
        runs = row.get(key)
        if not (isinstance(runs, list) and len(runs) == n and all(map(_positive, runs))):
            raise ValueError(f"a scaling row of {n} pairs has no valid {key}: {runs!r}")


def _positive(value: object) -> bool:
    """A finite number above 0 (``bool`` is not taken for a number)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return ok and math.isfinite(value) and value > 0


BUDGET_KEYS = (
    "epochs",
    "train_examples",
    "batch_size_per_replica",
    "learning_rate",
    "precision",
    "validation_examples",  # validated every epoch: inside every wall and epoch time
)


def budget_meta(budget: dict) -> dict:
    """The budget's parameters as a results file records them (``meta.budget_params``)."""
    return {key: budget[key] for key in BUDGET_KEYS}


def _flat(tree, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` as ``{"a.b": 1}`` (lists are values)."""
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}{key}.").items()}


# trainer options that tune the runtime only (intra_op_threads: the launcher sets the threads
# from the cores, which the CPU check compares; its default follows $TF_NUM_INTRAOP_THREADS)
RUNTIME_ONLY = ("intra_op_threads", "collective_timeout", "profile_batches")


def network_description(model) -> str:
    """A text that changes with a network's architecture, not with its weights or with the
    names a process gives its layers: each Keras layer's class and configuration (filters,
    kernels, activations, dropout rates, batch-norm momentum, initialisers...), or a torch
    module's ``repr`` (its layers and their arguments; an activation called in ``forward()``
    is not in it)."""
    if hasattr(model, "get_config") and hasattr(model, "layers"):  # Keras
        layers = [
            [type(layer).__name__, {k: v for k, v in layer.get_config().items() if k != "name"}]
            for layer in model.layers
        ]
        return json.dumps(layers, sort_keys=True, default=str)
    return repr(model)


@functools.cache
def trainer_recipe() -> dict:
    """What shapes a run besides the budget, as a results file records it
    (``meta.trainer_recipe``; ``--resume`` compares it): per trainer module, every option that
    the benchmark leaves at its default (all but those :func:`train_args` and :func:`bench_one`
    pass, and :data:`RUNTIME_ONLY`), and each candidate's network: its trainable parameters and
    a digest of :func:`network_description` (a changed architecture, such as 2026-12-04's stem).
    A default changed since a table was measured (the same day's ``--augment``) would otherwise
    mix two recipes in one table. Not seen: code inside the trainers (the augmentation's, the
    optimizer's constants), which a table's dates and the git history tell.

    Returns:
        ``{"defaults": {module: {dest: value}}, "parameters": {model_type: int},
        "networks": {model_type: sha256 hex}}``, JSON values (tuples as lists), so that a file
        read back compares equal.
    """
    import hashlib

    from training import torch_train
    from training import train as tf_train
    from training.models import build_model
    from training.precision import built_in_float32

    try:
        from training.torch_model import build_torch_model
    except ImportError:  # a venv without the torch extra: the PyTorch variant is left out
        build_torch_model = None

    defaults = {}
    for module, model_type in ((tf_train, "cnn"), (torch_train, "pytorch")):
        passed = train_args(model_type, Path("work"), "id", budget_of("smoke"), "data")
        passed += ["--seed", "1"]
        parser = module.build_parser()
        parsed = vars(parser.parse_args(passed))
        given = {a.dest for a in parser._actions if set(a.option_strings) & set(passed)}
        given |= set(RUNTIME_ONLY)
        defaults[module.__name__] = {k: v for k, v in sorted(parsed.items()) if k not in given}
    nets = {  # Keras layer configs record the dtype policy they were built under
        m: build_torch_model() if job_of(m) == "pytorchjob" else built_in_float32(build_model, m)
        for m in CANDIDATES
        if job_of(m) != "pytorchjob" or build_torch_model is not None
    }
    parameters = {
        m: int(
            sum(p.numel() for p in net.parameters() if p.requires_grad)
            if job_of(m) == "pytorchjob"
            else sum(math.prod(w.shape) for w in net.trainable_weights)
        )
        for m, net in nets.items()
    }
    networks = {
        m: hashlib.sha256(network_description(net).encode()).hexdigest() for m, net in nets.items()
    }
    recipe = {"defaults": defaults, "parameters": parameters, "networks": networks}
    return json.loads(json.dumps(recipe, default=str))


def best_variants(summary: list[dict]) -> dict[str, str]:
    """The best variant per job kind (``tfjob``, ``pytorchjob``: :func:`job_of`), by median
    test accuracy among that kind's variants with the most seeds (a variant with fewer seeds
    cannot win on a luckier median); ties keep the first in the summary's order."""
    best = {}
    for job in ("tfjob", "pytorchjob"):
        mine = [s for s in summary if job_of(s["model_type"]) == job]
        if mine:
            most = max(s["seeds"] for s in mine)
            full = [s for s in mine if s["seeds"] == most]
            best[job] = max(full, key=lambda s: s["accuracy_median"])["model_type"]
    return best


def scaling_of_the_best(scaling: list[dict], best: dict[str, str]) -> list[dict]:
    """The scaling rows of today's best variants only: when a resumed table's new runs make
    another variant the best of its kind, the former best's rows go (the section measures the
    best of each kind, :func:`main`), with a log line."""
    kept = [s for s in scaling if best.get(job_of(s["model_type"])) == s["model_type"]]
    for gone in sorted({s["model_type"] for s in scaling} - {s["model_type"] for s in kept}):
        log.warning("scaling rows of %s dropped: no longer the best of its kind", gone)
    return kept


def scaling_key(row: dict) -> tuple[str, int]:
    """What a scaling row measures: ``(model type, per-replica batch)``; one row per key."""
    return row["model_type"], row["batch_size_per_replica"]


def replace_scaling_row(scaling: list[dict], row: dict) -> list[dict]:
    """``scaling`` with ``row`` in the place of the row of its :func:`scaling_key`, or at the
    end where there is none."""
    key = scaling_key(row)
    if all(scaling_key(s) != key for s in scaling):
        return [*scaling, row]
    return [row if scaling_key(s) == key else s for s in scaling]


def bench_budget(name: str, precision: str | None = None) -> dict:
    """The budget the runs use: :func:`budget_of` ``name``, its precision replaced by
    ``precision`` where one is given (``--precision``: the float32 recipe measured on a CPU
    where the budget's ``auto`` would pick bfloat16)."""
    budget = budget_of(name)
    return {**budget, "precision": precision} if precision else budget


def resumed(path: Path, budget: str, precision: str | None = None) -> dict:
    """The result in ``path`` to go on from: ``{"reference", "rows", "scaling", "meta"}``;
    ``precision``: ``--precision``, part of the budget compared (:func:`bench_budget`).

    Raises:
        ResumeError: ``path`` is not a results file of this benchmark (a missing field, or one of
            the wrong type, in any run: :data:`RUN_FIELDS`, :data:`SCALING_FIELDS`; a model type
            that is not a candidate; a reference wall time that is not positive; a scaling
            row's numbers or pairs not as :func:`_check_pairs` wants them; two scaling rows of
            one model and batch), or it was
            measured under another budget (its name, its recorded parameters, or a run's epochs
            and global batch differ from today's :func:`budget_of`), with other trainer
            defaults or networks (its ``meta.trainer_recipe``, where recorded, differs from
            :func:`trainer_recipe`'s) or on another CPU (model name, cores or vector flags
            differ from :func:`training.precision.cpu_description`'s): its timings or
            accuracies would not compare.
    """
    try:
        saved = json.loads(path.read_text())
        meta, cpu = saved["meta"], saved["meta"]["cpu"]
        result = {"reference": saved["reference"], "rows": saved["rows"]}
        result["scaling"] = saved["scaling"]
        if not (isinstance(result["rows"], list) and isinstance(result["scaling"], list)):
            raise ValueError("rows and scaling must be lists")
        if result["reference"] is not None:
            _check_fields(result["reference"], RUN_FIELDS, "the reference")
            if not result["reference"]["wall_seconds"] > 0:
                raise ValueError("the reference's wall_seconds must be positive")
        for row in result["rows"]:
            _check_fields(row, RUN_FIELDS, "a run")
        for row in result["scaling"]:
            _check_fields(row, SCALING_FIELDS, "a scaling row")
            _check_pairs(row)
        for row in result["rows"] + result["scaling"]:
            if row["model_type"] not in CANDIDATES:
                raise ValueError(f"unknown model type {row['model_type']!r}")
        keys = [scaling_key(s) for s in result["scaling"]]
        if len(set(keys)) != len(keys):
            raise ValueError(f"two scaling rows of one model and batch: {keys}")
        # runs of a file written before --resume existed keep their date
        dates = meta.get("dates") or [meta["date"]]
        if not (isinstance(dates, list) and all(isinstance(d, str) for d in dates)):
            raise ValueError(f"meta.dates is not a list of dates: {dates!r}")
        for key in ("budget_params", "trainer_recipe"):  # absent in older files, else dicts
            if not isinstance(meta.get(key, {}), dict):
                raise ValueError(f"meta.{key} is not an object: {meta[key]!r}")
        result["meta"] = {**meta, "dates": dates}
        budget_held, cpu = meta["budget"], {key: cpu[key] for key in ("model", "cores", "flags")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ResumeError(f"cannot resume from {path}: not a results file ({err!r})") from err
    if budget_held != budget:
        raise ResumeError(f"cannot resume: {path} holds budget {budget_held!r}, not {budget!r}")
    today = bench_budget(budget, precision)
    held = meta.get("budget_params")  # absent in files written before it was recorded
    # a key that a file of an older version did not record is not compared
    if held is not None and held.get("precision", today["precision"]) != today["precision"]:
        was = held["precision"]
        home = stem_for(path.parent, budget, was).with_suffix(".json")
        hint = "" if home == path else f"move it to {home.name} and "
        raise ResumeError(
            f"cannot resume: {path} was measured with --precision {was}, this run has "
            f"{today['precision']}; {hint}repeat --precision {was} to go on from it"
        )
    if held is not None and held != {k: v for k, v in budget_meta(today).items() if k in held}:
        raise ResumeError(
            f"cannot resume: the {budget!r} budget changed since {path} was measured "
            f"({held!r}, now {budget_meta(today)!r}); start a new table with --overwrite"
        )
    recipe = meta.get("trainer_recipe")  # absent in files written before 2026-12-04 night
    if recipe is not None and _flat(recipe) != _flat(trainer_recipe()):
        was, now = _flat(recipe), _flat(trainer_recipe())
        changed = sorted(k for k in {*was, *now} if was.get(k, "-") != now.get(k, "-"))
        raise ResumeError(
            f"cannot resume: the trainers' defaults or networks changed since {path} was "
            f"measured ({', '.join(changed)}); start a new table with --overwrite"
        )
    # also catches a changed budget in files without budget_params (every run has 2 replicas)
    for row in result["rows"]:
        shape = (row["epochs"], row["global_batch_size"])
        if shape != (today["epochs"], 2 * today["batch_size_per_replica"]):
            raise ResumeError(
                f"cannot resume: {path} holds a {row['model_type']} run of {shape[0]} epochs x "
                f"{shape[1]} per step, the {budget!r} budget is now {today['epochs']} x "
                f"{2 * today['batch_size_per_replica']}; start a new table with --overwrite"
            )
    here = cpu_description()
    for key in ("model", "cores", "flags"):  # cores: the threads each replica gets
        if cpu[key] != here[key]:
            raise ResumeError(
                f"cannot resume: {path} was measured on another CPU ({key} "
                f"{cpu[key]!r}, here {here[key]!r}); start a new table with --overwrite"
            )
    return result


def build_parser() -> argparse.ArgumentParser:
    """Options: budget, model types, seeds, reference/scaling sections, data and results dirs."""
    p = argparse.ArgumentParser(prog="bench/train_bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--budget", choices=BUDGET_NAMES, default="full")
    p.add_argument("--model-types", nargs="+", choices=CANDIDATES, default=list(CANDIDATES))
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="skip the reference row (run with --budget full only)",
    )
    p.add_argument(
        "--no-scaling", dest="scaling", action="store_false", help="skip the efficiency section"
    )
    p.add_argument(
        "--scaling-batches",
        nargs="+",
        type=positive_int,
        default=None,
        help="per-replica batches for the efficiency section (default: 64 and every budget's)",
    )
    p.add_argument(
        "--scaling-repeats",
        type=positive_int,
        default=SCALING_REPEATS,
        help="2-replica/limit pairs per efficiency row, the row giving their median (with "
        "--resume, a kept row of fewer pairs, of the variants and batches this run measures, is "
        "measured again)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on from the results file of an earlier run (same budget, --precision and CPU): "
        "keep its runs, measure only the missing ones",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start a new table even where a results file of this budget exists (without "
        "--resume or --overwrite an existing file is refused, not replaced)",
    )
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default=None,
        help="the trainers' --precision in every run and scaling row (default: the budget's; "
        "float32 measures the float32 recipe where auto would pick bfloat16)",
    )
    p.add_argument("--data-dir", default=os.environ.get("TFDS_DATA_DIR"))
    p.add_argument("--results-dir", type=Path, default=RESULTS, help="default: bench/results")
    return p


def results_stem(args: argparse.Namespace) -> Path:
    """The JSON and markdown files without suffix: :func:`stem_for` the options."""
    return stem_for(args.results_dir, args.budget, args.precision)


def stem_for(results_dir: Path, budget: str, precision: str | None) -> Path:
    """``<results dir>/train_bench-<budget>``, ``-<precision>`` appended where ``precision``
    differs from the budget's own (a float32 table beside the budget's ``auto`` one, neither
    replacing the other)."""
    other = precision and precision != budget_of(budget)["precision"]
    return results_dir / f"train_bench-{budget}{f'-{precision}' if other else ''}"


def write(result: dict, args: argparse.Namespace, budget: dict, measured: bool = True) -> None:
    """Write the result so far (JSON and markdown): a failure late in an hour-long run keeps
    the rows measured before it. ``budget``: the budget the runs used (:func:`budget_of`,
    recorded as ``meta.budget_params``); ``measured``: a run was just added (today joins the
    dates and becomes ``meta.date``, with the load average now; a write that measured nothing
    keeps both from the result's meta)."""
    result["summary"] = summarize(result["rows"], result["reference"])
    today = time.strftime("%Y-%m-%d")
    before = result.get("meta", {})
    dates = {*before.get("dates", []), *([today] if measured else [])}
    # the date and load of the last measurement: a write that measured nothing keeps them
    last = {"date": today, "load_average_1m": round(os.getloadavg()[0], 2)}
    if not measured and "date" in before:
        last = {key: before.get(key) for key in last}
    result["meta"] = {
        "cpu": cpu_description(),  # model name, cores, the vector flags TF dispatches on
        **last,
        "dates": sorted(dates or {today}),  # the days its runs were measured on (--resume)
        "budget": args.budget,
        "budget_params": budget_meta(budget),  # --resume compares them
        "trainer_recipe": trainer_recipe(),  # and this
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = results_stem(args)
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(to_markdown(result))


def main(args: argparse.Namespace) -> int:
    """Run the benchmark, writing the results after every run; returns 0."""
    from training.data import encode_images, load_numpy

    sys.path.insert(0, str(BENCH))  # reference_train, whichever the working directory
    stem = results_stem(args)
    result: dict = {"reference": None, "rows": [], "scaling": []}
    if args.resume:  # refused before minutes of loading and encoding
        result = resumed(stem.with_suffix(".json"), args.budget, args.precision)
        log.info("resuming %s: %d runs kept", stem.with_suffix(".json"), len(result["rows"]))
    elif stem.with_suffix(".json").exists() and not args.overwrite:
        raise ResumeError(
            f"{stem.with_suffix('.json')} exists: --resume goes on from it, --overwrite "
            "starts a new table in its place"
        )
    images, labels = load_numpy("test", args.data_dir)
    encoded = encode_images(images, "jpeg")
    budget = bench_budget(args.budget, args.precision)
    done = {(r["model_type"], r["seed"]) for r in result["rows"]}
    want_reference = args.reference and args.budget == "full"  # the full budget's yardstick
    if want_reference and result["reference"] is None:
        result["reference"] = bench_one(
            "batch_norm", budget, 42, args.data_dir, encoded, labels, reference=True
        )
        log.info("%s", json.dumps(result["reference"]))
        write(result, args, budget)
    for model_type in args.model_types:
        for seed in args.seeds:
            if (model_type, seed) in done:
                continue
            row = bench_one(model_type, budget, seed, args.data_dir, encoded, labels)
            result["rows"].append(row)
            log.info("%s", json.dumps(row))
            write(result, args, budget)
    write(result, args, budget, measured=False)  # the summary, also when every run was resumed
    if args.scaling:
        batches = args.scaling_batches or sorted(
            {64, *(budget_of(b)["batch_size_per_replica"] for b in BUDGET_NAMES)}
        )
        # the best TensorFlow variant and the PyTorch one (DDP's efficiency), where benched
        best_of = best_variants(result["summary"])
        kept = scaling_of_the_best(result["scaling"], best_of)
        if kept != result["scaling"]:
            result["scaling"] = kept
            write(result, args, budget, measured=False)
        # a resumed row of fewer pairs than --scaling-repeats is measured again, and replaced
        scaled = {
            scaling_key(s) for s in result["scaling"] if s.get("repeats", 1) >= args.scaling_repeats
        }
        for best in best_of.values():
            for batch in batches:
                if (best, batch) in scaled:
                    continue
                row = scaling_row(
                    best, batch, budget["precision"], args.data_dir, args.scaling_repeats
                )
                result["scaling"] = replace_scaling_row(result["scaling"], row)
                log.info("%s", json.dumps(row))
                write(result, args, budget)
    print(to_markdown(result))
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``python bench/train_bench.py``); exit 1 when a replica fails or
    the dataset is missing."""
    return run_cli(main, build_parser(), (LaunchError, FileNotFoundError, ResumeError), argv)


if __name__ == "__main__":
    sys.exit(cli())
