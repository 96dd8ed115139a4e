#!/usr/bin/env bash
# Runs a command with every real server the tests need started on 127.0.0.1,
# then stops them, whatever the command's outcome:
#   - versitygw as separate processes (S3 gateway + standalone IAM service),
#     for the s3iam driver's conformance suite against a real process;
#
# The embedded S3 server and SQLite run inside the tests themselves.
# Builds are cached under ${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker},
# keyed by version, so only the first run on a machine pays for them.
#
#   hack/with-test-servers.sh go test ./...
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bucketbroker-test-servers.XXXXXX")
cleanup() {
  hack/versitygw.sh stop "$work/vgw" >&2 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(date +%s)
eval "$(hack/versitygw.sh start "$work/vgw")"
echo "test servers ready in $(( $(date +%s) - t0 ))s" >&2

# With the servers up, a test that finds one missing is a failure, not a skip.
export CI=true
set +e
"$@"
status=$?
set -e
exit "$status"
