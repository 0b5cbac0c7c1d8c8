"""Watch an InferenceService autoscale while Locust loads it; record, judge and plot a timeline.

    python -m loadtest.observer --namespace fashion-mnist --isvc fashion-mnist \\
        --locust-url http://localhost:8089 --max-replicas 5 --min-replicas 0 \\
        --out-dir reports/autoscaling --duration 600

Every ``--interval`` seconds it records one :class:`Sample`: ready and total predictor pods
(label ``serving.kserve.io/inferenceservice=<isvc>``, terminating pods not counted), the desired
replicas (Knative ``PodAutoscaler`` ``status.desiredScale`` in serverless mode, the
``HorizontalPodAutoscaler``'s ``status.desiredReplicas`` in Standard mode, else the predictor
``Deployment``'s ``spec.replicas``), and Locust's current users and requests/s (its web
API ``/stats/requests``, or the ``*_stats_history.csv`` of a headless run). At the end it writes
``timeline.csv``, ``verdict.json`` and ``timeline.png`` and exits 0 when :func:`judge` passes:

* scaled out: more than one ready pod while under load (or within ``--cold-start-s`` after);
* never more than ``--max-replicas`` pods or desired replicas;
* scaled back in: from a time within ``--scale-in-window-s`` after the load ended, ready pods,
  pods and desired replicas stay at most ``--min-replicas`` to the end (``--hold-s`` at least);
* no flapping after scaling in, and no pods stuck not ready longer than ``--cold-start-s``.

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
    """Result of :func:`judge`: ``passed``, the reasons it failed, and the key moments.

    Attributes:
        scaled_in_t: start of the final stretch at ``--min-replicas`` that lasts to the end of
            the timeline (``None`` if the timeline does not end there).
        last_above_t: last sample after the load with more than ``--min-replicas`` pods.
        held_s: how long the final stretch at ``--min-replicas`` lasted.
        flaps: times after the first scale-in at which pods rose above ``--min-replicas`` again.
        stuck: ``(from_t, to_t)`` stretches in which pods stayed not ready longer than the
            cold-start grace.
    """

    passed: bool
    reasons: list[str] = field(default_factory=list)
    peak_ready_pods: int = 0
    peak_replicas: int = 0
    load_start_t: float | None = None
    load_end_t: float | None = None
    scaled_out_t: float | None = None
    scaled_in_t: float | None = None
    last_above_t: float | None = None
    held_s: float = 0.0
    flaps: list[float] = field(default_factory=list)
    stuck: list[tuple[float, float]] = field(default_factory=list)

    def summary(self) -> str:
        """One line: ``PASS: ...`` with the key times, or ``FAIL: <reasons>``."""
        if not self.passed:
            return "FAIL: " + "; ".join(self.reasons)
        return (
            f"PASS: scaled out at t={self.scaled_out_t:.0f}s, load ended at "
            f"t={self.load_end_t:.0f}s, back at min replicas from t={self.scaled_in_t:.0f}s "
            f"to the end ({self.held_s:.0f}s)"
        )


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


def desired_from_hpas(hpa_list: Any) -> int | None:
    """Sum of ``status.desiredReplicas`` over the predictor's HorizontalPodAutoscalers
    (autoscaling/v2; client models or plain dicts; ``None``: none found or not computed yet).
    An HPA the controller has not synced yet reports ``desiredReplicas: 0`` (the field has no
    omitempty) and no ``conditions``: it is skipped."""
    values = []
    for hpa in _get(hpa_list, "items") or []:
        if not _get(hpa, "status", "conditions"):
            continue
        v = _get(hpa, "status", "desired_replicas")
        v = _get(hpa, "status", "desiredReplicas") if v is None else v
        if v is not None:
            values.append(int(v))
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


def _at_min(s: Sample, min_replicas: int) -> bool:
    return (
        s.ready_pods <= min_replicas
        and s.total_pods <= min_replicas
        and (s.desired_replicas is None or s.desired_replicas <= min_replicas)
    )


def _not_ready_stretches(samples: list[Sample]) -> list[tuple[float, float]]:
    """``(first_t, until_t)`` of each run of samples with pods that are not ready; ``until_t``
    is the first sample where all pods are ready again (or the last sample)."""
    out, start = [], None
    for s in samples:
        if s.total_pods > s.ready_pods and start is None:
            start = s.t
        elif s.total_pods <= s.ready_pods and start is not None:
            out.append((start, s.t))
            start = None
    if start is not None:
        out.append((start, samples[-1].t))
    return out


def judge(
    samples: list[Sample],
    max_replicas: int,
    min_replicas: int = 0,
    scale_in_window_s: float = 300.0,
    cold_start_s: float = 60.0,
    load_end_t: float | None = None,
    hold_s: float = 60.0,
) -> Verdict:
    """Judge a whole autoscaling timeline.

    Passes when all of these hold:

    * scaled out: more than one ready pod while under load (or within ``cold_start_s`` after);
    * never more than ``max_replicas`` pods or desired replicas;
    * scaled back in: from some time on, ready pods, pods and desired replicas stay at most
      ``min_replicas`` **to the end of the timeline**, that time is within
      ``scale_in_window_s`` after the load ended, and the stretch lasts ``hold_s`` or more;
    * no flapping: once back at ``min_replicas`` after the load, pods never rise above it again;
    * no pods stuck not ready: no stretch with not-ready pods longer than ``cold_start_s``.

    Args:
        samples: observations in time order.
        max_replicas: the InferenceService's ``maxReplicas``.
        min_replicas: ``minReplicas`` (0 with scale to zero): the target after the load.
        scale_in_window_s: seconds after the load ended within which the final stretch at
            ``min_replicas`` must begin.
        cold_start_s: grace for pods to become ready (image pull, model load): after the load
            ended, late-ready pods still count as having scaled out.
        load_end_t: when the load ended; default: the last sample with users > 0.
        hold_s: seconds the final stretch at ``min_replicas`` must last to count.

    Returns:
        A :class:`Verdict`; its reasons name the times involved.
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

    after = [s for s in samples if s.t > v.load_end_t]
    above = [s.t for s in after if not _at_min(s, min_replicas)]
    v.last_above_t = above[-1] if above else None
    tail = [s for s in after if v.last_above_t is None or s.t > v.last_above_t]
    last = samples[-1]
    if tail:
        v.scaled_in_t = tail[0].t
        v.held_s = last.t - v.scaled_in_t
    first_in = next((s.t for s in after if _at_min(s, min_replicas)), None)
    if first_in is not None:
        was_at_min = True
        for s in after:
            if s.t <= first_in:
                continue
            if was_at_min and not _at_min(s, min_replicas):
                v.flaps.append(s.t)
            was_at_min = _at_min(s, min_replicas)
    target = f"{min_replicas} replica(s)"
    if v.scaled_in_t is None:
        since = "" if first_in is None else f" (it was there at t={first_in:.0f}s)"
        v.reasons.append(
            f"did not stay scaled in: {last.ready_pods} ready / {last.total_pods} pods at the end "
            f"(t={last.t:.0f}s), above {target} last at t={v.last_above_t:.0f}s{since}"
        )
    elif v.scaled_in_t > v.load_end_t + scale_in_window_s:
        v.reasons.append(
            f"scaled in to {target} only at t={v.scaled_in_t:.0f}s, "
            f"{v.scaled_in_t - v.load_end_t:.0f}s after the load ended at t={v.load_end_t:.0f}s "
            f"(window {scale_in_window_s:.0f}s; above it last at t={v.last_above_t:.0f}s)"
        )
    elif v.held_s < hold_s:
        v.reasons.append(
            f"back at {target} from t={v.scaled_in_t:.0f}s, but the timeline ends "
            f"{v.held_s:.0f}s later (need {hold_s:.0f}s to tell that it stays there)"
        )
    if v.flaps:
        times = ", ".join(f"t={t:.0f}s" for t in v.flaps)
        v.reasons.append(
            f"flapped: back above {target} after scaling in at t={first_in:.0f}s, at {times}"
        )
    v.stuck = [(a, b) for a, b in _not_ready_stretches(samples) if b - a > cold_start_s]
    for a, b in v.stuck:
        v.reasons.append(
            f"pods stuck not ready from t={a:.0f}s to t={b:.0f}s ({b - a:.0f}s > "
            f"{cold_start_s:.0f}s cold-start grace)"
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
    ax.step(
        t,
        [s.total_pods for s in samples],
        where="post",
        label="pods (incl. starting)",
        lw=1.2,
        ls="--",
    )
    if any(s.desired_replicas is not None for s in samples):
        ax.step(
            t,
            [s.desired_replicas or 0 for s in samples],
            where="post",
            label="desired replicas",
            lw=1.2,
            ls=":",
        )
    if any(s.users is not None for s in samples):
        ax.step(
            t,
            [s.users or 0 for s in samples],
            where="post",
            label="Locust users",
            lw=1.0,
            color="grey",
            alpha=0.7,
        )
    if max_replicas is not None:
        ax.axhline(max_replicas, color="red", lw=0.8, ls="-.", label=f"max replicas {max_replicas}")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("pods / replicas / users")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.2 + 0.5)  # headroom for the legend and labels
    handles, labels = ax.get_legend_handles_labels()
    if any(s.rps is not None for s in samples):
        ax2 = ax.twinx()
        ax2.plot(
            t, [s.rps or 0 for s in samples], color="tab:purple", alpha=0.6, label="requests/s"
        )
        ax2.set_ylabel("requests/s")
        ax2.set_ylim(bottom=0)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if verdict is not None:
        for x, name in ((verdict.load_end_t, "load ended"), (verdict.scaled_in_t, "scaled in")):
            if x is not None:
                ax.axvline(x, color="black", lw=0.6, alpha=0.5)
                ax.text(x, ax.get_ylim()[1] * 0.97, f" {name}", fontsize=8, va="top")
        title = f"{title}\n{verdict.summary()}"
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
        autoscaling: ``AutoscalingV2Api`` (``list_namespaced_horizontal_pod_autoscaler``) or
            ``None``.
    """

    def __init__(self, core, apps, custom, namespace: str, isvc: str, autoscaling=None):
        self.core, self.apps, self.custom = core, apps, custom
        self.autoscaling = autoscaling
        self.namespace = namespace
        self.selector = f"{ISVC_LABEL}={isvc}"

    def pods(self) -> tuple[int, int]:
        """``(ready, total)`` predictor pods (see :func:`count_pods`)."""
        return count_pods(
            self.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        )

    def desired(self) -> int | None:
        """Knative PodAutoscaler desiredScale, else the HPA's desiredReplicas (Standard mode),
        else Deployment spec.replicas, else ``None``."""
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
        if self.autoscaling is not None:
            try:
                value = desired_from_hpas(
                    self.autoscaling.list_namespaced_horizontal_pod_autoscaler(
                        self.namespace, label_selector=self.selector
                    )
                )
            except ApiException as exc:
                if exc.status not in (403, 404):  # not allowed to read HPAs: the Deployment's
                    raise
                value = None
            if value is not None:
                return value
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
    p = argparse.ArgumentParser(
        prog="python -m loadtest.observer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--namespace", default="fashion-mnist")
    p.add_argument("--isvc", default="fashion-mnist", help="InferenceService name")
    p.add_argument("--locust-url", default="", help="Locust web UI, e.g. http://localhost:8089")
    p.add_argument("--locust-history", default="", help="Locust *_stats_history.csv instead")
    p.add_argument("--max-replicas", type=int, required=True)
    p.add_argument("--min-replicas", type=int, default=0)
    p.add_argument("--scale-in-window-s", type=float, default=300.0)
    p.add_argument("--cold-start-s", type=float, default=60.0)
    p.add_argument(
        "--hold-s",
        type=float,
        default=60.0,
        help="seconds the pods must stay at --min-replicas after the load (observed to the end)",
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    p.add_argument("--duration", type=float, default=900.0, help="seconds to observe at most")
    p.add_argument("--out-dir", type=Path, default=Path("reports/autoscaling"))
    p.add_argument("--kube-context", default=None)
    return p


def main(args: argparse.Namespace) -> int:
    """Observe, then write timeline.csv / verdict.json / timeline.png; 0 if the judge passes.

    Stops early once the load has ended and pods have stayed at ``--min-replicas`` for
    ``--hold-s`` seconds (so flapping during the hold is seen).
    """
    from kubernetes import client, config

    try:
        config.load_kube_config(context=args.kube_context)
    except config.ConfigException:
        config.load_incluster_config()
    reader = ClusterReader(
        client.CoreV1Api(),
        client.AppsV1Api(),
        client.CustomObjectsApi(),
        args.namespace,
        args.isvc,
        client.AutoscalingV2Api(),
    )
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
    seen_load, at_min_since = False, None
    while obs.clock() - obs.t0 < args.duration:
        s = obs.sample()
        print(
            f"t={s.t:7.1f}s ready={s.ready_pods} pods={s.total_pods} "
            f"desired={s.desired_replicas} users={s.users} rps={s.rps}",
            flush=True,
        )
        seen_load = seen_load or (s.users or 0) > 0
        if seen_load and (s.users or 0) == 0 and _at_min(s, args.min_replicas):
            at_min_since = s.t if at_min_since is None else at_min_since
            if s.t - at_min_since >= args.hold_s:
                break
        else:
            at_min_since = None
        time.sleep(args.interval)
    verdict = judge(
        obs.samples,
        args.max_replicas,
        args.min_replicas,
        args.scale_in_window_s,
        args.cold_start_s,
        hold_s=args.hold_s,
    )
    out = args.out_dir
    write_timeline_csv(obs.samples, out / "timeline.csv")
    (out / "verdict.json").write_text(
        json.dumps({**asdict(verdict), "started_unix": wall0, "isvc": args.isvc}, indent=2)
    )
    plot_timeline(
        obs.samples,
        out / "timeline.png",
        f"InferenceService {args.namespace}/{args.isvc} autoscaling",
        args.max_replicas,
        verdict,
    )
    print(verdict.summary(), flush=True)
    return 0 if verdict.passed else 1


def cli(argv: list[str] | None = None) -> int:
    """Console entry point."""
    return main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(cli())
