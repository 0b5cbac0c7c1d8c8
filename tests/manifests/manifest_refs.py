"""Paths and object references of the real manifests, shared by the fault-injection tests."""

WFT = "base/ml/pipeline/workflowtemplate.yaml"
ISVC = "base/ml/serving/inferenceservice.yaml"
KSVC = "base/ml/serving/message-dumper.yaml"
RBAC = "base/ml/pipeline/rbac.yaml"
PVC = "base/ml/storage/pvc.yaml"
ISVC_REF = "InferenceService/fashion-mnist/fashion-mnist"
WFT_REF = "WorkflowTemplate/fashion-mnist/fashion-mnist-pipeline"


def only(findings, check):
    """The findings of one check; fails the test when there is none."""
    hits = [f for f in findings if f.check == check]
    assert hits, f"no {check!r} finding in {[f.format() for f in findings]}"
    return hits
