#!/usr/bin/env bash
# Builds and runs SeaweedFS (`weed mini`: master, volume, filer, S3 gateway
# and its IAM API in one process) for the s3iam driver's conformance suite
# (TestConformanceSeaweedFS in internal/driver/s3iam).
#
#   hack/seaweedfs.sh build       build (once) and print the cached binary
#   hack/seaweedfs.sh cached      print the cached binary; fail if not built
#   hack/seaweedfs.sh start DIR   start it on 127.0.0.1; print
#                                 `export BUCKETBROKER_TEST_SEAWEEDFS_...` lines
#                                 for eval (only prints them if already running)
#   hack/seaweedfs.sh stop DIR    stop it (idempotent)
#
#   eval "$(hack/seaweedfs.sh start /tmp/swfs)"
#   go test -count=1 -run TestConformanceSeaweedFS ./internal/driver/s3iam
#   hack/seaweedfs.sh stop /tmp/swfs
#
# Only the export lines go to stdout; progress and errors go to stderr.
#
# SeaweedFS is not `go install`able (its go.mod has a replace directive), so
# the build downloads the module source from the Go module proxy, copies it
# to a writable directory and builds ./weed there with its own go.mod. It
# takes several minutes and a few GB of build cache; the binary is cached.
#
# Environment:
#   BUCKETBROKER_CACHE  build cache root (default ~/.cache/bucketbroker)
#   GO                  go command (default: go on PATH, else /usr/local/go/bin/go)
#   SWFS_START_TIMEOUT  seconds to wait for the server to answer (default 120)
#   SWFS_STOP_TIMEOUT   seconds to wait after SIGTERM before SIGKILL (default 15)
set -euo pipefail
shopt -s inherit_errexit

readonly MODULE=github.com/seaweedfs/seaweedfs
readonly VERSION=v0.0.0-20261109003541-7506e5f91cd6
readonly CACHE_ROOT="${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}"
readonly CACHE_DIR="$CACHE_ROOT/seaweedfs-$VERSION"
readonly BIN="$CACHE_DIR/weed"
readonly START_TIMEOUT="${SWFS_START_TIMEOUT:-120}"
readonly STOP_TIMEOUT="${SWFS_STOP_TIMEOUT:-15}"
# Free ports are picked at random below the Linux ephemeral range
# (32768-60999), so outgoing connections never hold them; when one is taken
# between the check and the bind, another set is tried, a bounded number of
# times.
# The span stays below 24000: test/harness.FreeAddr draws the tests' own
# ports above it, so a server started here never takes one of theirs.
readonly PORT_MIN=20000 PORT_SPAN=4000 PORT_ATTEMPTS=5

LOG_NAME=seaweedfs.sh
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

# build prints the path of the weed binary, building it first unless the
# cache holds it (see cached_build).
cmd_build() {
	cached_build seaweedfs "$VERSION" "$BIN" "about 8 minutes on 2 cores" build_into
}

# build_into STAGE GO builds weed into STAGE. From STAGE and without the
# caller's GOFLAGS or workspace, so that nothing of the caller's module
# takes part.
build_into() {
	local tmp="$1" go="$2" src
	if ! src="$(cd "$tmp" && GOWORK=off GOFLAGS='' "$go" mod download -json "$MODULE@$VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')" || [[ -z "$src" ]]; then
		die "go mod download $MODULE@$VERSION failed"
	fi
	[[ -f "$src/go.mod" ]] || die "go mod download gave no module directory ($src)"
	# The module cache is read-only; the copy is the main module, so its own
	# go.mod, go.sum and replace directives apply.
	cp -R "$src" "$tmp/src"
	chmod -R u+w "$tmp/src"
	if ! (cd "$tmp/src" && GOWORK=off GOFLAGS='' "$go" build -trimpath -o "$tmp/weed" ./weed >&2); then
		die "go build $MODULE@$VERSION ./weed failed"
	fi
}

# ready reports whether the S3 gateway on port answers its health check
# and accepts the root keys (SigV4-signed ListBuckets), which it does only
# once the filer has given it its identities. The keys reach curl on its
# standard input, not its command line.
ready() {
	local port="$1" status
	status="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/healthz")" || return 1
	[[ "$status" == 200 ]] || return 1
	status="$(printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" |
		curl -s -o /dev/null -w '%{http_code}' --max-time 5 -K - \
			--aws-sigv4 "aws:amz:us-east-1:s3" "http://127.0.0.1:$port/")" || return 1
	[[ "$status" == 200 ]]
}

# launch starts weed mini on free ports, waits until it is ready, and
# prints "pid s3port ports...". weed mini refuses to start when a port
# given on its command line is taken; another set of ports is then tried.
launch() {
	local dir="$1" bin="$2" logfile="$1/weed.log"
	local attempt pid
	local -a p
	for attempt in $(seq "$PORT_ATTEMPTS"); do
		read -r -a p <<<"$(free_ports 10)"
		echo "=== $(date -u +%FT%TZ) start with S3 on 127.0.0.1:${p[6]} (attempt $attempt)" >>"$logfile"
		# Every listener on 127.0.0.1 and on a port of ours (the gRPC ports
		# too, which otherwise default to port+10000, inside the ephemeral
		# range); the WebDAV, Iceberg, Lance and admin-UI extras off. The
		# admin server runs anyway (it hosts the maintenance worker), so it
		# gets ports as well. setsid: its own session, so a Ctrl-C aimed at
		# the caller's terminal does not take the server down mid-test.
		(cd "$dir" && exec setsid "$bin" -logdir "$dir/log" mini \
			-dir "$dir/data" -ip 127.0.0.1 -ip.bind 127.0.0.1 \
			-master.port "${p[0]}" -master.port.grpc "${p[1]}" \
			-volume.port "${p[2]}" -volume.port.grpc "${p[3]}" \
			-filer.port "${p[4]}" -filer.port.grpc "${p[5]}" \
			-s3.port "${p[6]}" -s3.port.grpc "${p[7]}" \
			-admin.port "${p[8]}" -admin.port.grpc "${p[9]}" -admin.port.legacy 0 \
			-admin.ui=false -webdav=false -s3.port.iceberg 0 -s3.port.lance 0 \
			-master.telemetry=false -master.volumeSizeLimitMB 64 \
			-s3.iam.readOnly=false -s3.iam.selfServiceRequiresGrant=true \
			-s3.autoCreateBucket=false \
			</dev/null >>"$logfile" 2>&1) &
		pid=$!
		if await_start "weed mini" "$pid" "$logfile" "127.0.0.1:${p[6]}" 'is not available|address already in use' ready "${p[6]}"; then
			echo "$pid ${p[*]}"
			return 0
		fi
		log "a port was taken, trying others"
	done
	die "weed mini: no free ports after $PORT_ATTEMPTS attempts
$(log_tail "$logfile")"
}

cmd_start() {
	local dir="$1"
	mkdir -p "$dir"
	dir="$(cd "$dir" && pwd)"
	if running_as "$(read_pid "$dir/weed.pid")" weed && [[ -s "$dir/env" ]]; then
		log "already running in $dir"
		cat "$dir/env"
		return 0
	fi
	cmd_stop "$dir"

	command -v curl >/dev/null || die "curl is needed to check that the server answers"
	command -v setsid >/dev/null || die "setsid (util-linux) is needed to detach the server"
	local bin
	bin="$(cmd_build)"
	(umask 077 && mkdir -p "$dir/data" "$dir/log")

	# The root keys (see root_keys). SeaweedFS makes an admin identity of
	# the keys in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, in its
	# environment.
	local access secret keys
	keys="$(root_keys "$dir")"
	read -r access secret <<<"$keys"
	export AWS_ACCESS_KEY_ID="$access" AWS_SECRET_ACCESS_KEY="$secret"

	log "starting weed mini (log: $dir/weed.log)"
	local out pid ports_line s3_port
	local -a ports
	out="$(launch "$dir" "$bin")"
	read -r pid ports_line <<<"$out"
	read -r -a ports <<<"$ports_line"
	s3_port="${ports[6]}"
	echo "$pid" >"$dir/weed.pid"
	echo "${ports[*]}" >"$dir/ports"

	# The IAM API shares the S3 port: SeaweedFS tells an IAM request (a
	# form POST with an Action) from an S3 one.
	log "weed mini pid $pid, S3 and IAM on 127.0.0.1:$s3_port"
	write_env "$dir" \
		"BUCKETBROKER_TEST_SEAWEEDFS_S3_ENDPOINT=http://127.0.0.1:$s3_port" \
		"BUCKETBROKER_TEST_SEAWEEDFS_IAM_ENDPOINT=http://127.0.0.1:$s3_port" \
		"BUCKETBROKER_TEST_SEAWEEDFS_ACCESS_KEY=$access" \
		"BUCKETBROKER_TEST_SEAWEEDFS_SECRET_KEY=$secret"
}

# cmd_stop stops weed mini (see stop_process). weed mini keeps unix
# sockets for its gRPC ports in /tmp, named by port: those of our ports go
# too.
cmd_stop() {
	local dir="$1" port
	[[ -d "$dir" ]] || return 0
	stop_process "weed mini" "$(read_pid "$dir/weed.pid")" weed
	if [[ -f "$dir/ports" ]]; then
		local -a ports
		read -r -a ports <"$dir/ports"
		for port in "${ports[@]}"; do
			rm -f /tmp/seaweedfs-*-"$port".sock
		done
	fi
	rm -f "$dir/weed.pid" "$dir/ports" "$dir/env"
}

case "${1:-}" in
build)
	(($# == 1)) || usage
	cmd_build
	;;
cached)
	(($# == 1)) || usage
	[[ -x "$BIN" ]] || die "not built yet: $BIN is missing (hack/seaweedfs.sh build)"
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
