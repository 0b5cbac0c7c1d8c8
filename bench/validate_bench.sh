#!/usr/bin/env bash
# Wall time of `python -m validation`, cold (empty render cache) and warm, for the two overlays
# and for everything (overlays + platform + argocd). Not a test: numbers depend on the machine.
# usage: bench/validate_bench.sh [runs]      (offline: MIRROR_DIR=../shared, default ../shared)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS="${1:-3}"
MIRROR_DIR="${MIRROR_DIR:-../shared}"
export UPSTREAM_MIRROR_DIR="${UPSTREAM_MIRROR_DIR:-$(cd "${MIRROR_DIR}" && pwd)/upstream}"
export KUBE_SCHEMA_DIR="${KUBE_SCHEMA_DIR:-$(cd "${MIRROR_DIR}" && pwd)/kube-schemas}"
PYTHON="${PYTHON:-.venv/bin/python}"
TIMEFORMAT="%R"
measure() {  # measure <label> <cold|warm> [kustomization ...]
  local label="$1" mode="$2" times=() cache
  shift 2
  cache="$(mktemp -d)"
  [[ "${mode}" == warm ]] && VALIDATION_CACHE_DIR="${cache}" "${PYTHON}" -m validation -q "$@" >/dev/null
  for _ in $(seq "${RUNS}"); do
    if [[ "${mode}" == cold ]]; then rm -rf "${cache}" && mkdir -p "${cache}"; fi
    t="$( { time VALIDATION_CACHE_DIR="${cache}" "${PYTHON}" -m validation -q "$@" >/dev/null; } 2>&1 )"
    times+=("${t}")
  done
  rm -rf "${cache}"
  printf '%-12s %-5s %s s\n' "${label}" "${mode}" "${times[*]}"
}
measure overlays cold overlays/local-k3d overlays/gpu-cloud
measure overlays warm overlays/local-k3d overlays/gpu-cloud
measure everything cold
measure everything warm
