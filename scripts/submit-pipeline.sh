#!/usr/bin/env bash
# Submit a run of the fashion-mnist-pipeline WorkflowTemplate (a Workflow built by a serializer,
# created with kubectl) and optionally wait for it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DEADLINE_MARGIN_S=60
usage() {
  cat <<USAGE
usage: scripts/submit-pipeline.sh [--wait] [--entrypoint NAME] [-p name=value ...]
Creates a Workflow from workflowtemplate/${PIPELINE} in namespace ${NAMESPACE} and prints
its name. -p overrides a parameter by name (values may contain any character, e.g.
-p train-resources='{"requests": {"cpu": "1"}}'). --entrypoint: a template other than
'pipeline' (train-all, or train with -p model-type=...; scripts/train.sh uses them; select
with -p candidates-runs=RUN[,RUN...]: publish the candidates those runs trained).
--wait: block until the run ends; exit 0 when Succeeded, 1 as soon as it is Failed/Error,
1 after TIMEOUT seconds ("still <phase> after N s"; the Workflow goes on: argo stop NAME).
Env: TIMEOUT (seconds) defaults to the live template's activeDeadlineSeconds (which the
overlay's workflow-deadline-seconds sets; Argo fails the run at it) plus ${DEADLINE_MARGIN_S} s:
that can be hours, so set TIMEOUT for a short run. POLL (seconds, default 10).
USAGE
}
if wants_help "${1:-}"; then usage; exit 0; fi
WAIT=false ENTRYPOINT=pipeline PARAMS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --wait) WAIT=true; shift ;;
    --entrypoint)
      [[ $# -ge 2 ]] || die "--entrypoint needs a value"
      ENTRYPOINT="$2"; shift 2 ;;
    -p)
      [[ $# -ge 2 && "$2" == *=* ]] || die "-p needs name=value"
      PARAMS+=("$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
done
kubectl_for_cluster
if [[ "${WAIT}" == true && -z "${TIMEOUT:-}" ]]; then  # the run's own deadline, read once
  deadline="$("${KUBECTL}" get workflowtemplate "${PIPELINE}" -n "${NAMESPACE}" \
    -o 'jsonpath={.spec.activeDeadlineSeconds}')" || die "cannot read workflowtemplate/${PIPELINE}"
  [[ -n "${deadline}" ]] || die "workflowtemplate/${PIPELINE} has no activeDeadlineSeconds: set TIMEOUT"
  TIMEOUT=$(( $(seconds activeDeadlineSeconds "${deadline}") + DEADLINE_MARGIN_S ))
  log "waiting at most ${TIMEOUT} s (the template's activeDeadlineSeconds ${deadline} + ${DEADLINE_MARGIN_S})"
fi
TIMEOUT="$(seconds TIMEOUT "${TIMEOUT:-0}")"
POLL="$(seconds POLL "${POLL:-10}" fraction)"
[[ -n "${ENTRYPOINT}" ]] || die "--entrypoint needs a template name"
manifest="$(workflow_json "${ENTRYPOINT}" "${PARAMS[@]+"${PARAMS[@]}"}")"
name="$(printf '%s\n' "${manifest}" | "${KUBECTL}" create -o name -f -)"
log "submitted ${name} (entrypoint ${ENTRYPOINT})"
printf '%s\n' "${name}"
if [[ "${WAIT}" == true ]]; then
  wait_workflow "${name}" "${TIMEOUT}" "${POLL}"
fi
