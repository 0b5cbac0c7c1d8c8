"""The e2e cluster's real node (scripts/e2e-node.sh): what a test needs to run real containers.

The node (``$FMNIST_E2E_REAL_NODE``, set by scripts/e2e-cluster.sh) is a kubelet with containerd,
runc, the CNI bridge, kube-proxy and CoreDNS, in the run's network namespace. It registers with
the taint ``e2e.fashion-mnist/real-node=true:NoSchedule``: only the pods of a namespace that
:func:`opt_in` annotated land there (the API server's PodNodeSelector and
PodTolerationRestriction admission plugins add the node selector and the toleration to every
pod of it): the platform's namespaces and the tests' real-node namespaces; the pods of any other
namespace stay on the kwok nodes.

Its images are the ones scripts/e2e-images.sh built and the node imported (nothing can be
pulled: the namespace has no uplink); :func:`imported_images` lists them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
from e2e_kube import REPO_ROOT, Kubectl

NODE_LABEL = "e2e.fashion-mnist/real-node"
NODE_IP = "10.244.0.1"
CLUSTER_DOMAIN = "cluster.local"
UID = 1000  # the project image's user (Dockerfile), which runs every pipeline container


def node_name() -> str:
    """The real node's name; pytest.fail when the cluster has none (the run was started with
    FMNIST_E2E_REAL_NODE=0: then every test that needs it is skipped, saying so)."""
    name = os.environ.get("FMNIST_E2E_REAL_NODE", "")
    if not name:
        if os.environ.get("FMNIST_E2E_REAL_NODE_DISABLED") == "1":
            pytest.skip("started with FMNIST_E2E_REAL_NODE=0: no real node in this cluster")
        pytest.fail(
            "the e2e cluster has no real node (FMNIST_E2E_REAL_NODE unset): start it "
            "with scripts/e2e-cluster.sh, which runs scripts/e2e-node.sh"
        )
    return name


def node_dir() -> Path:
    """The node's directory (logs, configs, images.txt) under the cluster's $FMNIST_E2E_DIR."""
    return Path(os.environ["FMNIST_E2E_DIR"]) / "kwok" / "node"


def placement_annotations() -> dict[str, str]:
    """The namespace annotations that send every pod of a namespace to the real node: the node
    selector of the PodNodeSelector admission plugin and the toleration of its taint that
    PodTolerationRestriction adds."""
    tolerations = json.dumps([{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}])
    return {
        "scheduler.alpha.kubernetes.io/node-selector": f"{NODE_LABEL}=true",
        "scheduler.alpha.kubernetes.io/defaultTolerations": tolerations,
    }


def opt_in(kubectl: Kubectl, namespace: str, restricted: bool = True) -> None:
    """Send every pod of ``namespace`` to the real node (the namespace annotations of the
    PodNodeSelector and PodTolerationRestriction admission plugins) and, by default, enforce
    the ``restricted`` Pod Security Standard there as the project's namespace does."""
    kubectl(
        "annotate", "namespace", namespace, "--overwrite",
        *(f"{k}={v}" for k, v in placement_annotations().items()),
    )  # fmt: skip
    if restricted:
        kubectl(
            "label", "namespace", namespace, "--overwrite",
            "pod-security.kubernetes.io/enforce=restricted",
        )  # fmt: skip


def volume_root(namespace: str) -> Path:
    """The host directory behind ``namespace``'s PVC on the real node (seeded_volume); what the
    pods write under /mnt/shared is there."""
    return Path(os.environ["FMNIST_E2E_DIR"]) / "volumes" / namespace


def seeded_volume(namespace: str) -> Path:
    """A hostPath directory for the namespace's PVC (controllers.provide_volume host_path), owned
    by the image's user (a hostPath volume gets no fsGroup), with the offline tfds build of
    Fashion-MNIST ($TFDS_DATA_DIR, ../shared/tfds in CI) copied to ``tfds/``, where the
    pipeline's ingest finds it prepared and training reads it. Removed with the cluster's
    directory."""
    src = Path(os.environ.get("TFDS_DATA_DIR") or REPO_ROOT.parent / "shared" / "tfds")
    if not (src / "fashion_mnist").is_dir():
        pytest.fail(f"no tfds build of fashion_mnist in {src}: set MIRROR_DIR=../shared")
    root = volume_root(namespace)
    shutil.copytree(src, root / "tfds", dirs_exist_ok=True)
    chown_tree(root)
    # the mode k3s' local-path provisioner gives a volume (`mkdir -m 0777`): the kubelet makes a
    # pod's missing subPath (KServe's pvc://.../models/fashion-mnist/1, before it is published)
    # with the volume's mode, owned by root; under 0755 the pipeline (UID 1000) could not publish
    root.chmod(0o777)
    return root


def chown_tree(root: Path) -> None:
    """``root`` and everything under it owned by the image's user (what a pod writes there
    later is its own)."""
    for path in [root, *root.rglob("*")]:
        os.chown(path, UID, UID)


def imported_images() -> set[str]:
    """The image references the node's containerd holds (images.txt, written at its start)."""
    return {line for line in (node_dir() / "images.txt").read_text().split() if line}


@cache
def _containerd_bin_dir() -> str:
    """Where scripts/tools.sh built containerd's programs (asked once per session)."""
    return subprocess.run(
        [str(REPO_ROOT / "scripts" / "tools.sh"), "--bin-dir", "containerd"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def _ctr(*args: str) -> str:
    """``ctr`` (scripts/tools.sh containerd) on the node's containerd, in the CRI's namespace
    ``k8s.io``; its stdout. Raises CalledProcessError when it fails."""
    return subprocess.run(
        [f"{_containerd_bin_dir()}/ctr", "--address", str(node_dir() / "containerd.sock"),
         "--namespace", "k8s.io", *args],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def tag_image(source: str, target: str) -> None:
    """Give the node's image ``source`` the second name ``target`` (``ctr images tag``; the
    kubelet's CRI sees the new name at once), as :func:`canonical` names both: for a name an
    upstream controller derives at run time (KServe's ``runtimeVersion`` tag), which no
    manifest of the repository holds for the e2e's layers to map. Raises CalledProcessError
    when ``source`` was not imported."""
    _ctr("images", "tag", "--force", canonical(source), canonical(target))


def image_digests(ref: str) -> set[str]:
    """The digests that identify the node's image ``ref`` (``sha256:<hex>``): its manifest's
    (what ``ctr images ls`` lists; an index's manifests too) and its config's (the image ID);
    a pod's ``status.containerStatuses[].imageID`` ends with one of them (containerd's CRI
    reports the repo digest, or the image ID where it has none). Raises AssertionError when
    the node has no image of that name."""
    ref = canonical(ref)
    rows = [line.split() for line in _ctr("images", "ls", f"name=={ref}").splitlines()[1:]]
    assert len(rows) == 1 and rows[0][0] == ref, f"{ref} on the node: {rows}"
    digests, todo = set(), [rows[0][2]]
    while todo:  # an index (a manifest list) names its manifests, each names its config
        digest = todo.pop()
        digests.add(digest)
        doc = json.loads(_ctr("content", "get", digest))
        todo += [m["digest"] for m in doc.get("manifests") or []]
        if "config" in doc:
            digests.add(doc["config"]["digest"])
    return digests


def canonical(ref: str) -> str:
    """An image reference as the node's containerd names it (scripts/lib.sh canonical_image:
    Docker's normalisation, docker.io/library/ for a single name, docker.io/ for a first
    component that is not a registry)."""
    first = ref.split("/")[0]
    if "/" not in ref:
        return f"docker.io/library/{ref}"
    if not any(c in first for c in ".:") and first != "localhost":
        return f"docker.io/{ref}"
    return ref


def imported_image(part: str) -> str:
    """The one imported image reference containing ``part`` (e.g. ``"/event-display:"``)."""
    found = sorted(ref for ref in imported_images() if part in ref)
    assert len(found) == 1, f"{part!r} in the node's images: {found} (scripts/e2e-images.sh)"
    return found[0]


def ml_image(overlay: list[dict]) -> str:
    """The pipeline image as local-k3d deploys it (the WorkflowTemplate's ``image``), from the
    rendered overlay (conftest's ``overlay`` fixture)."""
    wt = next(d for d in overlay if d["kind"] == "WorkflowTemplate")
    return next(p["value"] for p in wt["spec"]["arguments"]["parameters"] if p["name"] == "image")
