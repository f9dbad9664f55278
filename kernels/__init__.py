"""kernelwatch.kernels: the suite runner and the kernels it checks and times.

This package is installed into the environment of the library under test, so it
imports only the standard library, torch and (when present) triton. It knows
nothing of databases, brokers or dashboards: it turns a suite into result
records (JSON lines) and nothing else.
"""
