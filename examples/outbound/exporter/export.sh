#!/bin/sh
# One line per event, named by day. The event arrives on stdin; /results is
# the operator's directory, the only writable place that outlives the handler
# (/app is read-only, /tmp is private and discarded).
set -eu
day=$(date -u +%Y-%m-%d)
event=$(cat)
# the message id makes a retried attempt's duplicate line easy to spot
printf '{"message_id":"%s","attempt":%s,"event":%s}\n' "$RELAY_MESSAGE_ID" "$RELAY_ATTEMPT" "$event" \
    >> "/results/orders-$day.jsonl"
echo "exported $RELAY_MESSAGE_ID to orders-$day.jsonl"
