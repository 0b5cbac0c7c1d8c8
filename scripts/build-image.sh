#!/usr/bin/env bash
# Build the pipeline's two images from the one Dockerfile, tagged by content, import them into
# k3d (no registry) or push them (gpu-cloud), and name that tag in git: the overlay's kustomize
# `images:` entry, which sets the pipeline's `image` parameter (base/ml/kustomizeconfig.yaml),
# committed alone. The two: the image every TensorFlow step runs (ingest, the TFJob replicas,
# select) and its PyTorch build, the same reference with the tag suffix -torch (the PyTorchJob
# replicas; the extra `torch` keeps several GB of torch out of the first).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
usage() {
  cat <<USAGE
usage: scripts/build-image.sh [--gpu] [--push] [--no-commit]
       scripts/build-image.sh [--gpu] --set-only [--no-commit]
       scripts/build-image.sh --tag
Builds the pipeline images from the repo's Dockerfile (base ${PYTHON_BASE_IMAGE}) under the tag
of their content (--tag prints it: src-<12 hex> of the build context and the base), imports
them into k3d cluster '${CLUSTER_NAME}', then sets that tag in overlays/local-k3d/kustomization.yaml
(images: newTag) and commits that one file; push it and the next pipeline run's pods run it.
The PyTorchJob's image is the same reference with the tag suffix -torch (the 'torch' extra).
--gpu: overlays/gpu-cloud's image, built with the 'gpu' extra.
--push: push them to their registry instead of importing into k3d.
--set-only: build nothing, only set and commit the tag (images built elsewhere from this tree).
--no-commit: edit the overlay, commit nothing.
USAGE
}
for arg in "$@"; do if wants_help "${arg}"; then usage; exit 0; fi; done
GPU=false PUSH=false BUILD=true COMMIT=true
for arg in "$@"; do
  case "${arg}" in
    --gpu) GPU=true ;;
    --push) PUSH=true ;;
    --set-only) BUILD=false ;;
    --no-commit) COMMIT=false ;;
    --tag) [[ $# -eq 1 ]] || die "--tag goes alone"; content_tag; exit 0 ;;
    *) usage >&2; die "unknown argument ${arg}" ;;
  esac
done
[[ "${BUILD}" == true || "${PUSH}" == false ]] || die "--push builds: not with --set-only"
if [[ "${GPU}" == true ]]; then OVERLAY=gpu-cloud EXTRAS=gpu; else OVERLAY=local-k3d EXTRAS=""; fi
FILE="overlays/${OVERLAY}/kustomization.yaml"
# what the tag hashes (lib.sh content_tag): the build context and versions.env's base image
INPUTS=("${IMAGE_FILES[@]}" src versions.env)
# the tag in git must name what git holds: the inputs and the overlay committed first, no file
# under src/ that git ignores but `docker build` copies (.dockerignore drops only bytecode and
# egg-info), and a branch to commit on; all checked before anything is built
if [[ "${COMMIT}" == true ]]; then
  changed="$(git -C "${REPO_ROOT}" status --porcelain -- "${INPUTS[@]}" "${FILE}" 2>/dev/null)" \
    || die "not a git checkout: use --no-commit"
  [[ -z "${changed}" ]] \
    || die "commit these first (the tag in git must name committed code), or use --no-commit: ${changed//$'\n'/; }"
  ignored="$(git -C "${REPO_ROOT}" ls-files --others --ignored --exclude-standard -- src \
    | grep -vE '(^|/)__pycache__/|[.]egg-info/' || true)"
  [[ -z "${ignored}" ]] \
    || die "src/ holds files that git ignores but docker build would copy into the image: remove them (or use --no-commit): ${ignored//$'\n'/; }"
  git -C "${REPO_ROOT}" symbolic-ref -q HEAD >/dev/null \
    || die "detached HEAD: check out the branch Argo CD follows first (or use --no-commit)"
fi
TAG="$(content_tag)"
# the overlay's reference: its `images:` newName (or the base's name) and the tag it names now
OLD="$(overlay_param "${OVERLAY}" image)"
[[ "${OLD}" != *@* ]] \
  || die "overlays/${OVERLAY} pins the image by digest (${OLD}): the PyTorchJob runs <image>-torch, which needs a tag (remove the images: entry's digest)"
REPO="${OLD%:*}"
if [[ "${BUILD}" == true ]]; then
  need docker
  [[ "${PUSH}" == true ]] || need k3d
  # "<reference> <extras>": the TensorFlow image, then the PyTorch one (the WorkflowTemplate's
  # train-pytorch template runs {{workflow.parameters.image}}-torch)
  for build in "${REPO}:${TAG} ${EXTRAS}" "${REPO}:${TAG}-torch ${EXTRAS:+${EXTRAS},}torch"; do
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
fi
if [[ "${OLD}" == "${REPO}:${TAG}" ]]; then
  log "${FILE} names ${REPO}:${TAG} already: nothing to commit"
  exit 0
fi
# the newTag of the overlay's images: entry for the base's image name, edited in place (any
# indentation, quoting or flow style; every comment and other entry kept); restored if the
# overlay then does not render that reference
set_tag() {
  "${PYTHON}" -c '
import sys
import yaml
path, base, tag = sys.argv[1:]
# the name the entry matches: the base WorkflowTemplate image parameter, without its tag
(wft,) = [d for d in yaml.safe_load_all(open(base, encoding="utf-8")) if d]
name = next(p["value"] for p in wft["spec"]["arguments"]["parameters"] if p["name"] == "image")
name = name.rsplit(":", 1)[0]
text = open(path, encoding="utf-8").read()
root = yaml.compose(text)
images = [v for k, v in (root.value if isinstance(root, yaml.MappingNode) else [])
          if k.value == "images"]
entries = [e for e in (images[0].value if images and isinstance(images[0], yaml.SequenceNode) else [])
           if isinstance(e, yaml.MappingNode)
           and any(k.value == "name" and v.value == name for k, v in e.value)]
if len(entries) != 1:
    sys.exit(f"{path}: {len(entries)} images: entries named {name} (want one, with newTag)")
fields = {k.value: v for k, v in entries[0].value}
if "digest" in fields:
    sys.exit(f"{path}: the images: entry of {name} pins a digest: the PyTorchJob runs <image>-torch, which needs a tag (remove digest)")
if "newTag" not in fields or not isinstance(fields["newTag"], yaml.ScalarNode):
    sys.exit(f"{path}: the images: entry of {name} has no newTag")
start, end = fields["newTag"].start_mark.index, fields["newTag"].end_mark.index
quote = text[start] if text[start] in "\x27\"" else ""  # its quoting kept
open(path, "w", encoding="utf-8").write(text[:start] + quote + tag + quote + text[end:])
' "$@"
}
backup="$(mktemp)"
cp "${REPO_ROOT}/${FILE}" "${backup}"
set_tag "${REPO_ROOT}/${FILE}" "${REPO_ROOT}/base/ml/pipeline/workflowtemplate.yaml" "${TAG}" \
  || { rm -f "${backup}"; die "the tag is not set (see above)"; }
if [[ "$(overlay_param "${OVERLAY}" image 2>/dev/null)" != "${REPO}:${TAG}" ]]; then
  cp "${backup}" "${REPO_ROOT}/${FILE}"; rm -f "${backup}"
  die "${FILE}: the pipeline's image did not become ${REPO}:${TAG} (restored; see its images: entry)"
fi
rm -f "${backup}"
msg="image ${OVERLAY}: ${REPO}:${TAG} (was ${OLD##*:})"
if [[ "${COMMIT}" == false ]]; then log "edited ${FILE} (not committed): ${msg}"; exit 0; fi
commit_file "${FILE}" "${msg}"
log "next: git push (Argo CD syncs it; scripts/deploy.sh ${OVERLAY} without Argo CD): the next pipeline run's pods run ${REPO}:${TAG}"
