"""The fast render path gives exactly what a plain ``kubectl kustomize`` gives."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

from validation.config import kubectl_path
from validation.render import render_all, wrapped
from validation.yamlio import load_all

from .conftest import ROOT

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
  annotations:
    note: "yes"
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        service: {name: conv, namespace: default, path: /convert}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          description: |-
            Multi-line
            --- not a separator
          properties:
            mode: {type: string, enum: ["on", "off", "yes"], default: "0755"}
            size: {x-kubernetes-int-or-string: true, default: 10}
    - name: v0
      served: false
      storage: false
"""
# YAML 1.1 and 1.2 read `1e3` and `on` differently: left to kustomize, not stubbed
AMBIGUOUS = CRD.replace("widgets", "gadgets").replace("default: 10", "default: 1e3")
AMBIGUOUS = AMBIGUOUS.replace("type: object\n", "type: object\n          x-flag: on\n", 1)
STREAM = f"""\
# upstream header comment
---
{CRD}---
{AMBIGUOUS}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings}}
data: {{flag: "on", mode: "0755", when: "2024-01-01"}}
--- # trailing comment
apiVersion: v1
kind: ServiceAccount
metadata: {{name: ctrl}}
"""


def _tree(tmp_path, patches: str = ""):
    k = tmp_path / "up"
    k.mkdir()
    (k / "_mirror_demo.yaml").write_text(STREAM)
    (k / "kustomization.yaml").write_text(
        textwrap.dedent(
            """\
            namespace: demo
            buildMetadata: [originAnnotations]
            resources: [_mirror_demo.yaml]
            """
        )
        + patches
    )
    plain = subprocess.run(
        [kubectl_path(), "kustomize", str(k)], capture_output=True, text=True, check=True
    ).stdout
    return load_all(plain)


def test_stubbed_render_equals_plain_kustomize(tmp_path):
    expected = _tree(tmp_path)
    timings: dict[str, float] = {}
    rendered, errors = render_all(tmp_path, ["up"], [], None, timings=timings)
    assert errors == {}
    text = (tmp_path / "up/_mirror_demo.yaml").read_text()
    assert "validation-stub:_mirror_demo.yaml:1:0:widgets.example.com" in text  # widgets
    assert "default: 1e3" in text  # gadgets kept as it is
    got = [o.doc for o in rendered["up"]]
    for doc in expected:
        doc["metadata"].get("annotations", {}).pop("config.kubernetes.io/origin", None)
        if not doc["metadata"].get("annotations", True):
            del doc["metadata"]["annotations"]
    assert got == expected
    crd = got[0]
    assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"] == "demo"
    assert set(timings) >= {"upstream-parse", "kustomize"}


def test_patching_a_stubbed_upstream_schema_is_a_render_failure(tmp_path):
    patch = """\
patches:
  - target: {kind: CustomResourceDefinition, name: widgets.example.com}
    patch: |-
      - op: add
        path: /spec/versions/0/schema/openAPIV3Schema/required
        value: [mode]
"""
    _tree(tmp_path, patch)
    rendered, errors = render_all(tmp_path, ["up"], [], None)
    assert "up" not in rendered
    assert "changed its upstream schema" in errors["up"]


def test_wrappers_render_once_as_what_they_wrap(full_run):
    _, rendered = full_run
    with tempfile.TemporaryDirectory() as tmp:
        for top in ("base", "overlays", "argocd"):
            shutil.copytree(ROOT / top, Path(tmp) / top)
        assert wrapped(Path(tmp), "argocd") == "argocd/install"
        assert wrapped(Path(tmp), "argocd/apps/local-k3d") == "argocd/apps/common"
        assert wrapped(Path(tmp), "argocd/apps/gpu-cloud") == "argocd/apps/gpu-cloud"
        assert wrapped(Path(tmp), "overlays/local-k3d") == "overlays/local-k3d"
    a, b = rendered["argocd"], rendered["argocd/install"]
    assert [(o.ref, o.source) for o in a] == [(o.ref, o.source) for o in b]
    assert {o.kustomization for o in a} == {"argocd"}
