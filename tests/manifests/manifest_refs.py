"""Paths and object references of the real manifests, shared by the broken-copy tests."""

WFT = "base/ml/pipeline/workflowtemplate.yaml"
ISVC = "base/ml/serving/inferenceservice.yaml"
KSVC = "base/ml/serving/message-dumper.yaml"
RBAC = "base/ml/pipeline/rbac.yaml"
PVC = "base/ml/storage/pvc.yaml"
ARGO_PLATFORM = "base/platform/argo-workflows"
EXECUTOR_PATCH = f"{ARGO_PLATFORM}/patches/workflow-controller-configmap-executor.yaml"
ISVC_REF = "InferenceService/fashion-mnist/fashion-mnist"
WFT_REF = "WorkflowTemplate/fashion-mnist/fashion-mnist-pipeline"
PIPELINE_ROLE = "fashion-mnist-pipeline"
MEMO_ROLE = "argo-memoization-cache"
MEMO_RBAC = f"{ARGO_PLATFORM}/memoization-cache-rbac.yaml"
TFJOBS = {
    f"TFJob/fashion-mnist/fashion-mnist-pipeline-x7k2p-{m}-0"  # attempt 0 ({{retries}})
    for m in ("cnn", "dropout", "batch-norm")
}
TRAIN = "spec.templates[train].resource"
WORKER = f"{TRAIN}.manifest > spec.tfReplicaSpecs.Worker"
TENSORFLOW = f"{WORKER}.template.spec.containers[tensorflow]"
TRAIN_PYTORCH = "spec.templates[train-pytorch].resource"
PYTORCH_SPECS = f"{TRAIN_PYTORCH}.manifest > spec.pytorchReplicaSpecs"
PYTORCHJOB = "PyTorchJob/fashion-mnist/fashion-mnist-pipeline-x7k2p-pytorch-0"
PYTORCH_REPLICAS = {f"{PYTORCH_SPECS}.{r}" for r in ("Master", "Worker")}
PYTORCH = {f"{r}.template.spec.containers[pytorch]" for r in PYTORCH_REPLICAS}


def only(findings, check):
    """The findings of one check; fails the test when there is none."""
    hits = [f for f in findings if f.check == check]
    assert hits, f"no {check!r} finding in {[f.format() for f in findings]}"
    return hits
