#!/usr/bin/env bash
# Create (or reuse) the local k3d cluster: one server node (local-path RWO volumes are then
# shared by every pod), pinned k3s image from versions.env, a registry-free image import flow.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/k3d-up.sh
Creates k3d cluster '${CLUSTER_NAME}' (image ${K3S_IMAGE}, k3d ${K3D_VERSION}) if missing;
idempotent. Ports: 8080 -> Kourier ingress (80). Env: CLUSTER_NAME.
USAGE
  exit 0
fi
need k3d
if k3d cluster list -o json | grep -q "\"name\":\"${CLUSTER_NAME}\""; then
  log "cluster ${CLUSTER_NAME} exists; starting it"
  k3d cluster start "${CLUSTER_NAME}"
else
  log "creating cluster ${CLUSTER_NAME} (${K3S_IMAGE})"
  # traefik off: Knative uses Kourier as its ingress
  k3d cluster create "${CLUSTER_NAME}" --image "${K3S_IMAGE}" --servers 1 --agents 0 \
    --port "8080:80@loadbalancer" --k3s-arg "--disable=traefik@server:0" --wait
fi
"${KUBECTL}" config use-context "k3d-${CLUSTER_NAME}"
"${KUBECTL}" wait --for=condition=Ready nodes --all --timeout=180s
