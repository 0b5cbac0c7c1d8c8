"""The platform's controllers in the e2e: the pods of the pinned installs on the real node.

cert-manager (its controller, webhook and cainjector), KServe (its three controller managers),
the training-operator and Argo (workflow-controller, argo-server) run as the pods of the
Deployments that scripts/install-platform.sh applies, on the real node: their namespaces
(:data:`POD_NAMESPACES`) are created first with the real node's placement annotations, their
images are built here under the pinned names (scripts/e2e-images.sh), and the e2e's kustomize
layer (tests/e2e/platform-layer, the script's PLATFORM_LAYER_DIR) changes two fields of
KServe's managers: imagePullPolicy Always -> IfNotPresent (no registry can be reached) and
requests.cpu 100m -> 10m (the 2-core node). Every webhook keeps upstream's
``clientConfig.service``: the API server calls the pods through their Services. KServe's
webhook certificates are its Certificates, issued by cert-manager, their CA injected by
cainjector; the training-operator's comes from its own rotator, as upstream.

The kwok nodes run no containers: the pods of the kwok-node tests are only simulated; see
docs/e2e-controllers.md.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import real_node
import yaml
from e2e_kube import versions_env

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The e2e's kustomize layer over the pinned installs (install-platform.sh PLATFORM_LAYER_DIR).
PLATFORM_LAYER = Path(__file__).resolve().parent / "platform-layer"


class ControllerError(RuntimeError):
    """A controller binary is missing, did not start, or a cluster call failed."""


def kubectl(kubeconfig: Path, *args: str, input: str | None = None, check: bool = True) -> str:
    """Run the venv's kubectl against ``kubeconfig``; stdout. Raises ControllerError on failure."""
    proc = subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise ControllerError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def kubectl_binary() -> str:
    """$KUBECTL (the kubectl 1.34 that ``make e2e`` exports) or the venv's kubectl."""
    return os.environ.get("KUBECTL") or str(REPO_ROOT / ".venv" / "bin" / "kubectl")


# --- ServiceAccount kubeconfigs -----------------------------------------------------------------


def sa_kubeconfig(admin: Path, namespace: str, sa: str, dest: Path, duration: str = "4h") -> Path:
    """Write ``dest``: a kubeconfig for ServiceAccount ``namespace/sa`` (a token from
    ``kubectl create token``), same cluster as ``admin``, default namespace ``namespace``."""
    token = kubectl(admin, "create", "token", sa, "-n", namespace, f"--duration={duration}").strip()
    raw = json.loads(
        kubectl(admin, "config", "view", "--raw", "--minify", "--flatten", "-o", "json")
    )
    cluster = raw["clusters"][0]["cluster"]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": f"{namespace}-{sa}", "user": {"token": token}}],
        "contexts": [
            {
                "name": "sa",
                "context": {"cluster": "e2e", "user": f"{namespace}-{sa}", "namespace": namespace},
            }
        ],
        "current-context": "sa",
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(cfg))
    dest.chmod(0o600)
    return dest


#: Namespaces of the platform whose controllers run as the pods of the pinned install on the
#: real node (their Deployments as base/platform renders them; the images are local builds
#: under the pinned names, scripts/e2e-images.sh) -> those Deployments.
POD_NAMESPACES = {
    "cert-manager": ("cert-manager", "cert-manager-webhook", "cert-manager-cainjector"),
    "kserve": (
        "kserve-controller-manager",
        "kserve-localmodel-controller-manager",
        "llmisvc-controller-manager",
    ),
    "kubeflow": ("training-operator",),
    "argo": ("workflow-controller", "argo-server"),
}
#: Knative Serving and its ingress, run as pods when the tier ``serving`` runs
#: (:func:`serverless`); else install-platform.sh installs Knative's CRDs only.
SERVERLESS_NAMESPACES = {
    "knative-serving": ("controller", "webhook", "activator", "autoscaler"),
    "traefik": ("traefik",),
}


def serverless() -> bool:
    """Whether Knative Serving and Traefik run in this e2e: the tier ``serving`` is not in
    $E2E_SKIP_TIERS (scripts/e2e-tiers.sh: its tools and images are then built)."""
    return "serving" not in os.environ.get("E2E_SKIP_TIERS", "").split()


def pod_namespaces() -> dict[str, tuple[str, ...]]:
    """The namespaces whose controllers run as pods on the real node -> their Deployments:
    :data:`POD_NAMESPACES`, with :data:`SERVERLESS_NAMESPACES` when :func:`serverless`."""
    return {**POD_NAMESPACES, **(SERVERLESS_NAMESPACES if serverless() else {})}


# --- the platform of a test session ------------------------------------------------------------


@dataclass
class Platform:
    """The platform installed by scripts/install-platform.sh (its pods go with the cluster)."""

    admin: Path
    workdir: Path
    install_log: str
    install_seconds: float

    def check_alive(self) -> None:
        """Raise ControllerError when a controller pod of :func:`pod_namespaces` is not
        Running and Ready on the real node."""
        if bad := unready_platform_pods(self.admin):
            raise ControllerError(f"platform pods not Running and Ready: {bad}")


def install_env(admin: Path | None = None) -> dict[str, str]:
    """Environment for ``scripts/install-platform.sh``: offline mirror mode, the e2e kubectl,
    the e2e's layer (:data:`PLATFORM_LAYER`) and (when given) the admin kubeconfig as
    KUBECONFIG."""
    env = {
        **os.environ,
        "UPSTREAM_MIRROR_DIR": str(mirror_dir()),
        "KUBECTL": kubectl_binary(),
        "PYTHON": str(REPO_ROOT / ".venv" / "bin" / "python"),
        "PLATFORM_LAYER_DIR": str(PLATFORM_LAYER),
    }
    if admin is not None:
        env["KUBECONFIG"] = str(admin)
    return env


def run_install(admin: Path) -> subprocess.Popen:
    """Start ``scripts/install-platform.sh`` against ``admin`` in offline mirror mode (output
    piped: stdout and stderr together)."""
    return subprocess.Popen(
        ["bash", str(REPO_ROOT / "scripts" / "install-platform.sh")],
        env=install_env(admin),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def shared_mirror_dir() -> Path:
    """The offline upstream mirror: $UPSTREAM_MIRROR_DIR, else ../shared/upstream."""
    env = os.environ.get("UPSTREAM_MIRROR_DIR")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "upstream"
    if not path.is_dir():
        raise ControllerError(
            f"no upstream mirror at {path}: set MIRROR_DIR (absolute, or relative to the clone)"
        )
    return path


def mirror_dir() -> Path:
    """The mirror install-platform.sh reads: :func:`shared_mirror_dir`, plus, when
    :func:`serverless`, Knative Serving's serving-core (:func:`knative_serving_core`), which
    ../shared does not mirror: a directory of links beside the e2e's cluster
    ($FMNIST_E2E_DIR, else a temp dir), made once per process."""
    if not serverless():
        return shared_mirror_dir()
    if _MIRROR.get("dir") is None:
        import tempfile

        base = os.environ.get("FMNIST_E2E_DIR") or None
        out = Path(tempfile.mkdtemp(prefix="mirror.", dir=base))
        for f in shared_mirror_dir().iterdir():
            (out / f.name).symlink_to(f.resolve())
        version = versions_env()["KNATIVE_SERVING_VERSION"]
        (out / f"knative-serving-core-{version}.yaml").write_text(knative_serving_core())
        _MIRROR["dir"] = out
    return _MIRROR["dir"]


_MIRROR: dict[str, Path | None] = {"dir": None}


#: Files of knative/serving's config/core that are symlinks into its vendor/ (so not in the
#: module zip, which holds no links), as upstream's tree has them -> (module, file there); the
#: module's version is the one serving's go.mod requires.
KNATIVE_CORE_LINKS = {
    "configmaps/network.yaml": ("knative.dev/networking", "config/config-network.yaml"),
    "300-resources/certificate.yaml": ("knative.dev/networking", "config/certificate.yaml"),
    "300-resources/domain-claim.yaml": ("knative.dev/networking", "config/domain-claim.yaml"),
    "300-resources/ingress.yaml": ("knative.dev/networking", "config/ingress.yaml"),
    "300-resources/serverlessservice.yaml": (
        "knative.dev/networking",
        "config/serverlessservice.yaml",
    ),
    "300-resources/image.yaml": ("knative.dev/caching", "config/image.yaml"),
}


def knative_serving_core() -> str:
    """Knative Serving's serving-core.yaml for versions.env's KNATIVE_SERVING_VERSION, rendered as
    the release renders it from the module's config/core (``ko resolve -R -f config/core``, the
    ``app.kubernetes.io/version: devel`` labels set to the release), except the images: each
    ``ko://knative.dev/serving/cmd/NAME`` becomes the local build scripts/e2e-images.sh names
    ``knative_NAME`` (``ko.local/...``, as ``ko resolve --local`` names it), where the release has
    gcr.io digests that no rebuild can match. The files upstream links from vendor/
    (:data:`KNATIVE_CORE_LINKS`) are read from the modules serving's go.mod requires. The module
    is the one hack/tools/knative-serving.sh
    builds (its version from ``scripts/tools.sh --list``). Raises ControllerError when the module
    cannot be had, or a ``ko://`` reference has no image."""
    listing = _run(["bash", str(REPO_ROOT / "scripts" / "tools.sh"), "--list"])
    (module_version,) = [
        ln.split()[1] for ln in listing.splitlines() if ln.split()[:1] == ["knative-serving"]
    ]
    info = _module(f"knative.dev/serving@{module_version}")
    images = {}
    for line in _run(["bash", str(REPO_ROOT / "scripts" / "e2e-images.sh"), "--list"]).splitlines():
        name, ref = line.split()[:2]
        if name.startswith("knative_"):
            images[f"ko://knative.dev/serving/cmd/{name.removeprefix('knative_')}"] = ref
    release = versions_env()["KNATIVE_SERVING_VERSION"].removeprefix("v")
    requires = dict(
        re.findall(r"^\s*(knative\.dev/\S+) (v\S+)$", Path(info["GoMod"]).read_text(), re.M)
    )
    files = sorted((Path(info["Dir"]) / "config" / "core").rglob("*.yaml"))
    for module, rel in KNATIVE_CORE_LINKS.values():
        dep = _module(f"{module}@{requires[module]}")
        files.append(Path(dep["Dir"]) / rel)
    docs = []
    for path in files:
        text = path.read_text().replace(
            "app.kubernetes.io/version: devel", f'app.kubernetes.io/version: "{release}"'
        )
        for ko, ref in images.items():
            text = text.replace(ko, ref)
        if "ko://" in text:
            raise ControllerError(
                f"{path}: a ko:// image without a local build: {text[text.index('ko://') :][:80]}"
            )
        docs.append(text)
    return "\n---\n".join(docs)


def _module(spec: str) -> dict:
    """``go mod download -json`` of ``spec`` (MODULE@VERSION): its ``Dir``, ``GoMod``, ...
    Raises ControllerError naming where the module must come from: the e2e runs without an
    uplink, so only Go's module cache (filled by the tools' build) can give it."""
    try:
        return json.loads(_run(["go", "mod", "download", "-json", spec]))
    except ControllerError as e:
        raise ControllerError(
            f"{e} (the e2e runs without an uplink: the module is read from Go's module cache, where"
            f" the tools' build puts it; after `go clean -modcache`, fetch it first: go mod"
            f" download {spec})"
        ) from e


def _run(argv: list[str]) -> str:
    """stdout of the repository's script ``argv`` (offline: the shared mirror); raises
    ControllerError with its stderr (or stdout, where ``go mod download -json`` reports) when it
    fails."""
    env = {**os.environ, "UPSTREAM_MIRROR_DIR": str(shared_mirror_dir())}
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO_ROOT, env=env)
    if proc.returncode != 0:
        why = (proc.stderr.strip() or proc.stdout.strip())[-2000:]
        raise ControllerError(f"{' '.join(argv)}: {why}")
    return proc.stdout


def place_on_real_node(admin: Path, namespaces: tuple[str, ...] = ()) -> None:
    """Create ``namespaces`` (default: those of :func:`pod_namespaces`) with the real node's
    placement annotations (real_node.placement_annotations; server-side apply under a field
    manager of the e2e's own, so the install's apply of the same Namespace keeps them). Without
    a real node the controllers run nowhere: real_node.node_name fails (or skips, in a cluster
    started with FMNIST_E2E_REAL_NODE=0)."""
    real_node.node_name()
    for ns in namespaces or tuple(pod_namespaces()):
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "annotations": real_node.placement_annotations()},
        }
        kubectl(
            admin, "apply", "--server-side", "--field-manager=e2e-placement", "-f", "-",
            input=json.dumps(body),
        )  # fmt: skip


def unready_platform_pods(admin: Path) -> list[str]:
    """``namespace/pod: why`` for each pod of the Deployments of :data:`POD_NAMESPACES` that is
    not Running and Ready on the real node (a Deployment without pods is named too)."""
    bad = []
    node = real_node.node_name()
    for ns, deployments in pod_namespaces().items():
        for d in deployments:
            deploy = json.loads(kubectl(admin, "get", "deployment", d, "-n", ns, "-o", "json"))
            labels = deploy["spec"]["selector"]["matchLabels"]
            selector = ",".join(f"{k}={v}" for k, v in labels.items())
            got = kubectl(admin, "get", "pods", "-n", ns, "-l", selector, "-o", "json")
            mine = json.loads(got)["items"]
            if not mine:
                bad.append(f"{ns}/{d}: no pod")
            for pod in mine:
                st = pod.get("status") or {}
                ready = any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in st.get("conditions") or []
                )
                where = (pod.get("spec") or {}).get("nodeName")
                if st.get("phase") != "Running" or not ready or where != node:
                    waiting = [
                        (c.get("state") or {}).get("waiting", {}).get("reason", "")
                        for c in st.get("containerStatuses") or []
                    ]
                    bad.append(
                        f"{ns}/{pod['metadata']['name']}: {st.get('phase')} ready={ready}"
                        f" node={where} {' '.join(w for w in waiting if w)}".rstrip()
                    )
    return bad


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def start_platform(admin: Path, workdir: Path, timeout: float = 900) -> Platform:
    """Install the platform with scripts/install-platform.sh (offline), as on k3d: the
    namespaces of :data:`POD_NAMESPACES` are placed on the real node first, so the script's own
    Deployments run every controller as a pod (cert-manager's included) and the script waits
    for them. Returns once the script exited 0; raises ControllerError with the script's output
    otherwise. conftest's session fixture ``platform`` calls it once per session."""
    if threading.current_thread() is threading.main_thread():
        # SIGTERM (e.g. a CI timeout) -> KeyboardInterrupt, so pytest runs the teardown
        signal.signal(signal.SIGTERM, _interrupt)
    place_on_real_node(admin)
    t0 = time.monotonic()
    proc = run_install(admin)
    try:
        out, _ = proc.communicate(timeout=timeout)
        (workdir / "install-platform.log").write_text(out)  # kept with the cluster's logs
        if proc.returncode != 0:
            raise ControllerError(f"install-platform.sh exited {proc.returncode}:\n{out}")
        return Platform(admin, workdir, out, time.monotonic() - t0)
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        raise


# --- helpers for the tests that run the project's workloads ------------------------------------


def volume_name(pvc: dict, namespace: str) -> str:
    """The PersistentVolume that :func:`provide_volume` makes for ``namespace``/``pvc``."""
    return f"e2e-{namespace}-{pvc['metadata']['name']}"[:63]


def ensure_storage_class(admin: Path, pvc: dict) -> str:
    """The StorageClass of the project's PVC as k3s has it (local-path: rancher.io/local-path,
    WaitForFirstConsumer; no provisioner runs here), made if missing; its name."""
    sc = pvc["spec"].get("storageClassName") or "standard"
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": sc},
        "provisioner": "rancher.io/local-path",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }
    if not kubectl(admin, "get", "storageclass", sc, "--ignore-not-found", "-o", "name"):
        kubectl(admin, "apply", "-f", "-", input=json.dumps(storage_class))
    return sc


def provide_volume(admin: Path, pvc: dict, namespace: str, host_path: Path | None = None) -> None:
    """Make the project's PVC bindable on the kwok cluster: its StorageClass (k3s' local-path:
    rancher.io/local-path, WaitForFirstConsumer; no provisioner runs here) and a PersistentVolume
    pre-bound to ``namespace``/``pvc`` (hostPath: never mounted on a kwok node; mounted for real
    by the real node's kubelet, at ``host_path``, which the caller prepares: real_node.py), so
    the real PV controller binds the claim and the scheduler places the pods that mount it."""
    spec = pvc["spec"]
    sc = ensure_storage_class(admin, pvc)
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name(pvc, namespace)},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec["accessModes"],
            "storageClassName": sc,
            "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": str(host_path or f"/tmp/e2e-pv/{namespace}")},
            "claimRef": {"namespace": namespace, "name": pvc["metadata"]["name"]},
        },
    }
    kubectl(admin, "apply", "-f", "-", input=json.dumps(pv))
    # Only the declared fields: a claim read back from the server carries its resourceVersion,
    # and the PV controller may bind it (a write) between that read and this apply, which would
    # then fail with a Conflict (seen in CI).
    meta = pvc["metadata"]
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": meta["name"],
            "namespace": namespace,
            **({"labels": meta["labels"]} if meta.get("labels") else {}),
        },
        "spec": {k: spec[k] for k in ("accessModes", "resources", "storageClassName") if k in spec},
    }
    kubectl(admin, "apply", "-f", "-", input=json.dumps(claim))
