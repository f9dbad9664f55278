"""An implementation module that compiles each kernel on first use, as a JIT library does.

Wraps ``kernelwatch.kernels.triton_kernels`` kernel by kernel: the first call of a
kernel under a ``$HOME`` that has not built it sleeps ``KW_TEST_COMPILE_S`` (the
"compile") and leaves ``~/.cache/fakejit/<kernel>``, as FlashInfer builds an op into
``~/.cache/flashinfer``. Paired sides import it from the repository root.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelwatch.kernels.suite import load_impl

WRAPPED = "kernelwatch.kernels.triton_kernels"


def __getattr__(kernel: str) -> Callable[..., Any]:
    if kernel.startswith("__"):
        raise AttributeError(kernel)
    fn = load_impl(WRAPPED, kernel)

    def call(*args: Any) -> Any:
        built = Path.home() / ".cache" / "fakejit" / kernel
        if not built.exists():
            time.sleep(float(os.environ.get("KW_TEST_COMPILE_S", "2")))
            built.parent.mkdir(parents=True, exist_ok=True)
            built.write_text(str(os.getpid()))
        return fn(*args)

    call.__name__ = kernel
    return call
