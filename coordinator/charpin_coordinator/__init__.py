"""charpin-remote coordinator: runs at home or in CI. May import fabric, paramiko, msgspec, rich."""

from charpin_runner import __version__

__all__ = ["__version__"]
