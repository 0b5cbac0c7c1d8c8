#!/usr/bin/env bash
# The e2e cluster's real node: containerd + runc + the CNI bridge, kubelet, kube-proxy and
# CoreDNS and metrics-server, from the binaries scripts/tools.sh built at the versions in
# versions.env, all host
# processes of the run's network and mount namespace (scripts/e2e-cluster.sh creates it and
# calls this script inside it). Each component's settings are in the function named after it
# below. See docs/e2e.md, "The real node".
#
# Usage (inside the run's namespaces; E2E_DIR is the cluster's directory):
#   scripts/e2e-node.sh start E2E_DIR   start the node, wait until it is Ready and DNS answers
#   scripts/e2e-node.sh stop E2E_DIR    delete its pods, stop it, undo every host change, and
#                                       fail if a process, mount or cgroup is left
#
# Network (the run's namespace has no uplink and no default route): bridge fmnist0 =
# 10.244.0.1/24 = node IP = API server advertise address = CoreDNS; pods get 10.244.0.x from
# host-local, route only to the bridge, no masquerade. Service CIDR 10.0.0.0/24 (kwokctl's
# default, routed onto the bridge): kubernetes = 10.0.0.1, through kube-proxy (iptables mode).
# Placement: the node registers with the taint e2e.fashion-mnist/real-node=true:NoSchedule and
# the label e2e.fashion-mnist/real-node=true; a namespace opts in with PodNodeSelector /
# PodTolerationRestriction annotations (tests/e2e/real_node.py); other namespaces stay on kwok.
# Host changes it makes and undoes: the kubelet's sysctls (vm.overcommit_memory, kernel.panic,
# kernel.panic_on_oops, ... saved before, restored after start-up), one cgroup per v1 hierarchy
# (/fmnist-e2e-<id>), and four directories no setting moves (/var/lib/cni, /var/lib/kubelet,
# /run/containerd, /var/log/containers: a tmpfs over each in the run's mount namespace, the
# directory removed if this script created it). One real node per machine at a time (a host
# lock, held by the run's namespace: scripts/e2e-cluster.sh), since these are the machine's.
# Needs root and cgroup v1 (the kind of machine this project runs on; v2 is refused).
# FMNIST_E2E_NODE_OUTSIDE=1 (stop only): the run's namespace is gone; undo the host changes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/scripts/tools.sh"
# shellcheck disable=SC1091
source <(grep -E '^(PAUSE_VERSION|COREDNS_VERSION)=' "$ROOT/versions.env")

NODE_NAME=fmnist-e2e-node
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.0.0.0/24 # kwokctl's default --service-cluster-ip-range
BRIDGE=fmnist0
CLUSTER_DOMAIN=cluster.local
REAL_NODE_LABEL=e2e.fashion-mnist/real-node
PAUSE_IMAGE="registry.k8s.io/pause:$PAUSE_VERSION"
START_TIMEOUT="${FMNIST_E2E_START_TIMEOUT:-120}"
# Sysctls the kubelet sets at start-up (pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables); not namespaced: they are the whole machine's.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Directories that kubelet, containerd or libcni use whatever their settings say.
FIXED_DIRS=(/var/lib/cni /var/lib/kubelet /run/containerd /var/log/containers)

log() { printf 'e2e-node: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

paths() {
  E2E_DIR="$(cd "$1" && pwd -P)"
  NODE="$E2E_DIR/kwok/node" # under kwok/: e2e-cluster.sh's run_pids finds these processes
  PKI="$(echo "$E2E_DIR"/kwok/clusters/*/pki)"
  [[ -f "$PKI/ca.key" ]] || die "no cluster CA in $E2E_DIR/kwok/clusters/*/pki"
  CGROUP_NAME="fmnist-e2e-$(basename "$E2E_DIR" | tr -c 'a-zA-Z0-9\n' '-')"
  K8S_BIN="$("$TOOLS" --bin-dir kubernetes)"
  NODE_BIN="$("$TOOLS" --bin-dir kube-node)"
  CONTAINERD_BIN="$("$TOOLS" --bin-dir containerd)"
  RUNC="$("$TOOLS" --bin runc)"
  CNI_BIN="$("$TOOLS" --bin-dir cni-plugins)"
  COREDNS="$("$TOOLS" --bin coredns)"
  KC=("$K8S_BIN/kubectl" --kubeconfig "$E2E_DIR/kubeconfig")
  SERVER="$("${KC[@]}" config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
}

# A client or serving certificate signed by the cluster's CA (kwokctl's pki/ca.key).
cert() { # NAME SUBJECT [IP_SAN [DNS_SAN]]: a serving certificate when IP_SAN is given
  local name="$1" subj="$2" san="${3:-}" dns="${4:-$NODE_NAME}" ext="$NODE/certs/$1.ext"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n' > "$ext"
  if [[ -n "$san" ]]; then
    printf 'extendedKeyUsage=serverAuth\nsubjectAltName=IP:%s,DNS:%s\n' "$san" "$dns" >> "$ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' >> "$ext"
  fi
  openssl req -new -newkey rsa:2048 -nodes -keyout "$NODE/certs/$name.key" -subj "$subj" \
    -out "$NODE/certs/$name.csr" 2>/dev/null
  openssl x509 -req -in "$NODE/certs/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 2 -extfile "$ext" -out "$NODE/certs/$name.crt" 2>/dev/null
}

kubeconfig() { # NAME -> a kubeconfig with cert NAME
  cat > "$NODE/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$SERVER", certificate-authority: "$PKI/ca.crt"}}]
users: [{name: $1, user: {client-certificate: "$NODE/certs/$1.crt", client-key: "$NODE/certs/$1.key"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: $1}}]
current-context: e2e
EOF
}

network() {
  ip link set lo up
  ip link add "$BRIDGE" type bridge
  ip addr add "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # Service IPs from the namespace's own processes (the tests, Locust, the API server reaching
  # metrics-server's APIService): routed onto the bridge, where kube-proxy's OUTPUT rules DNAT
  # them to a pod or the node; a node would use its default route, which this namespace lacks
  ip route add "$SERVICE_CIDR" dev "$BRIDGE"
  # the bridge plugin would set ip_forward itself; this namespace's own setting, no uplink
  sysctl -qw net.ipv4.ip_forward=1
  mkdir -p "$NODE/cni/net.d" "$NODE/cni/data"
  cat > "$NODE/cni/net.d/10-fmnist.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "fmnist-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$NODE/cni/data",
              "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
EOF
}

# Directories that no setting moves: a tmpfs over each, only in the run's mount namespace.
fixed_dirs() {
  local d
  : > "$NODE/created-dirs"
  for d in "${FIXED_DIRS[@]}"; do
    if [[ ! -d "$d" ]]; then mkdir -p "$d" && echo "$d" >> "$NODE/created-dirs"; fi
    mount -t tmpfs -o mode=0755 "fmnist-e2e-node" "$d"
  done
}

cgroups() { # one cgroup per v1 hierarchy: the kubelet's cgroupRoot
  local h
  # (v2 would need the root's cgroup.subtree_control set up for the kubelet: not done)
  [[ "$(stat -fc %T /sys/fs/cgroup)" == tmpfs ]] || die "cgroup v1 is required (this is v2)"
  for h in /sys/fs/cgroup/*/; do
    h="${h%/}"
    [[ "$h" == */unified ]] && continue
    mkdir -p "$h/$CGROUP_NAME"
    if [[ -f "$h/cpuset.cpus" ]]; then # a v1 cpuset child starts empty
      cat "$h/cpuset.cpus" > "$h/$CGROUP_NAME/cpuset.cpus"
      cat "$h/cpuset.mems" > "$h/$CGROUP_NAME/cpuset.mems"
    fi
  done
}

containerd_start() {
  mkdir -p "$NODE/containerd" "$NODE/runc"
  cat > "$NODE/containerd/config.toml" <<EOF
version = 3
root = "$NODE/containerd/root"
state = "$NODE/containerd/state"
imports = []
# nothing of these outside the run's directory
disabled_plugins = ["io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.mount-handler.v1.erofs"]
[grpc]
  address = "$NODE/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE/containerd/opt"
[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = "$NODE/containerd/image-verifiers" # none
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins."io.containerd.cri.v1.runtime"]
  # root here cannot lower a process's oom_score_adj (no CAP_SYS_RESOURCE): without this every
  # sandbox fails in runc ("failed to update /proc/self/oom_score_adj")
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "$RUNC"
      Root = "$NODE/runc"
      SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_BIN"]
    conf_dir = "$NODE/cni/net.d"
EOF
  # the shim and runc are found on PATH
  PATH="$CONTAINERD_BIN:$(dirname "$RUNC"):$PATH" \
    "$CONTAINERD_BIN/containerd" --config "$NODE/containerd/config.toml" \
    > "$NODE/containerd.log" 2>&1 &
  echo $! > "$NODE/containerd.pid"
  wait_for containerd test -S "$NODE/containerd.sock"
}

ctr() { "$CONTAINERD_BIN/ctr" --address "$NODE/containerd.sock" --namespace k8s.io "$@"; }

# The images the node's pods run, built by scripts/e2e-images.sh (nothing is pulled).
import_images() {
  local archive
  local -a archives
  local list
  list="$("$ROOT/scripts/e2e-images.sh" --archives)" || die "the node's images are not all built"
  mapfile -t archives <<<"$list"
  # --discard-unpacked-layers: once a layer is unpacked into a snapshot its blob is garbage,
  # which halves the node's disk (the project images are 3 and 8 GB; the archives stay the cache)
  for archive in "${archives[@]}"; do
    ctr images import --local --discard-unpacked-layers --snapshotter overlayfs "$archive" \
      >> "$NODE/import.log" 2>&1 \
      || die "importing $archive failed ($(df -h --output=avail "$NODE" | tail -1 | tr -d ' ') free where the node unpacks images): $(tail -n 2 "$NODE/import.log" | cut -c1-300)"
  done
  ctr images ls -q > "$NODE/images.txt"
}

kubelet_start() {
  cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  cert kubelet-serving "/CN=$NODE_NAME" "$NODE_IP"
  kubeconfig kubelet
  mkdir -p "$NODE/kubelet" "$NODE/pod-logs" "$NODE/static-pods" "$NODE/volume-plugins"
  printf 'search %s\n' "$CLUSTER_DOMAIN" > "$NODE/resolv.conf" # no host nameserver in pods
  cat > "$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$NODE/containerd.sock
# what containerd answers in RuntimeConfig (runc SystemdCgroup = false), which the kubelet
# prefers; the same value here for a runtime that does not answer
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_NAME
enforceNodeAllocatable: []
oomScoreAdj: 0
failSwapOn: false
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $NODE/certs/kubelet-serving.crt
tlsPrivateKeyFile: $NODE/certs/kubelet-serving.key
rotateCertificates: false
serverTLSBootstrap: false
clusterDNS: [$NODE_IP]
clusterDomain: $CLUSTER_DOMAIN
resolvConf: $NODE/resolv.conf
podLogsDir: $NODE/pod-logs
staticPodPath: $NODE/static-pods
volumePluginDir: $NODE/volume-plugins
registerWithTaints:
  - {key: $REAL_NODE_LABEL, value: "true", effect: NoSchedule}
# the images are imported, they cannot be pulled again: never collect them, never evict for disk
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 200Mi, nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
maxPods: 40
EOF
  local before
  before="$(sysctl -n "${KUBELET_SYSCTLS[@]}" | paste -sd' ')"
  echo "$before" > "$NODE/sysctls-before"
  "$NODE_BIN/kubelet" --config "$NODE/kubelet.yaml" --kubeconfig "$NODE/kubelet.kubeconfig" \
    --root-dir "$NODE/kubelet" --cert-dir "$NODE/certs" --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" --node-labels "$REAL_NODE_LABEL=true" \
    > "$NODE/kubelet.log" 2>&1 &
  echo $! > "$NODE/kubelet.pid"
  wait_for kubelet "${KC[@]}" wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
  restore_sysctls # set once at start-up, never re-checked (docs/e2e.md)
}

restore_sysctls() {
  [[ -f "$NODE/sysctls-before" ]] || return 0
  local -a values
  read -r -a values < "$NODE/sysctls-before"
  local i
  for i in "${!KUBELET_SYSCTLS[@]}"; do
    sysctl -qw "${KUBELET_SYSCTLS[$i]}=${values[$i]}"
  done
}

kube_proxy_start() {
  cert kube-proxy "/CN=system:kube-proxy" # bootstrap ClusterRoleBinding system:node-proxier
  kubeconfig kube-proxy
  cat > "$NODE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $NODE/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
# leave the machine's conntrack sysctls and route_localnet alone
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
  "$NODE_BIN/kube-proxy" --config "$NODE/kube-proxy.yaml" > "$NODE/kube-proxy.log" 2>&1 &
  echo $! > "$NODE/kube-proxy.pid"
  wait_for kube-proxy curl -fsS http://127.0.0.1:10256/livez
}

coredns_start() {
  cert coredns "/CN=e2e:coredns"
  kubeconfig coredns
  # what kubeadm's system:coredns ClusterRole grants, bound to this certificate's user
  "${KC[@]}" apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "e2e:coredns"}
rules:
  - {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
  - {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "e2e:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "e2e:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "e2e:coredns"}]
EOF
  # kubeadm's Corefile less `forward` (no uplink: external names fail at once)
  cat > "$NODE/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    health 127.0.0.1:8180
    ready 127.0.0.1:8181
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $NODE/coredns.kubeconfig e2e
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loop
    reload
}
EOF
  "$COREDNS" -conf "$NODE/Corefile" > "$NODE/coredns.log" 2>&1 &
  echo $! > "$NODE/coredns.pid"
  wait_for coredns curl -fsS http://127.0.0.1:8181/ready
}

# The resource metrics API (metrics.k8s.io: what an HPA's cpu/memory metrics and `kubectl top`
# read), scraped from the real node's kubelet (/metrics/resource, its serving certificate
# verified; the kwok nodes have no kubelet: --node-selector) and served on the bridge through
# upstream's APIService, whose Service has no selector: its one endpoint is this process.
# Resolution 15 s, as upstream's manifests (it must exceed the 10 s kubelet request timeout).
# RBAC as upstream's components.yaml grants its ServiceAccount, bound to this certificate.
metrics_server_start() {
  local svc=metrics-server.kube-system.svc port=4443 METRICS_SERVER
  METRICS_SERVER="$("$TOOLS" --bin metrics-server)"
  cert metrics-server "/CN=e2e:metrics-server"
  cert metrics-server-serving "/CN=$svc" "$NODE_IP" "$svc"
  kubeconfig metrics-server
  "${KC[@]}" apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:metrics-server"}
rules:
  - {apiGroups: [""], resources: [nodes/metrics], verbs: [get]}
  - {apiGroups: [""], resources: [pods, nodes], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: "system:aggregated-metrics-reader"
  labels:
    rbac.authorization.k8s.io/aggregate-to-admin: "true"
    rbac.authorization.k8s.io/aggregate-to-edit: "true"
    rbac.authorization.k8s.io/aggregate-to-view: "true"
rules:
  - {apiGroups: [metrics.k8s.io], resources: [pods, nodes], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:metrics-server"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:metrics-server"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "e2e:metrics-server"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "metrics-server:system:auth-delegator"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:auth-delegator"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "e2e:metrics-server"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: metrics-server-auth-reader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "e2e:metrics-server"}]
---
apiVersion: v1
kind: Service
metadata: {name: metrics-server, namespace: kube-system}
spec:
  ports: [{name: https, port: 443, targetPort: $port, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: metrics-server-e2e
  namespace: kube-system
  labels: {kubernetes.io/service-name: metrics-server}
addressType: IPv4
endpoints: [{addresses: ["$NODE_IP"], conditions: {ready: true}}]
ports: [{name: https, port: $port, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.k8s.io}
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  service: {name: metrics-server, namespace: kube-system, port: 443}
  caBundle: $(base64 -w0 < "$PKI/ca.crt")
EOF
  "$METRICS_SERVER" --kubeconfig "$NODE/metrics-server.kubeconfig" \
    --authentication-kubeconfig "$NODE/metrics-server.kubeconfig" \
    --authorization-kubeconfig "$NODE/metrics-server.kubeconfig" \
    --bind-address "$NODE_IP" --secure-port "$port" \
    --tls-cert-file "$NODE/certs/metrics-server-serving.crt" \
    --tls-private-key-file "$NODE/certs/metrics-server-serving.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --kubelet-use-node-status-port --node-selector "$REAL_NODE_LABEL=true" \
    --metric-resolution 15s > "$NODE/metrics-server.log" 2>&1 &
  echo $! > "$NODE/metrics-server.pid"
  wait_for metrics-server curl -fsSk "https://$NODE_IP:$port/livez"
}

wait_for() { # NAME CMD... : poll CMD every 0.5 s up to START_TIMEOUT while process NAME lives
  local name="$1" i pid
  shift
  pid="$(cat "$NODE/$name.pid")"
  for ((i = 0; i < START_TIMEOUT * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    kill -0 "$pid" 2>/dev/null || die "$name exited: $(tail -n 5 "$NODE/$name.log")"
    sleep 0.5
  done
  die "$name: not ready within ${START_TIMEOUT}s (log: $NODE/$name.log)"
}

start() {
  paths "$1"
  local t0
  t0="$(date +%s%N)"
  mkdir -p "$NODE/certs"
  network
  fixed_dirs
  cgroups
  containerd_start
  import_images
  coredns_start
  kube_proxy_start
  kubelet_start
  # metrics-server belongs to the e2e tier "serving" (scripts/e2e-tiers.sh): not started when
  # E2E_SKIP_TIERS skips it
  if grep -qx metrics-server <<<"$("$ROOT/scripts/e2e-tiers.sh" tools)"; then
    metrics_server_start
  fi
  local ms=$((($(date +%s%N) - t0) / 1000000))
  echo "$ms" > "$NODE/start-ms"
  log "node $NODE_NAME Ready in $((ms / 1000)).$((ms % 1000 / 100)) s ($(wc -l < "$NODE/images.txt") images)"
}

stop_pid() { # NAME: TERM, then KILL after 10 s
  local f="$NODE/$1.pid" pid i
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}

cgroup_dirs() { # every directory of the node's cgroup tree, deepest first
  local h
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [[ -d "$h$CGROUP_NAME" ]] && find "$h$CGROUP_NAME" -depth -type d
  done
  return 0
}

stop() {
  paths "$1"
  [[ -d "$NODE" ]] || return 0
  local outside="${FMNIST_E2E_NODE_OUTSIDE:-0}"
  # pods first, while the kubelet runs: CNI DEL releases each pod's veth and address
  if [[ "$outside" == 0 && -f "$NODE/kubelet.pid" ]] && kill -0 "$(cat "$NODE/kubelet.pid")" 2>/dev/null; then
    "${KC[@]}" delete pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" \
      --grace-period=5 --wait=true --timeout=60s >/dev/null 2>&1 || log "pods not deleted in 60 s"
  fi
  stop_pid kubelet
  # containers the kubelet did not stop: kill every process left in the node's cgroups
  local d p
  for d in $(cgroup_dirs); do
    for p in $(cat "$d/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
  done
  stop_pid metrics-server
  stop_pid kube-proxy
  stop_pid coredns
  stop_pid containerd
  # the containers' shims (their command line names the node's containerd socket)
  local shims
  shims="$(pgrep -f -- "-address $NODE/containerd.sock" || true)"
  if [[ -n "$shims" ]]; then
    # shellcheck disable=SC2086
    kill -KILL $shims 2>/dev/null || true
    sleep 0.5
  fi
  restore_sysctls
  # kube-proxy's and the kubelet's iptables chains live in this network namespace and go with it
  local left=""
  for d in $(cgroup_dirs); do
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$d" 2>/dev/null && break; sleep 0.5; done
    [[ -d "$d" ]] && left+=" cgroup $d"
  done
  # mounts under the node's directory (overlay rootfs, tmpfs volumes, netns), then the fixed dirs
  local m
  for m in $(awk -v n="$NODE" 'index($2, n) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  for d in "${FIXED_DIRS[@]}"; do
    if awk -v d="$d" '$2 == d && $1 == "fmnist-e2e-node" {f=1} END {exit !f}' /proc/self/mounts; then
      umount -l "$d" || true
    fi
  done
  if [[ -f "$NODE/created-dirs" ]]; then
    while read -r d; do rm -rf "$d"; done < "$NODE/created-dirs"
  fi
  if grep -qF -- "$NODE" /proc/self/mounts; then
    left+=" mounts under $NODE"
  else # the imported images and the containers' layers (~6 GB), also when the logs are kept
    rm -rf --one-file-system "$NODE/containerd/root" "$NODE/containerd/state" "$NODE/kubelet"
  fi
  # the bridge is the run's namespace's (outside it, a bridge of that name is someone else's)
  if [[ "$outside" == 0 ]]; then ip link del "$BRIDGE" 2>/dev/null || true; fi
  for p in $(pgrep -f -- "$NODE/" || true); do
    [[ "$p" == "$$" ]] || left+=" process $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-80))"
  done
  [[ -z "$left" ]] || die "left behind:$left"
  log "node $NODE_NAME stopped; no process, mount or cgroup left"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  -h|--help)
    echo "usage: scripts/e2e-node.sh start|stop E2E_DIR"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) echo "usage: scripts/e2e-node.sh start|stop E2E_DIR (see --help)" >&2; exit 2 ;;
esac
