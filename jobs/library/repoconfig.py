"""The one reader of ``.kernelwatch.toml``: what a library repository tells kernelwatch.

Read once per commit under test (:func:`read_at`) by the webhook handler (which
suites and GPU classes to plan) and by the worker (how to build, what to run, which
thresholds); both get the same :class:`RepoConfig` (``config_model.py``). Example::

    [library]
    name = "tinykern"
    module = "tinykern"        # module exposing the kernels the suites call

    [install]
    recipe = "pip"             # pip | pythonpath | command (argument lists, never a shell)
    env = { OMP_NUM_THREADS = "1" }

    [gpus]
    classes = ["h100", "h200"] # those the server offers; default: all it offers

    [suites]
    names = ["basic"]
    kernels = ["softmax", "rmsnorm"]   # only these kernels of the suites (default: all)

    [thresholds]
    regression = 0.05          # relative slowdown that counts, per repository
    confidence = 0.99

    [thresholds.suites]        # per suite, over the repository's value
    decode = 0.03

    [[thresholds.cases]]       # per case pattern, first match wins, over both
    kernel = "attention*"      # fnmatch on the kernel name
    params = "*seq=128*"       # fnmatch on the case label ("dtype=float16, seq=128")
    regression = 0.10

``[install]`` build profiles are in ``docs/suites.md`` ("Build recipes and profiles").
A bad file is a ``ConfigError`` whose message names the file, the key and what is
allowed (``.kernelwatch.toml: unknown table [suite]; did you mean [suites]?``),
never a crash and never a silent default. That includes a file built to break the
parser (issue 24: 10 kB of arrays nested 5,000 deep raised ``RecursionError``, a 500
on every delivery and a run that "died" three times): the size (``MAX_BYTES``, checked
on the blob before git reads it) and the nesting (``MAX_DEPTH``, counted on the text
before ``tomllib`` recurses, and on the parsed tables for dotted keys) are limited
first, and whatever the parser or the validation still raise (``RecursionError``,
``MemoryError``, bytes that are not UTF-8) becomes the same ``ConfigError``.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from kernelwatch.jobs.errors import ConfigError
from kernelwatch.jobs.library.config_model import (
    DEFAULT_PROFILE,
    FROM_FILE,
    OWN_ERROR,
    RECIPES,
    CaseThreshold,
    InstallRecipe,
    RepoConfig,
    Thresholds,
    shown,
)
from kernelwatch.jobs.library.served import read_served, served_file
from kernelwatch.jobs.library.served import table as served_table

if TYPE_CHECKING:
    from kernelwatch.jobs.library.mirror import Mirror

FILE = ".kernelwatch.toml"
# A real file is a few kB with tables three deep; these are far above that and far
# below what hurts (tomllib recurses once per nested array or inline table).
MAX_BYTES = 256 * 1024
MAX_DEPTH = 32

_TYPE_WORDS = {
    "string_type": "a string",
    "float_type": "a number",
    "int_type": "a whole number",
    "bool_type": "true or false",
    "tuple_type": "a list",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def read_at(mirror: Mirror, sha: str, served: Mapping[str, Path] | None = None) -> RepoConfig:
    """The configuration of commit ``sha`` (defaults when it has no file).

    ``served``: the service-side files (``served.parse_table`` of ``KW_REPO_CONFIGS``);
    when one names this mirror's source, that file is read instead of the commit's.
    """
    path = served_file(mirror.source, served)
    if path is not None:
        return parse(read_served(path, mirror.source, MAX_BYTES), name=str(path))
    size = mirror.blob_size(sha, FILE)
    if size is None:
        return RepoConfig()
    if size > MAX_BYTES:
        raise ConfigError(_too_large(FILE, size))
    raw = mirror.read_bytes(sha, FILE)
    return parse(None if raw is None else decode(raw, FILE))


def read_configured(mirror: Mirror, sha: str, repo_configs: str | None) -> RepoConfig:
    """``read_at`` with the service's files from ``Settings.repo_configs`` (``KW_REPO_CONFIGS``):
    the one call planner, worker, bisection and build-ahead make."""
    return read_at(mirror, sha, served_table(repo_configs))


def parse(text: str | None, name: str = FILE) -> RepoConfig:
    """Parse the file's text (None: no file → defaults); errors start with ``name``.

    Every way the text can fail is a ``ConfigError``: over ``MAX_BYTES`` or nested
    deeper than ``MAX_DEPTH`` (refused before parsing), not TOML, or not what the
    tables allow; so is a ``RecursionError`` or ``MemoryError`` on the way.
    """
    if text is None:
        return RepoConfig()
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_BYTES:
        raise ConfigError(_too_large(name, size))
    depth = nesting(text)
    if depth > MAX_DEPTH:
        raise ConfigError(_too_deep(name, depth, "arrays and inline tables"))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{name}: {exc}") from exc
    except (RecursionError, MemoryError) as exc:
        raise ConfigError(f"{name}: cannot be read ({type(exc).__name__})") from None
    depth = table_depth(data)
    if depth > MAX_DEPTH:
        raise ConfigError(_too_deep(name, depth, "tables"))
    where = nul_at(data)
    if where is not None:
        raise ConfigError(
            f"{name}: {where or 'a key'} holds a NUL character (\\u0000), which no path, "
            "name, argument or variable can carry"
        )
    try:
        return RepoConfig.model_validate(data, context={FROM_FILE: True})
    except ValidationError as exc:
        raise ConfigError(f"{name}: {describe(exc, RepoConfig)}") from exc
    except (RecursionError, MemoryError) as exc:
        raise ConfigError(f"{name}: cannot be validated ({type(exc).__name__})") from None


def decode(raw: bytes, name: str = FILE) -> str:
    """The file's bytes as text; TOML is UTF-8, anything else is a ``ConfigError``."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not UTF-8 text (byte {exc.start})") from None


# what opens or closes a nesting level, or starts a string or comment that hides brackets
_TOKEN = re.compile(r"\"\"\"|'''|\"|'|#|[\[\]{}]")
_STRING_END = {
    '"""': re.compile(r'(?:[^\\]|\\.)*?"""', re.S),
    "'''": re.compile(r".*?'''", re.S),
    '"': re.compile(r'(?:[^\\"\n]|\\.)*"'),
    "'": re.compile(r"[^'\n]*'"),
}


def nesting(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings and comments, counted
    without recursion (``tomllib`` recurses once per level)."""
    depth = deepest = pos = 0
    while True:
        m = _TOKEN.search(text, pos)
        if m is None:
            return deepest
        token = m.group()
        pos = m.end()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth = max(0, depth - 1)
        elif token == "#":
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
        else:
            closed = _STRING_END[token].match(text, pos)
            pos = len(text) if closed is None else closed.end()


def table_depth(data: Any) -> int:
    """How deep tables and arrays nest in parsed data (dotted keys and ``[a.b.c]``
    headers nest without brackets); iterative, so any depth is safe to measure."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(data, 0)]
    while todo:
        value, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            todo += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, list):
            todo += [(v, depth + 1) for v in value]
    return deepest


def nul_at(data: Any) -> str | None:
    """The dotted key of the first string (a key or a value) holding a NUL, else None.

    TOML's ``\\u0000`` escape parses, and every field reaches an ``execve`` argument, a
    path or an environment variable, none of which can carry one: found here, the file
    is refused naming the key, not failed later as "embedded null byte" in a build or
    as an internal error of the worker.
    """
    todo: list[tuple[Any, str]] = [(data, "")]
    while todo:
        value, key = todo.pop()
        if isinstance(value, str) and "\x00" in value:
            return key
        if isinstance(value, dict):
            for k, v in value.items():
                inner = f"{key}.{k}" if key else str(k)
                if "\x00" in str(k):
                    return inner.replace("\x00", "\\u0000")
                todo.append((v, inner))
        elif isinstance(value, list):
            todo += [(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return None


def _too_large(name: str, size: int) -> str:
    return f"{name}: {size} bytes, over the limit of {MAX_BYTES} (a configuration is a few kB)"


def _too_deep(name: str, depth: int, what: str) -> str:
    return f"{name}: {what} nested {depth} deep, over the limit of {MAX_DEPTH}"


def parse_install(table: dict[str, Any], where: str) -> InstallRecipe:
    """An ``[install]`` table from elsewhere (server config over the repository's)."""
    try:
        return InstallRecipe.model_validate(table, context={FROM_FILE: True})
    except ValidationError as exc:
        raise ConfigError(f"{where}: {describe(exc, InstallRecipe, ('install',))}") from exc


def describe(exc: ValidationError, root: type[BaseModel], prefix: tuple[str, ...] = ()) -> str:
    """Every problem of a validation, one clause each, keys spelt as in the file."""
    seen: list[str] = []
    for err in exc.errors(include_url=False):
        text = _message(err, root, prefix)
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


def _message(err: ErrorDetails, root: type[BaseModel], prefix: tuple[str, ...]) -> str:
    rel = tuple(err["loc"])
    loc = prefix + rel
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == OWN_ERROR and ctx.get("unknown"):
        return _unknown((*loc, ctx["unknown"]), _model_at(root, rel), bool(ctx.get("table")))
    if kind == OWN_ERROR:
        key = str(ctx.get("key") or "")
        why = str(ctx.get("why", err["msg"])).replace("{table}", _key(loc))
        return f"{_key((*loc, key) if key else loc)} {why}"
    if kind == "extra_forbidden":
        return _unknown(loc, _model_at(root, rel[:-1]), isinstance(err["input"], dict))
    if kind == "missing":
        table = _model_at(root, rel[:-1])
        takes = f"; {_table(loc[:-1])} takes {', '.join(table.file_keys())}" if table else ""
        return f"{_key(loc)} is missing{takes}"
    if kind in _TYPE_WORDS:
        return f"{_key(loc)} must be {_TYPE_WORDS[kind]}, got {shown(err['input'])}"
    return f"{_key(loc)}: {err['msg']}"


def _unknown(loc: tuple[Any, ...], table: type[BaseModel] | None, is_table: bool) -> str:
    name = str(loc[-1])
    allowed = table.file_keys() if table is not None and hasattr(table, "file_keys") else []
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if len(loc) == 1 and is_table:
        if close:
            return f"unknown table [{name}]; did you mean [{close[0]}]?"
        return f"unknown table [{name}]; the tables are " + ", ".join(f"[{k}]" for k in allowed)
    if len(loc) == 1:
        hint = f"; did you mean [{close[0]}]?" if close else ""
        return f"unknown key {name} (keys of the file are tables){hint}"
    what = f"unknown table [{_key(loc)}]" if is_table else f"unknown key {_key(loc)}"
    if close and is_table:
        close = [f"[{_key((*loc[:-1], close[0]))}]"]
    hint = f"; did you mean {close[0]}?" if close else ";"
    return f"{what}{hint} {_table(loc[:-1])} takes {', '.join(allowed)}"


def _key(loc: Sequence[Any]) -> str:
    """A location as the file spells it: ``thresholds.cases[0].regression``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _table(loc: Sequence[Any]) -> str:
    """The table header a location sits under: ``[install]``, ``[[thresholds.cases]]``."""
    if loc and isinstance(loc[-1], int):
        return f"[[{_key(loc[:-1])}]]"
    return f"[{_key(loc)}]"


def _model_at(root: type[BaseModel], path: Sequence[Any]) -> type[Any] | None:
    """The table model at ``path`` inside ``root``, by walking the field annotations."""
    ann: Any = root
    for part in path:
        ann = _unwrap(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(str(part))
            if field is None:
                return None
            ann = field.annotation
        elif get_origin(ann) is tuple:
            ann = get_args(ann)[0]
        elif get_origin(ann) is dict:
            ann = get_args(ann)[1]
        else:
            return None
    ann = _unwrap(ann)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def _unwrap(ann: Any) -> Any:
    """``Annotated[X, ...]`` and ``X | None`` → ``X``."""
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
        elif origin in (Union, types.UnionType):
            ann = next(a for a in get_args(ann) if a is not type(None))
        else:
            return ann


__all__ = [
    "DEFAULT_PROFILE",
    "FILE",
    "RECIPES",
    "CaseThreshold",
    "InstallRecipe",
    "RepoConfig",
    "Thresholds",
    "MAX_BYTES",
    "MAX_DEPTH",
    "decode",
    "describe",
    "nesting",
    "parse",
    "parse_install",
    "read_at",
]
