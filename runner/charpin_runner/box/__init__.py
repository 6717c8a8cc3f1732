"""The box side of charpin-remote: one agent process per box and run. Runs on boxes; stdlib only."""
