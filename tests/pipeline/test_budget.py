"""The full budget is the cluster's, read from the WorkflowTemplate (written once)."""

from __future__ import annotations

import pytest
import yaml

from fmnist_pipeline.run import WORKFLOW_TEMPLATE, PipelineError, budget_of, cluster_budget


def test_full_budget_is_the_workflow_templates(tmp_path):
    doc = yaml.safe_load(WORKFLOW_TEMPLATE.read_text())
    for p in doc["spec"]["arguments"]["parameters"]:
        if p["name"] == "epochs":
            p["value"] = "7"
    changed = tmp_path / "wt.yaml"
    changed.write_text(yaml.safe_dump(doc))
    assert cluster_budget(changed)["epochs"] == 7
    full = budget_of("full")
    assert full["train_examples"] == 0  # every training image
    assert full["batch_size_per_replica"] * 2 > budget_of("quick")["batch_size_per_replica"]


def test_missing_budget_parameter_is_one_clear_error(tmp_path):
    broken = tmp_path / "wt.yaml"
    broken.write_text(yaml.safe_dump({"spec": {"arguments": {"parameters": []}}}))
    with pytest.raises(PipelineError, match="epochs"):
        cluster_budget(broken)
    with pytest.raises(PipelineError, match="wt.yaml"):
        cluster_budget(tmp_path / "absent" / "wt.yaml")
