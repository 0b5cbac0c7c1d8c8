"""Parse ``TF_CONFIG`` exactly as ``tf.distribute`` reads and validates it.

The Kubeflow training operator injects ``TF_CONFIG`` into every TFJob replica as JSON::

    {"cluster": {"chief": ["job-chief-0.ns.svc:2222"],
                 "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"]},
     "task": {"type": "worker", "index": 0}}

The reading is TensorFlow's ``TFConfigClusterResolver`` (task type, ``int(index)``, cluster)
and the checks are those of ``tf.distribute``'s ``multi_worker_util._validate_cluster_spec``:
task and job types among ``chief``/``worker``/``evaluator``/``ps``; the task type listed in the
cluster, except ``evaluator`` (the operator does not list it); at most one chief and one
evaluator; the index within its job. Two cases where TensorFlow would fail later are refused
here with a clear message: a cluster without a task type, and a negative index. An absent,
empty or blank ``TF_CONFIG`` means one local worker, the chief (TensorFlow itself fails on
``TF_CONFIG=""``, so :func:`parse_tf_config` removes a blank value from the environment).

The chief (the one task that exports) is the ``chief`` task if the cluster has one, else
``worker`` 0, as ``multi_worker_util.is_chief``; the evaluator, which that function also
calls chief, trains and exports nothing here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

TRAINING_TASK_TYPES = ("chief", "worker")
TASK_TYPES = ("chief", "worker", "evaluator", "ps")  # tf.distribute's allowed types


class TFConfigError(ValueError):
    """``TF_CONFIG`` is present but malformed (bad JSON, missing task, index out of range)."""


@dataclass(frozen=True)
class TaskInfo:
    """This process's place in the training cluster.

    Attributes:
        cluster: task type -> list of ``host:port`` addresses (empty for a local run).
        task_type: ``"chief"``, ``"worker"``, ``"evaluator"`` or ``"ps"``.
        task_index: index of this task within ``cluster[task_type]``.
    """

    cluster: dict[str, list[str]] = field(default_factory=dict)
    task_type: str = "worker"
    task_index: int = 0

    @property
    def num_workers(self) -> int:
        """Number of replicas that train (chief + workers); 1 for a local run."""
        return max(1, sum(len(self.cluster.get(t, [])) for t in TRAINING_TASK_TYPES))


def parse_tf_config(raw: str | None = None) -> TaskInfo:
    """Parse a ``TF_CONFIG`` JSON string (default: the environment variable).

    Args:
        raw: the JSON text; ``None`` reads ``os.environ["TF_CONFIG"]`` (and removes it from the
            environment when it is blank, so that TensorFlow reads "no cluster" too).

    Returns:
        A :class:`TaskInfo`; a local single-worker one when ``raw`` is absent or blank, or
        ``cluster`` is missing or empty.

    Raises:
        TFConfigError: invalid JSON, not an object, a cluster job that is not a list of
            addresses, a task/job type tf.distribute does not know, a task type missing from
            the cluster (other than ``evaluator``), several chiefs or evaluators, or an index
            that is not an integer or outside its job.
    """
    if raw is None:
        raw = os.environ.get("TF_CONFIG", "")
        if not raw.strip():
            os.environ.pop("TF_CONFIG", None)
    if not raw.strip():
        return TaskInfo()
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise TFConfigError(f"TF_CONFIG is not valid JSON: {exc}") from exc
    if not isinstance(cfg, dict):
        raise TFConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = cfg.get("cluster") or {}
    task = cfg.get("task") or {}
    if not isinstance(task, dict):
        raise TFConfigError('TF_CONFIG \'task\' must be an object like {"type": ..., "index": ...}')
    if not isinstance(cluster, dict) or not all(isinstance(v, list) for v in cluster.values()):
        raise TFConfigError("TF_CONFIG 'cluster' must map task types to lists of addresses")
    if not cluster:
        return TaskInfo()
    unknown = sorted(set(cluster) - set(TASK_TYPES))
    if unknown:
        raise TFConfigError(
            f"TF_CONFIG cluster has job(s) {unknown}; tf.distribute allows {list(TASK_TYPES)}"
        )
    task_type = task.get("type")
    if task_type is None:
        raise TFConfigError("TF_CONFIG has a 'cluster' but no 'task' type")
    if task_type not in TASK_TYPES:
        raise TFConfigError(
            f"TF_CONFIG task type {task_type!r} is unknown; tf.distribute allows {list(TASK_TYPES)}"
        )
    if task_type not in cluster and task_type != "evaluator":
        raise TFConfigError(
            f"TF_CONFIG task type {task_type!r} is not in the cluster {sorted(cluster)}"
        )
    for job in ("chief", "evaluator"):
        if len(cluster.get(job, [])) > 1:
            raise TFConfigError(f"TF_CONFIG cluster has {len(cluster[job])} {job} tasks; at most 1")
    if "index" not in task:
        raise TFConfigError("TF_CONFIG 'task' has no 'index'")
    try:
        task_index = int(task["index"])
    except (TypeError, ValueError) as exc:
        raise TFConfigError(f"TF_CONFIG task index {task['index']!r} is not an int") from exc
    size = len(cluster[task_type]) if task_type in cluster else None  # evaluator: unlisted
    if task_index < 0 or (size is not None and task_index >= size):
        raise TFConfigError(
            f"TF_CONFIG task index {task_index} out of range for {size or 0} {task_type} task(s)"
        )
    return TaskInfo(
        cluster={k: list(v) for k, v in cluster.items()},
        task_type=task_type,
        task_index=task_index,
    )


def is_chief(task: TaskInfo) -> bool:
    """True for the one task that writes the real checkpoints, logs and SavedModel.

    The ``chief`` task if the cluster has one, else ``worker`` 0; a local run is the chief.
    Unlike ``multi_worker_util.is_chief``, the evaluator is not: it trains nothing.
    """
    if task.task_type == "chief":
        return True
    return task.task_type == "worker" and task.task_index == 0 and "chief" not in task.cluster


def make_tf_config(cluster: dict[str, list[str]], task_type: str, task_index: int) -> str:
    """Serialise a ``TF_CONFIG`` value (what the launcher and the operator inject)."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": task_index}})
