#!/usr/bin/env bash
# Builds and runs a MinIO server (single drive, one process) for the tests
# of MinIO's admin API client (internal/driver/minio/adminapi).
#
#   hack/minio.sh build       build (once) and print the cached binary
#   hack/minio.sh cached      print the cached binary; fail if not built
#   hack/minio.sh start DIR   start it on 127.0.0.1; print
#                             `export BUCKETBROKER_TEST_MINIO_...` lines for
#                             eval (only prints them if already running)
#   hack/minio.sh stop DIR    stop it (idempotent)
#
#   eval "$(hack/minio.sh start /tmp/minio)"
#   go test -count=1 ./internal/driver/minio/...
#   hack/minio.sh stop /tmp/minio
#
# Only the export lines go to stdout; progress and errors go to stderr. DIR
# holds the data (data/), the log (minio.log), the pid, the root keys
# (root-keys, made on the first start and kept) and env (the export lines
# again); the last two are mode 0600.
#
# License: the MinIO server is AGPL-3.0. It is built from its source on the
# Go module proxy and run here as a separate test server process, reached
# over HTTP only; no bucketbroker code imports or links it (nor madmin-go,
# its AGPL admin client: bucketbroker speaks the admin API with code of its
# own).
#
# The module is served at a pseudo-version (MinIO tags releases in a form Go
# does not read as versions), asks for Go 1.24 and has no replace
# directives, so `go install` builds it with the Go the tests use and its
# own go.mod. It takes long (a large dependency tree: about 10 minutes of
# CPU); the binary (about 150 MB) is cached.
#
# Environment:
#   BUCKETBROKER_CACHE   build cache root (default ~/.cache/bucketbroker)
#   GO                   go command (default: go on PATH, else /usr/local/go/bin/go)
#   MINIO_START_TIMEOUT  seconds to wait for the server to answer (default 120)
#   MINIO_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 15)
set -euo pipefail
shopt -s inherit_errexit

readonly PACKAGE=github.com/minio/minio
readonly VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
readonly CACHE_ROOT="${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}"
readonly CACHE_DIR="$CACHE_ROOT/minio-$VERSION"
readonly BIN="$CACHE_DIR/minio"
readonly START_TIMEOUT="${MINIO_START_TIMEOUT:-120}"
readonly STOP_TIMEOUT="${MINIO_STOP_TIMEOUT:-15}"
# Free ports are picked at random below the Linux ephemeral range
# (32768-60999), so outgoing connections never hold them; when one is taken
# between the check and the bind, another set is tried, a bounded number of
# times.
# The span stays below 24000: test/harness.FreeAddr draws the tests' own
# ports above it, so a server started here never takes one of theirs.
readonly PORT_MIN=20000 PORT_SPAN=4000 PORT_ATTEMPTS=5

LOG_NAME=minio.sh
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
	cat >&2 <<EOF
usage: $0 build
       $0 cached
       $0 start DIR
       $0 stop DIR
EOF
	exit 2
}

# build prints the path of the minio binary, building it first unless the
# cache holds it (see cached_build).
cmd_build() {
	cached_build minio "$VERSION" "$BIN" "about 25 minutes on 2 busy cores" build_into
}

# build_into STAGE GO installs minio into STAGE. From STAGE and without the
# caller's GOFLAGS or workspace, so that nothing of the caller's module takes
# part: the build uses MinIO's own go.mod and go.sum. CGO off, as MinIO's
# own release build has it.
build_into() {
	local tmp="$1" go="$2"
	if ! (cd "$tmp" && GOBIN="$tmp" GOWORK=off GOFLAGS='' CGO_ENABLED=0 "$go" install -trimpath \
		"$PACKAGE@$VERSION" >&2); then
		die "go install $PACKAGE@$VERSION failed"
	fi
}

# ready reports whether the server on port is ready (its readiness check
# answers 200, which it does once its drive is formatted and IAM loaded) and
# accepts the root keys (a SigV4-signed ListBuckets). The keys reach curl on
# its standard input, not its command line.
ready() {
	local port="$1" status
	status="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/minio/health/ready")" || return 1
	[[ "$status" == 200 ]] || return 1
	status="$(printf 'user = "%s:%s"\n' "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" |
		curl -s -o /dev/null -w '%{http_code}' --max-time 5 -K - \
			--aws-sigv4 "aws:amz:us-east-1:s3" "http://127.0.0.1:$port/")" || return 1
	[[ "$status" == 200 ]]
}

# launch starts minio on a free port, waits until it is ready, and prints
# "pid port". minio refuses to start when its port is taken; another port is
# then tried.
launch() {
	local dir="$1" bin="$2" logfile="$1/minio.log"
	local attempt pid port
	for attempt in $(seq "$PORT_ATTEMPTS"); do
		port="$(free_ports 1)"
		echo "=== $(date -u +%FT%TZ) start on 127.0.0.1:$port (attempt $attempt)" >>"$logfile"
		# One drive (DIR/data), the S3 and admin APIs on one loopback port,
		# no web console (MINIO_BROWSER=off), no update check.
		# MINIO_CI_CD=1 keeps the buffer pools small (256 MiB), fit for a
		# shared test machine. --anonymous keeps the startup banner free of
		# the root keys. setsid: its own session, so a Ctrl-C aimed at the
		# caller's terminal does not take the server down mid-test.
		(cd "$dir" && MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CI_CD=1 \
			exec setsid "$bin" server --anonymous --address "127.0.0.1:$port" "$dir/data" \
			</dev/null >>"$logfile" 2>&1) &
		pid=$!
		if await_start minio "$pid" "$logfile" "127.0.0.1:$port" 'port is already in use|address already in use' ready "$port"; then
			echo "$pid $port"
			return 0
		fi
		log "port $port was taken, trying another"
	done
	die "minio: no free port after $PORT_ATTEMPTS attempts
$(log_tail "$logfile")"
}

cmd_start() {
	local dir="$1"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	if running_as "$(read_pid "$dir/minio.pid")" minio && [[ -s "$dir/env" ]]; then
		log "already running in $dir"
		cat "$dir/env"
		return 0
	fi
	cmd_stop "$dir"

	command -v curl >/dev/null || die "curl is needed to check that the server answers"
	command -v setsid >/dev/null || die "setsid (util-linux) is needed to detach the server"
	local bin
	bin="$(cmd_build)"
	(umask 077 && mkdir -p "$dir/data")

	# The root keys (see root_keys), handed to minio in its environment.
	local access secret keys
	keys="$(root_keys "$dir")"
	read -r access secret <<<"$keys"
	export MINIO_ROOT_USER="$access" MINIO_ROOT_PASSWORD="$secret"

	log "starting minio (log: $dir/minio.log)"
	local out pid port
	out="$(launch "$dir" "$bin")"
	read -r pid port <<<"$out"
	echo "$pid" >"$dir/minio.pid"

	# The admin API (/minio/admin/v3/...) shares the S3 port.
	log "minio pid $pid, S3 and admin API on 127.0.0.1:$port"
	write_env "$dir" \
		"BUCKETBROKER_TEST_MINIO_ENDPOINT=http://127.0.0.1:$port" \
		"BUCKETBROKER_TEST_MINIO_ACCESS_KEY=$access" \
		"BUCKETBROKER_TEST_MINIO_SECRET_KEY=$secret"
}

# cmd_stop stops minio (see stop_process).
cmd_stop() {
	local dir="$1"
	[[ -d "$dir" ]] || return 0
	stop_process minio "$(read_pid "$dir/minio.pid")" minio
	rm -f "$dir/minio.pid" "$dir/env"
}

case "${1:-}" in
build)
	(($# == 1)) || usage
	cmd_build
	;;
cached)
	(($# == 1)) || usage
	[[ -x "$BIN" ]] || die "not built yet: $BIN is missing (hack/minio.sh build)"
	echo "$BIN"
	;;
start)
	(($# == 2)) || usage
	cmd_start "$2"
	;;
stop)
	(($# == 2)) || usage
	cmd_stop "$2"
	;;
*) usage ;;
esac
