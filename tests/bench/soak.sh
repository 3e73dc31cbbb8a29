#!/usr/bin/env bash
# The fault soak (not in the test command): `relay run` replicas under random
# kill -9 (restarted with the same or a new consumer name), Redis SIGSTOP and
# SIGKILL with AOF, and a mix of fast, slow, flaky, failing and hanging
# handlers, for MINUTES (default 10); then the faults stop, everything
# settles, and it prints events / executions / duplicates / lost / overlaps /
# false dead letters (tests/bench/soak.lua says what each counts). Needs
# root, runc and redis-server; the compressed lifecycle constants (a
# -DRELAY_TEST_CONSTANTS=ON build: backoff in seconds, not minutes).
#   tests/bench/soak.sh [MINUTES]        RELAY_BIN picks the binary (default build-test/relay)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RELAY_BIN:-$here/build-test/relay}
minutes=${1:-10}
[[ -x $bin ]] || { echo "no relay binary at $bin (build first)" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "redis-server not found" >&2; exit 2; }
dir=$(mktemp -d /tmp/relay-soak.XXXXXX)
# the handlers' containers resolve the app dir from inside their user namespace
chmod 711 "$dir"
cleanup() {
    local pid
    if [[ -s $dir/witness.pid ]]; then
        pid=$(cat "$dir/witness.pid")
        kill "$pid" 2>/dev/null || true
        # its last log line would land in a removed directory
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    fi
    rm -rf "$dir"
}
trap cleanup EXIT
cd "$here"
# ASan's leak report at a daemon's exit is noise here: daemons are SIGKILLed
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} RELAY_BIN=$bin "$bin" x-lua "$here/tests/bench/soak.lua" "$minutes" "$dir"
