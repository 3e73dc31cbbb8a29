#!/usr/bin/env bash
# Per-invocation overhead of the container runtime (bare runc vs relay.core.proc vs
# `relay app invoke`) and throughput at concurrency 2. Needs root and runc.
#   tests/bench/runtime_bench.sh [RUNS]        RELAY_BIN picks the binary (default build/relay)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${RELAY_BIN:-$here/build/relay}
cd "$here"
exec "$bin" x-lua "$here/tests/bench/runtime_bench.lua" "${1:-20}"
