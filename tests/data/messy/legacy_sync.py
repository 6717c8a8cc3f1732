# legacy_sync.py - a deliberately messy example program for charpin pins (not production code)
# ruff: noqa: UP031 - percent formatting is part of the legacy style these examples imitate
# Does its work at import time: reads the environment, writes a marker, prints a banner.
import os
import sys

MODE = os.environ.get("SYNC_MODE", "dry-run")
os.makedirs("out", exist_ok=True)
with open(os.path.join("out", "sync.log"), "w") as _log:
    _log.write("mode=%s\n" % MODE)
print("legacy sync starting in %s mode" % MODE, file=sys.stderr)
COUNTER = {"items": 0}


def sync(names):
    for name in names:
        COUNTER["items"] += 1
        print("sync %s" % name)
    return 0 if names else 2


if __name__ == "__main__":
    code = sync(sys.argv[1:])
    if code:
        print("nothing to sync", file=sys.stderr)
    sys.exit(code)
