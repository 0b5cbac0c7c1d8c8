# shellcheck shell=bash
# Pulumi's Kubernetes provider (pulumi-resource-kubernetes), the plugin the program in pulumi/
# deploys with. Recipe contract: scripts/tools.sh.
#
# PULUMI_KUBERNETES_VERSION (the release of the Python SDK that pyproject.toml pins) is served
# by the Go module proxy only as the pseudo-version of that tag's commit (provider/v4 has no
# semver tags of its own): PSEUDO_OF_TAG below.
# cmd/pulumi-resource-kubernetes embeds schema-embed.json and terraform-mapping-embed.json, which
# upstream's `go generate` (its generate.go) makes from the zip's schema.json and
# terraform-mapping.json, stamping the version into the schema; tool_generate_source runs that
# same generate.go.
TOOL_VERSION_KEY=PULUMI_KUBERNETES_VERSION
TOOL_MODULE=github.com/pulumi/pulumi-kubernetes/provider/v4
TOOL_PACKAGES=(github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes)
# The pseudo-version the proxy serves for each release tag (read from its .info: Origin.Hash is
# the tag's commit); a pin without an entry here stops the build.
declare -A PSEUDO_OF_TAG=([v4.25.0]=v4.0.0-20260115033456-f47bc2d6f199)
pinned_tag() { local v; v="$(versions_get "$TOOL_VERSION_KEY")"; echo "v${v#v}"; }
tool_module_version() {
  local pseudo="${PSEUDO_OF_TAG["v${1#v}"]:-}"
  [[ -n "$pseudo" ]] || {
    echo "pulumi-kubernetes.sh: the proxy serves provider/v4 only as pseudo-versions; known tags: ${!PSEUDO_OF_TAG[*]}; pinned: $1" >&2
    return 1
  }
  echo "$pseudo"
}
tool_local_replace() { # sdk/v4 => ../sdk: the tagged sdk module of the same release
  [[ "$1" == github.com/pulumi/pulumi-kubernetes/sdk/v4 ]] \
    || { echo "pulumi-kubernetes.sh: upstream has a local replace of $1 this recipe does not know" >&2; return 1; }
  pinned_tag
}
TOOL_GENERATED=(
  cmd/pulumi-resource-kubernetes/schema-embed.json
  cmd/pulumi-resource-kubernetes/terraform-mapping-embed.json
)
tool_generate_source() { # in the tool module, the source in ./src: upstream's `go generate`
  mkdir gen && cp src/cmd/pulumi-resource-kubernetes/generate.go gen/main.go
  go build -mod=mod -o gen/gen-embed ./gen/main.go
  (cd src/cmd/pulumi-resource-kubernetes && VERSION="$(pinned_tag | cut -c2-)" ../../../gen/gen-embed)
  rm -r gen
}
tool_ldflags() { echo "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$(pinned_tag | cut -c2-)"; }
