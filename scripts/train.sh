#!/usr/bin/env bash
# Dev loop: train outside the full pipeline with THE training job of the pipeline (the `train`
# template of the WorkflowTemplate, so the environment values deployed with it apply) and wait.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
usage() {
  cat <<USAGE
usage: scripts/train.sh [model-type] [-p name=value ...]
Submits a Workflow from workflowtemplate/${PIPELINE} (namespace ${NAMESPACE}) with entrypoint
'train' for one TensorFlow model type (cnn | dropout | batch_norm: a TFJob), 'train-pytorch'
for pytorch (the PyTorchJob), or 'train-all' for all four in parallel, at most the environment's training-parallelism at once (-p train-pytorch=false: the three TFJobs), and waits, polling the Workflow's phase every POLL seconds: exit 0 when it Succeeded
(the last attempt of every training job succeeded), 1 when it is Failed or Error (with Argo's message) or still running
after TIMEOUT seconds. 'train-all' does not stop at the first failed job: its DAG lets the
other variants run to their end (failFast: false), so the Workflow fails, and the script exits
1, only after all four have ended.
-p overrides pipeline parameters by name (e.g. -p epochs=2 -p workers=1).
SavedModels land under /mnt/shared/candidates/<model-type> on the PVC (run id = Workflow name).
Needs the ML layer deployed (scripts/deploy.sh <env> or Argo CD) and the dataset ingested
(one pipeline run). Env: TIMEOUT, POLL: as scripts/submit-pipeline.sh --help says.
USAGE
}
if wants_help "${1:-}"; then usage; exit 0; fi
args=(--wait --entrypoint train-all)
if [[ $# -gt 0 && "$1" != -* ]]; then
  # the candidates are fmnist_common.CANDIDATES (the one list; select ranks exactly these)
  known="$(PYTHONPATH="${REPO_ROOT}/src" "${PYTHON}" -c \
    'from fmnist_common import CANDIDATES; print(" | ".join(CANDIDATES))')"
  [[ " | ${known} | " == *" | $1 | "* ]] || die "unknown model type '$1' (one of: ${known})"
  if [[ "$1" == pytorch ]]; then
    args=(--wait --entrypoint train-pytorch)
  else
    args=(--wait --entrypoint train -p "model-type=$1")
  fi
  shift
fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    -p)
      [[ $# -ge 2 ]] || die "-p needs name=value"
      args+=(-p "$2"); shift 2 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
done
exec "${REPO_ROOT}/scripts/submit-pipeline.sh" "${args[@]}"
