"""Coordinator entry for `python -m charpin_coordinator`."""

from charpin_coordinator.cli import main

raise SystemExit(main())
