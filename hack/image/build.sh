#!/usr/bin/env bash
# Builds argocd-pull's container image as an OCI image layout, without a container engine:
#   hack/image/build.sh OUT_DIR [PLATFORM...]        (default platforms: linux/amd64 linux/arm64)
# Each platform's binary is cross-compiled static (CGO_ENABLED=0) with its version and git revision linked in;
# main.go puts it with Debian's CA bundle on an empty base (user 65532, read-only-root-friendly) and writes one
# multi-platform image index. The creation time is the commit's (SOURCE_DATE_EPOCH overrides it), so the same
# commit and CA bundle give the same digests. VERSION overrides `git describe`.
set -euo pipefail

out=${1:?usage: build.sh OUT_DIR [PLATFORM...]}
shift
platforms=("$@")
[ ${#platforms[@]} -gt 0 ] || platforms=(linux/amd64 linux/arm64)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")

revision=$(git -C "$root" rev-parse HEAD)
version=${VERSION:-$(git -C "$root" describe --tags --always --dirty)}
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
source_url=https://github.com/argocd-pull/argocd-pull
ca_bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -r "$ca_bundle" ] || { echo "CA bundle $ca_bundle not found: apt-get install ca-certificates" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pkg=github.com/argocd-pull/argocd-pull/internal/version
ldflags="-s -w -X $pkg.Version=$version -X $pkg.Revision=$revision"
binaries=()
for p in "${platforms[@]}"; do
  os=${p%%/*} arch=${p#*/}
  echo "==> go build argocd-pull for $p"
  (cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags kustomize_disable_go_plugin_support \
    -ldflags "$ldflags" -o "$work/$os-$arch/argocd-pull" ./cmd/argocd-pull)
  binaries+=(-binary "$p=$work/$os-$arch/argocd-pull")
done

(cd "$here" && go build -o "$work/image" .)
"$work/image" -out "$out" -tag "$version" -created "$created" -ca-bundle "$ca_bundle" "${binaries[@]}" \
  -label "org.opencontainers.image.title=argocd-pull" \
  -label "org.opencontainers.image.description=The Argo CD pull model for Open Cluster Management fleets: hub controller, Maestro-compatible server, managed-cluster agent" \
  -label "org.opencontainers.image.source=$source_url" \
  -label "org.opencontainers.image.url=$source_url" \
  -label "org.opencontainers.image.documentation=$source_url/tree/$revision/docs" \
  -label "org.opencontainers.image.version=$version" \
  -label "org.opencontainers.image.revision=$revision" \
  -label "org.opencontainers.image.created=$created"
