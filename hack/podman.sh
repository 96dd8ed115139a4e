#!/usr/bin/env bash
# Make podman usable for the image tests and print the podman command line
# they run containers with (last line of stdout; progress on stderr):
#
#   hack/podman.sh ensure   install podman and runc from Debian packages when
#                           missing (as root, apt-get), then check that a
#                           container runs; exit 1 with the reason if not
#
# On the machines this project runs on, crun fails on the cgroup mode and
# podman's default ulimits are refused, so containers run with
#   podman --runtime runc --cgroup-manager cgroupfs run \
#     --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --network host
# (test/deploy adds the run flags). No base image is pulled: the image is
# FROM scratch.
set -euo pipefail

log() { echo "podman.sh: $*" >&2; }

case "${1:-}" in
  ensure) ;;
  *) echo "usage: $0 ensure" >&2; exit 2 ;;
esac

if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    log "podman and runc are missing and cannot be installed here (needs root and apt-get)"
    exit 1
  fi
  log "installing podman and runc from Debian packages"
  start=$(date +%s)
  export DEBIAN_FRONTEND=noninteractive
  # The lock: two test runs may ensure at once.
  (flock 9
   command -v podman >/dev/null && command -v runc >/dev/null ||
     { apt-get update -qq && apt-get install -y -qq --no-install-recommends podman runc; }
  ) 9>/tmp/bucketbroker-podman-install.lock >&2
  log "installed in $(( $(date +%s) - start ))s"
fi
podman=(podman --runtime runc --cgroup-manager cgroupfs)
"${podman[@]}" info >/dev/null 2>&1 || { log "podman is installed but does not work here: $("${podman[@]}" info 2>&1 | tail -n 1)"; exit 1; }
echo "${podman[*]}"
