This test is considered "skipped" because it exits with return code
80. This is useful for skipping tests that only work on certain
platforms or in certain settings.

  $ exit 80
