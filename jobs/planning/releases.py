"""New releases of watched packages, measured against the previous release as they appear.

The natural way to follow FlashInfer, flash-attn or Liger-Kernel is their releases on
PyPI (issue 27). Each ``[[watch.releases]]`` entry (``jobs/planning/schedule.py``) names
a package and where its releases appear: a simple package index (PEP 691 JSON or
PEP 503 HTML, ``https://`` or ``file://``) or a wheelhouse directory. Every poll lists
the versions there (yanked files and, unless asked, pre-releases left out) and plans,
per GPU class:

- nothing measured yet on that class: the newest version alone, the series' first point;
- otherwise every listed version newer than the newest measured one, each against the
  release before it (``plan_versions``: version ``n`` is the baseline of ``n+1``, and a
  baseline that has no run on that class is measured too).

The runs are ordinary released-version runs (``kernelwatch run NAME --version``) with
the trigger ``release``, filed under the package's repository, so trends, regressions
and the dashboard treat a release history like a commit history. A version is "known"
once it has a run on that class, so a poll that comes while its run is queued plans
nothing twice; a run that errored is not retried automatically (``kernelwatch run
--version`` re-measures it).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from html.parser import HTMLParser
from pathlib import Path

from celery import Celery
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from kernelwatch.db.config import Settings
from kernelwatch.db.models import Repository, Run
from kernelwatch.jobs.errors import ConfigError, SourceError
from kernelwatch.jobs.library.libspec import normalize_name
from kernelwatch.jobs.planning.plan import PlannedRun, RunRequest, plan_versions
from kernelwatch.jobs.planning.schedule import ReleaseWatch

log = logging.getLogger(__name__)

TRIGGER = "release"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
MAX_INDEX_BYTES = 20 * 1024 * 1024  # a project page of a big package is a few MB


def file_version(filename: str, project: str) -> Version | None:
    """The version of a distribution file of ``project`` (None: another project or not a
    distribution)."""
    want = normalize_name(project)
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return version if normalize_name(str(name)) == want else None


def from_wheelhouse(path: str | Path, project: str) -> set[Version]:
    folder = Path(path)
    if not folder.is_dir():
        raise SourceError(f"wheelhouse {folder} is not a directory")
    return {v for f in folder.iterdir() if (v := file_version(f.name, project)) is not None}


class _Links(HTMLParser):
    """``<a href=... data-yanked=...>file</a>`` of a PEP 503 project page."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, bool]] = []
        self._yanked: bool | None = None
        self._href = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            self._href = found.get("href") or ""
            self._yanked = "data-yanked" in found

    def handle_data(self, data: str) -> None:
        if self._yanked is not None and data.strip():
            path = urllib.parse.urlsplit(self._href).path
            name = path.rsplit("/", 1)[-1] or data.strip()
            self.files.append((urllib.parse.unquote(name), self._yanked))
            self._yanked = None


def from_index(url: str, project: str, timeout_s: float = 30) -> set[Version]:
    """Versions on a simple index's project page (``{url}/{normalized name}/``)."""
    page = f"{url.rstrip('/')}/{normalize_name(project)}/"
    if page.startswith("file://"):
        folder = Path(urllib.parse.urlsplit(page).path)
        html = folder / "index.html"
        if html.is_file():
            return _parse_html(html.read_text(errors="replace"), project)
        if folder.is_dir():  # a bare directory of files is an index too (pip accepts it)
            return from_wheelhouse(folder, project)
        raise SourceError(f"index {url}: no project page for {project} at {folder}")
    headers = {"Accept": f"{JSON_TYPE}, text/html;q=0.1", "User-Agent": "kernelwatch-releases"}
    request = urllib.request.Request(page, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(MAX_INDEX_BYTES + 1)
            kind = response.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return set()  # not published there (yet)
        raise SourceError(f"index {url}: HTTP {exc.code} for {project}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise SourceError(f"index {url} unreachable: {exc}") from exc
    if len(body) > MAX_INDEX_BYTES:
        raise SourceError(f"index {url}: the page of {project} is over {MAX_INDEX_BYTES} bytes")
    text = body.decode("utf-8", "replace")
    if kind == JSON_TYPE or kind == "application/json":
        return _parse_json(text, project, url)
    return _parse_html(text, project)


def _parse_json(text: str, project: str, url: str) -> set[Version]:
    try:
        files = json.loads(text).get("files", [])
    except (ValueError, AttributeError) as exc:
        raise SourceError(f"index {url}: not a PEP 691 project page ({exc})") from exc
    out = set()
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict) or f.get("yanked"):
            continue
        v = file_version(str(f.get("filename", "")), project)
        if v is not None:
            out.add(v)
    return out


def _parse_html(text: str, project: str) -> set[Version]:
    parser = _Links()
    parser.feed(text)
    return {
        v
        for name, yanked in parser.files
        if not yanked and (v := file_version(name, project)) is not None
    }


def listed_versions(watch: ReleaseWatch) -> list[Version]:
    """The versions where ``watch`` looks, oldest first (pre-releases only if asked)."""
    found = (
        from_index(watch.index, watch.package)
        if watch.index
        else from_wheelhouse(watch.wheelhouse or "", watch.package)
    )
    return sorted(v for v in found if watch.prereleases or not (v.is_prerelease or v.is_devrelease))


def measured_versions(session: Session, watch: ReleaseWatch, device_class: str) -> set[Version]:
    """Versions of the package with a run on ``device_class`` (any trigger, any state)."""
    repo = session.scalars(select(Repository).where(Repository.name == watch.name)).first()
    if repo is None:
        return set()
    specs = session.scalars(
        select(Run.version_spec).where(
            Run.repository_id == repo.id,
            Run.device_class == device_class,
            Run.version_spec.is_not(None),
        )
    )
    out = set()
    for spec in specs:
        try:
            out.add(Version(str(spec).split("==", 1)[1]))
        except (IndexError, InvalidVersion):
            continue
    return out


def to_measure(
    listed: list[Version], measured: Iterable[Version]
) -> tuple[list[Version], Version | None]:
    """(the versions to measure, oldest first, and the baseline of the first of them).

    Nothing measured yet: the newest alone, without a baseline. Else every listed
    version newer than the newest measured, the first against the release before it.
    """
    if not listed:
        return [], None
    known = set(measured)
    if not known:
        return [listed[-1]], None
    newest = max(known)
    new = [v for v in listed if v > newest]
    if not new:
        return [], None
    before = [v for v in {*listed, *known} if v < new[0]]
    return new, max(before) if before else None


def plan_new_releases(
    factory: sessionmaker[Session], settings: Settings, app: Celery | None, watch: ReleaseWatch
) -> list[PlannedRun]:
    """Plan the runs of releases that appeared since the last poll (on each class)."""
    listed = listed_versions(watch)
    planned: list[PlannedRun] = []
    for device_class in watch.device_classes:
        with factory() as session:
            new, baseline = to_measure(listed, measured_versions(session, watch, device_class))
        if not new:
            continue
        log.info(
            "release watch %s on %s: %s (against %s)", watch.package, device_class,
            ", ".join(map(str, new)), baseline or "nothing",
        )  # fmt: skip
        bench_args = [a for k in watch.kernels for a in ("--kernel", k)] + list(watch.bench_args)
        options: dict[str, object] = {"impl": watch.adapter, "suites_explicit": True}
        if bench_args:
            options["bench_args"] = bench_args
        options["index_url" if watch.index else "find_links"] = watch.index or watch.wheelhouse
        req = RunRequest(
            source=watch.name,
            versions=[f"{watch.name}=={v}" for v in new],
            baseline=f"{watch.name}=={baseline}" if baseline is not None else None,
            suites=list(watch.suites),
            device_class=device_class,
            trigger=TRIGGER,
            options=options,
        )
        try:
            planned += plan_versions(factory, settings, app, req)
        except ConfigError as exc:  # a version pip's spec rules refuse: say so, go on
            log.warning("release watch %s: %s", watch.package, exc)
    return planned


__all__ = [
    "TRIGGER",
    "file_version",
    "from_index",
    "from_wheelhouse",
    "listed_versions",
    "measured_versions",
    "plan_new_releases",
    "to_measure",
]
