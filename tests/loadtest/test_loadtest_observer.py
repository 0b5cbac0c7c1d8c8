"""The autoscaling observer on fixture API responses (no cluster): sampling, judge, CSV, PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from loadtest.observer import (
    ClusterReader,
    Observer,
    Sample,
    count_pods,
    desired_from_hpas,
    judge,
    locust_at,
    plot_timeline,
    read_locust_history,
    read_timeline_csv,
    write_timeline_csv,
)

FIXTURE = Path(__file__).parent / "fixtures" / "autoscale_snapshots.json"


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeCoreV1Api:
    """Returns real ``V1PodList`` objects deserialised from the fixture JSON."""

    def __init__(self, snapshots, api: ApiClient):
        self.snapshots, self.api, self.i, self.calls = snapshots, api, 0, []

    def list_namespaced_pod(self, namespace, label_selector=None):
        self.calls.append((namespace, label_selector))
        text = json.dumps(self.snapshots[self.i]["pods"])
        return self.api.deserialize(text, "V1PodList", "application/json")


class FakeCustomObjectsApi:
    def __init__(self, snapshots, fail_status=None):
        self.snapshots, self.i, self.fail_status = snapshots, 0, fail_status

    def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector):
        assert (group, version, plural) == (
            "autoscaling.internal.knative.dev",
            "v1alpha1",
            "podautoscalers",
        )
        if self.fail_status:
            raise ApiException(status=self.fail_status)
        return self.snapshots[self.i]["podautoscalers"]  # the API returns plain dicts


class FakeAppsV1Api:
    def __init__(self, api: ApiClient, replicas: int):
        self.api, self.replicas = api, replicas

    def list_namespaced_deployment(self, namespace, label_selector=None):
        text = json.dumps(
            {
                "apiVersion": "apps/v1",
                "kind": "DeploymentList",
                "metadata": {},
                "items": [
                    {
                        "metadata": {"name": "fashion-mnist-predictor", "namespace": namespace},
                        "spec": {
                            "replicas": self.replicas,
                            "selector": {"matchLabels": {"app": "x"}},
                            "template": {"metadata": {}},
                        },
                    }
                ],
            }
        )
        return self.api.deserialize(text, "V1DeploymentList", "application/json")


def observe_fixture():
    """Replay the fixture snapshots through ClusterReader/Observer; returns (observer, meta)."""
    meta = json.loads(FIXTURE.read_text())
    snaps = meta["snapshots"]
    api = ApiClient()
    core, custom = FakeCoreV1Api(snaps, api), FakeCustomObjectsApi(snaps)
    reader = ClusterReader(core, None, custom, meta["namespace"], meta["isvc"])
    clock = FakeClock()
    state = {"i": 0}

    def locust():
        d = snaps[state["i"]]["locust"]
        return None if d is None else (d["user_count"], d["total_rps"])

    obs = Observer(reader, locust, clock)
    for i, snap in enumerate(snaps):
        core.i = custom.i = state["i"] = i
        clock.now = 1000.0 + snap["t"]
        obs.sample()
    assert core.calls[0] == ("fashion-mnist", "serving.kserve.io/inferenceservice=fashion-mnist")
    return obs, meta


def test_count_pods_on_real_pod_objects():
    snaps = json.loads(FIXTURE.read_text())["snapshots"]
    api = ApiClient()
    by_t = {
        s["t"]: api.deserialize(json.dumps(s["pods"]), "V1PodList", "application/json")
        for s in snaps
    }
    assert count_pods(by_t[0]) == (0, 0)
    assert count_pods(by_t[10]) == (0, 1)  # Pending: counted, not ready
    assert count_pods(by_t[50]) == (2, 5)
    assert count_pods(by_t[130]) == (3, 3)  # terminating pods are not counted
    assert count_pods(snaps[5]["pods"]) == (2, 5)  # the plain-dict form works too


def test_observer_samples_and_judge_passes_good_timeline(tmp_path):
    obs, meta = observe_fixture()
    s = obs.samples
    assert [x.t for x in s][:3] == [0.0, 10.0, 20.0]
    assert max(x.ready_pods for x in s) == 5
    assert s[6] == Sample(60.0, 4, 5, 5, 5, 71.3)
    v = judge(s, meta["max_replicas"], meta["min_replicas"], scale_in_window_s=150, hold_s=30)
    assert v.passed, v.reasons
    assert v.load_end_t == 120.0 and v.scaled_out_t == 50.0 and v.scaled_in_t == 220.0
    # timeline CSV round trip and the plot
    write_timeline_csv(s, tmp_path / "timeline.csv")
    assert read_timeline_csv(tmp_path / "timeline.csv") == s
    png = plot_timeline(s, tmp_path / "timeline.png", "test fixture", 5, v)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_judge_fails_when_scale_in_is_too_slow():
    obs, meta = observe_fixture()
    v = judge(obs.samples, meta["max_replicas"], 0, scale_in_window_s=60, hold_s=30)
    assert not v.passed
    assert any("only at t=220s" in r for r in v.reasons), v.reasons


def _timeline(pods_under_load: int, pods_after: list[int], desired_peak=None):
    samples = [Sample(0, 0, 0, 0, 0, 0.0)]
    for t in range(10, 110, 10):
        samples.append(
            Sample(t, pods_under_load, pods_under_load, desired_peak or pods_under_load, 5, 80.0)
        )
    for k, p in enumerate(pods_after):
        samples.append(Sample(110 + 30 * k, p, p, p, 0, 0.0))
    return samples


def test_judge_fails_when_never_scaling_out():
    v = judge(_timeline(1, [0]), max_replicas=5, hold_s=0)
    assert not v.passed and any("never scaled out" in r for r in v.reasons)


def test_judge_fails_when_exceeding_max():
    v = judge(_timeline(5, [0], desired_peak=7), max_replicas=5, hold_s=0)
    assert not v.passed and any("exceeded max replicas 5: 7" in r for r in v.reasons)
    assert judge(_timeline(5, [0]), max_replicas=5, hold_s=0).passed


def test_judge_min_replicas_and_no_load():
    assert judge(_timeline(4, [3, 1]), max_replicas=5, min_replicas=1, hold_s=0).passed
    assert not judge(_timeline(4, [3, 2]), max_replicas=5, min_replicas=1, hold_s=0).passed
    v = judge([Sample(0, 1, 1), Sample(10, 1, 1)], max_replicas=5)
    assert not v.passed and "no load seen" in v.reasons[0]


def test_cold_start_grace():
    # pods become ready only 30 s after the load stopped: counted with 60 s grace, not with 10 s
    samples = [
        Sample(0, 0, 0, 0, 5, 9.0),
        Sample(10, 1, 3, 3, 5, 9.0),
        Sample(20, 1, 3, 3, 0, 0),
        Sample(40, 3, 3, 3, 0, 0.0),
        Sample(100, 0, 0, 0, 0, 0.0),
    ]
    assert judge(samples, 5, cold_start_s=60, hold_s=0).passed
    assert not judge(samples, 5, cold_start_s=10, hold_s=0).passed


def _raw_mode_reader(autoscaling=None) -> tuple[ClusterReader, dict]:
    """A reader of the fixture's pods, a Deployment of 3 replicas and no Knative (404)."""
    meta = json.loads(FIXTURE.read_text())
    api = ApiClient()
    reader = ClusterReader(
        FakeCoreV1Api(meta["snapshots"], api),
        FakeAppsV1Api(api, 3),
        FakeCustomObjectsApi(meta["snapshots"], fail_status=404),
        "fashion-mnist",
        "fashion-mnist",
        autoscaling,
    )
    return reader, meta


def test_desired_falls_back_to_deployment_without_knative():
    reader, meta = _raw_mode_reader()
    assert reader.desired() == 3
    reader.custom = FakeCustomObjectsApi(meta["snapshots"], fail_status=500)
    with pytest.raises(ApiException):
        reader.desired()


def test_desired_reads_the_hpa_in_standard_mode():
    class FakeAutoscalingV2Api:
        def __init__(self, desired):
            self.desired, self.calls = desired, []

        def list_namespaced_horizontal_pod_autoscaler(self, namespace, label_selector):
            self.calls.append((namespace, label_selector))
            synced = [{"type": "AbleToScale", "status": "True"}]
            if self.desired is None:  # created, not synced yet: desiredReplicas 0, no conditions
                return {"items": [{"status": {"desiredReplicas": 0, "currentReplicas": 0}}]}
            return {"items": [{"status": {"desiredReplicas": self.desired, "conditions": synced}}]}

    hpas = FakeAutoscalingV2Api(2)
    reader, _ = _raw_mode_reader(hpas)
    assert reader.desired() == 2  # the HPA's, not the Deployment's 3
    assert hpas.calls == [("fashion-mnist", "serving.kserve.io/inferenceservice=fashion-mnist")]
    reader.autoscaling = FakeAutoscalingV2Api(None)  # not computed yet: the Deployment's
    assert reader.desired() == 3
    assert desired_from_hpas({"items": []}) is None


def test_locust_history_csv(tmp_path):
    path = tmp_path / "run_stats_history.csv"
    header = "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%\n"
    path.write_text(
        header + "100,1,POST,/v1/models/[name]:predict,5.0,0,10\n"
        "100,1,,Aggregated,5.0,0,10\n200,4,,Aggregated,40.5,0,12\n"
    )
    hist = read_locust_history(path)
    assert hist == [(100.0, 1, 5.0), (200.0, 4, 40.5)]
    assert locust_at(hist, 150) == (1, 5.0) and locust_at(hist, 250) == (4, 40.5)
    assert locust_at(hist, 50) is None


TIMELINES = json.loads((FIXTURE.parent / "verdict_timelines.json").read_text())["kinds"]


@pytest.mark.parametrize("kind", TIMELINES)
def test_each_verdict_kind_on_its_fixture_timeline(kind):
    case = TIMELINES[kind]
    v = judge([Sample(*row) for row in case["samples"]], **case["judge"])
    if case["expect"].startswith("PASS"):
        assert v.passed and v.summary() == case["expect"], v.reasons
    else:
        assert not v.passed
        assert case["expect"] in v.reasons, v.reasons
        assert v.summary().startswith("FAIL: ")


def test_verdict_kinds_are_all_covered():
    reasons = " ".join(TIMELINES[k]["expect"] for k in TIMELINES)
    for phrase in (
        "PASS",
        "did not stay scaled in",
        "only at",
        "flapped",
        "stuck not ready",
        "never scaled out",
        "exceeded max",
        "no load",
        "timeline ends",
    ):
        assert phrase in reasons, phrase
