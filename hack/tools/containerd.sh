# shellcheck shell=bash
# The real node's container runtime: containerd 2.x (CRI v1; RELEASES.md of the pinned release
# lists it for Kubernetes 1.34) and its runc shim, plus ctr (image import, debugging).
# Run by scripts/e2e-node.sh. Recipe contract: scripts/tools.sh.
# Static, no cgo: the btrfs and devmapper snapshotters (cgo) are left out by upstream's own
# build tags; the node uses overlayfs.
TOOL_VERSION_KEY=CONTAINERD_VERSION
TOOL_MODULE=github.com/containerd/containerd/v2
TOOL_PACKAGES=(
  github.com/containerd/containerd/v2/cmd/containerd
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  github.com/containerd/containerd/v2/cmd/ctr
)
TOOL_TAGS=no_btrfs,no_devmapper,no_zfs
tool_ldflags() {
  echo "-X github.com/containerd/containerd/v2/version.Version=$MODULE_VERSION"
}
