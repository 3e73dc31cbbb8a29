#!/usr/bin/env bash
# The matcher benchmark. Times the whole `relay match --apps <workload>
# --events FILE --count` command — start-up, reading, validating every byte
# and matching — over a CityLots-shaped data set, checks the match counts of
# every workload, and prints events/second per workload with two ratios:
# against `wc -l` over the same file in the same run (the cost of just
# reading the lines), and against the upper figure of the quamina matcher
# measured on the outside data set (tests/bench/match_peers.tsv, which says
# where the figures come from); the target is 2x that figure, and the last
# column says whether the run met it.
#
#   tests/bench/match_bench.sh [--runs N] [--relay BIN] [--data FILE] [--outside DIR]
#
# By default the data set is the repository's own: tests/bench/gen_citylots.lua
# writes it (~190 MB, ~6 s) into the build directory once, and the counts
# checked are the ones below, recorded for that file (its md5 too). With
# --outside DIR, DIR/make_citylots.py writes the outside data set instead
# (DIR is a copy of the project's shared benchmark data, if there is one
# beside the clone) and the counts checked are the ones recorded below for it.
# The workloads (rule sets) are tests/bench/patterns/<workload> either way.
# A wrong count prints WRONG and makes the script exit 1.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$here/tests/bench
runs=5
relay=$here/build/relay
data=""
outside=""
while (($#)); do
    case $1 in
        --runs) runs=$2; shift 2 ;;
        --relay) relay=$2; shift 2 ;;
        --data) data=$2; shift 2 ;;
        --outside) outside=$2; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--relay BIN] [--data FILE] [--outside DIR]" >&2; exit 2 ;;
    esac
done
[[ -x $relay ]] || { echo "no relay binary at $relay (build first)" >&2; exit 2; }

# The md5 of tests/bench/gen_citylots.lua's output: the counts below hold
# for that exact file.
own_md5=30dd03be3140dcf93188e0a4b9850b9e
outside_md5=143c96ab6f975d548ad865029da6ae83

# workload | own set: events with >=1 match, total matches | outside set: the
# same. Every count was also reproduced by a plain evaluation of the rules over
# the parsed JSON.
workloads=(
    "cl2-exact                1      1       2      2"
    "cl2-prefix               15538  15538   24717  24717"
    "cl2-suffix               67995  67995   71701  71701"
    "ours-subset              213068 608537  213068 557490"
    "ours-subset-plus-coords  213068 821605  213068 770558"
    "q-benchmark-citylots     4665   4678    7173   7173"
    "many-mixed-1k            1109   1109    1166   1166"
    "many-exact-10k           5301   5378    5312   5381"
)
target=2

# quamina's upper figure for a workload, from the peer table.
quamina_upper() {
    awk -F'\t' -v w="$1" '!/^#/ && $1 == w { print $3; found = 1 } END { exit !found }' "$bench/match_peers.tsv"
}

md5_of() { md5sum "$1" | cut -d' ' -f1; }

if [[ -z $outside ]]; then
    set_name="own (tests/bench/gen_citylots.lua)"
    data=${data:-$here/build/citylots-own.jsonl}
    want_md5=$own_md5
    generate() { "$relay" x-lua "$bench/gen_citylots.lua" "$1"; }
else
    [[ -f $outside/make_citylots.py ]] || { echo "no make_citylots.py in $outside" >&2; exit 2; }
    set_name="outside ($outside)"
    data=${data:-$here/build/citylots.jsonl}
    want_md5=$outside_md5
    generate() { python3 "$outside/make_citylots.py" "$1" >/dev/null; }
fi

# A data file left by an older generator is made again; a fresh one that
# still differs means this machine writes other bytes (another libc's number
# formatting, say), so the counts may legitimately differ: say so.
mkdir -p "$(dirname "$data")"
md5=""
if [[ -s $data ]]; then
    md5=$(md5_of "$data")
fi
if [[ $md5 != "$want_md5" ]]; then
    echo "generating $data (data set: $set_name)" >&2
    generate "$data.tmp"
    mv "$data.tmp" "$data"
    md5=$(md5_of "$data")
    if [[ $md5 != "$want_md5" ]]; then
        echo "note: $data has md5 $md5, not the recorded $want_md5; counts may differ" >&2
    fi
fi
total=$(wc -l <"$data")

# The clock is read by the shell itself ($EPOCHREALTIME, bash 5): a `date`
# process per reading added its own fork and exec (~2 ms here) to every
# time. Its digits alone are microseconds, whatever the locale's decimal mark.
best_seconds() {  # best_seconds <runs> <command...>: fastest wall time of N runs
    local n=$1 best=""; shift
    for ((i = 0; i < n; i++)); do
        local t0 t1 dt
        t0=$EPOCHREALTIME
        "$@" >/dev/null
        t1=$EPOCHREALTIME
        dt=$((10#${t1//[!0-9]/} - 10#${t0//[!0-9]/}))
        if [[ -z $best || $dt -lt $best ]]; then best=$dt; fi
    done
    awk -v us="$best" 'BEGIN { printf "%.6f", us / 1e6 }'
}

wc_s=$(best_seconds "$runs" wc -l "$data")
# shellcheck disable=SC2016 # the backquotes are printed as they are
printf 'data set: %s; events: %d; baseline `wc -l` over the file: %.3f s (%.2f M lines/s)\n' \
    "$set_name" "$total" "$wc_s" "$(awk -v n="$total" -v s="$wc_s" 'BEGIN { print n / s / 1e6 }')"
printf '%-26s %10s %12s %10s %10s %6s  %s\n' workload seconds events/s "vs wc -l" "vs quamina" ">=${target}x" counts
failed=0
for row in "${workloads[@]}"; do
    read -r name own_events own_matches out_events out_matches <<<"$row"
    quamina=$(quamina_upper "$name") || { echo "no quamina figure for $name in match_peers.tsv" >&2; exit 2; }
    if [[ -z $outside ]]; then
        want_events=$own_events want_matches=$own_matches
    else
        want_events=$out_events want_matches=$out_matches
    fi
    apps=$bench/patterns/$name
    out=$("$relay" match --apps "$apps" --events "$data" --count)
    matched=$(sed -E 's/^matched ([0-9]+) of ([0-9]+)$/\1/' <<<"$out")
    seen=$(sed -E 's/^matched ([0-9]+) of ([0-9]+)$/\2/' <<<"$out")
    matches=$("$relay" match --apps "$apps" --events "$data" | wc -l)
    counts="matched $matched of $seen, $matches matches"
    if [[ $seen != "$total" || $matched != "$want_events" || $matches != "$want_matches" ]]; then
        counts="$counts  WRONG (want ${want_events} events, ${want_matches} matches)"
        failed=1
    fi
    s=$(best_seconds "$runs" "$relay" match --apps "$apps" --events "$data" --count)
    rate=$(awk -v n="$total" -v s="$s" 'BEGIN { printf "%.0f", n / s }')
    ratio=$(awk -v r="$rate" -v q="$quamina" 'BEGIN { printf "%.2f", r / q }')
    met=$(awk -v r="$ratio" -v t="$target" 'BEGIN { print (r >= t) ? "yes" : "no" }')
    printf '%-26s %10.3f %12s %10.2f %10s %6s  %s\n' "$name" "$s" "$rate" \
        "$(awk -v a="$wc_s" -v b="$s" 'BEGIN { print a / b }')" "$ratio" "$met" "$counts"
done
exit $failed
