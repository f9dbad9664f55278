"""kernelwatch.jobs: planning runs, enqueueing them, and judging their results.

The command line, the broker configuration, git access, baseline analysis and
the demo scenario live here. Workers (``kernelwatch.worker``) build on this
package; this package never imports the worker.
"""
