#!/bin/sh
# tirpc-serve: run tirpc-server with an rpcbind of its own on this host.
#
# The server registers its UDP and TCP ports with rpcbind (port 111) and the
# client's clnt_create asks that rpcbind for them, as ONC RPC does. rpcbind's
# local socket and state live in /run, which a testbed's hosts share with the
# machine (and a real host's own rpcbind may use): both run in a mount
# namespace of their own with a private /run, so neither meets another rpcbind.
# Arguments go to tirpc-server; SIGTERM or SIGINT stops both.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ "${RPCSPEER_PRIVATE_RUN:-}" != 1 ]; then
    exec unshare --mount --propagation private env RPCSPEER_PRIVATE_RUN=1 "$here/$(basename "$0")" "$@"
fi
command -v rpcbind >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin"
command -v rpcbind >/dev/null 2>&1 || { echo "tirpc-serve: rpcbind is not installed (make bootstrap installs it)" >&2; exit 1; }
mount -t tmpfs -o mode=0755,size=4m rpcscope-peer-run /run
mkdir -p /run/rpcbind
id _rpc >/dev/null 2>&1 && chown _rpc /run/rpcbind
rpcbind -f &
rpcbind_pid=$!
server_pid=
stop() {
    [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null
    kill -TERM "$rpcbind_pid" 2>/dev/null
}
trap stop TERM INT
i=0
while [ ! -S /run/rpcbind.sock ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
if [ ! -S /run/rpcbind.sock ]; then
    echo "tirpc-serve: rpcbind did not start (no /run/rpcbind.sock after 5 s)" >&2
    kill -TERM "$rpcbind_pid" 2>/dev/null
    exit 1
fi
"$here/tirpc-server" "$@" &
server_pid=$!
rc=0
# wait returns early when a signal arrives: wait again until the server has gone.
while kill -0 "$server_pid" 2>/dev/null; do
    wait "$server_pid" && rc=0 || rc=$?
done
kill -TERM "$rpcbind_pid" 2>/dev/null
wait "$rpcbind_pid" 2>/dev/null || true
exit "$rc"
