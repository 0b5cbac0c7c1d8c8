"""validation.schemas.validate: kubeconform judges each object once per process; the verdict
(errors or none) is kept by the object's YAML, so an object that changes is judged again."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from validation.core import Obj
from validation.schemas import validate

ROOT = Path(__file__).resolve().parents[2]
K8S = "1.34.1"


def _config_map(name: str, value) -> Obj:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "fashion-mnist"},
        "data": {"key": value},
    }
    return Obj(doc, "base/ml", f"base/ml/{name}.yaml")


def _wrapper(tmp_path: Path, body: str) -> Path:
    wrapper = tmp_path / "kubeconform"
    wrapper.write_text(f"#!/bin/sh\n{body}\n")
    wrapper.chmod(0o755)
    return wrapper


def test_an_object_is_judged_once_and_a_changed_one_again(tmp_path, monkeypatch, sources):
    calls = tmp_path / "calls"  # kubeconform's runs (a new binary: new keys)
    body = f'echo run >> "{calls}"\nexec "{os.environ["KUBECONFORM"]}" "$@"'
    monkeypatch.setenv("KUBECONFORM", str(_wrapper(tmp_path, body)))
    bad = _config_map("bad", 3)  # ConfigMap data values are strings
    good = _config_map("good", "3")

    first = validate([bad, good, copy.deepcopy(bad)], ROOT, K8S, tmp_path / "one")
    assert [(f.obj, f.field) for f in first] == [("ConfigMap/fashion-mnist/bad", "data.key")] * 2
    (sent,) = (tmp_path / "one").iterdir()
    assert len(list(sent.iterdir())) == 2  # the copy was not sent
    again = validate([good, bad], ROOT, K8S, tmp_path / "two")
    assert again == first[:1]  # the kept verdicts: the same finding, none for good
    assert calls.read_text().splitlines() == ["run"]
    assert not (tmp_path / "two").exists()  # nothing new to judge: kubeconform not run

    bad.doc["data"]["key"] = "3"  # fixed: the same object, other YAML
    bad.doc["data"]["other"] = {"nested": True}  # broken otherwise
    changed = validate([bad], ROOT, K8S, tmp_path / "three")
    assert [(f.obj, f.field) for f in changed] == [("ConfigMap/fashion-mnist/bad", "data.other")]
    assert calls.read_text().splitlines() == ["run", "run"]


def test_a_kubeconform_that_fails_keeps_no_verdict(tmp_path, monkeypatch, sources):
    """A kubeconform that dies without a result (here its first run exits 2) is one finding,
    and the objects it was sent are judged again next time, not taken for valid."""
    real, first = os.environ["KUBECONFORM"], tmp_path / "ran-once"
    body = f'[ -e "{first}" ] || {{ touch "{first}"; echo panic >&2; exit 2; }}\nexec "{real}" "$@"'
    monkeypatch.setenv("KUBECONFORM", str(_wrapper(tmp_path, body)))
    bad = _config_map("bad", 3)
    (failed,) = validate([bad], ROOT, K8S, tmp_path / "one")
    assert failed.message.startswith("kubeconform failed (exit status 2): panic"), failed
    again = validate([bad], ROOT, K8S, tmp_path / "two")
    assert [(f.obj, f.field) for f in again] == [("ConfigMap/fashion-mnist/bad", "data.key")]


def test_an_object_without_a_schema_is_asked_again(tmp_path, monkeypatch, sources):
    """No schema for a kind is an error, said and not kept: once the schema is there (a
    folder filled later, a download that failed once), the object is judged against it."""
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    monkeypatch.setenv("KUBE_SCHEMA_DIR", str(schemas))
    widget = Obj(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "size": 3},
        "base/ml",
        "base/ml/widget.yaml",
    )
    (missing,) = validate([widget], ROOT, K8S, tmp_path / "one")
    assert "could not find schema" in missing.message, missing
    (schemas / "example.com").mkdir()
    schema = {"type": "object", "properties": {"size": {"type": "string"}}}
    (schemas / "example.com" / "widget_v1.json").write_text(json.dumps(schema))
    (invalid,) = validate([widget], ROOT, K8S, tmp_path / "two")
    assert invalid.field == "size" and "want string" in invalid.message, invalid
