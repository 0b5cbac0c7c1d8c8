"""Parse ``TF_CONFIG`` the way ``tf.distribute`` and the Kubeflow training operator define it.

The operator injects ``TF_CONFIG`` into every TFJob replica as JSON::

    {"cluster": {"chief": ["job-chief-0.ns.svc:2222"],
                 "worker": ["job-worker-0.ns.svc:2222", "job-worker-1.ns.svc:2222"]},
     "task": {"type": "worker", "index": 0}}

Convention (from ``tf.distribute.cluster_resolver.TFConfigClusterResolver`` and TensorFlow's
multi-worker Keras tutorial): if the cluster has a ``chief`` task, that task is the chief;
otherwise ``worker`` 0 is. An absent or empty ``TF_CONFIG`` means one local worker, which is
the chief.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

TRAINING_TASK_TYPES = ("chief", "worker")


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
        raw: the JSON text; ``None`` reads ``os.environ["TF_CONFIG"]``.

    Returns:
        A :class:`TaskInfo`; a local single-worker one when ``raw`` is absent or blank.

    Raises:
        TFConfigError: on invalid JSON, a missing ``task``/``cluster``, an unknown task type
            or a task index outside the cluster.
    """
    if raw is None:
        raw = os.environ.get("TF_CONFIG", "")
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
    task_type = task.get("type")
    if task_type not in cluster:
        raise TFConfigError(
            f"TF_CONFIG task type {task_type!r} is not in the cluster {sorted(cluster)}"
        )
    try:
        task_index = int(task.get("index", 0))
    except (TypeError, ValueError) as exc:
        raise TFConfigError(f"TF_CONFIG task index {task.get('index')!r} is not an int") from exc
    if not 0 <= task_index < len(cluster[task_type]):
        raise TFConfigError(
            f"TF_CONFIG task index {task_index} out of range for {len(cluster[task_type])} "
            f"{task_type} task(s)"
        )
    return TaskInfo(
        cluster={k: list(v) for k, v in cluster.items()},
        task_type=task_type,
        task_index=task_index,
    )


def is_chief(task: TaskInfo) -> bool:
    """True for the one task that writes the real checkpoints, logs and SavedModel.

    The ``chief`` task if the cluster has one, else ``worker`` 0; a local run is the chief.
    """
    if task.task_type in ("chief", "master"):  # "master": the TF 1.x name of the chief
        return True
    return task.task_type == "worker" and task.task_index == 0 and "chief" not in task.cluster


def make_tf_config(cluster: dict[str, list[str]], task_type: str, task_index: int) -> str:
    """Serialise a ``TF_CONFIG`` value (what the launcher and the operator inject)."""
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": task_index}})
