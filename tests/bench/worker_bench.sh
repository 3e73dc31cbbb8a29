#!/usr/bin/env bash
# The worker benchmarks: `relay run` against baselines measured in the same run
# on a private redis-server (tests/bench/worker_bench.lua does the work):
#   (a) unmatched events/s vs a raw XREADGROUP + XACK loop      (target >= 0.95)
#   (b) matched events/s, trivial handler, vs relay.runtime.invoke at
#       concurrency 2                                             (target >= 0.85)
#   (c) RSS with 100 apps x 10 rules and 1,000 pending messages vs an idle
#       daemon without apps                                       (target < 64 MiB)
#   (t) the cost of TLS: (a)'s relay run over rediss:// vs redis:// to the
#       same redis-server on 127.0.0.1 (a throw-away CA made with openssl)
# Needs root, runc and redis-server. Exits non-zero on errors only; missed
# targets are printed, never asserted.
#   tests/bench/worker_bench.sh [--quick] [a] [b] [c] [t]     RELAY_BIN picks the binary (default build/relay)
# Full: 200,000 unmatched events, 120 invocations, 1,000 pending, 5 rounds of (a) and (b)
# (baseline and relay alternating first; medians). --quick: 20,000 events, 16
# invocations, 2 rounds (CI-sized, ~5 s).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RELAY_BIN:-$here/build/relay}
n=200000 m=120 msgs=1000 rounds=5
which=()
while (($#)); do
    case $1 in
        --quick) n=20000 m=16 rounds=2; shift ;;
        a|b|c|t) which+=("$1"); shift ;;
        *) echo "usage: $0 [--quick] [a] [b] [c] [t]" >&2; exit 2 ;;
    esac
done
((${#which[@]})) || which=(a b c t)
[[ -x $bin ]] || { echo "no relay binary at $bin (build first)" >&2; exit 2; }
command -v redis-server >/dev/null || { echo "redis-server not found" >&2; exit 2; }

dir=$(mktemp -d /tmp/relay-wbench.XXXXXX)
# runc resolves the rootfs under the state dir inside the containers' user
# namespace: the directories above it must be searchable by others
chmod 711 "$dir"
cleanup() {
    if [[ -s $dir/r.pid ]]; then kill "$(cat "$dir/r.pid")" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
# (t): a plaintext and a TLS port on 127.0.0.1 besides the unix socket.
tcp_args=()
if [[ " ${which[*]} " == *" t "* ]]; then
    command -v openssl >/dev/null || { echo "openssl not found (needed by t)" >&2; exit 2; }
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=bench-ca -keyout "$dir/ca.key" \
        -out "$dir/ca.crt" 2>/dev/null
    openssl req -new -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$dir/server.key" \
        -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost\n' >"$dir/server.ext"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 1 \
        -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
    read -r plain_port tls_port < <(python3 -c 'import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
    tcp_args=(--bind 127.0.0.1 --port "$plain_port" --tls-port "$tls_port" --tls-cert-file "$dir/server.crt"
        --tls-key-file "$dir/server.key" --tls-ca-cert-file "$dir/ca.crt" --tls-auth-clients no)
    export BENCH_PLAIN_URL="redis://127.0.0.1:$plain_port/0" BENCH_TLS_URL="rediss://localhost:$tls_port/0"
    export BENCH_TLS_CA="$dir/ca.crt"
fi
redis-server --port 0 --unixsocket "$dir/r.sock" --unixsocketperm 700 --save '' --appendonly no \
    --daemonize yes --pidfile "$dir/r.pid" --logfile "$dir/redis.log" --dir "$dir" "${tcp_args[@]}" >/dev/null
for _ in $(seq 100); do [[ -S $dir/r.sock && -s $dir/r.pid ]] && break; sleep 0.05; done
[[ -S $dir/r.sock ]] || { echo "redis-server did not start" >&2; exit 1; }

cd "$here"
start=$(date +%s.%N)
for w in "${which[@]}"; do
    "$bin" x-lua "$here/tests/bench/worker_bench.lua" "$dir/r.sock" "$dir/work" "$w" "$n" "$m" "$msgs" "$rounds"
done
printf 'total %.1f s (%s)\n' "$(echo "$(date +%s.%N) - $start" | bc)" "${which[*]}"
