#!/usr/bin/env bash
# The e2e control plane: a real kube-apiserver (RBAC + default admission), etcd,
# kube-controller-manager and kube-scheduler, plus kwok's controller for simulated nodes and
# pod lifecycles (hack/e2e/kwok-stages.yaml), all local processes started by
# `kwokctl create cluster --runtime binary` from the binaries scripts/tools.sh built at the
# versions in versions.env, and a real node (scripts/e2e-node.sh: containerd, kubelet,
# kube-proxy, CoreDNS) whose containers run the images of scripts/e2e-images.sh. No download.
# Everything runs in a network + mount namespace that the run creates (no uplink: every
# request of the tests stays inside it) and that goes with its last process. See docs/e2e.md.
#
# Usage:
#   scripts/e2e-cluster.sh run -- CMD [ARG...]   start, run CMD with the cluster's env, ALWAYS
#                                               tear down (EXIT/INT/TERM); exit with CMD's status
#   scripts/e2e-cluster.sh up                    start and print the env file to source
#   scripts/e2e-cluster.sh down E2E_DIR          stop the cluster `up` started in E2E_DIR
#
# CMD runs inside the run's namespaces and sees: KUBECONFIG (admin), KUBECTL (kubectl 1.34 built
# here), FMNIST_E2E_DIR, FMNIST_E2E_KUBECONFIG, FMNIST_E2E_CLUSTER, FMNIST_E2E_REAL_NODE (the
# real node's name, empty without one), PATH with the tool bin dirs first. From `up`, the env
# file's $KUBECTL is a wrapper that enters the run's network namespace (the API server is on
# its 127.0.0.1); `$E2E_DIR/enter CMD...` runs any command there.
# FMNIST_E2E_REAL_NODE=0: no real node (kwok nodes only; no images needed). Needs root either way.
# E2E_DIR (default: a new /tmp/fmnist-e2e.XXXXXX) holds the cluster's pki, etcd data and logs;
# it is removed after a passing run and kept (path printed) after a failing one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/scripts/tools.sh"
STAGES="$ROOT/hack/e2e/kwok-stages.yaml"
NODES="$ROOT/hack/e2e/nodes.yaml"
NAME="${FMNIST_E2E_CLUSTER:-fmnist-e2e}"
START_TIMEOUT="${FMNIST_E2E_START_TIMEOUT:-120}"
REAL_NODE="${FMNIST_E2E_REAL_NODE:-1}"
LOCK_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/fashion-mnist-gitops"
NODE_IP=10.244.0.1 # scripts/e2e-node.sh: the bridge, the node, the API server's advertise address

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

# The run's network + mount namespace: held by one process (its PID in $E2E_DIR/netns.pid),
# entered by every other one with nsenter (not `ip netns exec`, which remounts /sys and hides
# the cgroup hierarchies). Only loopback; the real node adds its bridge.
lock_real_node() {
  ((EUID == 0)) || die "the e2e needs root (its network namespace; the real node's cgroups)"
  if [[ "$REAL_NODE" != 0 ]]; then
    # One real node per machine (the kubelet's sysctls and fixed directories are the machine's):
    # the lock is held by fd 9, which the namespace holder and every process of the run inherit,
    # so it is released when the run's last process is gone.
    mkdir -p "$LOCK_DIR"
    local lock="$LOCK_DIR/e2e-real-node.lock"
    touch "$lock"
    exec 9<>"$lock"
    flock -n 9 || die "another e2e run's real node is running on this machine: the run in $(cat "$lock") (scripts/e2e-cluster.sh down $(cat "$lock") stops it)"
    : > "$lock" # (the holder writes its directory once it has one, up)
  fi
}

netns_create() {
  unshare --net --mount --propagation private -- \
    bash -c 'ip link set lo up && echo ok > "$1" && exec sleep infinity' _ "$E2E_DIR/netns.ok" \
    < /dev/null > /dev/null 2>&1 &
  echo $! > "$E2E_DIR/netns.pid"
  disown
  local i
  for ((i = 0; i < 50; i++)); do [[ -f "$E2E_DIR/netns.ok" ]] && break; sleep 0.1; done
  [[ -f "$E2E_DIR/netns.ok" ]] || die "could not create the run's network namespace (root needed)"
  readlink "/proc/$(cat "$E2E_DIR/netns.pid")/ns/net" > "$E2E_DIR/netns.id" # net:[inode]
  cat > "$E2E_DIR/enter" <<EOF
#!/bin/sh
# run a command in the network and mount namespace of the e2e run in $E2E_DIR
exec nsenter --target "\${FMNIST_E2E_NETNS_PID:-\$(cat '$E2E_DIR/netns.pid')}" --net --mount --wd="\$PWD" -- "\$@"
EOF
  chmod +x "$E2E_DIR/enter"
}
in_netns() { "$E2E_DIR/enter" "$@"; }  # (FMNIST_E2E_NETNS_PID: enter through another process)
netns_pids() { # every process still in the run's network namespace (its inode, netns.id)
  local id p
  id="$(cat "$E2E_DIR/netns.id" 2>/dev/null)" || return 0
  for p in /proc/[0-9]*; do
    if [[ "$(readlink "$p/ns/net" 2>/dev/null)" == "$id" ]]; then
      # not a zombie or a process in the middle of exiting (state Z or X: it holds nothing)
      [[ "$(awk '{print $3}' "$p/stat" 2>/dev/null)" =~ ^[ZX]?$ ]] || echo "${p#/proc/}"
    fi
  done
}

up() {
  bins
  lock_real_node
  E2E_DIR="${E2E_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/fmnist-e2e.XXXXXX")}"
  mkdir -p "$E2E_DIR"
  E2E_DIR="$(cd "$E2E_DIR" && pwd -P)"
  if [[ "$REAL_NODE" != 0 ]]; then echo "$E2E_DIR" > "$LOCK_DIR/e2e-real-node.lock"; fi
  if [[ "$REAL_NODE" != 0 ]]; then
    "$ROOT/scripts/e2e-images.sh" --archives >/dev/null \
      || die "the real node's images are not built: run scripts/e2e-images.sh (or FMNIST_E2E_REAL_NODE=0)"
  fi
  netns_create
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
# The HPA controller syncs every 5 s (default 15 s) and scales in after 30 s below target
# (default 5 min): the real node's autoscaling test fits in minutes (KServe's HPAs set an
# empty behavior, so this default applies to them).
componentsPatches:
  - name: kube-controller-manager
    extraArgs:
      - {key: use-service-account-credentials, value: "true"}
      - {key: horizontal-pod-autoscaler-sync-period, value: 5s}
      - {key: horizontal-pod-autoscaler-downscale-stabilization, value: 30s}
EOF
  if [[ "$REAL_NODE" != 0 ]]; then
    local pki="$E2E_DIR/kwok/clusters/$NAME/pki"
    # The real node (scripts/e2e-node.sh): the API server is reached on the bridge too
    # (pods: kubernetes.default = 10.0.0.1 -> kube-proxy -> $NODE_IP), advertises that address
    # (the namespace has no default route to take one from), authenticates to the kubelet
    # (logs, exec) and verifies its serving certificate; the namespaces of real-node pods opt in
    # through PodNodeSelector / PodTolerationRestriction. kwok leaves that node alone: it manages
    # only the nodes annotated kwok.x-k8s.io/node=fake (its binary runtime manages all by default).
    # API aggregation (metrics-server's metrics.k8s.io): kwokctl already proxies with its admin
    # certificate; the extension server trusts it as the front proxy, like kubeadm's flags.
    cat >> "$cfg" <<EOF
  - name: kube-apiserver
    extraArgs:
      - {key: bind-address, value: 0.0.0.0, override: true}
      - {key: advertise-address, value: $NODE_IP}
      - {key: kubelet-client-certificate, value: $pki/admin.crt}
      - {key: kubelet-client-key, value: $pki/admin.key}
      - {key: kubelet-certificate-authority, value: $pki/ca.crt}
      - {key: kubelet-preferred-address-types, value: "InternalIP,Hostname"}
      - {key: enable-admission-plugins, value: "PodNodeSelector,PodTolerationRestriction"}
      - {key: requestheader-client-ca-file, value: $pki/ca.crt}
      - {key: requestheader-allowed-names, value: kwok-admin}
      - {key: requestheader-username-headers, value: X-Remote-User}
      - {key: requestheader-group-headers, value: X-Remote-Group}
      - {key: requestheader-extra-headers-prefix, value: X-Remote-Extra-}
  - name: kwok-controller
    extraArgs:
      - {key: manage-all-nodes, value: "false", override: true}
      - {key: manage-nodes-with-annotation-selector, value: kwok.x-k8s.io/node=fake}
EOF
    sed -i "s|^  quietPull: true|  kubeApiserverCertSANs: [10.0.0.1, $NODE_IP]\n&|" "$cfg"
  else
    # kwok nodes only: the run's network namespace has no default route for the API server to
    # take its advertised address from, so it is given one
    cat >> "$cfg" <<EOF
  - name: kube-apiserver
    extraArgs:
      - {key: advertise-address, value: 127.0.0.1}
EOF
  fi
  log "starting $NAME in $E2E_DIR"
  if ! in_netns env KWOK_WORKDIR="$E2E_DIR/kwok" "$KWOK_BIN/kwokctl" --name "$NAME" \
      create cluster --config "$cfg" --config "$STAGES" \
      --kubeconfig "$E2E_DIR/kubeconfig" --timeout "${START_TIMEOUT}s" --wait "${START_TIMEOUT}s" \
      > "$E2E_DIR/create.log" 2>&1; then
    cat "$E2E_DIR/create.log" >&2
    die "kwokctl create cluster failed (logs: $E2E_DIR/kwok/clusters/$NAME/logs)"
  fi
  local kc=(in_netns "$K8S_BIN/kubectl" --kubeconfig "$E2E_DIR/kubeconfig")
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
  local node_name=""
  if [[ "$REAL_NODE" != 0 ]]; then
    in_netns "$ROOT/scripts/e2e-node.sh" start "$E2E_DIR"
    node_name=fmnist-e2e-node
  fi
  # inside the namespaces (run's CMD) and from the caller's shell (`up`)
  cat > "$E2E_DIR/env.inside" <<EOF
export FMNIST_E2E_DIR='$E2E_DIR'
export FMNIST_E2E_CLUSTER='$NAME'
export FMNIST_E2E_KUBECONFIG='$E2E_DIR/kubeconfig'
export FMNIST_E2E_REAL_NODE='$node_name'
export FMNIST_E2E_REAL_NODE_DISABLED='$([[ "$REAL_NODE" == 0 ]] && echo 1)'
export KUBECONFIG='$E2E_DIR/kubeconfig'
export KUBECTL='$K8S_BIN/kubectl'
export PATH='$K8S_BIN:$ETCD_BIN:$KWOK_BIN':"\$PATH"
EOF
  mkdir -p "$E2E_DIR/bin"
  printf '#!/bin/sh\nexec %q %q "$@"\n' "$E2E_DIR/enter" "$K8S_BIN/kubectl" > "$E2E_DIR/bin/kubectl"
  chmod +x "$E2E_DIR/bin/kubectl"
  sed -e "s|^export KUBECTL=.*|export KUBECTL='$E2E_DIR/bin/kubectl'|" \
    -e "s|^export PATH='|export PATH='$E2E_DIR/bin:|" "$E2E_DIR/env.inside" > "$E2E_DIR/env"
  local ms=$((($(date +%s%N) - t0) / 1000000))
  echo "$ms" > "$E2E_DIR/start-ms"
  log "ready in $((ms / 1000)).$((ms % 1000 / 100)) s: source $E2E_DIR/env"
}

# Every component's log in one place, $E2E_DIR/logs, before `down` removes where they were: the
# pods' still there (the platform's controllers; the kubelet deletes a deleted pod's logs),
# the control plane's (kwokctl delete removes its cluster directory); the real node's own
# (kubelet, containerd, kube-proxy, CoreDNS, metrics-server) stay in $E2E_DIR/kwok/node, the
# platform install's in $E2E_DIR/logs/platform (tests/e2e/conftest.py).
keep_logs() {
  local logs="$E2E_DIR/logs" cp_dir="$E2E_DIR/kwok/clusters/$NAME/logs"
  [[ -d "$E2E_DIR/kwok" ]] || return 0 # no cluster there (down checks and says so)
  mkdir -p "$logs"
  if [[ -d "$E2E_DIR/kwok/node/pod-logs" ]]; then
    cp -a "$E2E_DIR/kwok/node/pod-logs/." "$logs/pods/" 2>/dev/null || true
  fi
  if [[ -d "$cp_dir" ]]; then cp -a "$cp_dir/." "$logs/control-plane/" 2>/dev/null || true; fi
  if [[ -d "$E2E_DIR/kwok/node" ]]; then ln -sfn ../kwok/node "$logs/node"; fi
}

down() {
  # Only ever the run named explicitly: several runs (other clones, other users) may coexist.
  E2E_DIR="${1:-${E2E_DIR:-}}"
  [[ -n "$E2E_DIR" ]] || die "usage: $0 down E2E_DIR (the directory \`up\` printed)"
  bins
  keep_logs || log "could not gather the logs under $E2E_DIR/logs (stopping anyway)"
  local holder="" node_failed=0
  if [[ -f "$E2E_DIR/netns.pid" ]] && kill -0 "$(cat "$E2E_DIR/netns.pid")" 2>/dev/null; then
    holder="$(cat "$E2E_DIR/netns.pid")"
  fi
  if [[ -d "$E2E_DIR/kwok/node" ]]; then
    # first, while the API server runs: the node's pods, then the node (it checks what is left);
    # in the run's namespace, entered through the holder or any process left in it, else (all
    # gone) only the host's side: cgroups, sysctls, directories
    local via="$holder"
    [[ -n "$via" ]] || via="$(netns_pids | head -n1)"
    if [[ -n "$via" ]]; then
      FMNIST_E2E_NETNS_PID="$via" in_netns "$ROOT/scripts/e2e-node.sh" stop "$E2E_DIR" || node_failed=1
    else
      FMNIST_E2E_NODE_OUTSIDE=1 "$ROOT/scripts/e2e-node.sh" stop "$E2E_DIR" || node_failed=1
    fi
  fi
  # (kwokctl stops its processes by their PID files: no need to enter the namespace)
  if [[ -f "$E2E_DIR/kwokctl.yaml" ]]; then
    kwokctl delete cluster > "$E2E_DIR/delete.log" 2>&1 \
      || log "kwokctl delete cluster failed (see $E2E_DIR/delete.log)"
  elif [[ -z "$(run_pids)" && -z "$holder" ]]; then
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
  # the namespaces go with their last process: the holder, and nothing else may be left in them
  if [[ -n "$holder" ]]; then
    kill -KILL "$holder" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do kill -0 "$holder" 2>/dev/null || break; sleep 0.1; done
  fi
  for ((i = 0; i < 10; i++)); do # processes that are exiting (their parent was just killed)
    pids="$(netns_pids)"
    [[ -z "$pids" ]] && break
    sleep 0.3
  done
  if [[ -n "$pids" ]]; then
    local p what=""
    for p in $pids; do what+="; $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-160)"; done
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    die "processes left in the run's network namespace (killed)${what}"
  fi
  ((node_failed == 0)) || die "the real node left something behind (see above)"
  log "stopped $NAME; no process left"
}

run() {
  [[ "${1:-}" == "--" ]] && shift
  (($#)) || die "usage: $0 run -- CMD [ARG...]"
  local rc=0 child=""
  # On INT/TERM: stop CMD (it runs in the background so that `wait` returns at once on a
  # signal; a background command ignores the terminal's SIGINT, so it gets TERM), tear down.
  stop() {
    trap - EXIT
    trap '' INT TERM # a second Ctrl-C must not cut the teardown short
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
  in_netns bash -c 'source "$1/env.inside" && shift && exec "$@"' _ "$E2E_DIR" "$@" &
  child=$!
  wait "$child" || rc=$?
  child=""
  trap - INT TERM EXIT
  down
  if ((rc == 0)); then
    rm -rf "$E2E_DIR"
  else
    log "failed (exit $rc); cluster logs kept in $E2E_DIR/logs (pods, control-plane, node, platform)"
  fi
  return "$rc"
}

case "${1:-}" in
  up)
    # A failed or interrupted start must not leave half a cluster running: stop what started
    # (logs are kept). INT/TERM exit non-zero, which the EXIT trap sees.
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'rc=$?; if ((rc)) && [[ -n "${E2E_DIR:-}" ]]; then log "start failed: stopping it"; trap "" INT TERM; down || true; fi' EXIT
    up
    trap - EXIT INT TERM
    echo "$E2E_DIR/env" ;;
  down) shift; down "$@" ;;
  run) shift; run "$@" ;;
  -h|--help)
    echo "usage: scripts/e2e-cluster.sh run -- CMD [ARG...] | up | down E2E_DIR"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) echo "usage: scripts/e2e-cluster.sh run -- CMD [ARG...] | up | down E2E_DIR (see --help)" >&2; exit 2 ;;
esac
