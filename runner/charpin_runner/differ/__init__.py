"""Differential evidence for verify: base and patched run side by side on the same inputs. Runs
on boxes; stdlib only."""
