# shellcheck shell=bash
# The Pulumi CLI that scripts/pulumi.sh drives through the Automation API (pulumi/, docs/gitops.md
# "Pulumi"). Recipe contract: scripts/tools.sh.
#
# No package registry ships the CLI; upstream's release builds it from this module the same way
# (CGO off, -trimpath, tags osusergo,grpcnotrace). The module replaces sdk/v3 with ../sdk: the
# same tag's sdk/v3 module. The Python language host (pulumi-language-python) is not served in
# any form: the Automation API's inline program needs none (the CLI runs with --client and talks
# to the Python process that holds the program).
TOOL_VERSION_KEY=PULUMI_VERSION
TOOL_MODULE=github.com/pulumi/pulumi/pkg/v3
TOOL_PACKAGES=(github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
TOOL_TAGS=osusergo,grpcnotrace
tool_local_replace() { # sdk/v3 => ../sdk: the sdk module of the same release
  [[ "$1" == github.com/pulumi/pulumi/sdk/v3 ]] \
    || { echo "pulumi.sh: upstream has a local replace of $1 this recipe does not know" >&2; return 1; }
  echo "$MODULE_VERSION"
}
# The Automation API reads the CLI's version (`pulumi version`) and refuses one below its minimum:
# the version must be stamped, as upstream's Makefile does.
tool_ldflags() { echo "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$MODULE_VERSION"; }
