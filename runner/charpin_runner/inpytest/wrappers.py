"""Which hook-wrapper style this pluggy speaks. Runs inside the tests' pytest; stdlib + pytest only."""

from __future__ import annotations

import pytest


def _new_style_wrappers() -> bool:
    # pluggy < 1.1 (possible with pytest 7) only knows old-style `hookwrapper=True`.
    try:
        pytest.hookimpl(wrapper=True)
    except TypeError:
        return False
    return True


NEW_STYLE = _new_style_wrappers()
