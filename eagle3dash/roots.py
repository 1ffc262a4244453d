"""The data roots: the folders whose paths the app may read when a user types one.

A path typed into the app is a question the app's process answers with the files it can read, so
the app (not the CLI, whose user is already on the machine) accepts only paths under these
folders: the home folder plus those listed in `EAGLE3DASH_DATA_ROOTS` (separated like PATH). A
path outside them is refused with the same message whether or not it exists, before anything
reads it. Paths are judged by their real path: a link inside a root that points outside, the
path itself or a file in the folder it names, is outside.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from eagle3dash.errors import InputError
from eagle3dash.store import default_home

ROOTS_ENV = "EAGLE3DASH_DATA_ROOTS"
# A typed folder's entries whose real paths are checked: far above any checkpoint or model folder.
MAX_CHECKED_ENTRIES = 100_000


class OutsideRootsError(InputError):
    """A typed path outside the data roots; the message names the roots, never the path's fate."""


def data_roots(home: str | os.PathLike[str] | None = None) -> tuple[Path, ...]:
    """The home folder (default EAGLE3DASH_HOME) and the folders in EAGLE3DASH_DATA_ROOTS,
    resolved, in that order, without repeats."""
    listed = [p for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    found: list[Path] = []
    for entry in [home if home is not None else default_home(), *listed]:
        root = _resolved(entry)
        if root not in found:
            found.append(root)
    return tuple(found)


def _resolved(path: str | os.PathLike[str]) -> Path:
    # resolve() follows symlinks and folds `..` after them; strict=False: no error for a
    # missing tail, so a path that does not exist is treated like one that does.
    return Path(str(path).strip()).expanduser().resolve(strict=False)


def within_roots(
    path: str | os.PathLike[str],
    roots: Iterable[Path],
    label: str,
    also: Iterable[Path] = (),
    upload: str | None = None,
) -> str:
    """The path, resolved, if it lies in one of `roots` or `also` (folders the app reads besides
    the roots, e.g. the demo's models); else OutsideRootsError naming every one of them and how to
    add a root (and `upload`, the upload that replaces the path, where the page has one). The
    path is not inspected, so the answer never tells whether it exists."""
    allowed = tuple(dict.fromkeys(_resolved(root) for root in (*roots, *also)))
    resolved = _resolved(path)
    names = ", ".join(str(root) for root in allowed)
    how = (
        f"to read another folder, restart the app with it added to {ROOTS_ENV} (folders "
        f"separated by '{os.pathsep}'): `eagle3dash app --data-root FOLDER` or "
        f"`{ROOTS_ENV}=FOLDER make run`"
    )
    if upload:
        how += f"; or {upload}"
    if not _inside(resolved, allowed):
        raise OutsideRootsError(
            f"{label}: the app reads only paths under its data roots ({names}); {how}"
        )
    leaving = _entry_leaving(resolved, allowed)
    if leaving is not None:
        raise OutsideRootsError(
            f"{label}: {leaving} in it is a link to a path outside the data roots ({names}), "
            f"and the app reads only paths under them; copy the file into the folder, or {how}"
        )
    return str(resolved)


def _inside(resolved: Path, allowed: tuple[Path, ...]) -> bool:
    return any(resolved.is_relative_to(root) for root in allowed)


def _entry_leaving(folder: Path, allowed: tuple[Path, ...]) -> str | None:
    """The first entry under a folder whose real path leaves the allowed roots (its name relative
    to the folder), else None; a file or a missing path has no entries."""
    if not folder.is_dir():
        return None
    for count, (where, dirs, files) in enumerate(os.walk(folder, followlinks=False)):
        for name in [*dirs, *files]:
            entry = Path(where) / name
            if entry.is_symlink() and not _inside(entry.resolve(strict=False), allowed):
                return str(entry.relative_to(folder))
        if count > MAX_CHECKED_ENTRIES:
            break
    return None
