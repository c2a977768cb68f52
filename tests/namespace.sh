#!/usr/bin/env bash
# Run a command on a machine of its own: private PID, network and mount namespaces.
#
#   NAMESPACE_WORK=DIR [NAMESPACE_KEEP=PATH] bash tests/namespace.sh COMMAND [ARG...]
#
# tests/passes.py starts each xdist worker this way, so that a shell page's `ray stop`
# (which stops every Ray process it can see) and `ray start --head` (which wants port
# 6379) touch only that worker's own processes and port. Inside, the command gets:
#
# * its own PID namespace: `ray stop` sees only the command and what it started. When
#   the command exits, so does this script, PID 1 there, and the kernel ends everything
#   the command left running.
# * its own network namespace: port 6379 is free. Loopback gets an address and a default
#   route, so Ray finds a node IP the way it does on a real host (the route to outside).
# * its own /etc/resolv.conf: no DNS server is reachable in there, and torch's TCPStore
#   looks its address up; pointing at 127.0.0.1 makes the lookup fail at once, not after
#   a 10 s timeout.
# * its own /tmp, a new directory under NAMESPACE_WORK: pages name fixed paths there
#   (`ray start ... --temp-dir=/tmp/ray-node2`), and `ray.init()` with no address joins
#   the cluster recorded in /tmp/ray/ray_current_cluster. The checkout, if it is under
#   /tmp (CI may clone there), and each path of NAMESPACE_KEEP (colon-separated: pytest's
#   --basetemp, and the interpreter's virtualenv and base prefix, which may be under /tmp
#   too) stay visible at the same paths.
#
# Needs Linux and the privilege to make namespaces (root, as on CI). tests/passes.py
# probes with `bash tests/namespace.sh true` and, where that fails, runs the shell pages
# one at a time instead.
set -euo pipefail

if [ -z "${NAMESPACE_INSIDE:-}" ]; then
  : "${NAMESPACE_WORK:?set NAMESPACE_WORK to a directory to hold the private /tmp}"
  export NAMESPACE_INSIDE=1
  exec unshare --pid --net --mount --fork --mount-proc bash "$0" "$@"
fi
unset NAMESPACE_INSIDE  # a command that calls this script again gets namespaces of its own

export PATH="$PATH:/usr/sbin:/sbin"
ip link set lo up
ip addr add 10.9.0.2/32 dev lo
ip route add default dev lo src 10.9.0.2

private_tmp=$(mktemp -d "$NAMESPACE_WORK/tmp-XXXXXX")
printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$private_tmp.resolv.conf"
mount --bind "$private_tmp.resolv.conf" /etc/resolv.conf

checkout=$(cd "$(dirname "$0")/.." && pwd)
IFS=: read -r -a kept_paths <<<"${NAMESPACE_KEEP:-}"
for keep in "$checkout" "${kept_paths[@]}"; do
  case "$keep" in
    /tmp/*)
      mkdir -p "$private_tmp/${keep#/tmp/}"
      mount --bind "$keep" "$private_tmp/${keep#/tmp/}"
      ;;
  esac
done
mount --rbind "$private_tmp" /tmp  # --rbind carries the binds above along

# This shell stays as PID 1 and runs the command as its child: PID 1 inherits every
# process whose parent exits first and that no subreaper claims (shell_blocks.py makes
# the worker one for a page's `ray start` daemons), and a shell reaps them as they end,
# where the command, had it been PID 1, would collect them as zombies. A background
# job's stdin is /dev/null unless redirected, so the command gets ours (execnet talks to
# the worker through it).
set +eu
export IN_OWN_NAMESPACES=1  # conftest.py: a worker checks its own process table at the end
"$@" <&0 &
wait $!
