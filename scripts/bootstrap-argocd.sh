#!/usr/bin/env bash
# Install Argo CD (pinned, with our health checks) and hand the environment to GitOps: only the
# projects and the root app are applied here; the root app syncs argocd/apps/<env> from git,
# whose sync waves order the platform apps before the ML overlay.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ARGOCD_VERSION="$(pinned_version ARGOCD_VERSION)"
BOOTSTRAP_SELECTOR="fashion-mnist.example.com/bootstrap=true"
if wants_help "${1:-}" || [[ $# -ne 1 ]]; then
  cat <<USAGE
usage: scripts/bootstrap-argocd.sh <env>      env: local-k3d | gpu-cloud
Installs Argo CD ${ARGOCD_VERSION} (argocd/install, server-side), then applies the AppProjects
and the root Application of argocd/apps/<env> (label ${BOOTSTRAP_SELECTOR}).
Argo CD then syncs from the repository set in argocd/apps/common/repository.yaml: set it to
your fork and push first (docs/gitops.md). Idempotent. Prerequisites not managed by Argo CD:
cert-manager and Knative Serving + Traefik (scripts/install-platform.sh installs them).
Env: UPSTREAM_MIRROR_DIR   offline: Argo CD's install manifest from this mirror (../shared/upstream).
USAGE
  wants_help "${1:-}" && exit 0
  exit 2
fi
APPS="${REPO_ROOT}/argocd/apps/$(environment "$1")"
WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
mirror_kustomization "${REPO_ROOT}/argocd/install" "${WORK}/install"
"${KUBECTL}" apply --server-side --force-conflicts -k "${WORK}/install"
"${KUBECTL}" -n argocd rollout status deploy --timeout=300s
"${KUBECTL}" -n argocd rollout status statefulset/argocd-application-controller --timeout=300s
"${KUBECTL}" apply --server-side -k "${APPS}" -l "${BOOTSTRAP_SELECTOR}"
log "Argo CD syncs $1 from $("${KUBECTL}" -n argocd get application root -o jsonpath='{.spec.source.repoURL}')"
log "watch: kubectl -n argocd get applications"
