"""Store faults, one line each: a database locked too long, a full disk, a file SQLite cannot read.

SQLite raises these as `sqlite3.OperationalError` / `DatabaseError` (and the disk as `OSError`)
with a terse text; `classify` names the fault, the file and what to do. A full disk leaves no
room to record that a job failed, so the home keeps a small reserve file (`RESERVE_NAME`) that
`release_reserve` deletes to make that room; `keep_reserve` puts it back once there is space.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

from eagle3dash.errors import InputError

DB_WAIT_ENV = "EAGLE3DASH_DB_WAIT_S"
# How long one write waits for another process's write lock: SQLite's busy handler retries
# with a growing backoff (1 ms up to 100 ms between tries) until this total has passed.
DB_WAIT_S = 120.0
RESERVE_NAME = ".reserve"
RESERVE_BYTES = 1 << 20  # room for the last lines a full disk would refuse (a few WAL frames)

_LOCKED = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_FULL = (sqlite3.SQLITE_FULL,)
_UNREADABLE = (
    sqlite3.SQLITE_CORRUPT,
    sqlite3.SQLITE_NOTADB,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PERM,
)
# SQLITE_ERROR is also a bug's code; only these texts of it are a damaged database.
_MISSING = ("no such table", "no such column")


class StoreFault(InputError):
    """The store's database or disk failed a read or write; the message is one line."""


class StoreLocked(StoreFault):
    """Another process held the database's write lock longer than this one waits."""


class DiskFull(StoreFault):
    """The disk holding the home has no room left."""


class StoreUnreadable(StoreFault):
    """The database file cannot be read (not a database, corrupt, missing a table, no access)."""


def db_wait_s() -> float:
    """How long a write waits for a lock: `EAGLE3DASH_DB_WAIT_S`, else `DB_WAIT_S` (120 s)."""
    text = os.environ.get(DB_WAIT_ENV, "").strip()
    try:
        value = float(text) if text else DB_WAIT_S
    except ValueError:
        raise InputError(f"{DB_WAIT_ENV}={text!r} is not a number of seconds") from None
    if not value >= 0:  # also refuses nan
        raise InputError(f"{DB_WAIT_ENV}={text!r} must be 0 or more seconds")
    return value


def is_disk_full(error: BaseException) -> bool:
    """Whether an error is a full disk (SQLite's or the file system's)."""
    if isinstance(error, sqlite3.Error):
        return getattr(error, "sqlite_errorcode", None) in _FULL or "is full" in str(error)
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def classify(error: BaseException, db_path: Path) -> StoreFault | None:
    """The one-line fault an error of the store stands for (None: not a store fault)."""
    if is_disk_full(error):
        return DiskFull(
            f"the disk holding {db_path.parent} is full ({error}): free some space there, "
            "then run it again"
        )
    if not isinstance(error, sqlite3.Error):
        return None
    code = getattr(error, "sqlite_errorcode", None)
    if code in _LOCKED or "locked" in str(error):
        return StoreLocked(
            f"the database {db_path} stayed locked for {db_wait_s():.0f} s (another process "
            f"holds a write lock): stop that process or wait for it, then run it again"
        )
    if code in _UNREADABLE or str(error).startswith(_MISSING):
        return StoreUnreadable(
            f"the database {db_path} cannot be read ({error}): nothing was changed; restore it "
            f"from a copy, or set EAGLE3DASH_HOME to another folder"
        )
    return None


def keep_reserve(home: Path) -> None:
    """Make sure the home holds its reserve file (quietly skipped while the disk is full)."""
    path = home / RESERVE_NAME
    with contextlib.suppress(OSError):
        if path.is_file() and path.stat().st_size >= RESERVE_BYTES:
            return
        with open(path, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)


def release_reserve(home: Path) -> bool:
    """Delete the home's reserve file to make room; whether there was one."""
    try:
        (home / RESERVE_NAME).unlink()
    except OSError:
        return False
    return True
