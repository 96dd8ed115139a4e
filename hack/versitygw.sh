#!/usr/bin/env bash
# Builds and runs versitygw as separate processes, the way an operator deploys
# it: the standalone IAM service and the S3 gateway (posix backend) that asks
# it, over a private unix socket, to check signatures and evaluate policies.
# The s3iam driver's conformance suite runs against them
# (TestConformanceExternal in internal/driver/s3iam).
#
#   hack/versitygw.sh build       build (once) and print the cached binary
#   hack/versitygw.sh start DIR   start both servers on 127.0.0.1; print
#                                 `export BUCKETBROKER_TEST_...` lines for eval
#                                 (only prints them if already running)
#   hack/versitygw.sh stop DIR    stop both servers (idempotent)
#
#   eval "$(hack/versitygw.sh start /tmp/vgw)"
#   go test -count=1 -run TestConformanceExternal ./internal/driver/s3iam
#   hack/versitygw.sh stop /tmp/vgw
#
# Only the export lines go to stdout; progress and errors go to stderr. DIR
# holds the data (iam/, objects/, versions/), the logs (iam.log, s3.log), the
# pids, the root keys (root-keys, made on the first start and kept) and env
# (the export lines again); the last two are mode 0600.
#
# Environment:
#   BUCKETBROKER_CACHE  build cache root (default ~/.cache/bucketbroker)
#   GO                  go command (default: go on PATH, else /usr/local/go/bin/go)
#   VGW_START_TIMEOUT   seconds to wait for each server to answer (default 60)
#   VGW_STOP_TIMEOUT    seconds to wait after SIGTERM before SIGKILL (default 15)
set -euo pipefail
shopt -s inherit_errexit

readonly VERSION=v1.8.0
readonly PACKAGE=github.com/versity/versitygw/cmd/versitygw
readonly CACHE_ROOT="${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}"
readonly CACHE_DIR="$CACHE_ROOT/versitygw-$VERSION"
readonly BIN="$CACHE_DIR/versitygw"
readonly START_TIMEOUT="${VGW_START_TIMEOUT:-60}"
readonly STOP_TIMEOUT="${VGW_STOP_TIMEOUT:-15}"
# Free ports are picked at random below the Linux ephemeral range
# (32768-60999), so outgoing connections never hold them; a port taken
# between the check and the bind is replaced, a bounded number of times.
# The span stays below 24000: test/harness.FreeAddr draws the tests' own
# ports above it, so a server started here never takes one of theirs.
readonly PORT_MIN=20000 PORT_SPAN=4000 PORT_ATTEMPTS=5
# sockaddr_un holds 108 bytes with the terminating NUL.
readonly MAX_SOCKET_PATH=100

LOG_NAME=versitygw.sh
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
	cat >&2 <<EOF
usage: $0 build
       $0 start DIR
       $0 stop DIR
EOF
	exit 2
}

# build prints the path of the versitygw binary, building it first unless the
# cache holds it (see cached_build).
cmd_build() {
	cached_build versitygw "$VERSION" "$BIN" "about 1.5 minutes" build_into
}

# build_into STAGE GO installs versitygw into STAGE. From STAGE and without
# the caller's GOFLAGS (say -mod=vendor), so that nothing of the caller's
# module takes part: the build uses versitygw's own go.mod and go.sum.
build_into() {
	local tmp="$1" go="$2"
	if ! (cd "$tmp" && GOBIN="$tmp" GOWORK=off GOFLAGS='' "$go" install -trimpath \
		-ldflags "-X main.Version=$VERSION -X main.Build=release" "$PACKAGE@$VERSION" >&2); then
		die "go install $PACKAGE@$VERSION failed"
	fi
}

# healthy reports whether GET /health on 127.0.0.1:port answers 200.
healthy() {
	local status
	status="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$1/health")" || return 1
	[[ "$status" == 200 ]]
}

# up reports whether the server on port answers GET /health and the extra
# check passes.
up() { healthy "$1" && $2; }

# launch starts one server (the command line after the log file name) on a
# free port, waits until it answers GET /health and the extra check passes,
# and prints "pid port". It retries with another port when the one picked was
# taken in between (versitygw then exits at once with "address already in
# use").
launch() {
	local name="$1" logfile="$2" check="$3"
	shift 3
	local attempt port pid
	for attempt in $(seq "$PORT_ATTEMPTS"); do
		port="$(free_ports 1)"
		echo "=== $(date -u +%FT%TZ) start on 127.0.0.1:$port (attempt $attempt)" >>"$logfile"
		# setsid: its own session, so a Ctrl-C or hang-up aimed at the
		# caller's terminal does not take the server down mid-test.
		setsid "${@//@PORT@/127.0.0.1:$port}" </dev/null >>"$logfile" 2>&1 &
		pid=$!
		if await_start "$name" "$pid" "$logfile" "127.0.0.1:$port" 'address already in use' up "$port" "$check"; then
			echo "$pid $port"
			return 0
		fi
		log "$name: port $port was taken, trying another"
	done
	die "$name: no free port after $PORT_ATTEMPTS attempts
$(log_tail "$logfile")"
}

cmd_start() {
	local dir="$1"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	local iam_running=false s3_running=false
	running_as "$(read_pid "$dir/iam.pid")" versitygw && iam_running=true
	running_as "$(read_pid "$dir/s3.pid")" versitygw && s3_running=true
	if $iam_running && $s3_running && [[ -s "$dir/env" ]]; then
		log "already running in $dir"
		cat "$dir/env"
		return 0
	fi
	if $iam_running || $s3_running; then
		log "only one of the two servers runs in $dir: restarting both"
		cmd_stop "$dir"
	fi
	rm -f "$dir/iam.pid" "$dir/s3.pid" "$dir/env"

	command -v curl >/dev/null || die "curl is needed to check that the servers answer"
	command -v setsid >/dev/null || die "setsid (util-linux) is needed to detach the servers"
	local bin
	bin="$(cmd_build)"
	(umask 077 && mkdir -p "$dir/iam" "$dir/objects" "$dir/versions")

	# The gateway reaches the IAM service over a unix socket, whose path the
	# kernel limits: a long DIR gets its socket in a short directory of its
	# own, which stop removes.
	local sock="$dir/iam.sock" sockdir=""
	if ((${#sock} > MAX_SOCKET_PATH)); then
		sockdir="$(mktemp -d /tmp/bbvgw-XXXXXX)"
		sock="$sockdir/iam.sock"
		echo "$sockdir" >"$dir/sockdir"
	fi
	rm -f "$sock"

	# The root keys (see root_keys; the ports are picked afresh on a
	# restart) reach versitygw in its environment.
	local access secret keys
	keys="$(root_keys "$dir")"
	read -r access secret <<<"$keys"
	export ROOT_ACCESS_KEY_ID="$access" ROOT_SECRET_ACCESS_KEY="$secret"

	local out iam_pid iam_port s3_pid s3_port
	sock_ready() { [[ -S "$sock" ]]; }
	log "starting the IAM service (log: $dir/iam.log)"
	out="$(launch "versitygw IAM service" "$dir/iam.log" sock_ready \
		"$bin" --port @PORT@ --health /health --region us-east-1 \
		iam --quiet --dir "$dir/iam" --private-ports "$sock")"
	read -r iam_pid iam_port <<<"$out"
	echo "$iam_pid" >"$dir/iam.pid"
	# From here on a failed start leaves nothing running.
	# shellcheck disable=SC2064 # expand now: dir is local
	trap "cmd_stop $(printf %q "$dir")" EXIT

	true_check() { true; }
	log "starting the S3 gateway (log: $dir/s3.log)"
	out="$(launch "versitygw S3 gateway" "$dir/s3.log" true_check \
		"$bin" --port @PORT@ --health /health --region us-east-1 --quiet \
		--iam-standalone-endpoint "$sock" \
		posix --versioning-dir "$dir/versions" "$dir/objects")"
	read -r s3_pid s3_port <<<"$out"
	echo "$s3_pid" >"$dir/s3.pid"
	trap - EXIT

	log "IAM service pid $iam_pid on 127.0.0.1:$iam_port, S3 gateway pid $s3_pid on 127.0.0.1:$s3_port"
	write_env "$dir" \
		"BUCKETBROKER_TEST_S3_ENDPOINT=http://127.0.0.1:$s3_port" \
		"BUCKETBROKER_TEST_IAM_ENDPOINT=http://127.0.0.1:$iam_port" \
		"BUCKETBROKER_TEST_S3_ACCESS_KEY=$access" \
		"BUCKETBROKER_TEST_S3_SECRET_KEY=$secret"
}

# stop_pid stops the versitygw whose pid is in pidfile (see stop_process).
stop_pid() {
	stop_process "$1" "$(read_pid "$2")" versitygw
	rm -f "$2"
}

cmd_stop() {
	local dir="$1"
	[[ -d "$dir" ]] || return 0
	# The gateway first: it depends on the IAM service.
	stop_pid "S3 gateway" "$dir/s3.pid"
	stop_pid "IAM service" "$dir/iam.pid"
	if [[ -f "$dir/sockdir" ]]; then
		rm -rf "$(cat "$dir/sockdir")"
		rm -f "$dir/sockdir"
	fi
	rm -f "$dir/iam.sock" "$dir/env"
}

case "${1:-}" in
build)
	(($# == 1)) || usage
	cmd_build
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
