"""Characterization pins: record, replay and guard a program's process boundary. Stdlib only."""
