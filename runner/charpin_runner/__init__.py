"""charpin runner: runs on any box. Stdlib only (pytest only inside plugin.py); Python >= 3.9."""

__version__ = "0.1.0"
