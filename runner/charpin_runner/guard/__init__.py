"""Guard: refuse commits that change pins together with production code. Stdlib only."""
