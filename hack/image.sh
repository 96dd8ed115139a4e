#!/usr/bin/env bash
# Build the container image (default bucketbroker:<release>, the Release of
# internal/buildinfo/buildinfo.go) with podman, from
# build/Containerfile: FROM scratch, a static binary (CGO_ENABLED=0), the
# host's CA bundle, user 65532. Needs no registry and pulls no base image.
# Installs podman from Debian packages when missing (hack/podman.sh).
#
#   hack/image.sh [IMAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
release=$(sed -n 's/^const Release = "\(.*\)"/\1/p' internal/buildinfo/buildinfo.go)
IMAGE=${1:-bucketbroker:$release}
CA=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

log() { echo "image: $*" >&2; }

[ -s "$CA" ] || { log "no CA bundle at $CA (install ca-certificates, or set CA_BUNDLE)"; exit 1; }
podman=$(hack/podman.sh ensure | tail -n 1)
export PATH="/usr/local/go/bin:$PATH"
ctx=$(mktemp -d "${TMPDIR:-/tmp}/bucketbroker-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
start=$(date +%s)
# The version and commit, as make build passes them (Go stamps none here).
bi=github.com/bucketbroker/bucketbroker/internal/buildinfo
version=$(git describe --tags --exact-match 2>/dev/null || true) # none: buildinfo.Release
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo -dirty)
CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w -X $bi.version=$version -X $bi.commit=$commit" -o "$ctx/bucketbroker" ./cmd/bucketbroker
cp "$CA" "$ctx/ca-certificates.crt"
chmod 644 "$ctx/ca-certificates.crt"
chmod 755 "$ctx/bucketbroker"
$podman build --quiet -f build/Containerfile -t "$IMAGE" "$ctx" >&2
log "built $IMAGE in $(( $(date +%s) - start ))s"
echo "$IMAGE"
