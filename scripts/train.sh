#!/usr/bin/env bash
# Dev loop: run the standalone TFJobs (overlays/<env>/training) outside the pipeline and wait
# for their Succeeded condition. Re-running replaces the previous job of the same variant.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
usage() {
  cat <<USAGE
usage: scripts/train.sh <local-k3d|gpu-cloud> [model-type]
Renders overlays/<env>/training (one TFJob per model variant: cnn, dropout, batch_norm; the
pipeline's training CLI with --run-id manual), deletes a previous TFJob of the same variant,
creates the new one(s) in namespace ${NAMESPACE} and waits until each is Succeeded (exit 1 when
one is Failed). Needs the ML layer deployed first (scripts/deploy.sh <env>: namespace, PVC) and
the dataset ingested (a pipeline run, or python -m training.ingest on the PVC).
Env: TIMEOUT (seconds, default 21600), POLL (seconds, default 10).
USAGE
}
if wants_help "${1:-}"; then usage; exit 0; fi
if [[ $# -lt 1 || $# -gt 2 ]]; then usage >&2; exit 2; fi
ENV_NAME="$1" MODEL_TYPE="${2:-}"
TIMEOUT="${TIMEOUT:-21600}" POLL="${POLL:-10}"
KUST="${REPO_ROOT}/overlays/${ENV_NAME}/training"
[[ -f "${KUST}/kustomization.yaml" ]] || die "no training overlay for ${ENV_NAME} (${KUST})"
selector="app.kubernetes.io/component=training"
if [[ -n "${MODEL_TYPE}" ]]; then
  case "${MODEL_TYPE}" in
    cnn | dropout | batch_norm) ;;
    *) die "unknown model type ${MODEL_TYPE} (cnn | dropout | batch_norm)" ;;
  esac
  # label values use the TFJob name suffix (batch_norm -> batch-norm)
  selector+=",fashion-mnist.example.com/model-type=${MODEL_TYPE//_/-}"
fi
manifests="$("${KUBECTL}" kustomize "${KUST}")"
log "replacing TFJobs (${selector}) in ${NAMESPACE}"
"${KUBECTL}" -n "${NAMESPACE}" delete tfjobs -l "${selector}" --ignore-not-found --wait=true
names="$(printf '%s\n' "${manifests}" | "${KUBECTL}" create -f - -l "${selector}" -o name)"
[[ -n "${names}" ]] || die "no TFJob matched ${selector}"
log "created: ${names//$'\n'/ }"
status() {  # status <tfjob> <condition type> -> True | False | ''
  "${KUBECTL}" -n "${NAMESPACE}" get "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}"
}
deadline=$((SECONDS + TIMEOUT))
for name in ${names}; do
  while true; do
    if [[ "$(status "${name}" Succeeded)" == "True" ]]; then
      log "${name}: Succeeded"
      break
    fi
    if [[ "$(status "${name}" Failed)" == "True" ]]; then
      "${KUBECTL}" -n "${NAMESPACE}" describe "${name}" >&2 || true
      die "${name}: Failed"
    fi
    ((SECONDS < deadline)) || die "${name}: not Succeeded after ${TIMEOUT}s"
    sleep "${POLL}"
  done
done
log "all TFJobs Succeeded; SavedModels under /mnt/shared/candidates/<model-type> on the PVC"
