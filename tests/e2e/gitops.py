"""The GitOps flow of docs/gitops.md in the e2e: a git server of the run serving the tree under
test, Argo CD bootstrapped from a clone of it by ``scripts/bootstrap-argocd.sh``, and helpers
to read what Argo CD reports.

The served repository (:func:`served_tree`) is the tree under test (tracked and untracked files
that git does not ignore, as ``git ls-files -co --exclude-standard`` lists them), then two
commits of the e2e's own, then the user's first step:

1. ``the tree under test``;
2. ``e2e: offline`` - each pinned remote base that Argo CD renders replaced by its
   ``../shared/upstream`` mirror file (``scripts/lib.sh`` mirror_kustomization, as ``make
   validate`` and the installs render them offline; argocd/install keeps its URL:
   bootstrap-argocd.sh renders it with UPSTREAM_MIRROR_DIR, as a user offline would), and
   each ``base/platform/<part>`` that tests/e2e/platform-layer has a layer for rendered through
   that layer (``rendered.yaml`` + the layer's kustomization), so that Argo CD
   syncs the platform exactly as ``scripts/install-platform.sh`` installed it here (KServe's
   imagePullPolicy and requests: tests/e2e/platform-layer/kserve);
3. ``Set the repository URL`` - docs/gitops.md's step 1: ``argocd/apps/common/repository.yaml``
   names this server's URL.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import controllers
import yaml
from e2e_kube import REPO_ROOT, Kubectl
from git_server import git

#: The served repository's name (its clone URL ends in ``/<this>.git``).
REPO_NAME = "fashion-mnist-gitops"
#: The e2e's layer over Argo CD's install (bootstrap-argocd.sh ARGOCD_LAYER_DIR).
ARGOCD_LAYER = Path(__file__).resolve().parent / "argocd-layer"
AUTHOR = {
    "GIT_AUTHOR_NAME": "e2e",
    "GIT_AUTHOR_EMAIL": "e2e@fashion-mnist.example.com",
    "GIT_COMMITTER_NAME": "e2e",
    "GIT_COMMITTER_EMAIL": "e2e@fashion-mnist.example.com",
}


def commit(tree: Path, message: str) -> str:
    """``git add -A`` and commit everything in ``tree`` as the e2e's author; the new revision."""
    git("add", "-A", cwd=tree)
    git("commit", "--quiet", "--allow-empty", "-m", message, cwd=tree, env=AUTHOR)
    return git("rev-parse", "HEAD", cwd=tree).strip()


def push(tree: Path) -> subprocess.CompletedProcess[str]:
    """``git push origin HEAD:main`` from ``tree`` (the hook's ``remote:`` lines in stderr)."""
    return subprocess.run(
        ["git", "-c", "http.postBuffer=1073741824", "push", "origin", "HEAD:main"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _remote_kustomizations(tree: Path) -> list[Path]:
    """The kustomization directories of ``tree`` with a remote resource (a URL) that Argo CD
    renders: not argocd/install (bootstrap-argocd.sh renders it, offline with
    UPSTREAM_MIRROR_DIR, and reads the release from its URL) nor the tests' own."""
    found = []
    for k in sorted(tree.rglob("kustomization.yaml")):
        rel = k.relative_to(tree).parts
        if rel[0] in (".git", "tests") or rel[:2] == ("argocd", "install"):
            continue
        resources = (yaml.safe_load(k.read_text()) or {}).get("resources") or []
        if any("://" in r or r.startswith("github.com/") for r in resources):
            found.append(k.parent)
    return found


def _offline(tree: Path, mirror: Path, kubectl: str) -> None:
    """Commit 2 of the module docstring, in ``tree``."""
    env = {**os.environ, "UPSTREAM_MIRROR_DIR": str(mirror), "KUBECTL": kubectl}
    for d in _remote_kustomizations(tree):
        tmp = d.with_name(d.name + ".offline")
        script = 'source scripts/lib.sh && mirror_kustomization "$1" "$2"'
        subprocess.run(["bash", "-c", script, "-", str(d), str(tmp)], cwd=tree, env=env, check=True)
        shutil.rmtree(d)
        tmp.rename(d)
    for layer in sorted(controllers.PLATFORM_LAYER.iterdir()):
        part = tree / "base" / "platform" / layer.name
        if not (part / "kustomization.yaml").is_file():
            continue  # a part of the install that is no directory of base/platform (serving-core)
        rendered = subprocess.run(
            [kubectl, "kustomize", str(part)], capture_output=True, text=True, check=True
        ).stdout
        shutil.rmtree(part)
        shutil.copytree(layer, part)
        (part / "rendered.yaml").write_text(rendered)


def served_tree(work: Path, url: str, mirror: Path, kubectl: str) -> Path:
    """The working tree of the served repository (module docstring), committed, with ``origin``
    at ``url``; returns its path (``work/served``)."""
    tree = work / "served"
    files = git("ls-files", "-co", "--exclude-standard", "-z", cwd=REPO_ROOT).split("\0")
    for f in filter(None, files):
        src = REPO_ROOT / f
        if src.is_file():  # (a tracked file deleted in the tree under test is not served)
            (tree / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / f)
    git("init", "--quiet", "--initial-branch=main", str(tree))
    commit(tree, "the tree under test")
    _offline(tree, mirror, kubectl)
    commit(tree, "e2e: offline (remote bases from ../shared/upstream) and the e2e's platform layer")
    repo = tree / "argocd" / "apps" / "common" / "repository.yaml"
    doc = yaml.safe_load(repo.read_text())
    doc["data"] = {"url": url, "revision": "main"}
    repo.write_text(yaml.safe_dump(doc, sort_keys=False))
    commit(tree, "Set the repository URL")
    git("remote", "add", "origin", url, cwd=tree)
    return tree


# --- what Argo CD reports ------------------------------------------------------------------------


def app(kubectl: Kubectl, name: str) -> dict:
    """Application ``name`` of namespace argocd (``{}`` while it does not exist)."""
    proc = kubectl.run("get", "applications.argoproj.io", name, "-n", "argocd", "-o", "json")
    return yaml.safe_load(proc.stdout) if proc.returncode == 0 else {}


def state(application: dict) -> tuple[str, str, str]:
    """(sync status, health status, synced revision) of an Application ('' where unset)."""
    st = application.get("status") or {}
    sync = st.get("sync") or {}
    return (
        sync.get("status", ""),
        (st.get("health") or {}).get("status", ""),
        sync.get("revision", ""),
    )


def describe(kubectl: Kubectl) -> str:
    """One line per Application: name, sync, health, revision, operation phase, conditions;
    for an operation that is not Succeeded, the revision it syncs, its retry count and start,
    and each resource of its result that is not Synced (kind/name: status, message)."""
    items = kubectl.json("get", "applications.argoproj.io", "-n", "argocd")["items"]
    lines = []
    for a in items:
        st = a.get("status") or {}
        op = st.get("operationState") or {}
        conds = [f"{c['type']}: {c.get('message', '')[:300]}" for c in st.get("conditions") or []]
        lines.append(
            f"{a['metadata']['name']}: {state(a)[:2]} rev={state(a)[2][:8]} "
            f"op={op.get('phase')} {op.get('message', '')[:300]!r} {conds}"
        )
        if op and op.get("phase") != "Succeeded":
            sync = (op.get("operation") or {}).get("sync") or {}
            failed = [
                f"{r.get('kind')}/{r.get('name')}: {r.get('status')} {r.get('message', '')[:200]}"
                for r in (op.get("syncResult") or {}).get("resources") or []
                if r.get("status") != "Synced"
            ]
            lines.append(
                f"  operation: revision={str(sync.get('revision'))[:8]} "
                f"retryCount={op.get('retryCount', 0)} startedAt={op.get('startedAt')} {failed}"
            )
    return "\n".join(lines)


def wait_synced(kubectl: Kubectl, name: str, revision: str, timeout: float) -> float:
    """Seconds until Application ``name`` is Synced at ``revision`` with no operation running;
    AssertionError (with every Application's state) after ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        a = app(kubectl, name)
        sync, _, rev = state(a)
        op = ((a.get("status") or {}).get("operationState") or {}).get("phase")
        if sync == "Synced" and rev == revision and op != "Running":
            return time.monotonic() - t0
        time.sleep(0.5)
    raise AssertionError(
        f"{name} not Synced at {revision[:8]} in {timeout:.0f}s:\n{describe(kubectl)}"
    )


def comparison_error(application: dict) -> str:
    """The message of an Application's ComparisonError condition ('' when it has none)."""
    conds = (application.get("status") or {}).get("conditions") or []
    return next((c.get("message", "") for c in conds if c["type"] == "ComparisonError"), "")


def resource_version(kubectl: Kubectl, name: str) -> str:
    """Application ``name``'s metadata.resourceVersion now (where :func:`watch_app` starts)."""
    return app(kubectl, name)["metadata"]["resourceVersion"]


def watch_app(kubectl: Kubectl, name: str, since: str, predicate, timeout: float) -> dict:
    """The first state of Application ``name`` written after resourceVersion ``since`` for which
    ``predicate(application)`` is truthy, read from the API server's watch (``GET ...?watch=1``),
    so a status that Argo CD replaces at its next reconciliation is seen too: a refused
    server-side diff's ComparisonError lasts only until the controller next compares from its
    diff cache (Argo CD v3.5.1 controller/state.go ``useDiffCache``: with ServerSideDiff the
    cache is used even after the soft expiry, and a failed comparison cached every resource as
    unmodified). AssertionError naming the states seen after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    version, err = since, ""
    # the API server may end a watch early: watch again from the last version seen, until then
    while (left := deadline - time.monotonic()) > 0:
        path = (
            f"/apis/argoproj.io/v1alpha1/namespaces/argocd/applications?watch=1"
            f"&fieldSelector=metadata.name%3D{name}&resourceVersion={version}"
            f"&timeoutSeconds={max(1, math.ceil(left))}"
        )
        cmd = [kubectl.binary, "--kubeconfig", str(kubectl.kubeconfig), "get", "--raw", path]
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            # the caller's deadline, whatever kubectl does
            timer = threading.Timer(left + 5, proc.kill)
            timer.start()
            try:
                for line in proc.stdout:
                    try:
                        event = json.loads(line)
                    except json.JSONDecodeError:
                        break  # a stream cut mid-event: watch again
                    if event.get("type") == "ERROR":  # e.g. 410: the version is compacted
                        raise AssertionError(f"watch of {name} since {version}: {event}")
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if predicate(obj):
                        return obj
                    sync, health, rev = state(obj)
                    seen.append(f"{sync}/{health}@{rev[:8]} {comparison_error(obj)[:120]!r}")
            finally:
                timer.cancel()
                proc.kill()
            err = proc.stderr.read() or err
        if proc.returncode not in (0, None) and deadline - time.monotonic() > 1:
            time.sleep(1)  # kubectl failed: not a busy loop
    raise AssertionError(
        f"no state of {name} after resourceVersion {since} matched in {timeout:.0f}s; seen: "
        f"{seen[-10:]}; kubectl: {err.strip()[-500:]}"
    )
