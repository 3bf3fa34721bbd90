#!/usr/bin/env bash
# Builds the Argo CD multi-call binary with its web UI inside. argocd-server serves the UI from files embedded
# at build time (ui/dist/app in the argo-cd module), and the module cache is read-only, so the module is copied
# to COPY_DIR, the UI built by hack/argocd-ui is put into the copy, and the wrapper module in this directory is
# built against the copy through a temporary go.mod that replaces argo-cd with it.
# Usage: hack/argocd/build.sh ARGOCD_VERSION UI_DIR COPY_DIR OUT
set -euo pipefail
version=$1 ui=$2 copy=$3 out=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=github.com/argoproj/argo-cd/v3

src=$(go mod download -json "${module}@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ ! -f "$ui/index.html" ]; then
  echo "no web UI in $ui: build it first (make argocd-ui)" >&2
  exit 1
fi
rm -rf "$copy"
mkdir -p "$(dirname "$copy")"
cp -r "$src" "$copy"
chmod -R u+w "$copy"
rm -rf "$copy/ui/dist/app"
cp -r "$ui" "$copy/ui/dist/app"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/go.mod" "$tmp/go.mod"
cp "$here/go.sum" "$tmp/go.sum"
go mod edit -modfile="$tmp/go.mod" -replace "${module}=${copy}"
pkg=${module}/common
cd "$here"
go build -modfile="$tmp/go.mod" -o "$out" \
  -ldflags "-X ${pkg}.version=${version#v} -X ${pkg}.gitTag=${version} -X ${pkg}.gitTreeState=clean" \
  ${module}/cmd
