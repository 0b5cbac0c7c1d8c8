#!/usr/bin/env bash
# Deploy an overlay's ML layer with Pulumi instead of kubectl or Argo CD: the Python program in
# pulumi/ (program.py), driven through Pulumi's Automation API by pulumi/deploy.py, offline
# (docs/gitops.md "Pulumi"). Needs `make venv` and `scripts/tools.sh pulumi pulumi-kubernetes`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}" || [[ $# -lt 2 ]]; then
  cat <<USAGE
usage: scripts/pulumi.sh up|preview|destroy <overlay> [--train [-p name=value ...]] [--refresh]
  overlay: $(cd "${REPO_ROOT}/overlays" && echo */ | tr -d / | sed 's/ / | /g'); the stack is named after it (project fashion-mnist).
  up        create or update the overlay's objects (what scripts/deploy.sh applies); adopts
            the Namespace and PVC that git keeps (Delete=false) when an earlier deployment
            left them, and says so
  preview   what up would change
  destroy   delete every object the stack created but those two (the models stay; deleting
            them: docs/gitops.md)
  --train   also submit a training run (a Workflow of the pipeline), exported as trainingRun;
            each up --train replaces the last run with a new one; a later up without
            --train deletes it, even while it runs
  --refresh read the live objects first (objects deleted behind the stack's back, the URL)
Env: KUBECONFIG (its first file); PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE
(required with a file:// backend); PULUMI_BACKEND_URL (default: a file:// backend under
\$XDG_STATE_HOME/fashion-mnist-gitops/pulumi).
USAGE
  wants_help "${1:-}" && exit 0
  exit 2
fi
kubectl_for_cluster
export KUBECTL
exec "${PYTHON}" "${REPO_ROOT}/pulumi/deploy.py" "$@"
