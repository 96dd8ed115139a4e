#!/usr/bin/env bash
# Build golangci-lint from the Go module proxy once and print its path (last
# line of stdout; progress on stderr):
#
#   GOLANGCI_LINT=$(hack/golangci-lint.sh | tail -n 1)
#
# `make lint` runs it with the repository's .golangci.yml. Cached by version
# under ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/tools/ (go_tool in
# hack/lib.sh): minutes the first time on a machine (it is large), then nothing.
set -euo pipefail
LOG_NAME=golangci-lint
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GOLANGCI_LINT_VERSION=${GOLANGCI_LINT_VERSION:-v2.15.0}
go_tool golangci-lint "$GOLANGCI_LINT_VERSION" github.com/golangci/golangci-lint/v2/cmd/golangci-lint \
	"-s -w -X main.version=${GOLANGCI_LINT_VERSION#v}" version
