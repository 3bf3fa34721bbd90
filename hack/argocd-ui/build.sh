#!/usr/bin/env bash
# Builds Argo CD's web UI (index.html and its assets) from the ui/ sources of the pinned argo-cd module, with
# yarn and the npm registry, into OUT_DIR. WORK_DIR keeps node_modules between runs. README.md beside this
# script says how the UI's argo-ui dependency is met.
# Usage: hack/argocd-ui/build.sh ARGOCD_VERSION WORK_DIR OUT_DIR
set -euo pipefail
version=$1 work=$2 out=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
yarn=(npx --yes yarn@1.22.22)

src=$(go mod download -json "github.com/argoproj/argo-cd/v3@${version}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ ! -f "$src/ui/package.json" ]; then
  echo "argo-cd ${version}: ui/ sources not found in the module cache" >&2
  exit 1
fi

# Fresh sources on every build; node_modules stays, so a rebuild installs nothing new.
mkdir -p "$work"
find "$work" -mindepth 1 -maxdepth 1 ! -name node_modules -exec rm -rf {} +
cp -r "$src/ui/." "$work/"
chmod -R u+w "$work"
# argo-ui from npm instead of a git commit, in package.json and yarn.lock (README.md says why).
patch -s -p1 -d "$work" < "$here/ui.patch"
(cd "$work" && "${yarn[@]}" install --frozen-lockfile --non-interactive --ignore-engines --network-timeout 600000)
# Two one-line fixes to that argo-ui release for the newer uuid and xterm Argo CD installs, and the parts of
# argo-ui Argo CD v3.2 imports that the release lacks (argo-ui-overlay/). node_modules is kept between runs,
# so the fixes may be there already.
argo_ui=$work/node_modules/argo-ui
if ! patch -R -s -f -p1 --dry-run -d "$argo_ui" < "$here/argo-ui.patch" >/dev/null 2>&1; then
  patch -s -f -p1 -d "$argo_ui" < "$here/argo-ui.patch"
fi
cp -r "$here/argo-ui-overlay/." "$argo_ui/"
(cd "$work" && NODE_ENV=production ARGO_VERSION="$version" node node_modules/.bin/webpack --config ./src/app/webpack.config.js --mode production)

rm -rf "$out.tmp" "$out"
mkdir -p "$(dirname "$out")"
cp -r "$work/dist/app" "$out.tmp"
rm -f "$out.tmp/gitkeep"
mv "$out.tmp" "$out"
