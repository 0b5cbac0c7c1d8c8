"""Fixtures: the validator run once per session, and broken copies of the real tree."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from validation.main import expand, run
from validation.schemas import kubeconform_path

ROOT = Path(__file__).resolve().parents[2]


def _online() -> bool:
    try:
        socket.create_connection(("github.com", 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session", autouse=True)
def sources() -> dict:
    """Offline mirrors from the environment (or online), and kubeconform (``KUBECONFORM``, or
    the pinned one scripts/kubeconform.sh finds); fails clearly when either is missing."""
    mirrors = os.environ.get("UPSTREAM_MIRROR_DIR") and os.environ.get("KUBE_SCHEMA_DIR")
    if not mirrors and not _online():
        pytest.fail("offline and no mirrors: run with MIRROR_DIR=../shared (make test)")
    try:
        os.environ["KUBECONFORM"] = kubeconform_path(ROOT)
    except FileNotFoundError as e:
        pytest.fail(str(e))
    mirror = os.environ.get("UPSTREAM_MIRROR_DIR")
    return {"mirror_dir": Path(mirror) if mirror else None}


@pytest.fixture(scope="session")
def full_run(sources):
    """(findings, rendered) of the whole repository, once per session."""
    return run(ROOT, None, **sources)


def by_name(items: list, name: str) -> dict:
    """The item of a list named ``name`` (templates, parameters, tasks, containers)."""
    hits = [x for x in items if x.get("name") == name]
    assert len(hits) == 1, f"{len(hits)} items named {name!r}"
    return hits[0]


def template(wft: dict, name: str) -> dict:
    """A WorkflowTemplate's template by name."""
    return by_name(wft["spec"]["templates"], name)


def param(wft: dict, name: str) -> dict:
    """A WorkflowTemplate's workflow parameter by name."""
    return by_name(wft["spec"]["arguments"]["parameters"], name)


@pytest.fixture
def broken(tmp_path, sources):
    """A copy of the manifest tree to break, and the validator run on (parts of) it."""
    for name in ("base", "overlays", "argocd"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "versions.env", tmp_path / "versions.env")

    class Tree:
        root = tmp_path
        mirror_dir = sources["mirror_dir"]

        def edit(self, rel: str, fn, kind: str | None = None, name: str | None = None) -> None:
            """Apply ``fn`` to the document of a YAML file with this kind/name (the only one
            when the file holds one); fn mutates the dict."""
            docs = list(yaml.safe_load_all((tmp_path / rel).read_text()))
            (doc,) = [
                d
                for d in docs
                if (kind is None or d["kind"] == kind)
                and (name is None or d["metadata"]["name"] == name)
            ]
            fn(doc)
            (tmp_path / rel).write_text(yaml.safe_dump_all(docs, sort_keys=False))

        def replace(self, rel: str, old: str, new: str) -> None:
            """Replace text that must occur in the file."""
            text = (tmp_path / rel).read_text()
            assert old in text, f"{old!r} not in {rel}"
            (tmp_path / rel).write_text(text.replace(old, new))

        def append(self, rel: str, doc: dict) -> None:
            """Add a document to a YAML file."""
            with (tmp_path / rel).open("a") as f:
                f.write("---\n" + yaml.safe_dump(doc, sort_keys=False))

        def check(self, *kusts: str):
            """Findings of the validator on these kustomizations (default base/ml)."""
            return run(tmp_path, list(kusts) or ["base/ml"], **sources)[0]

        def render(self, kust: str):
            """The objects one kustomization renders (the validator's expansion)."""
            return expand(run(tmp_path, [kust], **sources)[1][kust])

    return Tree()
