#!/usr/bin/env bash
# Install the platform layer in dependency order and wait until each part is ready:
# cert-manager -> Knative Serving + Kourier -> KServe (+ runtimes) -> training operator
# (server-side) -> Argo Workflows. Idempotent (server-side apply everywhere).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/install-platform.sh
Installs cert-manager ${CERT_MANAGER_VERSION}, Knative Serving ${KNATIVE_SERVING_VERSION} with
Kourier ${KNATIVE_NET_KOURIER_VERSION}, KServe ${KSERVE_VERSION}, the Kubeflow training operator
${TRAINING_OPERATOR_VERSION} and Argo Workflows ${ARGO_WORKFLOWS_VERSION} into the current
kubectl context, and waits for them. Re-running is safe.
USAGE
  exit 0
fi
apply() { "${KUBECTL}" apply --server-side --force-conflicts "$@"; }

log "cert-manager ${CERT_MANAGER_VERSION}"
apply -f "https://github.com/cert-manager/cert-manager/releases/download/${CERT_MANAGER_VERSION}/cert-manager.yaml"
"${KUBECTL}" -n cert-manager rollout status deploy --timeout=300s

log "Knative Serving ${KNATIVE_SERVING_VERSION} + Kourier"
KN="https://github.com/knative/serving/releases/download/knative-${KNATIVE_SERVING_VERSION}"
apply -f "${KN}/serving-crds.yaml"
"${KUBECTL}" wait --for=condition=Established crd/services.serving.knative.dev --timeout=120s
apply -f "${KN}/serving-core.yaml"
apply -f "https://github.com/knative/net-kourier/releases/download/knative-${KNATIVE_NET_KOURIER_VERSION}/kourier.yaml"
"${KUBECTL}" patch configmap/config-network -n knative-serving --type merge \
  -p '{"data":{"ingress-class":"kourier.ingress.networking.knative.dev"}}'
# Pod-spec features the InferenceService / message-dumper use (PVC volumes, node placement,
# security contexts).
"${KUBECTL}" patch configmap/config-features -n knative-serving --type merge -p '{"data":{
  "kubernetes.podspec-persistent-volume-claim":"enabled",
  "kubernetes.podspec-persistent-volume-write":"enabled",
  "kubernetes.podspec-nodeselector":"enabled",
  "kubernetes.podspec-tolerations":"enabled",
  "kubernetes.podspec-securitycontext":"enabled"}}'
"${KUBECTL}" -n knative-serving rollout status deploy --timeout=300s
"${KUBECTL}" -n kourier-system rollout status deploy --timeout=300s

log "KServe ${KSERVE_VERSION}"
apply -k "${REPO_ROOT}/base/platform/kserve"
"${KUBECTL}" -n kserve rollout status deploy/kserve-controller-manager --timeout=300s
apply -k "${REPO_ROOT}/base/platform/kserve-runtimes"

log "Kubeflow training operator ${TRAINING_OPERATOR_VERSION} (server-side: large CRDs)"
apply -k "${REPO_ROOT}/base/platform/training-operator"
"${KUBECTL}" -n kubeflow rollout status deploy/training-operator --timeout=300s

log "Argo Workflows ${ARGO_WORKFLOWS_VERSION}"
apply -k "${REPO_ROOT}/base/platform/argo-workflows"
"${KUBECTL}" -n argo rollout status deploy --timeout=300s
log "platform ready"
