# shellcheck shell=bash
# Kubernetes control-plane binaries (and kubectl, see docs/e2e.md: the PyPI kubectl 1.37 is
# outside the +-1 version skew of a 1.34 API server). Recipe contract: scripts/tools.sh.
TOOL_VERSION_KEY=KUBERNETES_VERSION
TOOL_MODULE=k8s.io/kubernetes
TOOL_PACKAGES=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
)

# Upstream replaces every staging module with ./staging/src/k8s.io/X; each is published as
# k8s.io/X v0.MINOR.PATCH for Kubernetes v1.MINOR.PATCH.
tool_local_replace() { echo "v0.${MODULE_VERSION#v1.}"; }

# What hack/lib/version.sh sets, so /version reports the real release (buildDate = the
# module's publication time, for a reproducible build; gitCommit is not known from the module).
tool_ldflags() {
  local minor="${MODULE_VERSION#v1.}" pkg out=""
  minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $pkg.gitVersion=$MODULE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    out+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$MODULE_TIME"
  done
  echo "$out"
}
