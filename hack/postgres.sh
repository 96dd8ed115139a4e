#!/usr/bin/env bash
# Starts and stops a throwaway PostgreSQL server for the store tests.
#
#   eval "$(hack/postgres.sh start DIR)"   # prints: export BUCKETBROKER_TEST_POSTGRES_DSN='...'
#   go test ./internal/store/postgres
#   hack/postgres.sh stop DIR
#   hack/postgres.sh sql DIR 'STATEMENT'   # runs it as the superuser
#
# start installs PostgreSQL from Debian packages when it is missing, creates
# a cluster in DIR/data (once), listening only on 127.0.0.1 on a free port,
# with its unix socket in DIR/socket and its log in DIR/postgres.log, and a
# role and database named bucketbroker that 127.0.0.1 may use without a
# password. Run again on a running server, it only prints the line again.
# The cluster's default collation is ICU "en" (PostgreSQL 15 and later), not
# byte order, so that a store that forgets COLLATE "C" fails its tests here.
#
# Only the export line goes to stdout; everything else goes to stderr.
#
# Environment: PG_PORT makes start listen on that port instead of a free one
# (a test that stops and starts its server keeps the DSN it has).
set -euo pipefail

# Every wait is bounded by this many seconds.
readonly WAIT=60

exec 3>&1 1>&2

die() {
	echo "postgres.sh: $*" >&2
	exit 1
}

usage() {
	echo "usage: $0 start DIR | stop DIR | sql DIR STATEMENT" >&2
	exit 2
}

# bindir prints the directory holding initdb and pg_ctl: the newest
# /usr/lib/postgresql/<version>/bin (Debian), else wherever PATH finds them.
bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -n -r); do
		if [[ -x $d/initdb && -x $d/pg_ctl && -x $d/psql && -x $d/pg_isready ]]; then
			echo "$d"
			return 0
		fi
	done
	local initdb
	if initdb=$(command -v initdb) && command -v pg_ctl >/dev/null; then
		d=$(dirname "$(readlink -f "$initdb")")
		if [[ -x $d/pg_ctl && -x $d/psql && -x $d/pg_isready ]]; then
			echo "$d"
			return 0
		fi
	fi
	return 1
}

install_postgres() {
	[[ $EUID -eq 0 ]] || die "PostgreSQL is not installed (no initdb/pg_ctl found) and installing it needs root: apt-get install postgresql"
	command -v apt-get >/dev/null || die "PostgreSQL is not installed and apt-get is not available: install PostgreSQL and put initdb and pg_ctl on PATH"
	echo "Installing PostgreSQL from Debian packages"
	timeout 600 apt-get update -qq || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq postgresql >/dev/null ||
		die "apt-get install postgresql failed"
}

# as runs a command as the user that owns the cluster. PostgreSQL refuses
# to run as root, so root hands the cluster to the postgres user (created by
# the Debian package); anyone else runs it as themselves.
as() {
	if [[ $EUID -eq 0 ]]; then
		(cd / && runuser -u "$owner" -- "$@")
	else
		(cd / && "$@")
	fi
}

# free_port prints a port nobody listens on: one the kernel hands out, or
# without python3 a random one that refuses a connection.
free_port() {
	if command -v python3 >/dev/null; then
		python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
		return
	fi
	local port i
	for i in $(seq 50); do
		port=$((20000 + RANDOM % 30000))
		if ! (exec 5<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
	die "found no free port"
}

# running prints the port of the server running in $data, or fails.
running() {
	as "$bin/pg_ctl" status -D "$data" >/dev/null 2>&1 || return 1
	# Line 4 of postmaster.pid is the port the server listens on.
	sed -n 4p "$data/postmaster.pid"
}

print_dsn() {
	echo "export BUCKETBROKER_TEST_POSTGRES_DSN='postgres://bucketbroker@127.0.0.1:$1/bucketbroker?sslmode=disable'" >&3
}

init_cluster() {
	local version
	version=$("$bin/initdb" --version | sed -E 's/^[^0-9]*([0-9]+).*/\1/')
	local locale=(--locale=C.UTF-8)
	if ((version >= 15)); then
		locale+=(--locale-provider=icu --icu-locale=en)
	fi
	echo "Creating a PostgreSQL $version cluster in $data"
	as "$bin/initdb" -D "$data" --username=postgres --encoding=UTF8 "${locale[@]}" \
		--auth-local=peer --auth-host=reject >"$dir/initdb.log" 2>&1 ||
		die "initdb failed; see $dir/initdb.log"
	cat >>"$data/postgresql.conf" <<EOF

# hack/postgres.sh: a test server, reachable only from this machine.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/socket'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
EOF
	# peer: the cluster's owner over the unix socket (this script).
	# trust: the bucketbroker role on its database over 127.0.0.1 only.
	cat >"$data/pg_hba.conf" <<EOF
local all         all          peer map=owner
host  bucketbroker bucketbroker 127.0.0.1/32 trust
EOF
	echo "owner $owner postgres" >"$data/pg_ident.conf"
	echo "owner $owner $owner" >>"$data/pg_ident.conf"
	as touch "$data/.hack-initialized"
}

start() {
	if ! bin=$(bindir); then
		install_postgres
		bin=$(bindir) || die "PostgreSQL installed, but no directory holds initdb, pg_ctl, psql and pg_isready"
	fi
	if [[ $EUID -eq 0 ]]; then
		owner=postgres
		id -u "$owner" >/dev/null 2>&1 || die "user $owner does not exist; PostgreSQL must not run as root"
	else
		owner=$(id -un)
	fi

	mkdir -p "$dir"
	chown "$owner" "$dir" || die "cannot give $dir to $owner"
	chmod 0700 "$dir" || die "cannot make $dir private"
	as test -w "$dir" || die "user $owner cannot write $dir (is a parent directory closed to it?); choose a directory such as /tmp/bucketbroker-postgres"
	# The socket path must fit in sun_path (107 bytes).
	((${#dir} + 25 < 107)) || die "$dir is too long for a unix socket path; choose a shorter directory"

	# One start at a time per DIR.
	exec 9>>"$dir/.lock"
	flock -w "$WAIT" 9 || die "another hack/postgres.sh holds $dir/.lock for more than ${WAIT}s"

	local port
	if port=$(running); then
		echo "PostgreSQL already running in $data on port $port"
		print_dsn "$port"
		return 0
	fi
	if [[ ! -e $data ]]; then
		init_cluster
	elif [[ ! -f $data/.hack-initialized ]]; then
		# Never delete what this script did not make (nor finish making).
		die "$data exists but was not made by hack/postgres.sh (or its initdb was interrupted): remove it or choose another DIR"
	fi
	as mkdir -p "$dir/socket"

	# Another process can take the free port before the server binds it:
	# try a few.
	local attempt
	for attempt in 1 2 3; do
		port=${PG_PORT:-$(free_port)}
		echo "Starting PostgreSQL on 127.0.0.1:$port (log: $dir/postgres.log)"
		# The server must not inherit the lock or this script's stdout:
		# it would hold the lock, and $(hack/postgres.sh start) would never
		# see the end of its output.
		if as "$bin/pg_ctl" start -D "$data" -l "$dir/postgres.log" -w -t "$WAIT" -o "-p $port" >/dev/null 3>&- 9>&-; then
			break
		fi
		if running >/dev/null; then
			# pg_ctl gave up waiting, but the server is there: stop it
			# rather than leave it unknown.
			as "$bin/pg_ctl" stop -D "$data" -m fast -w -t "$WAIT" >/dev/null || true
			die "PostgreSQL did not become ready within ${WAIT}s; see $dir/postgres.log"
		fi
		((attempt < 3)) && [ -z "${PG_PORT:-}" ] || die "PostgreSQL did not start; see $dir/postgres.log"
		echo "Start failed, trying another port; see $dir/postgres.log"
	done

	local deadline=$((SECONDS + WAIT))
	# pg_ctl -w has waited already; this also checks the TCP listener.
	until as "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 5; do
		((SECONDS < deadline)) || die "PostgreSQL does not accept connections on 127.0.0.1:$port after ${WAIT}s; see $dir/postgres.log"
		sleep 0.2
	done

	# Idempotent, so that a start interrupted here is finished by the next.
	local psql=("$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir/socket" -p "$port" -U postgres -d postgres)
	if [[ -z $(as "${psql[@]}" -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'bucketbroker'") ]]; then
		as "${psql[@]}" -c "CREATE ROLE bucketbroker LOGIN"
	fi
	if [[ -z $(as "${psql[@]}" -tAc "SELECT 1 FROM pg_database WHERE datname = 'bucketbroker'") ]]; then
		as "${psql[@]}" -c "CREATE DATABASE bucketbroker OWNER bucketbroker ENCODING 'UTF8'"
	fi

	# The DSN the tests get must work as printed.
	PGCONNECT_TIMEOUT=5 "$bin/psql" -X -q -tA \
		"postgres://bucketbroker@127.0.0.1:$port/bucketbroker?sslmode=disable" -c 'SELECT 1' >/dev/null ||
		die "cannot connect as bucketbroker to 127.0.0.1:$port; see $dir/postgres.log"
	print_dsn "$port"
}

stop() {
	if [[ ! -f $data/PG_VERSION ]]; then
		echo "No PostgreSQL cluster in $dir; nothing to stop"
		return 0
	fi
	bin=$(bindir) || die "no initdb/pg_ctl found to stop the server in $dir"
	owner=$(stat -c %U "$data")
	if [[ $EUID -ne 0 && $owner != "$(id -un)" ]]; then
		die "$data belongs to $owner; run stop as root or as $owner"
	fi
	if ! running >/dev/null; then
		echo "PostgreSQL in $dir is not running"
		return 0
	fi
	echo "Stopping PostgreSQL in $dir"
	as "$bin/pg_ctl" stop -D "$data" -m fast -w -t "$WAIT" >/dev/null ||
		die "PostgreSQL in $dir did not stop within ${WAIT}s; see $dir/postgres.log (pid in $data/postmaster.pid)"
}

# sql runs one statement as the cluster's superuser, over the unix socket,
# in the postgres database, on the running server; its output goes to
# stdout. Tests use it for what the bucketbroker role may not do (such as
# moving its database to another tablespace).
sql() {
	bin=$(bindir) || die "no psql found"
	owner=$(stat -c %U "$data") || die "no PostgreSQL cluster in $dir"
	local port
	port=$(running) || die "PostgreSQL in $dir is not running"
	as "$bin/psql" -X -q -tA -v ON_ERROR_STOP=1 -h "$dir/socket" -p "$port" -U postgres -d postgres -c "$1" >&3
}

cmd=${1:-}
case $cmd in
start | stop) [[ $# -eq 2 ]] || usage ;;
sql) [[ $# -eq 3 ]] || usage ;;
*) usage ;;
esac
dir=$(realpath -m -- "$2")
data=$dir/data
bin=
owner=
case $cmd in
start) start ;;
stop) stop ;;
sql) sql "$3" ;;
esac
