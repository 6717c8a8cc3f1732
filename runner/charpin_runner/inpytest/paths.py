"""Node ids, paths and plugin names as the probe records them. Runs inside the tests' pytest;
stdlib + pytest only."""

from __future__ import annotations

import datetime
import os
import types
from pathlib import Path

import pytest


def _resolve_path(config: pytest.Config, value: str) -> Path:
    return Path(config.invocation_params.dir, value)


def _today(value: str | None) -> datetime.date:
    if value is None:
        return datetime.datetime.now(datetime.timezone.utc).date()
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise pytest.UsageError(
            f"--charpin-today {value!r} is not a date; write it as YYYY-MM-DD"
        ) from None


def _id_prefix(config: pytest.Config, root: Path) -> tuple[str, list[str]]:
    # realpath on both sides: /tmp and /private/tmp (macOS) are one folder, not a sibling.
    rel = os.path.relpath(os.path.realpath(config.rootpath), os.path.realpath(root))
    if rel == ".":
        return "", []
    if rel == ".." or rel.startswith(".." + os.sep):
        note = f"pytest rootdir {config.rootpath} is outside --charpin-root {root}; ids not rebased"
        return "", [note]
    return rel.replace(os.sep, "/") + "/", []


# pytest's limit for a string parameter used whole as its id (`parametrize_long_str_id_strategy`).
_LONG_ID = 100


def _long_id_strategy(config: pytest.Config) -> str:
    try:
        return str(config.getini("parametrize_long_str_id_strategy"))
    except ValueError:  # pytest < 9: no such setting, long strings are used whole
        return "legacy"


def _root_spellings(root: Path) -> tuple[str, ...]:
    """The repository's path as it may appear in ids: as given and resolved, longest first."""
    found = {str(root), os.path.realpath(root)}
    return tuple(sorted((r for r in found if len(r) > 1), key=len, reverse=True))


def _posix_rel(path: str, root: Path) -> str:
    try:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
        return rel.replace(os.sep, "/")
    except ValueError:
        return path


def _conftests(config: pytest.Config, root: Path) -> list[str]:
    found = set()
    for plugin in config.pluginmanager.get_plugins():
        file = getattr(plugin, "__file__", None)
        if isinstance(file, str) and os.path.basename(file) == "conftest.py":
            found.add(_posix_rel(file, root))
    return sorted(found)


def _plugins(config: pytest.Config) -> list[str]:
    pm = config.pluginmanager
    names = set()
    from_dists = set()
    for plugin, dist in pm.list_plugin_distinfo():
        from_dists.add(id(plugin))
        if _is_probe(plugin):
            continue
        # dist.project_name and dist.version each parse the METADATA file again.
        meta = dist.metadata
        names.add(f"{meta['name']}-{meta['version']}")
    for _name, plugin in pm.list_name_plugin():
        if id(plugin) in from_dists or not isinstance(plugin, types.ModuleType):
            continue
        module = plugin.__name__
        file = getattr(plugin, "__file__", None) or ""
        if module.startswith("_pytest.") or os.path.basename(file) == "conftest.py":
            continue
        if _is_probe(plugin):
            continue
        names.add(module)
    return sorted(names)


def _is_probe(plugin: object) -> bool:
    """charpin's own probe is no plugin of the project's: one box loads it as `-p
    charpin_runner.plugin`, another through the installed charpin-remote's entry point, and
    listing it would show every such pair of boxes as plugin drift."""
    name = getattr(plugin, "__name__", "")
    return isinstance(name, str) and (
        name == "charpin_runner" or name.startswith("charpin_runner.")
    )
