"""TF_CONFIG parsing and chief detection (worker-only and chief clusters)."""

import json

import pytest

from training.tf_config import TFConfigError, is_chief, make_tf_config, parse_tf_config

WORKERS = {"worker": ["w0:2222", "w1:2222", "w2:2222"]}
WITH_CHIEF = {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"]}


@pytest.mark.parametrize(
    ("cluster", "task_type", "index", "chief", "replicas"),
    [
        (WORKERS, "worker", 0, True, 3),
        (WORKERS, "worker", 1, False, 3),
        (WORKERS, "worker", 2, False, 3),
        (WITH_CHIEF, "chief", 0, True, 3),
        (WITH_CHIEF, "worker", 0, False, 3),  # worker 0 is NOT chief when a chief exists
        (WITH_CHIEF, "worker", 1, False, 3),
        ({**WITH_CHIEF, "evaluator": ["e0:2222"]}, "evaluator", 0, False, 3),
    ],
)
def test_chief_detection(cluster, task_type, index, chief, replicas):
    task = parse_tf_config(make_tf_config(cluster, task_type, index))
    assert task.task_type == task_type
    assert task.task_index == index
    assert is_chief(task) is chief
    assert task.num_workers == replicas


@pytest.mark.parametrize("raw", [None, "", "   "])
def test_absent_tf_config_is_a_local_single_worker_chief(raw, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    task = parse_tf_config(raw)
    assert task.cluster == {}
    assert task.num_workers == 1
    assert is_chief(task)


def test_reads_the_environment(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", make_tf_config(WORKERS, "worker", 2))
    task = parse_tf_config()
    assert (task.task_type, task.task_index, is_chief(task)) == ("worker", 2, False)


def test_operator_style_config_with_string_index():
    raw = json.dumps(
        {
            "cluster": {"worker": ["a-worker-0.ns.svc:2222", "a-worker-1.ns.svc:2222"]},
            "task": {"type": "worker", "index": "1"},
            "environment": "cloud",
        }
    )
    task = parse_tf_config(raw)
    assert task.task_index == 1
    assert not is_chief(task)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"cluster": {"worker": ["a"]}, "task": {"type": "ps", "index": 0}}), "'ps'"),
        (
            json.dumps({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 1}}),
            "range",
        ),
        (
            json.dumps({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": "x"}}),
            "int",
        ),
        (json.dumps({"cluster": {"worker": "a:1"}, "task": {"type": "worker"}}), "lists"),
    ],
)
def test_malformed_tf_config_raises_a_clear_error(raw, message):
    with pytest.raises(TFConfigError, match=message):
        parse_tf_config(raw)


@pytest.mark.parametrize("task", ['"worker"', "[0]"])
def test_task_must_be_an_object(task):
    with pytest.raises(TFConfigError, match="'task' must be an object"):
        parse_tf_config('{"cluster": {"worker": ["a:1"]}, "task": ' + task + "}")


def test_master_is_the_tf1_name_of_the_chief():
    task = parse_tf_config(make_tf_config({"master": ["m:1"], "worker": ["w:1"]}, "master", 0))
    assert is_chief(task)
