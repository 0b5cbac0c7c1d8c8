#!/usr/bin/env bash
# Shared helpers: repo root, versions.env, usage. Sourced by every script.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../versions.env
source "${REPO_ROOT}/versions.env"
KUBECTL="${KUBECTL:-kubectl}"
if ! command -v "${KUBECTL}" >/dev/null 2>&1 && [[ -x "${REPO_ROOT}/.venv/bin/kubectl" ]]; then
  KUBECTL="${REPO_ROOT}/.venv/bin/kubectl"
fi
CLUSTER_NAME="${CLUSTER_NAME:-fashion-mnist}"
NAMESPACE="${NAMESPACE:-fashion-mnist}"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is required (see docs/readme-gitops.md)"; }
wants_help() { [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; }
