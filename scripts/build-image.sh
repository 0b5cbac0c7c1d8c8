#!/usr/bin/env bash
# Build the pipeline's two images from the one Dockerfile and import them into k3d (no
# registry), or push them (gpu-cloud): the image every TensorFlow step runs (ingest, the TFJob
# replicas, select) and its PyTorch build, the same reference with the tag suffix -torch (the
# PyTorchJob replicas; the extra `torch` keeps several GB of torch out of the first). The
# reference is the one the overlay deploys (read from it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/build-image.sh [--gpu] [--push]
Builds the pipeline images from the repo's Dockerfile (base ${PYTHON_BASE_IMAGE}) and imports
them into k3d cluster '${CLUSTER_NAME}': the pipeline's 'image' parameter as overlays/local-k3d
renders it, and the same with tag suffix -torch built with the 'torch' extra (the PyTorchJob's
image). --gpu: overlays/gpu-cloud's reference, built with the 'gpu' extra.
--push: push them to their registry instead of importing.
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
# "<reference> <extras>": the TensorFlow image, then the PyTorch one (the WorkflowTemplate's
# train-pytorch template runs {{workflow.parameters.image}}-torch)
for build in "${TAG} ${EXTRAS}" "${TAG}-torch ${EXTRAS:+${EXTRAS},}torch"; do
  read -r ref extras <<<"${build}" || true
  log "building ${ref} (overlays/${OVERLAY}, extras '${extras:-}')"
  docker build --build-arg "PYTHON_BASE_IMAGE=${PYTHON_BASE_IMAGE}" \
    --build-arg "EXTRAS=${extras:-}" -t "${ref}" "${REPO_ROOT}"
  if [[ "${PUSH}" == true ]]; then
    docker push "${ref}"
  else
    need k3d
    k3d image import "${ref}" --cluster "${CLUSTER_NAME}"
  fi
done
