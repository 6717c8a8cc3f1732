"""The parts of the probe that run inside the tests' own pytest process. Runs on boxes; stdlib +
pytest only (plugin.py is their entry point)."""
