#!/usr/bin/env bash
# Dispatch latency: `relay run` from XADD to handler start and to the
# acknowledgement at concurrency 1 and 2, cold and warm, throughput of a
# trivial handler, against bare `runc run` and bare bwrap in the same run
# (interleaved), on a private redis-server (tests/bench/dispatch_bench.lua
# does the work). Needs root, runc, bwrap and redis-server. Prints
# percentiles and warm/bare-runc ratios, asserts no time.
#   tests/bench/dispatch_bench.sh [--quick] [RUNS] [M]   RELAY_BIN picks the binary (default build/relay)
# --quick: 6 events per series and 10 for throughput (a bounded check that it all runs).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RELAY_BIN:-$here/build/relay}
quick=0
if [[ ${1:-} == --quick ]]; then quick=1; shift; fi
runs=${1:-40} m=${2:-40}
if ((quick)); then runs=6 m=10; fi
[[ -x $bin ]] || { echo "no relay binary at $bin (build first)" >&2; exit 2; }
for tool in redis-server runc bwrap; do
    command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 2; }
done

dir=$(mktemp -d /tmp/relay-dbench.XXXXXX)
# runc resolves the rootfs under the state dir inside the containers' user
# namespace: the directories above it must be searchable by others
chmod 711 "$dir"
cleanup() {
    if [[ -s $dir/r.pid ]]; then kill "$(cat "$dir/r.pid")" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$dir/r.sock" --unixsocketperm 700 --save '' --appendonly no \
    --daemonize yes --pidfile "$dir/r.pid" --logfile "$dir/redis.log" --dir "$dir" >/dev/null
for _ in $(seq 100); do [[ -S $dir/r.sock && -s $dir/r.pid ]] && break; sleep 0.05; done
[[ -S $dir/r.sock ]] || { echo "redis-server did not start" >&2; exit 1; }

cd "$here"
"$bin" x-lua "$here/tests/bench/dispatch_bench.lua" "$dir/r.sock" "$dir/work" "$runs" "$m"
