"""TF_CONFIG: read exactly as TensorFlow's TFConfigClusterResolver and validated as
tf.distribute validates it, on every shape the training operator writes; every entry point
turns a configuration error into one line and a non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from training.tf_config import TaskInfo, TFConfigError, is_chief, make_tf_config, parse_tf_config

W = {"worker": ["w0:2222", "w1:2222", "w2:2222"]}
C = {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]}


def _cfg(cluster, task_type=None, index=None, **extra) -> str:
    task = {} if task_type is None else {"type": task_type}
    if index is not None:
        task["index"] = index
    return json.dumps({"cluster": cluster, "task": task, **extra})


# name -> TF_CONFIG that TensorFlow accepts
ACCEPTED = {
    "worker-only-0": _cfg(W, "worker", 0),
    "worker-only-2": _cfg(W, "worker", 2),
    "chief": _cfg(C, "chief", 0),
    "chief+workers-worker-0": _cfg(C, "worker", 0),  # worker 0 is not chief beside a chief
    "chief+workers-worker-1": _cfg(C, "worker", 1),
    "evaluator-not-in-cluster": _cfg(C, "evaluator", 0),  # as the training operator writes it
    "evaluator-in-cluster": _cfg({**C, "evaluator": ["e0:2222"]}, "evaluator", 0),
    "ps": _cfg({**C, "ps": ["p0:2222", "p1:2222"]}, "ps", 1),
    "string-index": _cfg(W, "worker", "1", environment="cloud"),
    "rpc-layer": _cfg(W, "worker", 1, rpc_layer="grpc"),
    "empty-object": "{}",
}
# name -> (TF_CONFIG, our message); TensorFlow refuses these too (or fails later)
REFUSED = {
    "malformed": ("{not json", "not valid JSON"),
    "null": ("null", "JSON object"),
    "index-out-of-range": (_cfg(W, "worker", 3), "index 3 out of range for 3 worker"),
    "chief-index-1": (_cfg(C, "chief", 1), "out of range for 1 chief"),
    "type-not-in-cluster": (_cfg(W, "chief", 0), "'chief' is not in the cluster"),
    "unknown-type": (_cfg(W, "foo", 0), "'foo' is unknown"),
    "master-tf1": (_cfg({"master": ["m:1"], "worker": ["w:1"]}, "master", 0), "'master'"),
    "two-chiefs": (_cfg({"chief": ["a:1", "b:1"]}, "chief", 0), "2 chief tasks"),
    "index-not-int": (_cfg(W, "worker", "x"), "not an int"),
    "no-index": (_cfg(W, "worker"), "no 'index'"),
}
# refused here, where TensorFlow would accept and fail later (MultiWorkerMirroredStrategy)
STRICTER = {
    "negative-index": (_cfg(W, "worker", -1), "out of range"),
    "cluster-without-task": (_cfg(W), "no 'task' type"),
    "json-array": ("[1, 2]", "JSON object"),
    "addresses-not-a-list": (json.dumps({"cluster": {"worker": "a:1"}}), "lists of addresses"),
}


@pytest.fixture
def tf_resolver(monkeypatch):
    """``raw -> TFConfigClusterResolver`` reading ``raw`` from the environment."""
    from tensorflow.python.distribute.cluster_resolver import TFConfigClusterResolver

    def make(raw: str):
        monkeypatch.setenv("TF_CONFIG", raw)
        return TFConfigClusterResolver()

    return make


@pytest.mark.parametrize("name", ACCEPTED)
def test_reads_what_tensorflow_reads(name, tf_resolver, monkeypatch):
    from tensorflow.python.distribute import multi_worker_util

    raw = ACCEPTED[name]
    resolver = tf_resolver(raw)
    task = parse_tf_config()
    spec = resolver.cluster_spec()
    assert task.cluster == spec.as_dict()
    if not task.cluster:  # no cluster: one local worker, the chief
        assert task == TaskInfo() and is_chief(task)
        return
    assert (task.task_type, task.task_index) == (resolver.task_type, resolver.task_id)
    tf_chief = multi_worker_util.is_chief(spec, resolver.task_type, resolver.task_id)
    if task.task_type == "evaluator":  # TF calls it chief of its side-car; it trains nothing
        assert tf_chief and not is_chief(task)
    else:
        assert is_chief(task) is tf_chief
    assert task.num_workers == len(spec.as_dict().get("chief", [])) + len(
        spec.as_dict().get("worker", [])
    )


@pytest.mark.parametrize("name", REFUSED)
def test_refuses_what_tensorflow_refuses(name, tf_resolver):
    from tensorflow.python.distribute import multi_worker_util

    raw, message = REFUSED[name]
    with pytest.raises(TFConfigError, match=message):
        parse_tf_config(raw)
    with pytest.raises((ValueError, TypeError)):  # JSONDecodeError is a ValueError
        resolver = tf_resolver(raw)
        multi_worker_util.is_chief(resolver.cluster_spec(), resolver.task_type, resolver.task_id)


@pytest.mark.parametrize("name", STRICTER)
def test_refuses_early_what_would_fail_later(name):
    raw, message = STRICTER[name]
    with pytest.raises(TFConfigError, match=message):
        parse_tf_config(raw)


@pytest.mark.parametrize("raw", ["", "   "])
def test_empty_tf_config_is_one_local_worker_and_tensorflow_is_told_so(raw, tf_resolver):
    with pytest.raises(ValueError):  # what TensorFlow does with it on its own
        tf_resolver(raw).cluster_spec()
    assert os.environ["TF_CONFIG"] == raw
    task = parse_tf_config()
    assert task == TaskInfo() and task.num_workers == 1 and is_chief(task)
    assert "TF_CONFIG" not in os.environ  # removed, so TensorFlow reads "no cluster" too
    from tensorflow.python.distribute.cluster_resolver import TFConfigClusterResolver

    assert TFConfigClusterResolver().cluster_spec().as_dict() == {}


def test_absent_tf_config_is_a_local_single_worker_chief(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert parse_tf_config() == TaskInfo()


def test_make_tf_config_round_trips():
    task = parse_tf_config(make_tf_config(C, "worker", 1))
    assert (task.cluster, task.task_type, task.task_index) == (C, "worker", 1)


def _run(module: str, args: list[str], tf_config: str | None):
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def _one_error_line(proc, prog: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"{prog}: error: ")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


TRAIN_ARGS = ["--model-type", "cnn", "--epochs", "1", "--saved-model-dir", "unused"]


@pytest.mark.parametrize(
    ("tf_config", "data_dir", "message"),
    [
        ("{not json", None, "TF_CONFIG is not valid JSON"),
        (_cfg(W, "worker", 3), None, "out of range"),
        (_cfg({**C, "ps": ["p:1"]}, "ps", 0), None, "no parameter servers"),
        ("", "/nonexistent/tfds", "is not prepared in /nonexistent/tfds"),  # "" = local, no crash
    ],
)
def test_train_configuration_errors_are_one_line(tf_config, data_dir, message, tmp_path):
    args = TRAIN_ARGS + ["--checkpoint-dir", str(tmp_path), "--data-dir", data_dir or "x"]
    line = _one_error_line(_run("training.train", args, tf_config), "python -m training.train")
    assert message in line, line


def test_train_as_evaluator_has_nothing_to_do(tmp_path):
    args = TRAIN_ARGS + ["--checkpoint-dir", str(tmp_path)]
    proc = _run("training.train", args, ACCEPTED["evaluator-not-in-cluster"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "evaluator task: nothing to do" in proc.stderr


def test_select_and_launcher_configuration_errors_are_one_line(tmp_path):
    args = ["--data-dir", "/nonexistent/tfds", "--candidates-dir", str(tmp_path)]
    args += ["--serving-base-path", str(tmp_path / "models"), "--report", str(tmp_path / "r")]
    select = _run("training.select", args, "{not json")
    assert "is not prepared" in _one_error_line(select, "python -m training.select")
    launcher = _run("training.launcher", ["--num-workers", "0", "--", "--x"], None)
    assert "num_workers must be >= 1" in _one_error_line(launcher, "python -m training.launcher")
