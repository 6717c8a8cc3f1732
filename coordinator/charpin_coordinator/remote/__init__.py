"""Coordinator side: shipping one snapshot to many boxes over SSH and fetching receipts."""
