#!/usr/bin/env bash
# The cost of RELAY_CLAIM_WAIT=1: claim latency and rate with and without
# WAIT, against a private primary on loopback TCP and one replica of it
# (tests/bench/claim_wait_bench.lua does the work). Needs redis-server.
#   tests/bench/claim_wait_bench.sh [N] [ROUNDS]   RELAY_BIN picks the binary (default build/relay)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RELAY_BIN:-$here/build/relay}
n=${1:-2000} rounds=${2:-3}
[[ -x $bin ]] || { echo "no relay binary at $bin (build first)" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "redis-server not found" >&2; exit 2; }

dir=$(mktemp -d /tmp/relay-cwbench.XXXXXX)
cleanup() {
    for p in "$dir"/primary.pid "$dir"/replica.pid; do
        if [[ -s $p ]]; then kill "$(cat "$p")" 2>/dev/null || true; fi
    done
    rm -rf "$dir"
}
trap cleanup EXIT
start() {  # start <name> <args…>
    local name=$1; shift
    mkdir -p "$dir/$name"
    redis-server --unixsocket "$dir/$name.sock" --save '' --appendonly no --daemonize yes \
        --pidfile "$dir/$name.pid" --logfile "$dir/$name.log" --dir "$dir/$name" "$@" >/dev/null
}
port=
for _ in $(seq 20); do
    candidate=$((20000 + RANDOM % 20000))
    if start primary --port "$candidate" --bind 127.0.0.1 --repl-diskless-sync-delay 0; then
        for _ in $(seq 50); do [[ -s $dir/primary.pid ]] && break; sleep 0.05; done
        if redis-cli -p "$candidate" ping >/dev/null 2>&1; then port=$candidate; break; fi
    fi
done
[[ -n $port ]] || { echo "cannot start the primary" >&2; exit 1; }
start replica --port 0 --replicaof 127.0.0.1 "$port"
for _ in $(seq 200); do
    redis-cli -s "$dir/replica.sock" info replication 2>/dev/null | grep -q "master_link_status:up" && break
    sleep 0.05
done
redis-cli -s "$dir/replica.sock" info replication | grep -q "master_link_status:up" ||
    { echo "the replica did not sync" >&2; exit 1; }
cd "$here"
"$bin" x-lua "$here/tests/bench/claim_wait_bench.lua" "redis://127.0.0.1:$port/0" "$n" "$rounds"
