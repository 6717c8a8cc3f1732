"""Importers: other harnesses' records read as their tools write them, converted to charpin's own
formats and proved by a green replay (`charpin import`). One module per format; common.py runs
the shared part (one verification run, write, replay from disk, roll back when red)."""
