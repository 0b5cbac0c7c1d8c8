"""Watch an InferenceService autoscale while Locust loads it; record, judge and plot a timeline.

    python -m loadtest.observer --namespace fashion-mnist --isvc fashion-mnist \\
        --locust-url http://localhost:8089 --max-replicas 5 --min-replicas 0 \\
        --out-dir reports/autoscaling --duration 600

Every ``--interval`` seconds it records one :class:`Sample`: ready and total predictor pods
(label ``serving.kserve.io/inferenceservice=<isvc>``, terminating pods not counted), the desired
replicas (Knative ``PodAutoscaler`` ``status.desiredScale`` in serverless mode, else the
predictor ``Deployment``'s ``spec.replicas``), and Locust's current users and requests/s (its web
API ``/stats/requests``, or the ``*_stats_history.csv`` of a headless run). At the end it writes
``timeline.csv``, ``verdict.json`` and ``timeline.png`` and exits 0 when :func:`judge` passes:

* scaled out: more than one ready pod while under load (or within ``--cold-start-s`` after);
* never more than ``--max-replicas`` pods or desired replicas;
* scaled back in (ready pods and desired replicas <= ``--min-replicas``) within
  ``--scale-in-window-s`` after the load ended.

Pure logic (:func:`count_pods`, :func:`desired_from_*`, :func:`judge`, :func:`plot_timeline`)
is separate from the Kubernetes and Locust I/O (:class:`ClusterReader`, :class:`Observer`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

ISVC_LABEL = "serving.kserve.io/inferenceservice"
KNATIVE_PA = ("autoscaling.internal.knative.dev", "v1alpha1", "podautoscalers")


@dataclass(frozen=True)
class Sample:
    """One observation.

    Attributes:
        t: seconds since the observer started.
        ready_pods: predictor pods Running with condition Ready=True (not terminating).
        total_pods: predictor pods not terminating (any phase: cold starts included).
        desired_replicas: what the autoscaler asks for (``None`` if unknown).
        users: Locust's current user count (``None`` if unknown).
        rps: Locust's current requests/s (``None`` if unknown).
    """

    t: float
    ready_pods: int
    total_pods: int
    desired_replicas: int | None = None
    users: int | None = None
    rps: float | None = None


@dataclass
class Verdict:
    """Result of :func:`judge`: ``passed`` and the reasons it failed, plus key moments."""

    passed: bool
    reasons: list[str] = field(default_factory=list)
    peak_ready_pods: int = 0
    peak_replicas: int = 0
    load_start_t: float | None = None
    load_end_t: float | None = None
    scaled_out_t: float | None = None
    scaled_in_t: float | None = None


def _get(obj: Any, *path: str) -> Any:
    """Attribute or key lookup along ``path`` (works on client models and plain dicts)."""
    for name in path:
        if obj is None:
            return None
        obj = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    return obj


def count_pods(pod_list: Any) -> tuple[int, int]:
    """``(ready, total)`` predictor pods in a ``V1PodList`` (or its dict form).

    Terminating pods (``metadata.deletionTimestamp`` set) and finished ones (phase Succeeded or
    Failed) are not counted; ``ready`` needs phase Running and condition ``Ready`` = ``"True"``.
    """
    ready = total = 0
    for pod in _get(pod_list, "items") or []:
        if _get(pod, "metadata", "deletion_timestamp") or _get(
            pod, "metadata", "deletionTimestamp"
        ):
            continue
        phase = _get(pod, "status", "phase")
        if phase in ("Succeeded", "Failed"):
            continue
        total += 1
        conditions = _get(pod, "status", "conditions") or []
        if phase == "Running" and any(
            _get(c, "type") == "Ready" and _get(c, "status") == "True" for c in conditions
        ):
            ready += 1
    return ready, total


def desired_from_podautoscalers(pa_list: Any) -> int | None:
    """Sum of ``status.desiredScale`` over Knative PodAutoscalers (``None``: none / unknown)."""
    values = [_get(pa, "status", "desiredScale") for pa in (_get(pa_list, "items") or [])]
    values = [int(v) for v in values if v is not None and int(v) >= 0]
    return sum(values) if values else None


def desired_from_deployments(deployment_list: Any) -> int | None:
    """Sum of ``spec.replicas`` over the predictor Deployments (``None``: none found)."""
    values = [_get(d, "spec", "replicas") for d in (_get(deployment_list, "items") or [])]
    values = [int(v) for v in values if v is not None]
    return sum(values) if values else None


def read_locust_history(path: str | Path) -> list[tuple[float, int, float]]:
    """``(unix time, users, requests/s)`` rows of the Aggregated line of a Locust
    ``*_stats_history.csv`` (written with ``--csv PREFIX``), in time order."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("Name") != "Aggregated":
                continue
            try:
                rows.append(
                    (float(row["Timestamp"]), int(row["User Count"]), float(row["Requests/s"]))
                )
            except (KeyError, ValueError):
                continue
    return sorted(rows)


def locust_at(history: list[tuple[float, int, float]], unix_t: float) -> tuple[int, float] | None:
    """Users and requests/s of the last history row at or before ``unix_t``."""
    best = None
    for ts, users, rps in history:
        if ts > unix_t:
            break
        best = (users, rps)
    return best


def judge(
    samples: list[Sample],
    max_replicas: int,
    min_replicas: int = 0,
    scale_in_window_s: float = 300.0,
    cold_start_s: float = 60.0,
    load_end_t: float | None = None,
) -> Verdict:
    """Judge an autoscaling timeline.

    Args:
        samples: observations in time order.
        max_replicas: the InferenceService's ``maxReplicas``: no sample may exceed it (pods or
            desired replicas).
        min_replicas: ``minReplicas`` (0 with scale to zero): the target after the load.
        scale_in_window_s: seconds after the load ended within which pods must be back at
            ``min_replicas``.
        cold_start_s: grace after the load ended during which late-ready pods still count as
            having scaled out (pods take time to pull images and load the model).
        load_end_t: when the load ended; default: the last sample with users > 0.

    Returns:
        A :class:`Verdict`.
    """
    v = Verdict(passed=False)
    if not samples:
        v.reasons.append("no samples")
        return v
    loaded = [s.t for s in samples if (s.users or 0) > 0]
    v.load_start_t = loaded[0] if loaded else None
    v.load_end_t = load_end_t if load_end_t is not None else (loaded[-1] if loaded else None)
    v.peak_ready_pods = max(s.ready_pods for s in samples)
    v.peak_replicas = max(max(s.ready_pods, s.total_pods, s.desired_replicas or 0) for s in samples)
    if v.load_end_t is None:
        v.reasons.append("no load seen (users never > 0; is Locust running?)")
        return v
    start = v.load_start_t if v.load_start_t is not None else samples[0].t
    for s in samples:
        if start <= s.t <= v.load_end_t + cold_start_s and s.ready_pods > 1:
            v.scaled_out_t = s.t
            break
    if v.scaled_out_t is None:
        v.reasons.append(
            f"never scaled out: at most {v.peak_ready_pods} ready pod(s) under load "
            f"(+{cold_start_s:.0f}s cold-start grace)"
        )
    over = [s for s in samples if max(s.total_pods, s.desired_replicas or 0) > max_replicas]
    if over:
        worst = max(max(s.total_pods, s.desired_replicas or 0) for s in over)
        v.reasons.append(f"exceeded max replicas {max_replicas}: {worst} at t={over[0].t:.0f}s")
    for s in samples:
        if (
            s.t > v.load_end_t
            and s.ready_pods <= min_replicas
            and s.total_pods <= min_replicas
            and (s.desired_replicas is None or s.desired_replicas <= min_replicas)
        ):
            v.scaled_in_t = s.t
            break
    deadline = v.load_end_t + scale_in_window_s
    if v.scaled_in_t is None or v.scaled_in_t > deadline:
        last = samples[-1]
        v.reasons.append(
            f"did not scale in to {min_replicas} within {scale_in_window_s:.0f}s after the "
            f"load ended at t={v.load_end_t:.0f}s (last sample t={last.t:.0f}s: "
            f"{last.ready_pods} ready, {last.total_pods} pods)"
        )
    v.passed = not v.reasons
    return v


def write_timeline_csv(samples: Iterable[Sample], path: str | Path) -> None:
    """One CSV row per sample, columns = :class:`Sample` fields."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in fields(Sample)]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=names)
        w.writeheader()
        for s in samples:
            w.writerow({k: ("" if v is None else v) for k, v in asdict(s).items()})


def read_timeline_csv(path: str | Path) -> list[Sample]:
    """Inverse of :func:`write_timeline_csv`."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):

            def val(key, cast, row=row):
                return cast(row[key]) if row.get(key, "") != "" else None

            out.append(
                Sample(
                    t=float(row["t"]),
                    ready_pods=int(row["ready_pods"]),
                    total_pods=int(row["total_pods"]),
                    desired_replicas=val("desired_replicas", int),
                    users=val("users", int),
                    rps=val("rps", float),
                )
            )
    return out


def plot_timeline(
    samples: list[Sample],
    path: str | Path,
    title: str,
    max_replicas: int | None = None,
    verdict: Verdict | None = None,
) -> Path:
    """Draw pods (ready, total, desired) and Locust users/requests/s over time as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t for s in samples]
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    ax.step(t, [s.ready_pods for s in samples], where="post", label="ready pods", lw=2.2)
    ax.step(t, [s.total_pods for s in samples], where="post", label="pods (incl. starting)",
            lw=1.2, ls="--")  # fmt: skip
    if any(s.desired_replicas is not None for s in samples):
        ax.step(t, [s.desired_replicas or 0 for s in samples], where="post",
                label="desired replicas", lw=1.2, ls=":")  # fmt: skip
    if any(s.users is not None for s in samples):
        ax.step(t, [s.users or 0 for s in samples], where="post", label="Locust users",
                lw=1.0, color="grey", alpha=0.7)  # fmt: skip
    if max_replicas is not None:
        ax.axhline(max_replicas, color="red", lw=0.8, ls="-.", label=f"max replicas {max_replicas}")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("pods / replicas / users")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.2 + 0.5)  # headroom for the legend and labels
    handles, labels = ax.get_legend_handles_labels()
    if any(s.rps is not None for s in samples):
        ax2 = ax.twinx()
        ax2.plot(t, [s.rps or 0 for s in samples], color="tab:purple", alpha=0.6,
                 label="requests/s")  # fmt: skip
        ax2.set_ylabel("requests/s")
        ax2.set_ylim(bottom=0)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if verdict is not None:
        for x, name in ((verdict.load_end_t, "load ended"), (verdict.scaled_in_t, "scaled in")):
            if x is not None:
                ax.axvline(x, color="black", lw=0.6, alpha=0.5)
                ax.text(x, ax.get_ylim()[1] * 0.97, f" {name}", fontsize=8, va="top")
        title = f"{title}\n{'PASS' if verdict.passed else 'FAIL: ' + '; '.join(verdict.reasons)}"
    ax.legend(handles, labels, loc="upper right", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


class ClusterReader:
    """Reads predictor pods and desired replicas of one InferenceService.

    Args:
        core: ``kubernetes.client.CoreV1Api`` (or a fake with ``list_namespaced_pod``).
        apps: ``AppsV1Api`` (``list_namespaced_deployment``) or ``None``.
        custom: ``CustomObjectsApi`` (``list_namespaced_custom_object``) or ``None``.
        namespace: the InferenceService's namespace.
        isvc: the InferenceService's name.
    """

    def __init__(self, core, apps, custom, namespace: str, isvc: str):
        self.core, self.apps, self.custom = core, apps, custom
        self.namespace = namespace
        self.selector = f"{ISVC_LABEL}={isvc}"

    def pods(self) -> tuple[int, int]:
        """``(ready, total)`` predictor pods (see :func:`count_pods`)."""
        return count_pods(
            self.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        )

    def desired(self) -> int | None:
        """Knative PodAutoscaler desiredScale, else Deployment spec.replicas, else ``None``."""
        from kubernetes.client.exceptions import ApiException

        if self.custom is not None:
            try:
                pas = self.custom.list_namespaced_custom_object(
                    *KNATIVE_PA[:2], self.namespace, KNATIVE_PA[2], label_selector=self.selector
                )
                value = desired_from_podautoscalers(pas)
                if value is not None:
                    return value
            except ApiException as exc:
                if exc.status not in (403, 404):  # no Knative (raw deployment mode) is fine
                    raise
        if self.apps is not None:
            return desired_from_deployments(
                self.apps.list_namespaced_deployment(self.namespace, label_selector=self.selector)
            )
        return None


def locust_web_stats(url: str, timeout: float = 2.0) -> tuple[int, float] | None:
    """Current ``(user_count, total_rps)`` from Locust's web UI API ``<url>/stats/requests``."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/stats/requests", timeout=timeout) as r:
            data = json.loads(r.read())
        return int(data.get("user_count", 0)), float(data.get("total_rps", 0.0))
    except (OSError, ValueError):
        return None


class Observer:
    """Samples a cluster (and Locust) over time.

    Args:
        reader: a :class:`ClusterReader`.
        locust: ``() -> (users, rps) | None`` for the current load, or ``None``.
        clock: ``() -> seconds`` (monotonic; injectable for tests).
    """

    def __init__(
        self,
        reader: ClusterReader,
        locust: Callable[[], tuple[int, float] | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.reader, self.locust, self.clock = reader, locust, clock
        self.t0 = clock()
        self.samples: list[Sample] = []

    def sample(self) -> Sample:
        """Take and keep one :class:`Sample`."""
        ready, total = self.reader.pods()
        desired = self.reader.desired()
        load = self.locust() if self.locust else None
        s = Sample(
            t=round(self.clock() - self.t0, 3),
            ready_pods=ready,
            total_pods=total,
            desired_replicas=desired,
            users=load[0] if load else None,
            rps=round(load[1], 2) if load else None,
        )
        self.samples.append(s)
        return s


def build_parser() -> argparse.ArgumentParser:
    """Options: target, Locust source, limits, timing, output."""
    p = argparse.ArgumentParser(prog="python -m loadtest.observer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--namespace", default="fashion-mnist")
    p.add_argument("--isvc", default="fashion-mnist", help="InferenceService name")
    p.add_argument("--locust-url", default="", help="Locust web UI, e.g. http://localhost:8089")
    p.add_argument("--locust-history", default="", help="Locust *_stats_history.csv instead")
    p.add_argument("--max-replicas", type=int, required=True)
    p.add_argument("--min-replicas", type=int, default=0)
    p.add_argument("--scale-in-window-s", type=float, default=300.0)
    p.add_argument("--cold-start-s", type=float, default=60.0)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    p.add_argument("--duration", type=float, default=900.0, help="seconds to observe at most")
    p.add_argument("--out-dir", type=Path, default=Path("reports/autoscaling"))
    p.add_argument("--kube-context", default=None)
    return p


def main(args: argparse.Namespace) -> int:
    """Observe, then write timeline.csv / verdict.json / timeline.png; 0 if the judge passes.

    Stops early once the load has ended and pods are back at ``--min-replicas``.
    """
    from kubernetes import client, config

    try:
        config.load_kube_config(context=args.kube_context)
    except config.ConfigException:
        config.load_incluster_config()
    reader = ClusterReader(
        client.CoreV1Api(), client.AppsV1Api(), client.CustomObjectsApi(), args.namespace,
        args.isvc,
    )  # fmt: skip
    wall0 = time.time()
    if args.locust_url:
        locust = lambda: locust_web_stats(args.locust_url)  # noqa: E731
    elif args.locust_history:
        locust = lambda: locust_at(  # noqa: E731
            read_locust_history(args.locust_history) if Path(args.locust_history).exists() else [],
            time.time(),
        )
    else:
        locust = None
    obs = Observer(reader, locust)
    seen_load = False
    while obs.clock() - obs.t0 < args.duration:
        s = obs.sample()
        print(f"t={s.t:7.1f}s ready={s.ready_pods} pods={s.total_pods} "
              f"desired={s.desired_replicas} users={s.users} rps={s.rps}", flush=True)  # fmt: skip
        seen_load = seen_load or (s.users or 0) > 0
        if seen_load and (s.users or 0) == 0 and s.total_pods <= args.min_replicas:
            break
        time.sleep(args.interval)
    verdict = judge(
        obs.samples, args.max_replicas, args.min_replicas, args.scale_in_window_s,
        args.cold_start_s,
    )  # fmt: skip
    out = args.out_dir
    write_timeline_csv(obs.samples, out / "timeline.csv")
    (out / "verdict.json").write_text(
        json.dumps({**asdict(verdict), "started_unix": wall0, "isvc": args.isvc}, indent=2)
    )
    plot_timeline(obs.samples, out / "timeline.png",
                  f"InferenceService {args.namespace}/{args.isvc} autoscaling",
                  args.max_replicas, verdict)  # fmt: skip
    print(("PASS" if verdict.passed else "FAIL: " + "; ".join(verdict.reasons)), flush=True)
    return 0 if verdict.passed else 1


def cli(argv: list[str] | None = None) -> int:
    """Console entry point."""
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
