# export_invoices.py - a deliberately messy example program for charpin pins (not production code)
# ruff: noqa: UP031 - percent formatting is part of the legacy style these examples imitate
# Reads "customer,amount,qty" lines on stdin, prints invoices on stdout and progress on stderr.
import os
import sys
from decimal import ROUND_HALF_EVEN, Decimal

TAX = Decimal(os.environ.get("TAX_RATE", "0.0875"))
SEEN = []


def money(value):
    d = value.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
    if os.environ.get("CURRENCY") == "USD":
        return "$" + str(d)
    return str(d)


def main(argv):
    exempt = "--tax-exempt" in argv
    bad = 0
    total = Decimal("0")
    for number, line in enumerate(sys.stdin, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(",")
        if len(parts) != 3:
            print("skipping line %d: expected 3 fields" % number, file=sys.stderr)
            bad += 1
            continue
        customer, amount, qty = parts
        net = Decimal(amount) * int(qty)
        tax = Decimal("0") if exempt else net * TAX
        SEEN.append(customer)
        total += net + tax
        print("%-10s net=%s tax=%s" % (customer, money(net), money(tax)))
    print("TOTAL %s" % money(total))
    print("processed %d customers" % len(SEEN), file=sys.stderr)
    if bad:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
