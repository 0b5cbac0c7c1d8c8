"""Real 2-process MultiWorkerMirroredStrategy runs over loopback, on a slice of the real data."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from fmnist_common import LOOPBACK, free_ports
from fmnist_pipeline.run import BUDGETS, train_args
from training.export import INPUT_NAME, OUTPUT_NAME, SIGNATURE_KEY
from training.launcher import launch

pytestmark = pytest.mark.slow


def _args(work: Path, model_type, run_id, epochs, precision, data_dir) -> list[str]:
    budget = {
        **BUDGETS["smoke"],
        "epochs": epochs,
        "precision": precision,
    }  # 2,048 images, 64/replica
    return train_args(model_type, work, run_id, budget, data_dir)


def _train(
    tmp_path: Path, model_type, with_chief, data_dir, run_id="t1", epochs=2, precision="float32"
):
    work = tmp_path / "shared"
    scratch_tmp = tmp_path / "local-tmp"  # each replica's TMPDIR: non-chief scratch lives here
    scratch_tmp.mkdir(exist_ok=True)
    args = _args(work, model_type, run_id, epochs, precision, data_dir)
    env = {"TMPDIR": str(scratch_tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    launch(args, num_workers=2, with_chief=with_chief, name=model_type, env=env, timeout=600)
    return work, scratch_tmp


def _leftovers(*roots: Path) -> list[str]:
    bad = []
    for root in roots:
        for dirpath, dirnames, _ in os.walk(root):
            bad += [
                os.path.join(dirpath, d) for d in dirnames if "workertemp" in d or "staging" in d
            ]
    return bad


def _graph_dtypes(saved: Path) -> set[int]:
    """Every dtype named by a node attribute of the SavedModel's graph and its functions."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel.FromString((saved / "saved_model.pb").read_bytes())
    graph = sm.meta_graphs[0].graph_def
    nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
    return {
        t
        for n in nodes
        for a in n.attr.values()
        for t in (a.type, *a.list.type)
        if t  # 0: no dtype
    }


@pytest.mark.parametrize(
    ("model_type", "with_chief", "precision"),
    [("batch_norm", False, "mixed_bfloat16"), ("dropout", True, "float32")],
)
def test_two_workers_train_and_only_the_chief_exports(
    tmp_path, data_dir, test_slice, model_type, with_chief, precision
):
    work, scratch_tmp = _train(tmp_path, model_type, with_chief, data_dir, precision=precision)
    saved = work / "candidates" / model_type
    assert (saved / "saved_model.pb").is_file()
    history = json.loads((saved / "training_history.json").read_text())
    assert history["replicas"] == 2
    assert history["global_batch_size"] == 128
    assert history["steps_per_epoch"] == 2048 // 128
    assert len(history["history"]["loss"]) == 2
    assert history["history"]["loss"][-1] < history["history"]["loss"][0]
    assert min(history["history"]["images_per_second"]) > 0
    assert history["precision"] == precision
    # whatever the training precision, the export computes in float32 (any TF Serving runs it)
    assert tf.float32.as_datatype_enum in _graph_dtypes(saved)
    assert tf.bfloat16.as_datatype_enum not in _graph_dtypes(saved)

    # no worker temp dir anywhere: not on the shared volume, not in the replicas' TMPDIR
    assert _leftovers(work, scratch_tmp) == []
    assert list(scratch_tmp.iterdir()) == []
    assert list((work / "candidates").iterdir()) == [saved]
    ckpt = work / "checkpoints" / model_type / "t1"
    assert sorted(p.name for p in ckpt.iterdir() if p.name.startswith("epoch-")) == [
        "epoch-001",
        "epoch-002",
    ]
    assert any((work / "tensorboard" / model_type / "t1").rglob("events.out.tfevents.*"))

    images, labels = test_slice
    from training.data import encode_images

    sig = tf.saved_model.load(str(saved)).signatures[SIGNATURE_KEY]
    probs = sig(**{INPUT_NAME: tf.constant(encode_images(images[:200], "jpeg"))})[
        OUTPUT_NAME
    ].numpy()
    assert probs.shape == (200, 10)
    assert np.mean(probs.argmax(1) == labels[:200]) > 0.4, "2 short epochs should beat chance (0.1)"


def test_checkpoints_of_different_runs_and_types_never_collide(tmp_path, data_dir):
    work, _ = _train(tmp_path, "cnn", False, data_dir, run_id="run-a", epochs=1)
    _train(tmp_path, "cnn", False, data_dir, run_id="run-b", epochs=1)
    runs = sorted(p.name for p in (work / "checkpoints" / "cnn").iterdir())
    assert runs == ["run-a", "run-b"]
    assert all((work / "checkpoints" / "cnn" / r / "epoch-001").is_dir() for r in runs)


def test_a_chief_re_created_after_training_exports_alone(tmp_path, data_dir, test_slice):
    """The chief lost while exporting, after the other worker exited 0, comes back alone (a job
    under restartPolicy ExitCode; the pipeline's next attempt starts every replica). Its run's
    training is finished (``trained.json`` and the last epoch's weights), so it exports those
    weights without the strategy, whose peer would never come (here nothing listens at the
    peer's address); a worker in that state exits 0 at once."""
    work, _ = _train(tmp_path, "cnn", False, data_dir, run_id="r1", epochs=1)
    saved = work / "candidates" / "cnn"
    first = tmp_path / "first-export"
    saved.rename(first)  # the candidate that the lost chief never published
    peers = [f"{LOOPBACK}:{port}" for port in free_ports(2)]
    for index in (1, 0):
        tf_config = {"cluster": {"worker": peers}, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2"}
        argv = _args(work, "cnn", "r1", 1, "float32", data_dir)
        proc = subprocess.run(
            [sys.executable, "-m", "training.train", *argv],
            env=env, capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        said = "the chief exports" if index == 0 else "this run's training is finished"
        assert said in out, out[-3000:]
        assert (saved / "saved_model.pb").is_file() == (index == 0), out[-2000:]
    history = json.loads((saved / "training_history.json").read_text())
    assert history == json.loads((first / "training_history.json").read_text())
    # the same weights as the first export: the same answers
    images, _ = test_slice
    from training.data import encode_images

    jpegs = tf.constant(encode_images(images[:64], "jpeg"))
    answers = [
        tf.saved_model.load(str(d)).signatures[SIGNATURE_KEY](**{INPUT_NAME: jpegs})[OUTPUT_NAME]
        for d in (first, saved)
    ]
    np.testing.assert_allclose(answers[0].numpy(), answers[1].numpy(), rtol=1e-5, atol=1e-6)
    shutil.rmtree(first)


def test_a_backup_of_another_network_stops_both_workers_in_one_line(tmp_path, data_dir):
    """A reused --run-id whose interrupted run's backup holds another network: both replicas
    fail at the restore with one line (exit 1: retrying cannot help), neither waits for the
    other, and the non-chief's temporary backup directory does not survive."""
    from keras_backup import write_backup  # tests/training/keras_backup.py

    from training import train

    work = tmp_path / "shared"
    argv = _args(work, "cnn", "r1", 2, "float32", data_dir)
    backup = train.checkpoint_dir(train.build_parser().parse_args(argv)) / "backup"
    write_backup(backup, "batch_norm")
    peers = [f"{LOOPBACK}:{port}" for port in free_ports(2)]
    scratch_tmp = tmp_path / "local-tmp"  # each replica's TMPDIR, as _train gives it
    scratch_tmp.mkdir()
    procs = []
    try:
        for index in (0, 1):
            tf_config = {"cluster": {"worker": peers}, "task": {"type": "worker", "index": index}}
            env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2"}
            env["TMPDIR"] = str(scratch_tmp)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "training.train", *argv],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )  # fmt: skip
            )
        outs = [proc.communicate(timeout=300)[0] for proc in procs]
    finally:
        for proc in procs:  # a failure must not leave a replica running
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, out in zip(procs, outs, strict=True):
        assert proc.returncode == 1, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        errors = [ln for ln in out.splitlines() if "python -m training.train: error: " in ln]
        assert len(errors) == 1 and f"backup {backup} cannot be restored" in errors[0], errors
    assert _leftovers(work, scratch_tmp) == []
    assert list(scratch_tmp.glob(f"{train.SCRATCH_PREFIX}*")) == []  # the non-chief's scratch
    assert not (work / "candidates").exists()


def test_two_workers_killed_after_an_epoch_resume_from_the_backup(tmp_path, data_dir):
    """Both replicas killed (SIGKILL) once a backup exists (after epoch N of a long run): started
    again with N + 1 epochs they restore it (every variable of the run matched), train only
    the last epoch, and the chief exports."""
    import time

    from training import train

    work = tmp_path / "shared"
    argv = _args(work, "cnn", "r1", 2, "float32", data_dir)
    backup = train.checkpoint_dir(train.build_parser().parse_args(argv)) / "backup" / "chief"
    peers = [f"{LOOPBACK}:{port}" for port in free_ports(2)]
    procs = []
    try:
        for index in (0, 1):
            tf_config = {"cluster": {"worker": peers}, "task": {"type": "worker", "index": index}}
            env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2"}
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "training.train", *argv, "--epochs", "40"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
            )
        deadline = time.monotonic() + 300
        while not tf.train.latest_checkpoint(str(backup)) and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), "a replica ended before its backup"
            time.sleep(0.1)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    latest = tf.train.latest_checkpoint(str(backup))  # ckpt-N: saved after epoch N
    assert latest, "no backup within 300 s"
    done = int(latest.rsplit("-", 1)[1])
    scratch_tmp = tmp_path / "local-tmp"
    scratch_tmp.mkdir()
    env = {"TMPDIR": str(scratch_tmp), "TF_CPP_MIN_LOG_LEVEL": "2"}
    lines = []

    class Lines:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    epochs = ["--epochs", str(done + 1)]  # one epoch left after the backup's
    launch([*argv, *epochs], num_workers=2, name="cnn", env=env, timeout=600, out=Lines())
    out = "".join(lines)
    assert f"Epoch {done + 1}/{done + 1}" in out, out[-3000:]
    assert f"Epoch 1/{done + 1}" not in out, out[-3000:]  # done >= 1
    # both replicas say so, as the e2e's pod-loss test reads it from the pods' logs
    assert out.count(f"({done} of {done + 1} epochs done)") == 2, out[-3000:]
    assert (work / "candidates" / "cnn" / "saved_model.pb").is_file()
    assert _leftovers(work, scratch_tmp) == []


@pytest.mark.parametrize("index", [0, 1], ids=["leader", "non-leader"])
def test_a_worker_whose_peer_never_starts_exits_retryable_within_its_timeout(
    tmp_path, data_dir, index
):
    """TF_CONFIG names two workers, only one starts (the other's pod never scheduled): the one
    started waits --collective-timeout seconds at the rendezvous, not TensorFlow's hour, then
    exits PEER_LOST_EXIT_CODE (retryable) with one line naming the flag; the leader's line also
    names the task that never joined. Nothing is exported."""
    from training import train

    work = tmp_path / "shared"
    argv = [*_args(work, "cnn", "r1", 1, "float32", data_dir), "--collective-timeout", "5"]
    peers = [f"{LOOPBACK}:{port}" for port in free_ports(2)]
    tf_config = {"cluster": {"worker": peers}, "task": {"type": "worker", "index": index}}
    env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "training.train", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,  # TensorFlow's own register timeout is an hour
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == train.PEER_LOST_EXIT_CODE, out[-3000:]
    errors = [ln for ln in out.splitlines() if "rendezvous: not every replica" in ln]
    assert len(errors) == 1, out[-3000:]
    assert "(worker: 2) joined within 5 s (--collective-timeout)" in errors[0], errors
    if index == 0:  # the coordination service's leader knows who is missing
        assert "missing: /job:worker/replica:0/task:1" in errors[0], errors
    assert "Traceback" not in out, out[-3000:]
    assert not (work / "candidates").exists()


def test_the_stragglers_line_says_when_tensorflow_names_only_some():
    """TensorFlow's barrier error lists at most two "timed out task names" with the count;
    the line keeps the count and says how many it does not name."""
    from training.train import stragglers

    leader = (
        "Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. ...\n"
        "# of tasks that reached the barrier: 1/4.\n"
        "The first task at the barrier: /job:chief/replica:0/task:0. Some timed out task names:\n"
        "/job:worker/replica:0/task:2\n/job:worker/replica:0/task:1\n"
    )
    assert stragglers(leader) == (
        "1 of 4 tasks joined; missing: /job:worker/replica:0/task:1, "
        "/job:worker/replica:0/task:2, and 1 more"
    )
    assert stragglers("Deadline Exceeded") == ""
