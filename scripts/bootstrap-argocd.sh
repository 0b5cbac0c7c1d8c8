#!/usr/bin/env bash
# Install Argo CD (pinned, with our health checks) and hand the environment to GitOps: the
# root app-of-apps syncs argocd/apps/<env> -> platform apps -> the ML overlay.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}" || [[ $# -ne 1 ]]; then
  cat <<USAGE
usage: scripts/bootstrap-argocd.sh <env>      env: local-k3d | gpu-cloud
Installs Argo CD ${ARGOCD_VERSION} (argocd/install, server-side) and applies argocd/apps/<env>.
Idempotent. Prerequisites not managed by Argo CD: cert-manager and Knative Serving + Kourier
(scripts/install-platform.sh installs them).
USAGE
  wants_help "${1:-}" && exit 0
  exit 2
fi
APPS="${REPO_ROOT}/argocd/apps/$1"
[[ -f "${APPS}/kustomization.yaml" ]] || die "no environment $1 (${APPS})"
"${KUBECTL}" apply --server-side --force-conflicts -k "${REPO_ROOT}/argocd/install"
"${KUBECTL}" -n argocd rollout status deploy --timeout=300s
"${KUBECTL}" -n argocd rollout status statefulset/argocd-application-controller --timeout=300s
"${KUBECTL}" apply --server-side -k "${APPS}"
log "Argo CD syncs $1; watch: kubectl -n argocd get applications"
