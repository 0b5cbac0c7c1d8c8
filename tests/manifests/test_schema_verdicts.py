"""validation.schemas.validate: kubeconform judges each object once per process; the verdict
(errors or none) is kept by the object's YAML, so an object that changes is judged again."""

from __future__ import annotations

import copy
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


def test_an_object_is_judged_once_and_a_changed_one_again(tmp_path, monkeypatch, sources):
    calls = tmp_path / "calls"
    wrapper = tmp_path / "kubeconform"  # counts kubeconform's runs (a new binary: a new key)
    wrapper.write_text(
        f'#!/bin/sh\necho run >> "{calls}"\nexec "{os.environ["KUBECONFORM"]}" "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("KUBECONFORM", str(wrapper))
    bad = _config_map("bad", 3)  # ConfigMap data values are strings
    good = _config_map("good", "3")

    first = validate([bad, good, copy.deepcopy(bad)], ROOT, K8S, tmp_path / "one")
    assert [(f.obj, f.field) for f in first] == [("ConfigMap/fashion-mnist/bad", "data.key")] * 2
    assert len(list((tmp_path / "one" / "objs").iterdir())) == 2  # the copy was not sent
    again = validate([good, bad], ROOT, K8S, tmp_path / "two")
    assert again == first[:1]  # the kept verdicts: the same finding, none for good
    assert calls.read_text().splitlines() == ["run"]
    assert not (tmp_path / "two").exists()  # nothing new to judge: kubeconform not run

    bad.doc["data"]["key"] = "3"  # fixed: the same object, other YAML
    bad.doc["data"]["other"] = {"nested": True}  # broken otherwise
    changed = validate([bad], ROOT, K8S, tmp_path / "three")
    assert [(f.obj, f.field) for f in changed] == [("ConfigMap/fashion-mnist/bad", "data.other")]
    assert calls.read_text().splitlines() == ["run", "run"]
