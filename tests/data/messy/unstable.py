# unstable.py - prints something that moves between runs; charpin must refuse to pin it.
# usage: unstable.py time|temp|set
import datetime
import sys
import tempfile

what = sys.argv[1]
if what == "time":
    print(datetime.datetime.now().isoformat())
elif what == "temp":
    print(tempfile.gettempdir())
elif what == "set":
    print(" ".join({"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}))
