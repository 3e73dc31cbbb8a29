"""Handlers of the users app. Relay runs `python3 /app/main.py` once per event,
with the event JSON on stdin and the handler's name in RELAY_HANDLER."""
import json
import os
import sys


def created(event):
    user = event.get("new", {})
    print(f"{os.environ['GREETING']}, {user.get('name', 'someone')}!")


def deleted(event):
    user = event.get("old", {})
    # stderr is forwarded too, line by line
    print(f"user {user.get('id')} deleted", file=sys.stderr)


HANDLERS = {
    "users.created": created,
    "users.deleted": deleted,
}


def main():
    name = os.environ["RELAY_HANDLER"]
    handler = HANDLERS.get(name)
    if handler is None:
        print(f"unknown handler {name}", file=sys.stderr)
        return 2
    handler(json.load(sys.stdin))
    return 0  # a non-zero exit (or an exception) fails the attempt


if __name__ == "__main__":
    sys.exit(main())
