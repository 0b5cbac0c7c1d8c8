#!/usr/bin/env bash
# Build the one image that runs every pipeline step and import it into k3d (no registry).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/build-image.sh [--gpu] [--push]
Builds ${IMAGE_NAME}:${IMAGE_TAG} from the repo's Dockerfile (base ${PYTHON_BASE_IMAGE}) and
imports it into k3d cluster '${CLUSTER_NAME}'. --gpu: build with the 'gpu' extra and tag
${REGISTRY}/${IMAGE_NAME}:${IMAGE_TAG}-gpu; --push: push that tag instead of importing.
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
need docker
if [[ "${GPU}" == true ]]; then
  TAG="${REGISTRY}/${IMAGE_NAME}:${IMAGE_TAG}-gpu" EXTRAS=gpu
else
  TAG="${IMAGE_NAME}:${IMAGE_TAG}" EXTRAS=""
fi
log "building ${TAG}"
docker build --build-arg "PYTHON_BASE_IMAGE=${PYTHON_BASE_IMAGE}" --build-arg "EXTRAS=${EXTRAS}" \
  -t "${TAG}" "${REPO_ROOT}"
if [[ "${PUSH}" == true ]]; then
  docker push "${TAG}"
else
  need k3d
  k3d image import "${TAG}" --cluster "${CLUSTER_NAME}"
fi
