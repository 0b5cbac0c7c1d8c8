#!/usr/bin/env bash
# The kubeconform `make validate` and `make test` run, of the pinned version (versions.env
# KUBECONFORM_VERSION): KUBECONFORM when set, else the tools cache's (scripts/tools.sh), else
# one on PATH; only when none is found is it built from its module (scripts/tools.sh
# kubeconform, which needs Go). So a developer with kubeconform installed needs no Go.
#
# Usage:
#   scripts/kubeconform.sh          print its path, building it when none is found
#   scripts/kubeconform.sh --find   print its path, or nothing (exit 0) when none is found
# A KUBECONFORM that is not an executable kubeconform of the pinned version stops both, naming
# what it is; a kubeconform on PATH of another version is passed over, and said so.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "kubeconform.sh: $*" >&2; exit 1; }
WANT="$(sed -n 's/^KUBECONFORM_VERSION=//p' "$ROOT/versions.env")"
[[ -n "$WANT" ]] || die "no KUBECONFORM_VERSION in versions.env"
case "${1:-}" in
  "" | --find) ;;
  -h | --help)
    echo "usage: scripts/kubeconform.sh [--find]"
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0 ;;
  *) die "usage: scripts/kubeconform.sh [--find]" ;;
esac

version_of() { "$1" -v 2>/dev/null | head -n1 || true; }

if [[ -n "${KUBECONFORM:-}" ]]; then
  [[ -x "$KUBECONFORM" && ! -d "$KUBECONFORM" ]] || die "KUBECONFORM=$KUBECONFORM is not an executable file"
  have="$(version_of "$KUBECONFORM")"
  [[ "$have" == "$WANT" ]] \
    || die "KUBECONFORM=$KUBECONFORM is kubeconform '${have:-(no version from -v)}'; $WANT is pinned (versions.env KUBECONFORM_VERSION): unset KUBECONFORM to use or build that one"
  echo "$KUBECONFORM"
  exit 0
fi
if cached="$("$ROOT/scripts/tools.sh" --bin kubeconform 2>/dev/null)" && [[ -n "$cached" ]]; then
  echo "$cached"
  exit 0
fi
if onpath="$(command -v kubeconform)"; then
  have="$(version_of "$onpath")"
  if [[ "$have" == "$WANT" ]]; then echo "$onpath"; exit 0; fi
  echo "kubeconform.sh: $onpath is kubeconform '${have:-(no version)}', not the pinned $WANT: passed over" >&2
fi
[[ "${1:-}" == --find ]] && exit 0
command -v go >/dev/null \
  || die "no kubeconform $WANT (KUBECONFORM, the tools cache, PATH) and no Go to build one: set KUBECONFORM to the path of a kubeconform $WANT (its release binary: github.com/yannh/kubeconform/releases), put one on PATH, or install Go (versions.env GO_VERSION)"
"$ROOT/scripts/tools.sh" kubeconform >&2
"$ROOT/scripts/tools.sh" --bin kubeconform
