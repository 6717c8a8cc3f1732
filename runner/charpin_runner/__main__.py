"""Runs on the box as `python3 charpin-runner.pyz ...` or `python -m charpin_runner`. Stdlib only."""

from charpin_runner.cli import main

raise SystemExit(main())
