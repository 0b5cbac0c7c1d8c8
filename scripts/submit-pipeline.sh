#!/usr/bin/env bash
# Submit a run of the fashion-mnist-pipeline WorkflowTemplate (argo CLI if present, else a
# Workflow object via kubectl create) and optionally wait for it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/submit-pipeline.sh [--wait] [-p name=value ...]
Submits workflowtemplate/fashion-mnist-pipeline in namespace ${NAMESPACE}. Parameters
(-p epochs=2 ...) override the template's arguments. --wait: block until it finishes.
USAGE
  exit 0
fi
WAIT=false PARAMS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wait) WAIT=true; shift ;;
    -p) PARAMS+=("$2"); shift 2 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
if command -v argo >/dev/null 2>&1; then
  args=(submit -n "${NAMESPACE}" --from workflowtemplate/fashion-mnist-pipeline)
  for p in "${PARAMS[@]+"${PARAMS[@]}"}"; do args+=(-p "${p}"); done
  [[ "${WAIT}" == true ]] && args+=(--wait)
  exec argo "${args[@]}"
fi
params_yaml=""
for p in "${PARAMS[@]+"${PARAMS[@]}"}"; do
  params_yaml+=$'\n'"      - name: ${p%%=*}"$'\n'"        value: \"${p#*=}\""
done
name="$("${KUBECTL}" create -o name -f - <<WF
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: fashion-mnist-pipeline-
  namespace: ${NAMESPACE}
spec:
  workflowTemplateRef:
    name: fashion-mnist-pipeline
  arguments:
    parameters:${params_yaml:- []}
WF
)"
log "submitted ${name}"
if [[ "${WAIT}" == true ]]; then
  "${KUBECTL}" -n "${NAMESPACE}" wait "${name}" --for=jsonpath='{.status.phase}'=Succeeded --timeout=6h
fi
