"""Run one training job as N local processes: the TFJob or the PyTorchJob, on one machine.

Picks free loopback ports, gives every process the environment the Kubeflow training operator
would inject, streams each process's output prefixed with its replica name, and fails fast: as
soon as one replica exits non-zero the others are terminated and :class:`LaunchError` says
which replica failed and how.

* ``--job tfjob`` (default): ``TF_CONFIG`` with ``worker`` replicas (optionally one ``chief``),
  running ``python -m training.train``;
* ``--job pytorchjob``: one ``master`` (rank 0) and ``N - 1`` ``worker`` replicas with
  ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK`` (:mod:`training.pytorchjob`),
  running ``python -m training.torch_train``.

    python -m training.launcher --num-workers 2 --name cnn -- \
        --model-type cnn --epochs 2 --saved-model-dir work/candidates/cnn --checkpoint-dir work/ckpt

Everything after ``--`` is passed unchanged to the trainer, the same arguments the job
manifests pass.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import threading
import time

from fmnist_common import free_ports
from fmnist_common.cli import ConfigError, number, run_cli
from training.pytorchjob import make_dist_env
from training.tf_config import make_tf_config

TAIL_LINES = 20
JOBS = {"tfjob": "training.train", "pytorchjob": "training.torch_train"}  # job -> trainer


class LaunchError(RuntimeError):
    """A replica failed (or the job timed out); the message names it and quotes its output."""


def cluster_spec(num_workers: int, with_chief: bool = False) -> dict[str, list[str]]:
    """Loopback cluster: ``{"worker": [...]}`` or ``{"chief": [one], "worker": [...]}``.

    ``num_workers`` counts all training replicas (the chief included when ``with_chief``).

    Raises:
        ValueError: ``num_workers < 1`` or a chief with fewer than 2 replicas requested.
    """
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1")
    if with_chief and num_workers < 2:
        raise ValueError("a chief cluster needs at least 2 replicas (chief + 1 worker)")
    addrs = [f"127.0.0.1:{p}" for p in free_ports(num_workers)]
    if with_chief:
        return {"chief": addrs[:1], "worker": addrs[1:]}
    return {"worker": addrs}


def threads_per_replica(num_replicas: int) -> int:
    """Intra-op threads for each of ``num_replicas`` processes sharing this machine's cores
    (at least 1); set as ``TF_NUM_INTRAOP_THREADS`` (TensorFlow) and ``OMP_NUM_THREADS``
    (torch) unless the environment sets them: without it each torch replica takes every core."""
    return max(1, (os.cpu_count() or 1) // max(1, num_replicas))


def thread_env(num_replicas: int) -> dict[str, str]:
    """The thread settings every local replica gets unless its environment sets them: for each
    of ``num_replicas`` processes sharing this machine, ``TF_NUM_INTRAOP_THREADS`` and
    ``OMP_NUM_THREADS`` = :func:`threads_per_replica` (the trainers' ``--intra-op-threads``
    default; ``training.train`` then sets the inter-op pool to ``max(2, intra)``). The cluster's
    replicas take the same two values from their CPU limit (``resourceFieldRef``,
    base/ml/pipeline/workflowtemplate.yaml)."""
    each = str(threads_per_replica(num_replicas))
    return {"TF_NUM_INTRAOP_THREADS": each, "OMP_NUM_THREADS": each}


def _replicas(cluster: dict[str, list[str]]) -> list[tuple[str, int]]:
    return [(t, i) for t in ("chief", "worker") for i in range(len(cluster.get(t, [])))]


def replica_envs(job: str, num_workers: int, with_chief: bool = False) -> list[tuple[str, dict]]:
    """``(replica name, environment)`` of every replica of a local job, on fresh loopback ports.

    Args:
        job: ``tfjob`` (``TF_CONFIG``) or ``pytorchjob`` (``MASTER_ADDR``... for a ``master``
            and ``num_workers - 1`` workers, ranks as training-operator v1.9.4 gives them).
        num_workers: all training replicas (the chief or master included).
        with_chief: TFJob only: a ``chief`` + workers cluster.

    Raises:
        ValueError: an impossible job (no replica, a chief with 1 replica or for a PyTorchJob,
            an unknown job kind).
    """
    if job == "tfjob":
        cluster = cluster_spec(num_workers, with_chief)
        return [
            (f"{t}-{i}", {"TF_CONFIG": make_tf_config(cluster, t, i)})
            for t, i in _replicas(cluster)
        ]
    if job != "pytorchjob":
        raise ValueError(f"unknown job {job!r} (one of {sorted(JOBS)})")
    if with_chief:
        raise ValueError("a PyTorchJob has a master, not a chief")
    if num_workers < 1:
        raise ValueError("num_workers must be >= 1")
    (port,) = free_ports(1)
    names = ["master-0"] + [f"worker-{i}" for i in range(num_workers - 1)]
    return [
        (name, make_dist_env("127.0.0.1", port, num_workers, rank))
        for rank, name in enumerate(names)
    ]


def _raise_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def _pump(proc: subprocess.Popen, prefix: str, tail: collections.deque, out) -> None:
    for line in proc.stdout:  # type: ignore[union-attr]
        tail.append(line.rstrip("\n"))
        out.write(f"{prefix} {line}")
        out.flush()


def launch(
    train_args: list[str],
    num_workers: int = 2,
    with_chief: bool = False,
    name: str = "train",
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    out=None,
    module: str | None = None,
    job: str = "tfjob",
) -> float:
    """Start the replicas, stream their logs, wait for all of them.

    Args:
        train_args: arguments for ``python -m <module>``.
        num_workers: number of replicas (``TF_CONFIG`` cluster size).
        with_chief: use a ``chief`` + workers cluster instead of workers only.
        name: log prefix, e.g. the model type.
        timeout: seconds before the whole job is killed (``None``: no limit).
        env: extra environment for every replica.
        out: text stream for the prefixed logs (default ``sys.stdout``).
        module: the Python module each replica runs (default: the job's trainer, :data:`JOBS`).
        job: ``tfjob`` or ``pytorchjob`` (see :func:`replica_envs`).

    Returns:
        Wall time in seconds.

    Raises:
        LaunchError: a replica exited non-zero (the others are terminated) or the timeout hit.
    """
    out = out or sys.stdout
    replicas = replica_envs(job, num_workers, with_chief)
    module = module or JOBS[job]
    threads = thread_env(num_workers)
    procs: list[tuple[str, subprocess.Popen, collections.deque]] = []
    t0 = time.perf_counter()
    # SIGTERM (kubectl delete, timeout, CI cancel) must still stop the replicas: turn it into
    # SystemExit so the `finally` below runs. Only possible from the main thread.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        for replica, job_env in replicas:
            penv = dict(os.environ)
            penv.update(env or {})
            penv.update(job_env)
            penv = {**threads, **penv, "PYTHONUNBUFFERED": penv.get("PYTHONUNBUFFERED", "1")}
            proc = subprocess.Popen(
                [sys.executable, "-m", module, *train_args],
                env=penv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
            threading.Thread(
                target=_pump, args=(proc, f"[{name}/{replica}]", tail, out), daemon=True
            ).start()
            procs.append((replica, proc, tail))
        while True:
            codes = [(r, p.poll(), t) for r, p, t in procs]
            failed = [(r, c, t) for r, c, t in codes if c not in (None, 0)]
            if failed:
                replica, code, tail = failed[0]
                time.sleep(0.2)  # let the pump thread drain the last lines
                raise LaunchError(
                    f"{name}: replica {replica} exited with code {code}; "
                    f"stopping the other replicas. Last output:\n  " + "\n  ".join(tail)
                )
            if all(c == 0 for _, c, _ in codes):
                return time.perf_counter() - t0
            if timeout is not None and time.perf_counter() - t0 > timeout:
                raise LaunchError(f"{name}: timed out after {timeout:.0f} s")
            time.sleep(0.2)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def build_parser() -> argparse.ArgumentParser:
    """The launcher CLI: launcher options, then ``--`` and the training arguments."""
    p = argparse.ArgumentParser(
        prog="python -m training.launcher",
        description="Run a TFJob (`python -m training.train`, TF_CONFIG) or a PyTorchJob "
        "(`python -m training.torch_train`, MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK) as N "
        "local replicas.",
    )
    p.add_argument(
        "--job",
        choices=sorted(JOBS),
        default="tfjob",
        help="tfjob: TF_CONFIG workers running training.train; pytorchjob: a Master + workers "
        "(MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) running training.torch_train",
    )
    p.add_argument(
        "--num-workers", type=int, default=2, help="replicas, the chief or master included"
    )
    p.add_argument("--chief", action="store_true", help="TFJob: a chief + workers cluster")
    p.add_argument("--name", default="train", help="log prefix")
    p.add_argument("--timeout", type=number(float, 0, low_open=True), default=None, help="seconds")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then training arguments")
    return p


def main(args: argparse.Namespace) -> int:
    """Launch the replicas and wait; returns 0 when all finished.

    Raises:
        ConfigError: an impossible cluster (``--num-workers`` < 1, ``--chief`` with 1 or
            with ``--job pytorchjob``).
        LaunchError: a replica failed or the job timed out.
    """
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    try:
        replica_envs(args.job, args.num_workers, args.chief)  # validate before starting anything
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    seconds = launch(
        train_args, args.num_workers, args.chief, args.name, args.timeout, job=args.job
    )
    print(f"launcher: all replicas finished in {seconds:.1f} s")
    return 0


def cli(argv: list[str] | None = None) -> int:
    """Console entry point (``fmnist-launch``): exit 1 with one line on stderr on failure."""
    return run_cli(main, build_parser(), (LaunchError,), argv)


if __name__ == "__main__":
    sys.exit(cli())
