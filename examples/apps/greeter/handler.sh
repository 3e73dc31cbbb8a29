#!/bin/sh
# The event JSON arrives on stdin; RELAY_* variables describe the invocation.
# Exit 0 on success; anything else is a failed attempt (retried, then dead-lettered).

greet() {
    event=$(cat)
    echo "hello from $RELAY_APP/$RELAY_HANDLER (message $RELAY_MESSAGE_ID, attempt $RELAY_ATTEMPT)"
    echo "event: $event"
}

tick() {
    echo "tick at $(date -u +%Y-%m-%dT%H:%M:%SZ), deadline $RELAY_DEADLINE"
}

case "$RELAY_HANDLER" in
    greet) greet ;;
    tick) tick ;;
    *) echo "unknown handler: $RELAY_HANDLER" >&2; exit 2 ;;
esac
