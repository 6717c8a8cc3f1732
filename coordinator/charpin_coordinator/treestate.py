"""Coordinator side; pure, reads a receipt. What "the same tree state" means for two runs.

Two runs of a box saw the same code only when they ran the same commit, with the same patch (if
any), and a working tree holding the same uncommitted changes and untracked files at the start
(the receipt's tree.dirty_digest_before). A test that failed exactly while an uncommitted
fixture edit was present is explained by that edit: flake evidence compares runs of one tree
state only (history/flaky.py, the HTML flaky lists).
"""

from __future__ import annotations

from charpin_runner.receipt import Receipt

CLEAN = ""


def tree_state(receipt: Receipt) -> str:
    """CLEAN for a working tree with nothing uncommitted at the start of the run, else the
    digest of what was (the commit and the patch are compared on their own)."""
    tree = receipt.tree
    return tree.dirty_digest_before if tree.dirty_before else CLEAN


def describe(state: str | None) -> str:
    """`clean tree`, `dirty tree 0123456789ab`, or `tree state unknown` (older records)."""
    if state is None:
        return "tree state unknown"
    return "clean tree" if state == CLEAN else f"dirty tree {state[:12]}"
