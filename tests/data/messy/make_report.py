# make_report.py - a deliberately messy example program for charpin pins (not production code)
# ruff: noqa: UP031 - percent formatting is part of the legacy style these examples imitate
# Reads data/sales.csv from the current folder and writes a report tree under out/.
import json
import os
import sys

OUT = "out"


def load(path):
    rows = []
    with open(path) as handle:
        for line in handle:
            region, month, amount = line.strip().split(";")
            rows.append((region, month, int(amount)))
    return rows


def main():
    rows = load(os.path.join("data", "sales.csv"))
    by_region = {}
    for region, month, amount in rows:
        by_region.setdefault(region, []).append((month, amount))
    os.makedirs(os.path.join(OUT, "regions"), exist_ok=True)
    summary = {"regions": sorted(by_region), "total": sum(r[2] for r in rows)}
    with open(os.path.join(OUT, "summary.json"), "w") as handle:
        json.dump(summary, handle, indent=2, sort_keys=True)
        handle.write("\n")
    for region, items in sorted(by_region.items()):
        with open(os.path.join(OUT, "regions", region + ".txt"), "w") as handle:
            for month, amount in items:
                handle.write("%s %6d\n" % (month, amount))
    print("report written to %s" % os.path.abspath(OUT))
    print("%d regions" % len(by_region))
    return 0


if __name__ == "__main__":
    sys.exit(main())
