"""kernelwatch's exceptions, in one place.

KernelwatchError
├── SourceError        the repository cannot be reached or is not a git repository
├── CommitNotFound     a revision does not exist in the repository
├── ConfigError        a .kernelwatch.toml that cannot be parsed or is invalid
├── InstallError       the library could not be installed/built (its log attached)
└── InfrastructureError broker, database or git fetch trouble: retried, never blamed on a kernel
"""

from __future__ import annotations


class KernelwatchError(Exception):
    """Base class: a failure kernelwatch can explain in one sentence."""


class SourceError(KernelwatchError):
    pass


class CommitNotFound(KernelwatchError):
    pass


class ConfigError(KernelwatchError):
    pass


class InstallError(KernelwatchError):
    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class InfrastructureError(KernelwatchError):
    pass
