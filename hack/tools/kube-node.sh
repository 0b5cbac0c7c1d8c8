# shellcheck shell=bash
# The real node's Kubernetes binaries (kubelet, kube-proxy), from the same pinned
# k8s.io/kubernetes module, replaces and version ldflags as the control plane
# (hack/tools/kubernetes.sh); a separate recipe so the control plane's cache entry is not
# rebuilt. Run by scripts/e2e-node.sh (docs/e2e.md, "Real node"). Recipe contract:
# scripts/tools.sh.
# shellcheck disable=SC1091
source "$(dirname "${BASH_SOURCE[0]}")/kubernetes.sh"
TOOL_PACKAGES=(
  k8s.io/kubernetes/cmd/kubelet
  k8s.io/kubernetes/cmd/kube-proxy
)
