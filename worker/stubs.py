"""The ``stub_sources`` build step: compile only the kernels a suite needs.

Why: FlashAttention-2 (the ``flash-attn`` package) has no switch that leaves head
dimensions or the backward pass out of its build. Its ``setup.py`` lists ~73
kernel files, one template instantiation each (``flash_fwd_hdim128_bf16_causal_sm80.cu``
holds ``run_mha_fwd_<cutlass::bfloat16_t, 128, true>``), and ``flash_api.cpp``
dispatches to all of them; a cold Hopper build is ~25 minutes. Dropping files from
the list would leave undefined symbols and the extension would not import. So each
file that a profile does not keep is rewritten, in the build's own checkout, into a
stub that defines the same explicit specialisation with a body that throws: the
library links and imports, a call into a left-out kernel raises a ``RuntimeError``
naming the file, and the stub compiles in seconds (it includes ``flash.h`` and
CUTLASS's numeric types, not the kernel templates).

Both forms of the generated files are understood: explicit specialisations
(``template<> void run_mha_fwd_<...>(...) { ... }``) and explicit instantiations
(``template void run_mha_fwd_splitkv_dispatch<...>(...);``), with or without
``namespace FLASH_NAMESPACE``. A matched file in which neither form is found fails
the build (``InstallError``): a changed layout upstream must not silently yield a
library without its kernels. Files are only ever rewritten inside the checkout;
a symlink among them is refused.

What this module does not do: decide which files to keep (the profile's
``stub_sources`` table does, ``jobs/library/config_model.py``) or run the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from kernelwatch.jobs.errors import InstallError
from kernelwatch.jobs.library.config_model import StubSources
from kernelwatch.kernels.stubbed import LEFT_OUT

MARK = "kernelwatch stub_sources"
# template<> void NAME<ARGS>(PARAMS) {   or   template void NAME<ARGS>(PARAMS);
_SPECIALISATION = re.compile(
    r"template\s*<\s*>\s*void\s+(?P<name>\w+)\s*<(?P<args>[^>]*)>\s*\((?P<params>[^)]*)\)\s*\{"
)
_INSTANTIATION = re.compile(
    r"template\s+void\s+(?P<name>\w+)\s*<(?P<args>[^>]*)>\s*\((?P<params>[^)]*)\)\s*;"
)
_NAMESPACE = re.compile(r"namespace\s+FLASH_NAMESPACE\b")


def stub_text(original: str, rel: str) -> str:
    """The stub of one instantiation file; raises ``InstallError`` if it has none."""
    found = [
        (m["name"], " ".join(m["args"].split()), " ".join(m["params"].split()))
        for pattern in (_SPECIALISATION, _INSTANTIATION)
        for m in pattern.finditer(original)
    ]
    if not found:
        raise InstallError(
            f"stub_sources: {rel} has no template instantiation to stand in for; "
            "keep it or narrow the profile's files"
        )
    namespaced = bool(_NAMESPACE.search(original))
    lines = [
        f"// {MARK}: stands in for {rel}, which this build profile leaves out.",
        "#include <stdexcept>",
    ]
    if namespaced:
        lines.append('#include "namespace_config.h"')
    lines += ['#include "cutlass/numeric_types.h"', '#include "flash.h"', ""]
    if namespaced:
        lines.append("namespace FLASH_NAMESPACE {")
    message = f"{rel} {LEFT_OUT}"
    for name, args, params in found:
        lines += [
            "template<>",
            f"void {name}<{args}>({params}) {{",
            f'    throw std::runtime_error("{message}");',
            "}",
        ]
    if namespaced:
        lines.append("}  // namespace FLASH_NAMESPACE")
    return "\n".join(lines) + "\n"


def selected(src: Path, spec: StubSources) -> tuple[list[str], list[str]]:
    """(stubbed, kept): the checkout's files that ``spec.files`` matches, split by ``keep``."""
    matched = sorted({p for pattern in spec.files for p in src.glob(pattern) if p.is_file()})
    stubbed, kept = [], []
    for path in matched:
        rel = path.relative_to(src).as_posix()
        if any(Path(rel).match(k) for k in spec.keep):
            kept.append(rel)
        else:
            stubbed.append(rel)
    return stubbed, kept


def apply(src: Path, spec: StubSources) -> str:
    """Rewrite every left-out file of ``spec`` under ``src`` into its stub; the build log."""
    stubbed, kept = selected(src, spec)
    if not stubbed and not kept:
        raise InstallError(f"stub_sources: no file under the checkout matches {list(spec.files)}")
    root = src.resolve()
    for rel in stubbed:
        path = src / rel
        if path.is_symlink() or not path.resolve().is_relative_to(root):
            raise InstallError(f"stub_sources: {rel} is a link; only plain files are rewritten")
        text = path.read_text(encoding="utf-8", errors="replace")
        if MARK not in text:
            path.write_text(stub_text(text, rel), encoding="utf-8")
    head = f"$ stub_sources: {len(stubbed)} files stubbed, {len(kept)} kept\n"
    return head + "".join(f"  kept {rel}\n" for rel in kept)


__all__ = ["MARK", "apply", "selected", "stub_text"]
