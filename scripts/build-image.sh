#!/usr/bin/env bash
# Build the one image that runs every pipeline step and import it into k3d (no registry), or
# push it (gpu-cloud). The image reference is the one the overlay deploys (read from it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/build-image.sh [--gpu] [--push]
Builds the pipeline image from the repo's Dockerfile (base ${PYTHON_BASE_IMAGE}) and imports it
into k3d cluster '${CLUSTER_NAME}'. The reference is the pipeline's 'image' parameter as
overlays/local-k3d renders it (--gpu: overlays/gpu-cloud, built with the 'gpu' extra).
--push: push it to its registry instead of importing.
USAGE
  exit 0
fi
GPU=false PUSH=false
for arg in "$@"; do
  case "${arg}" in
    --gpu) GPU=true ;;
    --push) PUSH=true ;;
    *) die "unknown argument ${arg} (see --help)" ;;
  esac
done
if [[ "${GPU}" == true ]]; then OVERLAY=gpu-cloud EXTRAS=gpu; else OVERLAY=local-k3d EXTRAS=""; fi
TAG="$(overlay_param "${OVERLAY}" image)"
need docker
log "building ${TAG} (overlays/${OVERLAY})"
docker build --build-arg "PYTHON_BASE_IMAGE=${PYTHON_BASE_IMAGE}" --build-arg "EXTRAS=${EXTRAS}" \
  -t "${TAG}" "${REPO_ROOT}"
if [[ "${PUSH}" == true ]]; then
  docker push "${TAG}"
else
  need k3d
  k3d image import "${TAG}" --cluster "${CLUSTER_NAME}"
fi
