"""An implementation module whose softmax is fast in one process only: unsteady.

Wraps ``kernelwatch.kernels.triton_kernels``. The first side process to call softmax
claims ``$KW_TEST_TOKEN_DIR/fast`` and runs it once a call; every other process, new
ones too, runs it eight times: a kernel whose time is not a property of the code but
of the process (SDPA's varlen MHA prefill on the H200 kept 8-12 of 16 fresh sides
+7-80 % off). The other kernels are the wrapped ones, steady.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kernelwatch.kernels.suite import load_impl
from tests.paired_factories import owns_token

WRAPPED = "kernelwatch.kernels.triton_kernels"
SLOW = 8


def __getattr__(kernel: str) -> Callable[..., Any]:
    if kernel.startswith("__"):
        raise AttributeError(kernel)
    fn = load_impl(WRAPPED, kernel)
    if kernel != "softmax":
        return fn
    repeat = 1 if owns_token(os.environ["KW_TEST_TOKEN_DIR"], "fast") else SLOW

    def call(*args: Any) -> Any:
        out = None
        for _ in range(repeat):
            out = fn(*args)
        return out

    call.__name__ = kernel
    return call
