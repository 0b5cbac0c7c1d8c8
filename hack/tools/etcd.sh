# shellcheck shell=bash
# etcd server at the version kubeadm v1.34 deploys (DefaultEtcdVersion 3.6.4-0).
# Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=ETCD_VERSION
TOOL_MODULE=go.etcd.io/etcd/server/v3
TOOL_PACKAGES=(go.etcd.io/etcd/server/v3)
TOOL_BINARIES=(server=etcd)

# Upstream replaces its sibling modules with ../api, ../pkg, ... (published at the same
# version) and points forbidden imports at ./FORBIDDEN_DEPENDENCY (dropped here).
tool_local_replace() {
  if [[ "$2" == *FORBIDDEN_DEPENDENCY* ]]; then echo -; else echo "$MODULE_VERSION"; fi
}
