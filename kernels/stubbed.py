"""What a kernel that a build profile left out says when it is called.

The ``stub_sources`` build step (``worker/stubs.py``) compiles such a kernel into a
stub that throws this text; the runner and the paired sides recognise it
(``kernels/adapters:build_profile_skips``) and record the case as a skip, not as an
error of the library. Standard library only: the worker imports it without torch.
"""

from __future__ import annotations

LEFT_OUT = "was left out of this build (kernelwatch build profile)"

__all__ = ["LEFT_OUT"]
