"""A stand-in for Liger-Kernel: its module and class names and calling convention, in torch.

``liger_kernel.ops.<op>`` modules whose ``Liger*Function.apply`` allocate and return
their outputs as Liger's do, computed in plain torch (float32, then the input dtype),
so the adapter, the suites and the GPU driver's whole path can be exercised on a
machine without Liger and without Triton's interpreter.
"""

from __future__ import annotations

from pathlib import Path

OPS = {
    "softmax": """
import torch
class LigerSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.softmax(x.float(), -1).to(x.dtype)
""",
    "rms_norm": """
import torch
class LigerRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, offset=0.0, casting_mode="llama", in_place=True):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w
""",
    "layer_norm": """
import torch
class LigerLayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, eps):
        return torch.nn.functional.layer_norm(x.float(), x.shape[-1:], w.float(), b.float(),
                                              eps).to(x.dtype)
""",
    "swiglu": """
import torch
class LigerSiLUMulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return torch.nn.functional.silu(a.float()).to(b.dtype) * b
""",
    "geglu": """
import torch
class LigerGELUMulFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return torch.nn.functional.gelu(a.float(), approximate="tanh").to(b.dtype) * b
""",
}


def write(root: Path, ops: dict[str, str] = OPS) -> Path:
    """The stand-in package under ``root`` (``root/liger_kernel/ops/*.py``); ``root``."""
    pkg = root / "liger_kernel" / "ops"
    pkg.mkdir(parents=True)
    (root / "liger_kernel" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    for name, text in ops.items():
        (pkg / f"{name}.py").write_text(text)
    return root
