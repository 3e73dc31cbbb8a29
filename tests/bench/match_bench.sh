#!/usr/bin/env bash
# The matcher benchmark (issue: pattern language). Times the whole
# `relay match --apps <workload> --events FILE --count` command — start-up,
# reading, validating every byte and matching — on the synthetic CityLots
# set, checks the match counts of ../shared/bench/README.md, and prints
# events/second per workload with two ratios: against `wc -l` over the same
# file in the same run (the cost of just reading the lines), and against the
# upper quamina figure of that README.
#
#   tests/bench/match_bench.sh [--runs N] [--relay BIN] [--data FILE]
#
# The data file (~190 MB) is generated into the build directory once.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
shared=${RELAY_SHARED:-$here/../shared}
runs=5
relay=$here/build/relay
data=$here/build/citylots.jsonl
while (($#)); do
    case $1 in
        --runs) runs=$2; shift 2 ;;
        --relay) relay=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--relay BIN] [--data FILE]" >&2; exit 2 ;;
    esac
done
[[ -x $relay ]] || { echo "no relay binary at $relay (build first)" >&2; exit 2; }
if [[ ! -s $data ]]; then
    echo "generating $data (synthetic CityLots, ~15 s)" >&2
    python3 "$shared/bench/make_citylots.py" "$data.tmp" >/dev/null && mv "$data.tmp" "$data"
fi
total=$(wc -l <"$data")

# workload | events with >=1 match | total matches | quamina upper events/s
workloads=(
    "cl2-exact 2 2 2000000"
    "cl2-prefix 24717 24717 1650000"
    "cl2-suffix 71701 71701 610000"
    "ours-subset 213068 557490 286000"
    "ours-subset-plus-coords 213068 770558 39000"
    "q-benchmark-citylots 7173 7173 74000"
    "many-mixed-1k - 1166 910000"
    "many-exact-10k - 5381 1590000"
)

best_seconds() {  # best_seconds <runs> <command...>: fastest wall time of N runs
    local n=$1 best=""; shift
    for ((i = 0; i < n; i++)); do
        local t0 t1 dt
        t0=$(date +%s%N)
        "$@" >/dev/null
        t1=$(date +%s%N)
        dt=$(((t1 - t0) / 1000))
        if [[ -z $best || $dt -lt $best ]]; then best=$dt; fi
    done
    awk -v us="$best" 'BEGIN { printf "%.6f", us / 1e6 }'
}

wc_s=$(best_seconds "$runs" wc -l "$data")
printf 'events: %d; baseline `wc -l` over the file: %.3f s (%.2f M lines/s)\n' "$total" "$wc_s" \
    "$(awk -v n="$total" -v s="$wc_s" 'BEGIN { print n / s / 1e6 }')"
printf '%-26s %10s %12s %10s %10s  %s\n' workload seconds events/s "vs wc -l" "vs quamina" counts
failed=0
for row in "${workloads[@]}"; do
    read -r name want_events want_matches quamina <<<"$row"
    apps=$shared/bench/patterns/$name
    out=$("$relay" match --apps "$apps" --events "$data" --count)
    matched=$(sed -E 's/^matched ([0-9]+) of ([0-9]+)$/\1/' <<<"$out")
    seen=$(sed -E 's/^matched ([0-9]+) of ([0-9]+)$/\2/' <<<"$out")
    matches=$("$relay" match --apps "$apps" --events "$data" | wc -l)
    counts="matched $matched of $seen, $matches matches"
    if [[ $seen != "$total" || $matches != "$want_matches" || ($want_events != - && $matched != "$want_events") ]]; then
        counts="$counts  WRONG (want ${want_events} events, ${want_matches} matches)"
        failed=1
    fi
    s=$(best_seconds "$runs" "$relay" match --apps "$apps" --events "$data" --count)
    rate=$(awk -v n="$total" -v s="$s" 'BEGIN { printf "%.0f", n / s }')
    printf '%-26s %10.3f %12s %10.2f %10.2f  %s\n' "$name" "$s" "$rate" \
        "$(awk -v a="$wc_s" -v b="$s" 'BEGIN { print a / b }')" \
        "$(awk -v r="$rate" -v q="$quamina" 'BEGIN { print r / q }')" "$counts"
done
exit $failed
