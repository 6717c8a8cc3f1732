"""Coordinator side: `charpin-remote verify`, an agent's patch judged base against patched."""
