"""Real 2-process PyTorch DDP runs of ``python -m training.torch_train`` over loopback (gloo),
on a slice of the real data, with the variables the Kubeflow training operator sets."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fmnist_common import LOOPBACK, free_ports
from training.pytorchjob import ENV_VARS, DistEnvError, parse_dist_env
from training.train import PEER_LOST_EXIT_CODE

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 240  # seconds for a whole 2-process run (about 30 s on 2 cores)
TAGS = {"loss", "accuracy", "val_loss", "val_accuracy", "lr", "images_per_second"}


def _env(data_dir, **dist) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env |= {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1", **dist}
    if data_dir:
        env["TFDS_DATA_DIR"] = data_dir
    return env


def _args(work: Path, run_id: str, epochs: int, train_examples: int = 512) -> list[str]:
    return [
        *("--epochs", str(epochs), "--train-examples", str(train_examples)),
        *("--validation-examples", "256", "--batch-size-per-replica", "32"),
        *("--saved-model-dir", str(work / "candidates" / "pytorch")),
        *("--checkpoint-dir", str(work / "checkpoints")),
        *("--tensorboard-dir", str(work / "tensorboard")),
        *("--run-id", run_id, "--precision", "float32", "--intra-op-threads", "1"),
    ]


def _start(work: Path, data_dir, args: list[str], world: int = 2) -> list[subprocess.Popen]:
    """One ``python -m training.torch_train`` per rank; each writes ``work/rank-R.log``."""
    (port,) = free_ports(1)
    procs = []
    for rank in range(world):
        env = _env(
            data_dir,
            MASTER_ADDR=LOOPBACK,
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world),
            RANK=str(rank),
        )
        out = open(work / f"rank-{rank}.log", "w")  # noqa: SIM115  (closed with the process)
        cmd = [sys.executable, "-m", "training.torch_train", *args]
        procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
        out.close()
    return procs


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _wait(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    """Exit codes; ``subprocess.TimeoutExpired`` (all killed) when not all are done in time."""
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in procs]
    finally:
        _kill(procs)


def _run(work: Path, data_dir, run_id: str, epochs: int) -> tuple[list[int], list[str]]:
    work.mkdir(parents=True, exist_ok=True)
    codes = _wait(_start(work, data_dir, _args(work, run_id, epochs)), RUN_TIMEOUT)
    return codes, [(work / f"rank-{r}.log").read_text() for r in range(2)]


def _checksums(text: str, when: str) -> list[str]:
    return re.findall(rf"params sha256 {when}: ([0-9a-f]+)", text)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, data_dir):
    """2 ranks, 2 epochs of 512 training images (8 steps of 2 x 32), run id ``r1``."""
    work = tmp_path_factory.mktemp("ddp")
    codes, logs = _run(work, data_dir, "r1", epochs=2)
    return work, codes, logs


def test_two_ranks_train_and_only_rank_0_exports(first_run):
    work, codes, logs = first_run
    assert codes == [0, 0], logs
    candidates = work / "candidates"
    assert [p.name for p in candidates.iterdir()] == ["pytorch"]  # no staging leftovers
    saved = candidates / "pytorch"
    assert (saved / "saved_model.pb").is_file()
    assert (saved / "torchscript" / "model.pt").is_file()
    history = json.loads((saved / "training_history.json").read_text())
    assert history["model_type"] == "pytorch" and history["run_id"] == "r1"
    assert history["replicas"] == 2
    assert history["global_batch_size"] == 64
    assert history["steps_per_epoch"] == 512 // 64
    assert history["mirror_average"] is True  # default augmentation has flips
    assert history["train_examples"] == 512
    curves = history["history"]
    assert set(curves) == TAGS | {"epoch_seconds"}
    assert all(len(v) == 2 for v in curves.values())
    assert curves["loss"][1] < curves["loss"][0]
    assert "rank 0 exported" in logs[0] and "exported" not in logs[1]
    assert re.search(r"epoch 2/2 - 8 steps .* images_per_second: ", logs[0])

    import torch

    ckpt = work / "checkpoints" / "pytorch" / "r1"
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch-001.pt", "epoch-002.pt"]
    state = torch.load(ckpt / "epoch-002.pt", weights_only=True)
    assert state["epoch"] == 2
    assert {"model", "optimizer", "scheduler"} <= set(state)
    # the trainer keeps weights (and so activations) in channels_last, oneDNN's layout
    conv = state["model"]["conv2.weight"]
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = (work / "tensorboard" / "pytorch" / "r1").glob("events.out.tfevents.*")
    tags = set(EventAccumulator(str(events)).Reload().Tags()["scalars"])
    assert tags == TAGS


def test_both_ranks_hold_identical_parameters(first_run):
    _, codes, logs = first_run
    assert codes == [0, 0], logs
    after_step = [_checksums(text, "after step 1") for text in logs]
    at_end = [_checksums(text, "at the end") for text in logs]
    assert len(after_step[0]) == 1 and after_step[0] == after_step[1]
    assert len(at_end[0]) == 1 and at_end[0] == at_end[1]
    assert after_step[0] != at_end[0]  # 15 more steps changed them


def test_same_run_id_resumes_from_the_last_checkpoint(first_run, tmp_path, data_dir):
    """A second run of ``r1`` (with a third epoch) starts from ``epoch-002.pt``, as a replica
    of the step's next attempt does (docs/training.md "Losing a pod"), instead of training
    from scratch."""
    work, codes, _ = first_run
    assert codes == [0, 0]
    again = tmp_path / "again"
    shutil.copytree(work / "checkpoints", again / "checkpoints")
    codes, logs = _run(again, data_dir, "r1", epochs=3)
    assert codes == [0, 0], logs
    for rank, text in enumerate(logs):
        assert f"rank {rank} resumes from " in text and "epoch-002.pt (2 of 3 epochs done)" in text
        assert "epoch 3/3" in text
        assert "epoch 1/3" not in text and "epoch 2/3" not in text
        assert "after step 17:" in text  # the first step of this process is step 17 of the run
    ckpt = again / "checkpoints" / "pytorch" / "r1"
    assert sorted(p.name for p in ckpt.iterdir()) == [f"epoch-00{e}.pt" for e in (1, 2, 3)]
    history = json.loads((again / "candidates" / "pytorch" / "training_history.json").read_text())
    assert len(history["history"]["loss"]) == 3  # the checkpoint carried the first two epochs


def test_a_master_restarted_after_the_last_checkpoint_exports_alone(first_run, tmp_path, data_dir):
    """The Master lost while exporting, after the Workers exited 0, comes back (alone under
    restartPolicy ExitCode, or with every replica in the step's next attempt). With every epoch
    checkpointed it exports from the checkpoint without waiting for peers (that rendezvous
    could never complete); a Worker in that state exits 0."""
    work, codes, _ = first_run
    assert codes == [0, 0]
    again = tmp_path / "again"
    shutil.copytree(work / "checkpoints", again / "checkpoints")
    (port,) = free_ports(1)  # nothing listens: a rendezvous would wait, then fail
    for rank in (0, 1):
        dist = {"MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
        proc = subprocess.run(
            [sys.executable, "-m", "training.torch_train", *_args(again, "r1", 2)],
            env=_env(data_dir, **dist, RANK=str(rank)),
            capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "all 2 epochs are checkpointed" in proc.stdout + proc.stderr
    saved = again / "candidates" / "pytorch"
    assert (saved / "saved_model.pb").is_file() and (saved / "torchscript" / "model.pt").is_file()
    history = json.loads((saved / "training_history.json").read_text())
    assert len(history["history"]["loss"]) == 2 and history["run_id"] == "r1"


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE"])
def test_missing_operator_variable_fails_fast_with_one_line(tmp_path, data_dir, missing):
    dist = {"MASTER_ADDR": LOOPBACK, "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1"}
    del dist[missing]
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "training.torch_train", *_args(tmp_path, "r", 1)],
        env=_env(data_dir, **dist),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"python -m training.torch_train: error: {missing} is not set")
    assert time.monotonic() - started < 30  # nothing heavy was imported, nothing waited
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"RANK": "2"}, "RANK=2 is out of range"),
        ({"RANK": "-1"}, "RANK=-1 is out of range"),
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two' is not an integer"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0 is out of range"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is out of range"),
        ({"MASTER_ADDR": " "}, "MASTER_ADDR is not set"),
        ({"MASTER_PORT": None, "RANK": None}, "MASTER_PORT, RANK are not set"),
    ],
)
def test_invalid_operator_variables_are_refused(changes, message):
    env = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "2", "RANK": "1"}
    assert parse_dist_env(env).rank == 1
    env |= changes
    env = {k: v for k, v in env.items() if v is not None}
    with pytest.raises(DistEnvError, match=re.escape(message)):
        parse_dist_env(env)


def test_a_rank_that_dies_makes_the_other_exit_promptly(tmp_path, data_dir):
    """Rank 1 is killed (SIGKILL) after its first step; rank 0's next collective fails and it
    exits with the retryable code within seconds instead of hanging until a timeout."""
    args = _args(tmp_path, "killed", epochs=5, train_examples=4096)  # 64 steps per epoch
    procs = _start(tmp_path, data_dir, [*args, "--collective-timeout", "300"])
    try:
        log1, deadline = tmp_path / "rank-1.log", time.monotonic() + RUN_TIMEOUT
        while "after step 1:" not in log1.read_text():
            assert procs[1].poll() is None, log1.read_text()
            assert time.monotonic() < deadline, "rank 1 never finished its first step"
            time.sleep(0.1)
        procs[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = procs[0].wait(timeout=60)
        waited = time.monotonic() - killed
    finally:
        _kill(procs)
    log0 = (tmp_path / "rank-0.log").read_text()
    assert code == PEER_LOST_EXIT_CODE, log0
    assert waited < 30, f"rank 0 took {waited:.0f} s to notice"
    assert len(re.findall(rf"lost a peer .*exiting {PEER_LOST_EXIT_CODE} \(retryable\)", log0)) == 1
    assert "epoch 5/5" not in log0
    assert not (tmp_path / "candidates").exists()


@pytest.mark.parametrize("rank", [0, 1], ids=["master", "worker"])
def test_a_rank_whose_peer_never_starts_exits_retryable_within_its_timeout(
    tmp_path, data_dir, rank
):
    """WORLD_SIZE 2, only one rank started (the other's pod never scheduled): it waits
    --collective-timeout seconds at the process group's rendezvous, then exits
    PEER_LOST_EXIT_CODE with one line naming the flag, not "lost a peer"."""
    (port,) = free_ports(1)
    env = _env(data_dir, MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port), WORLD_SIZE="2",
               RANK=str(rank))  # fmt: skip
    args = [*_args(tmp_path, "alone", epochs=1), "--collective-timeout", "5"]
    proc = subprocess.run(
        [sys.executable, "-m", "training.torch_train", *args],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == PEER_LOST_EXIT_CODE, out[-3000:]
    lines = [ln for ln in out.splitlines() if "rendezvous: not every replica" in ln]
    assert len(lines) == 1 and "lost a peer" not in out, out[-3000:]
    assert f"(WORLD_SIZE 2, MASTER {LOOPBACK}:{port}) joined within 5 s" in lines[0], lines
    assert "(--collective-timeout)" in lines[0] and "Traceback" not in out, out[-3000:]
