"""scripts/k3d-up.sh and scripts/build-image.sh against fake `k3d`, `docker` and `kubectl`.

The fakes come first on PATH and record every call (argv) into a state dir; the fake k3d answers
`k3d version` and `k3d cluster list -o json` from that dir. build-image.sh renders the overlay
with the real .venv/bin/kubectl (kustomize, no cluster); k3d-up.sh's cluster calls go to the
fake kubectl. Expected values are read from versions.env and the rendered overlays.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
REAL_KUBECTL = REPO / ".venv" / "bin" / "kubectl"
FAKE = """#!{python}
import json, pathlib, sys
state = pathlib.Path({state!r})
tool, args = pathlib.Path(sys.argv[0]).name, sys.argv[1:]
with open(state / "calls.jsonl", "a") as f:
    f.write(json.dumps([tool, *args]) + "\\n")
if tool == "k3d" and args[:1] == ["version"]:
    print("k3d version " + (state / "k3d-version").read_text())
    print("k3s version v1.31.5-k3s1 (default)")
elif tool == "k3d" and args[:2] == ["cluster", "list"]:
    names = json.loads((state / "clusters.json").read_text())
    # k3d prints json.Marshal output: compact, one line
    print(json.dumps([{{"name": n, "serversCount": 1}} for n in names], separators=(",", ":")))
"""


def versions() -> dict[str, str]:
    out = {}
    for line in (REPO / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            out[key.strip()] = value.strip()
    return out


@cache
def rendered_image(overlay: str) -> str:
    """The pipeline's `image` parameter as `kubectl kustomize overlays/OVERLAY` renders it."""
    out = subprocess.run(
        [str(REAL_KUBECTL), "kustomize", str(REPO / "overlays" / overlay)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    (wt,) = [d for d in yaml.safe_load_all(out) if d and d.get("kind") == "WorkflowTemplate"]
    (image,) = [p["value"] for p in wt["spec"]["arguments"]["parameters"] if p["name"] == "image"]
    return image


@pytest.fixture
def fakes(tmp_path):
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_dir.mkdir()
    for tool in ("k3d", "docker", "kubectl"):
        exe = bin_dir / tool
        exe.write_text(FAKE.format(python=sys.executable, state=str(state)))
        exe.chmod(0o755)

    def run(script, *args, k3d_version=None, clusters=(), kubectl=bin_dir / "kubectl"):
        (state / "k3d-version").write_text(k3d_version or versions()["K3D_VERSION"])
        (state / "clusters.json").write_text(json.dumps(list(clusters)))
        (state / "calls.jsonl").write_text("")
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "KUBECTL": str(kubectl),
            "CLUSTER_NAME": "fashion-mnist",
        }
        proc = subprocess.run(
            [str(REPO / "scripts" / script), *args],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        calls = [json.loads(c) for c in (state / "calls.jsonl").read_text().splitlines()]
        return proc, calls

    return run


def only(calls, *prefix):
    return [c for c in calls if c[: len(prefix)] == list(prefix)]


def flag_values(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# --- k3d-up.sh ---


def test_k3d_up_creates_the_cluster_with_the_pinned_k3s_and_port_8080(fakes):
    proc, calls = fakes("k3d-up.sh")
    assert proc.returncode == 0, proc.stderr
    (create,) = only(calls, "k3d", "cluster", "create")
    assert create[3] == "fashion-mnist"
    assert flag_values(create, "--image") == [versions()["K3S_IMAGE"]]
    assert flag_values(create, "--port") == ["8080:80@loadbalancer"]
    assert flag_values(create, "--k3s-arg") == ["--disable=traefik@server:0"]
    assert flag_values(create, "--servers") == ["1"] and flag_values(create, "--agents") == ["0"]
    assert not only(calls, "k3d", "cluster", "start")
    assert ["kubectl", "config", "use-context", "k3d-fashion-mnist"] in calls


def test_k3d_up_reuses_an_existing_cluster(fakes):
    proc, calls = fakes("k3d-up.sh", clusters=["other", "fashion-mnist"])
    assert proc.returncode == 0, proc.stderr
    assert not only(calls, "k3d", "cluster", "create")
    assert only(calls, "k3d", "cluster", "start") == [["k3d", "cluster", "start", "fashion-mnist"]]


def test_k3d_up_creates_when_only_other_clusters_exist(fakes):
    proc, calls = fakes("k3d-up.sh", clusters=["fashion-mnist-old"])
    assert proc.returncode == 0, proc.stderr
    assert len(only(calls, "k3d", "cluster", "create")) == 1


def test_k3d_up_refuses_another_k3d_version(fakes):
    pinned = versions()["K3D_VERSION"]
    proc, calls = fakes("k3d-up.sh", k3d_version="v5.6.0")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "v5.6.0" in last and pinned in last
    assert calls == [["k3d", "version"]]  # nothing created, started or configured


# --- build-image.sh ---


def test_rendered_images_come_from_the_environments_and_the_one_tag():
    tag = rendered_image("local-k3d").rpartition(":")[2]
    for overlay in ("local-k3d", "gpu-cloud"):
        env = yaml.safe_load((REPO / "overlays" / overlay / "environment.yaml").read_text())
        assert rendered_image(overlay) == f"{env['data']['image-repository']}:{tag}"
    assert rendered_image("local-k3d") != rendered_image("gpu-cloud")


def build_args(argv):
    return dict(a.split("=", 1) for a in flag_values(argv, "--build-arg"))


def test_build_image_builds_and_imports_the_local_k3d_images(fakes):
    image = rendered_image("local-k3d")
    proc, calls = fakes("build-image.sh", kubectl=REAL_KUBECTL)
    assert proc.returncode == 0, proc.stderr
    builds = only(calls, "docker", "build")
    assert [flag_values(b, "-t") for b in builds] == [[image], [f"{image}-torch"]]
    assert all(b[-1] == str(REPO) for b in builds)
    base = versions()["PYTHON_BASE_IMAGE"]
    assert [build_args(b) for b in builds] == [
        {"PYTHON_BASE_IMAGE": base, "EXTRAS": ""},
        {"PYTHON_BASE_IMAGE": base, "EXTRAS": "torch"},  # the PyTorchJob's image
    ]
    assert only(calls, "k3d") == [
        ["k3d", "image", "import", ref, "--cluster", "fashion-mnist"]
        for ref in (image, f"{image}-torch")
    ]
    assert not only(calls, "docker", "push")
    assert calls.index(builds[0]) < calls.index(only(calls, "k3d")[0])


def test_build_image_gpu_uses_the_gpu_cloud_image_and_the_gpu_extra(fakes):
    image = rendered_image("gpu-cloud")
    proc, calls = fakes("build-image.sh", "--gpu", kubectl=REAL_KUBECTL)
    assert proc.returncode == 0, proc.stderr
    builds = only(calls, "docker", "build")
    assert [flag_values(b, "-t") for b in builds] == [[image], [f"{image}-torch"]]
    assert [build_args(b)["EXTRAS"] for b in builds] == ["gpu", "gpu,torch"]
    assert [c[3] for c in only(calls, "k3d")] == [image, f"{image}-torch"]


def test_build_image_gpu_push_pushes_instead_of_importing(fakes):
    image = rendered_image("gpu-cloud")
    proc, calls = fakes("build-image.sh", "--gpu", "--push", kubectl=REAL_KUBECTL)
    assert proc.returncode == 0, proc.stderr
    assert flag_values(only(calls, "docker", "build")[0], "-t") == [image]
    assert only(calls, "docker", "push") == [
        ["docker", "push", image],
        ["docker", "push", f"{image}-torch"],
    ]
    assert not only(calls, "k3d")


def test_the_pytorchjob_runs_the_torch_build_of_the_pipeline_image():
    """The name build-image.sh gives the PyTorch image is the one the PyTorchJob pulls."""
    wft = (REPO / "base/ml/pipeline/workflowtemplate.yaml").read_text()
    assert 'image: "{{workflow.parameters.image}}-torch"' in wft


def test_build_image_refuses_an_environment_name(fakes):
    # `build-image.sh gpu-cloud` is not a call: the environment is chosen by --gpu
    proc, calls = fakes("build-image.sh", "gpu-cloud", kubectl=REAL_KUBECTL)
    assert proc.returncode == 1 and "unknown argument gpu-cloud" in proc.stderr
    assert not calls
