"""The library under test: git mirrors, library specs, the one reader of ``.kernelwatch.toml``."""
