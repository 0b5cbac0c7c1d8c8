"""Fixtures: the harness run once per session, and broken copies of the real tree."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from validation.cli import default_cache_dir, run
from validation.config import CRDS_CATALOG_URL

ROOT = Path(__file__).resolve().parents[2]


def _online() -> bool:
    try:
        socket.create_connection(("github.com", 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def sources() -> dict:
    """Mirror + schema locations (env), or online; fail clearly when neither is available."""
    mirror = os.environ.get("UPSTREAM_MIRROR_DIR")
    schemas = os.environ.get("KUBE_SCHEMA_DIR")
    if not (mirror and schemas) and not _online():
        pytest.fail(
            "no UPSTREAM_MIRROR_DIR/KUBE_SCHEMA_DIR and no network: run with MIRROR_DIR=../shared "
            "(make test) or export UPSTREAM_MIRROR_DIR=<shared>/upstream "
            "KUBE_SCHEMA_DIR=<shared>/kube-schemas"
        )
    return {
        "mirror_dir": Path(mirror) if mirror else None,
        "schema_location": schemas or CRDS_CATALOG_URL,
        "cache_dir": default_cache_dir(),
    }


@pytest.fixture(scope="session")
def full_run(sources):
    """(findings, rendered) of the whole repo, rendered once per session."""
    return run(ROOT, None, **sources)


@pytest.fixture
def broken(tmp_path, sources):
    """A copy of the manifest tree to break, and a function running one kustomization on it."""
    for name in ("base", "overlays", "argocd"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "versions.env", tmp_path / "versions.env")

    class Tree:
        root = tmp_path

        def docs(self, rel: str) -> list[dict]:
            return list(yaml.safe_load_all((tmp_path / rel).read_text()))

        def edit(self, rel: str, fn, index: int = 0) -> None:
            """Apply fn to document `index` of a YAML file (fn mutates the dict)."""
            docs = self.docs(rel)
            fn(docs[index])
            (tmp_path / rel).write_text(yaml.safe_dump_all(docs, sort_keys=False))

        def replace(self, rel: str, old: str, new: str) -> None:
            text = (tmp_path / rel).read_text()
            assert old in text, f"{old!r} not in {rel}"
            (tmp_path / rel).write_text(text.replace(old, new))

        def check(self, kust: str = "base/ml", versions: bool = False):
            findings, _ = run(tmp_path, [kust], check_versions=versions, **sources)
            return [f for f in findings if f.severity == "error"]

    return Tree()
