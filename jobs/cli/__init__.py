"""The ``kernelwatch`` command line: one module per command, ``main`` dispatches.

The only room of ``jobs`` that may start a worker or the dashboard.
"""
