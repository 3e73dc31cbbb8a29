#!/bin/sh
# Run every built libFuzzer target for a bounded time with its seed corpus.
# Usage: tests/fuzz/run.sh BUILD_DIR SECONDS
# Targets are BUILD_DIR/fuzz_<name>; seeds live in tests/fuzz/seeds/<name>/.
# New corpus entries go to a scratch dir, so the committed seeds stay small.
set -eu
build=${1:?usage: run.sh BUILD_DIR SECONDS}
seconds=${2:?usage: run.sh BUILD_DIR SECONDS}
here=$(cd "$(dirname "$0")" && pwd)
status=0
found=0
for target in "$build"/fuzz_*; do
    [ -x "$target" ] || continue
    found=1
    name=$(basename "$target" | sed 's/^fuzz_//')
    corpus=$(mktemp -d)
    seeds="$here/seeds/$name"
    echo "fuzz: $name for ${seconds}s"
    if [ -d "$seeds" ]; then
        "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -artifact_prefix="$build/" "$corpus" "$seeds" || status=1
    else
        "$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -artifact_prefix="$build/" "$corpus" || status=1
    fi
    rm -rf "$corpus"
done
if [ "$found" = 0 ]; then
    echo "fuzz: no fuzz_* targets in $build (configure with -DRELAY_FUZZ=ON, CC=clang)" >&2
    exit 1
fi
exit $status
