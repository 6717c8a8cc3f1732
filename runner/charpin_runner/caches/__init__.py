"""A box's shared caches (venvs, cache repositories, runner folders) kept right under concurrent
runs: locks and leases, the publication journal, and collection. Runs on boxes; stdlib only.

See ARCHITECTURE.md, "Caches shared by concurrent runs", for the model.
"""
