"""POSTs the event to NOTIFY_URL with the token from /run/secrets.

A non-2xx answer or a network error exits non-zero, so Relay retries the
event with backoff and dead-letters it after the last attempt.
"""
import os
import sys
import urllib.request

with open("/run/secrets/NOTIFIER_TOKEN") as f:
    token = f.read().strip()

body = sys.stdin.buffer.read()
request = urllib.request.Request(
    os.environ["NOTIFY_URL"],
    data=body,
    method="POST",
    headers={
        "Content-Type": "application/json",
        "Authorization": "Bearer " + token,
        # the receiver can drop a retried delivery it has already seen
        "Idempotency-Key": os.environ["RELAY_MESSAGE_ID"],
    },
)
with urllib.request.urlopen(request, timeout=10) as response:
    print("notified", os.environ["RELAY_MESSAGE_ID"], "status", response.status)
