#!/usr/bin/env bash
# The e2e control plane: a real kube-apiserver (RBAC + default admission), etcd,
# kube-controller-manager and kube-scheduler, plus kwok's controller for simulated nodes and
# pod lifecycles (hack/e2e/kwok-stages.yaml), all local processes on 127.0.0.1 started by
# `kwokctl create cluster --runtime binary` from the binaries scripts/tools.sh built at the
# versions in versions.env. No download, no container. See docs/e2e.md.
#
# Usage:
#   scripts/e2e-cluster.sh run -- CMD [ARG...]   start, run CMD with the cluster's env, ALWAYS
#                                               tear down (EXIT/INT/TERM); exit with CMD's status
#   scripts/e2e-cluster.sh up                    start and print the env file to source
#   scripts/e2e-cluster.sh down E2E_DIR          stop the cluster `up` started in E2E_DIR
#
# CMD sees: KUBECONFIG (admin), KUBECTL (kubectl 1.34 built here), FMNIST_E2E_DIR,
# FMNIST_E2E_KUBECONFIG, FMNIST_E2E_CLUSTER, PATH with the tool bin dirs first.
# E2E_DIR (default: a new /tmp/fmnist-e2e.XXXXXX) holds the cluster's pki, etcd data and logs;
# it is removed after a passing run and kept (path printed) after a failing one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/scripts/tools.sh"
STAGES="$ROOT/hack/e2e/kwok-stages.yaml"
NODES="$ROOT/hack/e2e/nodes.yaml"
NAME="${FMNIST_E2E_CLUSTER:-fmnist-e2e}"
START_TIMEOUT="${FMNIST_E2E_START_TIMEOUT:-120}"

log() { printf 'e2e-cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

bins() {
  K8S_BIN="$("$TOOLS" --bin-dir kubernetes)" || die "run scripts/tools.sh first"
  ETCD_BIN="$("$TOOLS" --bin-dir etcd)" || die "run scripts/tools.sh first"
  KWOK_BIN="$("$TOOLS" --bin-dir kwok)" || die "run scripts/tools.sh first"
}

kwokctl() { KWOK_WORKDIR="$E2E_DIR/kwok" "$KWOK_BIN/kwokctl" --name "$NAME" "$@"; }

# PIDs of every process whose command line mentions this run's directory (all of them were
# started by kwokctl for this run; the directory name is unique per run).
# The processes of this run: their command line holds its absolute directory, matched
# literally (a regex or a relative path could match another run's processes).
run_pids() {
  local dir pid
  dir="$(cd "$E2E_DIR" 2>/dev/null && pwd -P)/kwok/" || return 0
  for pid in $(pgrep -f -- "/kwok/" || true); do
    if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir"; then echo "$pid"; fi
  done
}

up() {
  bins
  E2E_DIR="${E2E_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/fmnist-e2e.XXXXXX")}"
  mkdir -p "$E2E_DIR"
  local t0 cfg="$E2E_DIR/kwokctl.yaml"
  t0="$(date +%s%N)"
  # Binary paths, 127.0.0.1 only, RBAC + default admission plugins, no downloads.
  cat > "$cfg" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  securePort: true
  kubeAuthorization: true
  kubeAdmission: true
  quietPull: true
  cacheDir: $E2E_DIR/kwok/cache
  kubeApiserverBinary: $K8S_BIN/kube-apiserver
  kubeControllerManagerBinary: $K8S_BIN/kube-controller-manager
  kubeSchedulerBinary: $K8S_BIN/kube-scheduler
  kubectlBinary: $K8S_BIN/kubectl
  etcdBinary: $ETCD_BIN/etcd
  kwokControllerBinary: $KWOK_BIN/kwok
# Each built-in controller uses its own ServiceAccount (RBAC bootstrap roles), like kubeadm.
componentsPatches:
  - name: kube-controller-manager
    extraArgs:
      - key: use-service-account-credentials
        value: "true"
EOF
  log "starting $NAME in $E2E_DIR"
  if ! kwokctl create cluster --config "$cfg" --config "$STAGES" \
      --kubeconfig "$E2E_DIR/kubeconfig" --timeout "${START_TIMEOUT}s" --wait "${START_TIMEOUT}s" \
      > "$E2E_DIR/create.log" 2>&1; then
    cat "$E2E_DIR/create.log" >&2
    die "kwokctl create cluster failed (logs: $E2E_DIR/kwok/clusters/$NAME/logs)"
  fi
  local kc=("$K8S_BIN/kubectl" --kubeconfig "$E2E_DIR/kubeconfig")
  "${kc[@]}" apply -f "$NODES" >/dev/null
  "${kc[@]}" wait --for=condition=Ready node --all --timeout="${START_TIMEOUT}s" >/dev/null
  # The controller-manager's ServiceAccount controller creates "default" in every namespace;
  # pods cannot be admitted before it exists.
  local i
  for ((i = 0; i < START_TIMEOUT * 2; i++)); do
    "${kc[@]}" get serviceaccount default -n default >/dev/null 2>&1 && break
    sleep 0.5
  done
  "${kc[@]}" get serviceaccount default -n default >/dev/null || die "no default ServiceAccount (controller-manager down?)"
  cat > "$E2E_DIR/env" <<EOF
export FMNIST_E2E_DIR='$E2E_DIR'
export FMNIST_E2E_CLUSTER='$NAME'
export FMNIST_E2E_KUBECONFIG='$E2E_DIR/kubeconfig'
export KUBECONFIG='$E2E_DIR/kubeconfig'
export KUBECTL='$K8S_BIN/kubectl'
export PATH='$K8S_BIN:$ETCD_BIN:$KWOK_BIN':"\$PATH"
EOF
  local ms=$((($(date +%s%N) - t0) / 1000000))
  echo "$ms" > "$E2E_DIR/start-ms"
  log "ready in $((ms / 1000)).$((ms % 1000 / 100)) s: source $E2E_DIR/env"
}

down() {
  # Only ever the run named explicitly: several runs (other clones, other users) may coexist.
  E2E_DIR="${1:-${E2E_DIR:-}}"
  [[ -n "$E2E_DIR" ]] || die "usage: $0 down E2E_DIR (the directory \`up\` printed)"
  bins
  if [[ -f "$E2E_DIR/kwokctl.yaml" ]]; then
    kwokctl delete cluster > "$E2E_DIR/delete.log" 2>&1 \
      || log "kwokctl delete cluster failed (see $E2E_DIR/delete.log)"
  elif [[ -z "$(run_pids)" ]]; then
    log "no e2e cluster in $E2E_DIR"; return 0
  fi
  local pids i
  for ((i = 0; i < 20; i++)); do
    pids="$(run_pids)"
    [[ -z "$pids" ]] && break
    if ((i == 10)); then
      log "still running after kwokctl delete, sending SIGKILL: $(echo "$pids" | tr '\n' ' ')"
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null || true
    fi
    sleep 0.5
  done
  pids="$(run_pids)"
  [[ -z "$pids" ]] || die "processes of $E2E_DIR left behind: $pids"
  log "stopped $NAME; no process left"
}

run() {
  [[ "${1:-}" == "--" ]] && shift
  (($#)) || die "usage: $0 run -- CMD [ARG...]"
  local rc=0 child=""
  # On INT/TERM: stop CMD (it runs in the background so that `wait` returns at once on a
  # signal; a background command ignores the terminal's SIGINT, so it gets TERM), tear down.
  stop() {
    trap - INT TERM EXIT
    if [[ -n "${child:-}" ]]; then
      kill -TERM "$child" 2>/dev/null || true
      # bounded: a command that ignores TERM gets KILL after 10 s
      for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$child" 2>/dev/null || break; sleep 1; done
      kill -KILL "$child" 2>/dev/null || true
      wait "$child" 2>/dev/null || true
    fi
    down
    exit "$1"
  }
  trap 'stop 130' INT
  trap 'stop 143' TERM
  trap 'stop 1' EXIT
  up
  # shellcheck disable=SC1091
  (source "$E2E_DIR/env" && exec "$@") &
  child=$!
  wait "$child" || rc=$?
  child=""
  trap - INT TERM EXIT
  down
  if ((rc == 0)); then rm -rf "$E2E_DIR"; else log "failed (exit $rc); cluster logs kept in $E2E_DIR"; fi
  return "$rc"
}

case "${1:-}" in
  up)
    # A failed start must not leave half a cluster running: stop what started (logs are kept).
    trap 'rc=$?; if ((rc)) && [[ -n "${E2E_DIR:-}" ]]; then log "start failed: stopping it"; down || true; fi' EXIT
    up
    trap - EXIT
    echo "$E2E_DIR/env" ;;
  down) shift; down "$@" ;;
  run) shift; run "$@" ;;
  -h|--help)
    echo "usage: scripts/e2e-cluster.sh run -- CMD [ARG...] | up | down E2E_DIR"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) echo "usage: scripts/e2e-cluster.sh run -- CMD [ARG...] | up | down E2E_DIR (see --help)" >&2; exit 2 ;;
esac
