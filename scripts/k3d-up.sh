#!/usr/bin/env bash
# Create (or reuse) the local k3d cluster: one server node (local-path RWO volumes are then
# shared by every pod), pinned k3s image from versions.env, checked against the pinned k3d
# version. No registry: scripts/build-image.sh imports the pipeline image into this cluster.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/k3d-up.sh
Creates k3d cluster '${CLUSTER_NAME}' (image ${K3S_IMAGE}, k3d ${K3D_VERSION}) if missing;
idempotent. Ports: 8080 -> Traefik, Knative's ingress (80). Env: CLUSTER_NAME.
USAGE
  exit 0
fi
need k3d
# `k3d version` prints "k3d version <version>" on its first line
installed="$(k3d version | sed -n '1s/^k3d version //p')" || die "could not run 'k3d version'"
[[ "${installed}" == "${K3D_VERSION}" ]] \
  || die "k3d ${installed:-(unknown version)} is installed, versions.env pins K3D_VERSION=${K3D_VERSION}"
if k3d cluster list -o json | grep -q "\"name\":\"${CLUSTER_NAME}\""; then
  log "cluster ${CLUSTER_NAME} exists; starting it"
  k3d cluster start "${CLUSTER_NAME}"
else
  log "creating cluster ${CLUSTER_NAME} (${K3S_IMAGE})"
  # k3s's bundled Traefik off: it has no Knative provider (k3s 1.34 bundles Traefik 3.5);
  # scripts/install-platform.sh installs the pinned one (base/platform/traefik)
  k3d cluster create "${CLUSTER_NAME}" --image "${K3S_IMAGE}" --servers 1 --agents 0 \
    --port "8080:80@loadbalancer" --k3s-arg "--disable=traefik@server:0" --wait
fi
"${KUBECTL}" config use-context "k3d-${CLUSTER_NAME}"
kubectl_for_cluster
"${KUBECTL}" wait --for=condition=Ready nodes --all --timeout=180s
