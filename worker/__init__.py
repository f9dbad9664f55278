"""kernelwatch.worker: the Celery worker that measures runs.

A task takes a run id and calls ``executor.execute``: mirror → clean worktree →
isolated environment for that commit → suite runner in a subprocess with
timeouts → result records into the database → analysis. Kernel failures are
results; only infrastructure failures are retried.
"""
