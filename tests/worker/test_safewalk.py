"""The no-follow walk: a directory swapped for a link after it was listed is never opened."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kernelwatch.worker.safewalk import walk_no_follow


def _tree(tmp_path: Path) -> Path:
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("f")
    (top / "link").symlink_to(top / "a")
    (top / "g").write_text("g")
    return top


def test_it_walks_like_fwalk_with_links_as_files_and_stops_at_its_depth(tmp_path: Path) -> None:
    top = _tree(tmp_path)
    seen = {path.relative_to(top).as_posix(): (sorted(d), sorted(f))
            for path, d, f, _ in walk_no_follow(top)}  # fmt: skip
    assert seen == {".": (["a"], ["g", "link"]), "a": (["b"], []), "a/b": ([], ["f"])}
    shallow = [path.relative_to(top).as_posix() for path, *_ in walk_no_follow(top, max_depth=1)]
    assert shallow == [".", "a"]
    assert list(walk_no_follow(top / "link")) == []  # the top itself a link: nothing
    assert list(walk_no_follow(top / "g")) == []


def test_a_directory_swapped_for_a_link_to_a_fifo_is_never_opened(tmp_path: Path) -> None:
    """The worker may be root: a link swapped in between the listing and the open must not
    have it open what the link names (a FIFO here, whose waiting writer would notice; a
    device such as /dev/watchdog on a host)."""
    top = _tree(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer() -> None:
        with open(fifo, "wb"):  # blocks until someone opens the FIFO for reading
            opened.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    walk = walk_no_follow(top)
    first = next(walk)
    assert "a" in first[1]
    (top / "a" / "b" / "f").unlink()
    (top / "a" / "b").rmdir()
    (top / "a").rmdir()
    (top / "a").symlink_to(fifo)  # swapped after the listing, before the descent
    rest = [path for path, *_ in walk]
    assert rest == [] and not opened.wait(0.5), "the walk opened what the link names"
    with open(fifo, "rb"):  # let the writer go
        pass
    t.join(5)
