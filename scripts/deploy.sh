#!/usr/bin/env bash
# Apply one overlay of the ML layer (server-side, so the pipeline's serve step and this apply
# can share the InferenceService).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}" || [[ $# -ne 1 ]]; then
  cat <<USAGE
usage: scripts/deploy.sh <overlay>      overlay: local-k3d | gpu-cloud
Renders overlays/<overlay> with kustomize and applies it server-side; idempotent.
The InferenceService becomes Ready only once a first model version exists on the PVC
(TF Serving waits for one): run the pipeline (scripts/submit-pipeline.sh --wait).
USAGE
  wants_help "${1:-}" && exit 0
  exit 2
fi
OVERLAY="${REPO_ROOT}/overlays/$(environment "$1")"
kubectl_for_cluster
"${KUBECTL}" apply --server-side --field-manager=fashion-mnist-deploy -k "${OVERLAY}"
"${KUBECTL}" -n "${NAMESPACE}" get workflowtemplate,inferenceservice,ksvc,pvc
