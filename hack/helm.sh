#!/usr/bin/env bash
# Build helm from the Go module proxy once and print its path (last line of
# stdout; progress on stderr):
#
#   HELM=$(hack/helm.sh | tail -n 1)
#
# Cached by version under ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/tools/
# (go_tool in hack/lib.sh): a few minutes the first time on a machine, then
# nothing.
set -euo pipefail
LOG_NAME=helm
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HELM_VERSION=${HELM_VERSION:-v3.22.0}
go_tool helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
	"-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" version --short
