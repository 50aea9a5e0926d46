"""Developer commands that are not tests: the release matrix (`make test-matrix`) and the soak
(`make soak`). Run as `python -m tools.<name>`; not shipped in the wheel."""
