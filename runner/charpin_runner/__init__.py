"""charpin runner: runs on any box. Stdlib only (pytest only inside plugin.py); Python >= 3.9.

PYTEST_DONT_REWRITE: charpin's boot imports this package before pytest starts (probehost.py), so
pytest must not try to rewrite it when it marks installed plugins' packages.
"""

__version__ = "0.1.0"
