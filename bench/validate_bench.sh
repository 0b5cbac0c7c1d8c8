#!/usr/bin/env bash
# Wall and CPU time of `python -m validation` (every kustomization), as shipped and without the
# one speed measure it keeps: upstream mirror copies without their CRDs (render.without_crds).
# Also: kustomize runs one at a time instead of in parallel threads. Not a test: numbers depend
# on the machine and its load. Works from any directory.
# usage: bench/validate_bench.sh [runs]      (offline: MIRROR_DIR, default ../shared)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUNS="${1:-3}"
MIRROR_DIR="${MIRROR_DIR:-../shared}"
export UPSTREAM_MIRROR_DIR="${UPSTREAM_MIRROR_DIR:-$(cd "${MIRROR_DIR}" && pwd)/upstream}"
export KUBE_SCHEMA_DIR="${KUBE_SCHEMA_DIR:-$(cd "${MIRROR_DIR}" && pwd)/kube-schemas}"
export KUBECONFORM="${KUBECONFORM:-$(scripts/kubeconform.sh)}"
PYTHON="${PYTHON:-.venv/bin/python}"
SHIPPED='from validation.main import main'
WITH_CRDS='import validation.render as r; r.without_crds = lambda text: text
from validation.main import main'
SEQUENTIAL='import concurrent.futures as cf, validation.render as r
r.ThreadPoolExecutor = lambda max_workers: cf.ThreadPoolExecutor(1)
from validation.main import main'
measure() {  # measure <label> <python prelude>
  local times=()
  for _ in $(seq "${RUNS}"); do
    times+=("$( { /usr/bin/time -f '%e s wall/%U s cpu' "${PYTHON}" -c "$2
raise SystemExit(main([]))" >/dev/null; } 2>&1 | tail -n1)")
  done
  printf '%-28s %s\n' "$1" "$(IFS=,; echo "${times[*]}")"
}
echo "cpus: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg)"
measure "as shipped" "${SHIPPED}"
measure "CRDs carried (no measure)" "${WITH_CRDS}"
measure "kustomize sequential" "${SEQUENTIAL}"
