#!/usr/bin/env bash
# Render and validate every kustomization (python -m validation). Offline: MIRROR_DIR=../shared.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if wants_help "${1:-}"; then
  cat <<USAGE
usage: scripts/validate.sh [kustomization-dir ...]
Runs python -m validation (kubeconform schemas and the checks of docs/validation.md).
Env: MIRROR_DIR (sets UPSTREAM_MIRROR_DIR and KUBE_SCHEMA_DIR), KUBECONFORM (default: the
kubeconform scripts/kubeconform.sh finds or builds), PYTHON (default .venv/bin/python).
USAGE
  exit 0
fi
if [[ -n "${MIRROR_DIR:-}" ]]; then
  export UPSTREAM_MIRROR_DIR="${UPSTREAM_MIRROR_DIR:-$(cd "${MIRROR_DIR}" && pwd)/upstream}"
  export KUBE_SCHEMA_DIR="${KUBE_SCHEMA_DIR:-$(cd "${MIRROR_DIR}" && pwd)/kube-schemas}"
fi
export KUBECONFORM="${KUBECONFORM:-$("${REPO_ROOT}/scripts/kubeconform.sh")}"
PYTHON="${PYTHON:-${REPO_ROOT}/.venv/bin/python}"
cd "${REPO_ROOT}"
exec "${PYTHON}" -m validation "$@"
