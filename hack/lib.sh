# shellcheck shell=bash
# Helpers shared by the hack/ scripts that build and run test servers as
# processes (versitygw.sh, seaweedfs.sh). Source it after `set -euo
# pipefail`, with LOG_NAME set to the script's name for log lines, and
# PORT_MIN / PORT_SPAN for free_ports, START_TIMEOUT for await_start,
# STOP_TIMEOUT for stop_process, CACHE_ROOT for cached_build.

log() { echo "${LOG_NAME:-hack}: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# go_cmd prints the go command: $GO, else go on PATH, else /usr/local/go.
go_cmd() {
	if [[ -n "${GO:-}" ]]; then
		echo "$GO"
	elif command -v go >/dev/null; then
		echo go
	elif [[ -x /usr/local/go/bin/go ]]; then
		echo /usr/local/go/bin/go
	else
		die "go is not on PATH nor at /usr/local/go/bin/go (set GO)"
	fi
}

random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# root_keys prints "access secret", the root key pair of a server's data
# directory dir: random, made on the first start of dir and kept in it
# (mode 0600), so that a restart serves the buckets and users already in
# dir to the same root. Callers hand the keys to the server in its
# environment, never on its command line, where ps would show them.
root_keys() {
	local dir="$1" access secret
	if [[ ! -s "$dir/root-keys" ]]; then
		(umask 077 && echo "bbroot$(random_hex 8) $(random_hex 20)" >"$dir/root-keys.tmp")
		mv -f "$dir/root-keys.tmp" "$dir/root-keys"
	fi
	read -r access secret <"$dir/root-keys"
	[[ -n "$access" && -n "$secret" ]] || die "$dir/root-keys holds no key pair: remove it to make a new one"
	echo "$access $secret"
}

# await_start NAME PID LOGFILE WHERE TAKEN READY... waits up to
# START_TIMEOUT seconds for the server NAME, just started as PID and
# logging to LOGFILE, to be ready: the command READY... succeeds. It
# returns 0 once ready, and 1 when the server exited with a line matching
# the grep pattern TAKEN (a port was taken between the check and the bind:
# the caller tries other ports). It dies, with the log's tail, when the
# server exited for another reason or did not answer on WHERE in time
# (then it kills it first).
await_start() {
	local name="$1" pid="$2" logfile="$3" where="$4" taken="$5"
	shift 5
	local deadline=$((SECONDS + START_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! alive "$pid"; then
			break
		fi
		if "$@"; then
			return 0
		fi
		sleep 0.2
	done
	if alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
		die "$name did not answer on $where within ${START_TIMEOUT}s
$(log_tail "$logfile")"
	fi
	wait "$pid" 2>/dev/null || true
	if ! tail -n 5 "$logfile" | grep -q -E "$taken"; then
		die "$name exited during startup
$(log_tail "$logfile")"
	fi
	return 1
}

# write_env DIR NAME=VALUE... writes an `export NAME=VALUE` line for each
# to DIR/env (mode 0600: the values hold the root keys) and prints them:
# what a script's start prints for eval.
write_env() {
	local dir="$1" env="" kv
	shift
	for kv in "$@"; do
		env+="export $kv"$'\n'
	done
	env="${env%$'\n'}"
	(umask 077 && echo "$env" >"$dir/env")
	echo "$env"
}

# cached_build NAME VERSION BIN HOW_LONG BUILD prints BIN, building it first
# unless it exists. BUILD is a function, called as `BUILD STAGE GO` from a
# temporary directory STAGE beside the cache (CACHE_ROOT) with the go
# command GO; it must leave the binary at STAGE/$(basename BIN), which is
# then renamed into place, so an interrupted or failed build never leaves a
# broken binary behind, and two concurrent builds both end with a good one.
# HOW_LONG goes in the log line ("about 8 minutes"). The test servers'
# scripts build with it; go_tool below is the same for tools built with go
# install alone, with a lock besides.
cached_build() {
	local name="$1" version="$2" bin="$3" how_long="$4" build="$5"
	if [[ -x "$bin" ]]; then
		echo "$bin"
		return 0
	fi
	local go tmp
	go="$(go_cmd)"
	mkdir -p "$(dirname "$bin")"
	# Leftovers of builds killed outright (SIGKILL) hold nothing in use.
	find "$CACHE_ROOT" -maxdepth 1 -name ".$name-*-build.*" -mmin +120 -exec rm -rf {} + 2>/dev/null || true
	tmp="$(mktemp -d "$CACHE_ROOT/.$name-$version-build.XXXXXX")"
	# A module copy may be read-only: u+w first, so that rm can empty it.
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "chmod -R u+w '$tmp' 2>/dev/null; rm -rf '$tmp'" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
	log "building $name $version into $(dirname "$bin") ($how_long)"
	"$build" "$tmp" "$go"
	[[ -x "$tmp/$(basename "$bin")" ]] || die "the $name build left no binary in $tmp"
	mv -f "$tmp/$(basename "$bin")" "$bin"
	chmod -R u+w "$tmp"
	rm -rf "$tmp"
	trap - EXIT INT TERM HUP
	echo "$bin"
}

# listening reports whether something accepts connections on 127.0.0.1:port.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_ports prints n distinct ports between PORT_MIN and PORT_MIN +
# PORT_SPAN that nothing listens on (picked at random: another process may
# still take one before it is bound, so callers retry a failed start).
free_ports() {
	local n="$1" port
	local -A picked=()
	for _ in $(seq $((n * 50))); do
		((${#picked[@]} < n)) || break
		port=$((PORT_MIN + (RANDOM * 32768 + RANDOM) % PORT_SPAN))
		[[ -z "${picked[$port]:-}" ]] || continue
		listening "$port" && continue
		picked[$port]=1
	done
	((${#picked[@]} == n)) || die "no $n free ports found between $PORT_MIN and $((PORT_MIN + PORT_SPAN))"
	echo "${!picked[@]}"
}

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# running_as reports whether pid runs the program named comm, not a recycled
# pid.
running_as() { alive "$1" && [[ "$(cat "/proc/$1/comm" 2>/dev/null)" == "$2" ]]; }

read_pid() { cat "$1" 2>/dev/null || true; }

log_tail() {
	echo "--- last lines of $1 ---"
	tail -n 20 "$1" 2>/dev/null || true
	echo "---"
}

# stop_process stops pid if it still runs the program comm: SIGTERM, up to
# STOP_TIMEOUT seconds, then SIGKILL. A pid that is gone or recycled is left
# alone.
stop_process() {
	local name="$1" pid="$2" comm="$3" deadline
	running_as "$pid" "$comm" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	deadline=$((SECONDS + STOP_TIMEOUT))
	while alive "$pid" && ((SECONDS < deadline)); do
		sleep 0.2
	done
	if alive "$pid"; then
		log "$name (pid $pid) still running ${STOP_TIMEOUT}s after SIGTERM: sending SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		deadline=$((SECONDS + 5))
		while alive "$pid" && ((SECONDS < deadline)); do
			sleep 0.1
		done
		alive "$pid" && die "$name (pid $pid) survived SIGKILL for 5s (stuck in the kernel?)"
	fi
	log "stopped $name (pid $pid)"
}

# go_tool builds a Go command from the module proxy once, into the tool cache
# (${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/tools/NAME-VERSION/NAME),
# and prints its path (last line of stdout; progress on stderr):
#
#   go_tool NAME VERSION PACKAGE LDFLAGS [ARGS...]
#
# ARGS run the new binary once (e.g. `version`) to prove it starts. A cached
# build is reused without running go. Concurrent callers wait on a lock; the
# build goes to a temporary directory next to the entry and is renamed into
# place, so an interrupted build never leaves a binary later runs would
# trust. Tools are built, not downloaded: the module proxy is the one network
# every CI and developer machine is sure to have.
go_tool() {
	local name="$1" version="$2" pkg="$3" ldflags="$4"
	shift 4
	local tools="${BUCKETBROKER_CACHE:-$HOME/.cache/bucketbroker}/tools"
	local dir="$tools/$name-$version"
	local bin="$dir/$name"
	if [[ -x "$bin" ]]; then
		echo "$bin"
		return 0
	fi
	local go
	go=$(go_cmd)
	mkdir -p "$tools"
	exec 9>"$tools/.$name-$version.lock"
	flock 9
	if [[ -x "$bin" ]]; then
		echo "$bin"
		return 0
	fi
	rm -rf "$tools/.build-$name-$version."* # left by a run killed with SIGKILL
	GO_TOOL_STAGE=$(mktemp -d "$tools/.build-$name-$version.XXXXXX")
	trap 'rm -rf "$GO_TOOL_STAGE"' EXIT
	local start
	start=$(date +%s)
	log "building $name $version (minutes, once)"
	# go install pkg@version ignores the surrounding module; GOWORK/GOFLAGS
	# are cleared so neither can leak in from the caller's environment.
	(cd "$GO_TOOL_STAGE" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$GO_TOOL_STAGE" \
		"$go" install -trimpath -ldflags="$ldflags" "$pkg@$version") >&2
	"$GO_TOOL_STAGE/$name" "$@" >&2
	chmod 755 "$GO_TOOL_STAGE"
	mv -T "$GO_TOOL_STAGE" "$dir" 2>/dev/null || rm -rf "$GO_TOOL_STAGE" # a concurrent build won: as good
	[[ -x "$bin" ]] || die "$name missing after build: $bin"
	log "built in $(($(date +%s) - start))s: $bin"
	echo "$bin"
}
