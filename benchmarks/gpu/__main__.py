"""``python -m benchmarks.gpu``: see ``benchmarks/gpu/__init__.py``."""

from benchmarks.gpu.cli import main

raise SystemExit(main())
