"""The store: one SQLite database (through sqlite-utils) and a home folder of files.

Home folder `EAGLE3DASH_HOME` (default `./.eagle3dash`):
    eagle3dash.db          SQLite, WAL mode, busy timeout: the app and the worker write concurrently
    checkpoints/<sha256>/  uploaded checkpoints, content-addressed
    captures/<run>/        capture shards of a run
    logs/<job>.log         a job's stdout, stderr and logging
    .reserve               room a worker frees to record a job's end on a full disk (store_faults)

The home's files apart from the database (safe paths, content addresses, uploads, capture
folders) are `home_files.py`'s, re-exported here. The store is the single source of truth: pages
read only from here, jobs write their progress and results here. Schema changes are numbered
migrations recorded in the `migrations` table; a database made by an older version is upgraded
in place when opened, never wiped.

Every query function takes a `Store` first. A `Store` hands each thread its own connection
(`Store.db`), so one `Store` can be shared by Streamlit's script threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, overload

from sqlite_utils import Database

from eagle3dash.errors import InputError
from eagle3dash.home_files import UnsafePathError as UnsafePathError
from eagle3dash.home_files import capture_dir as capture_dir
from eagle3dash.home_files import content_address as content_address
from eagle3dash.home_files import delete_upload
from eagle3dash.home_files import safe_join as safe_join
from eagle3dash.home_files import save_upload as save_upload
from eagle3dash.severity import severity_rank
from eagle3dash.store_faults import classify, db_wait_s
from eagle3dash.text import ascii_int

HOME_ENV = "EAGLE3DASH_HOME"
DEFAULT_HOME = ".eagle3dash"
DB_NAME = "eagle3dash.db"
SUBDIRS = ("checkpoints", "captures", "logs")

RUN_COLUMNS = (
    "id",
    "created_at",
    "status",
    "checkpoint_id",
    "endpoint_url",
    "baseline_url",
    "options_json",
    "measured_accept_length",
    "sim_accept_training",
    "sim_accept_serving",
    "tok_s",
    "baseline_tok_s",
    "speedup",
    "worst_severity",
    "worst_finding_title",
    "error",
    "diagnosis_json",
    "engine",
)
_BOOL_COLUMNS = ("uploaded", "post_norm", "needs_gpu", "cancel_requested", "checkpoint_removed")


class HomeError(InputError):
    """The home folder cannot hold the store (a file, read-only, not creatable)."""


class ReadOnlyHomeError(HomeError):
    """A home folder that exists but cannot be written; the app still shows it, read-only."""


class SchemaTooNewError(InputError):
    """The database was written by a newer eagle3dash than this one."""


# --- migrations --------------------------------------------------------------------------------
# Append only: a released migration never changes, the next change is a new number.

_V1 = (
    """CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL,
        sha256 TEXT,
        name TEXT,
        format TEXT,
        report_json TEXT,
        created_at TEXT NOT NULL,
        uploaded INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE endpoints (
        url TEXT PRIMARY KEY,
        last_probe_json TEXT,
        version TEXT,
        created_at TEXT NOT NULL
    )""",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        created_at TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'queued',
        checkpoint_id INTEGER REFERENCES checkpoints(id),
        endpoint_url TEXT,
        baseline_url TEXT,
        options_json TEXT,
        measured_accept_length REAL,
        sim_accept_training REAL,
        sim_accept_serving REAL,
        tok_s REAL,
        baseline_tok_s REAL,
        speedup REAL,
        worst_severity TEXT,
        worst_finding_title TEXT,
        error TEXT
    )""",
    "CREATE INDEX runs_created_at ON runs(created_at DESC, id DESC)",
    "CREATE INDEX runs_status ON runs(status, created_at DESC, id DESC)",
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'queued'
            CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
        params_json TEXT,
        result_json TEXT,
        progress REAL NOT NULL DEFAULT 0,
        message TEXT,
        created_at TEXT NOT NULL,
        heartbeat_at TEXT,
        started_at TEXT,
        finished_at TEXT,
        log_path TEXT,
        needs_gpu INTEGER NOT NULL DEFAULT 0,
        worker_pid INTEGER,
        error TEXT
    )""",
    "CREATE INDEX jobs_run_id ON jobs(run_id)",
    "CREATE INDEX jobs_status ON jobs(status)",
    """CREATE TABLE layouts (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        side TEXT NOT NULL,
        slot INTEGER NOT NULL,
        depth INTEGER,
        post_norm INTEGER NOT NULL DEFAULT 0,
        description TEXT
    )""",
    "CREATE INDEX layouts_run_id ON layouts(run_id)",
    """CREATE TABLE metrics (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        source TEXT NOT NULL,
        name TEXT NOT NULL,
        step INTEGER,
        request INTEGER,
        value REAL
    )""",
    "CREATE INDEX metrics_run_id ON metrics(run_id, source, name)",
    """CREATE TABLE findings (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        rule_id TEXT NOT NULL,
        severity TEXT NOT NULL,
        title TEXT NOT NULL,
        evidence TEXT,
        fix TEXT,
        position INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX findings_run_id ON findings(run_id)",
    """CREATE TABLE bench_results (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        result_json TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    "CREATE UNIQUE INDEX bench_results_run_role ON bench_results(run_id, role)",
)

_V2 = (
    # A removed checkpoint stays as a row, so runs that used it still show its name.
    "ALTER TABLE checkpoints ADD COLUMN removed_at TEXT",
    "CREATE INDEX checkpoints_sha256 ON checkpoints(sha256)",
    "CREATE INDEX runs_checkpoint_id ON runs(checkpoint_id)",
    "ALTER TABLE endpoints ADD COLUMN probed_at TEXT",
    # Cancel of a running job is a flag the worker acts on; host and child pid let a new worker
    # tell a dead worker's job from a live one and reap an orphaned child on the same machine.
    "ALTER TABLE jobs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE jobs ADD COLUMN worker_host TEXT",
    "ALTER TABLE jobs ADD COLUMN child_pid INTEGER",
)

_V3 = (
    # One JSON form of the whole diagnosis (diagnosis.Diagnosis.to_dict()); the layouts, metrics
    # and bench_results tables stay for runs stored before it.
    "ALTER TABLE runs ADD COLUMN diagnosis_json TEXT",
    # Weight-file digests by path, size and mtime (identity.py): a draft is hashed once.
    """CREATE TABLE file_digests (
        path TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        hashed_at TEXT NOT NULL
    )""",
)

_V4 = (
    # One digest of a checkpoint's config and weights (identity.checkpoint_digest): the same
    # draft registered by path and uploaded is one checkpoint.
    "ALTER TABLE checkpoints ADD COLUMN content_digest TEXT",
    "CREATE INDEX checkpoints_content_digest ON checkpoints(content_digest)",
    # An endpoint known to be gone (the demo's doubles after seeding): its runs' URLs are dead.
    "ALTER TABLE endpoints ADD COLUMN stopped_at TEXT",
)

_V5 = (
    # Where a job ran (jobs/ray_backend.py: Ray node id, host, GPU ids, pid), as JSON.
    "ALTER TABLE jobs ADD COLUMN placement_json TEXT",
)

_V6 = (
    # The serving engine a run diagnosed ("sglang" | "vllm"; NULL: a run stored before engines
    # were told apart, or not finished): the Runs page's column and search.
    "ALTER TABLE runs ADD COLUMN engine TEXT",
)

_V7 = (
    # The servers a job measures (a diagnosis's endpoint and baseline, as http_client.server_key
    # names them, a JSON list): a queued job waits while a running one measures any of them
    # (jobs/lifecycle.py claim_job), so that two jobs never benchmark one server at once.
    "ALTER TABLE jobs ADD COLUMN servers_json TEXT",
)

# (version, name, statements) in order.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (1, "initial schema", _V1),
    (2, "removed checkpoints, job cancel flag and worker host", _V2),
    (3, "the diagnosis as one JSON form, weight-file digests", _V3),
    (4, "checkpoint content digests, stopped endpoints", _V4),
    (5, "where a job ran", _V5),
    (6, "the serving engine of a run", _V6),
    (7, "the servers a job measures", _V7),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


def now_iso() -> str:
    """The current UTC time as ISO 8601 with microseconds and a Z (sorts as text)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> datetime | None:
    """Parse a time written by `now_iso` (None stays None)."""
    return None if text is None else datetime.fromisoformat(text)


def to_json(obj: Any) -> str:
    """JSON text of a dict/list with dataclasses, paths, sets and numpy/torch scalars allowed."""
    return json.dumps(obj, default=_json_default, allow_nan=True)


def _json_default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=str)
    if hasattr(obj, "item"):  # numpy / torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


def _from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# --- the Store ---------------------------------------------------------------------------------


class Store:
    """A home folder and its SQLite database; `db` is this thread's sqlite-utils connection."""

    def __init__(self, home: Path, read_only: bool = False) -> None:
        self.home = home
        self.read_only = read_only
        self.db_path = home / DB_NAME
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []

    def __repr__(self) -> str:
        return f"Store({str(self.home)!r})"

    @property
    def db(self) -> Database:
        """This thread's `sqlite_utils.Database` (opened on first use: WAL, busy timeout)."""
        db = getattr(self._local, "db", None)
        if db is None:
            conn = connect(self.db_path, read_only=self.read_only)
            with self._lock:
                self._conns.append(conn)
            db = Database(conn, execute_plugins=False)
            self._local.db = db
        return db

    def path(self, *parts: str | os.PathLike[str]) -> Path:
        """A path inside the home folder; refuses anything that would leave it."""
        return safe_join(self.home, *parts)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """BEGIN IMMEDIATE ... COMMIT (rolled back on error); joins an open transaction."""
        db = self.db
        if db.conn.in_transaction:
            yield db
            return
        db.conn.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.conn.execute("COMMIT")  # a COMMIT that fails (a full disk) is rolled back too
        except BaseException:
            if db.conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.conn.execute("ROLLBACK")
            raise

    def get_digest(self, path: str, size: int, mtime_ns: int) -> str | None:
        """A weight file's recorded SHA-256 at this size and mtime (identity.DigestCache)."""
        row = self.db.execute(
            "SELECT sha256 FROM file_digests WHERE path = ? AND size = ? AND mtime_ns = ?",
            (path, size, mtime_ns),
        ).fetchone()
        return None if row is None else str(row[0])

    def put_digest(self, path: str, size: int, mtime_ns: int, digest: str) -> None:
        """Record a weight file's SHA-256 (identity.DigestCache)."""
        self.db.execute(
            "INSERT INTO file_digests (path, size, mtime_ns, sha256, hashed_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET size = excluded.size, "
            "mtime_ns = excluded.mtime_ns, sha256 = excluded.sha256, "
            "hashed_at = excluded.hashed_at",
            (path, size, mtime_ns, digest, now_iso()),
        )

    def close(self) -> None:
        """Close every connection this store opened (any thread)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._local = threading.local()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    db_path: Path, timeout: float | None = None, read_only: bool = False
) -> sqlite3.Connection:
    """A connection in autocommit mode (explicit BEGINs only), WAL, foreign keys, and a busy
    timeout (`timeout`, default `store_faults.db_wait_s()`: how long a write waits for another
    process's lock); `read_only`: opened with SQLite's mode=ro, which reads a WAL database in a
    read-only folder."""
    timeout = db_wait_s() if timeout is None else timeout
    if read_only:
        uri = f"file:{urllib.parse.quote(str(db_path))}"
        try:
            conn = _read_only(f"{uri}?mode=ro", timeout)
        except sqlite3.OperationalError:
            # On a read-only file system SQLite cannot make a WAL database's -shm file; nothing
            # there can change the database, so it may be read as immutable.
            conn = _read_only(f"{uri}?immutable=1", timeout)
        return conn
    conn = sqlite3.connect(
        str(db_path), timeout=timeout, isolation_level=None, check_same_thread=False
    )
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    if mode.lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _read_only(uri: str, timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(
        uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False
    )
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def default_home() -> Path:
    """`EAGLE3DASH_HOME`, or `./.eagle3dash`."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME)


def open_store(home: str | os.PathLike[str] | None = None) -> Store:
    """Open (creating folders and database, applying migrations) the store at `home`."""
    root = Path(home) if home is not None else default_home()
    root = root.expanduser().resolve()
    fix = f"set {HOME_ENV} to a folder you can write (default ./{DEFAULT_HOME})"
    if root.exists() and not root.is_dir():
        raise HomeError(f"the home {root} is a file, not a folder: {fix}")
    try:
        root.mkdir(parents=True, exist_ok=True)
        for sub in SUBDIRS:
            (root / sub).mkdir(exist_ok=True)
    except OSError as e:
        raise HomeError(f"the home {root} cannot be created ({e.strerror or e}): {fix}") from None
    if not os.access(root, os.W_OK):
        raise ReadOnlyHomeError(f"the home {root} is read-only: {fix}")
    store = Store(root)
    try:
        migrate(store)
        _check_tables(store)
    except sqlite3.Error as e:
        store.close()
        # A damaged database reads as the same line the pages show for it.
        unusable = HomeError(f"the database {store.db_path} cannot be used ({e}): {fix}")
        raise classify(e, store.db_path) or unusable from None
    except BaseException:
        store.close()
        raise
    return store


def open_read_only(home: str | os.PathLike[str] | None = None) -> Store:
    """A read-only home's store, to show its runs: nothing created, nothing migrated; HomeError
    when it has no database of this eagle3dash's schema version."""
    root = (Path(home) if home is not None else default_home()).expanduser().resolve()
    fix = f"set {HOME_ENV} to a folder you can write, or make {root} writable"
    if not (root / DB_NAME).is_file():
        raise HomeError(f"the home {root} is read-only and has no database: {fix}")
    store = Store(root, read_only=True)
    try:
        version = schema_version(store.db)
    except sqlite3.Error as e:
        store.close()
        raise HomeError(f"the database {store.db_path} cannot be read ({e}): {fix}") from None
    if version != SCHEMA_VERSION:
        store.close()
        if version > SCHEMA_VERSION:
            raise SchemaTooNewError(_too_new(store, version))
        raise HomeError(
            f"the home {root} is read-only and its database is from an older eagle3dash "
            f"(schema {version}, this one needs {SCHEMA_VERSION}): {fix}"
        )
    try:
        _check_tables(store)
    except BaseException:
        store.close()
        raise
    return store


@functools.cache
def _schema_tables() -> frozenset[str]:
    """The tables the migrations create, read off an in-memory database built by them."""
    conn = sqlite3.connect(":memory:")
    try:
        for _, _, statements in MIGRATIONS:
            for sql in statements:
                conn.execute(sql)
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        conn.close()
    return frozenset(name for (name,) in rows if not name.startswith("sqlite_"))


def _check_tables(store: Store) -> None:
    """HomeError naming the tables a migrated database lacks (dropped by hand or a tool): every
    page would otherwise fail on its first query."""
    rows = store.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    missing = sorted(_schema_tables() - {name for (name,) in rows})
    if missing:
        raise HomeError(
            f"the database {store.db_path} lacks its {', '.join(missing)} table"
            f"{'s' if len(missing) > 1 else ''} (dropped by hand or by a tool): move it aside "
            f"to start a new one, or restore it from a backup"
        )


def schema_version(db: Database) -> int:
    """The highest migration applied to this database (0 for an empty one)."""
    if not db["migrations"].exists():
        return 0
    row = db.execute("SELECT MAX(version) FROM migrations").fetchone()
    return int(row[0] or 0)


def migrate(store: Store) -> list[int]:
    """Apply the migrations this database lacks, in one transaction; return their versions."""
    db = store.db
    current = schema_version(db)
    if current > SCHEMA_VERSION:
        raise SchemaTooNewError(_too_new(store, current))
    if current == SCHEMA_VERSION:
        return []
    applied: list[int] = []
    with store.transaction():
        db.conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        current = schema_version(db)  # another process may have migrated meanwhile
        if current > SCHEMA_VERSION:
            raise SchemaTooNewError(_too_new(store, current))
        for version, name, statements in MIGRATIONS:
            if version <= current:
                continue
            for sql in statements:
                db.conn.execute(sql)
            db.conn.execute(
                "INSERT INTO migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (version, name, now_iso()),
            )
            applied.append(version)
    return applied


def _too_new(store: Store, version: int) -> str:
    return (
        f"{store.db_path} has schema version {version}, newer than this eagle3dash knows "
        f"({SCHEMA_VERSION}): upgrade eagle3dash, or point {HOME_ENV} at another folder"
    )


# --- rows --------------------------------------------------------------------------------------


@overload
def decode_row(row: Mapping[str, Any]) -> dict: ...
@overload
def decode_row(row: None) -> None: ...
def decode_row(row: Mapping[str, Any] | None) -> dict | None:
    """A result row with booleans as bool and *_json columns also parsed (without the suffix)."""
    if row is None:
        return None
    out = dict(row)
    for key in _BOOL_COLUMNS:
        if key in out and out[key] is not None:
            out[key] = bool(out[key])
    for key in list(out):
        if key.endswith("_json"):
            out[key[: -len("_json")]] = _from_json(out[key])
    return out


def insert_row(db: Database, table: str, row: Mapping[str, Any]) -> int:
    """Insert one row; return its id (every table here has an INTEGER PRIMARY KEY)."""
    rowid = db.table(table).insert(dict(row)).last_rowid
    if rowid is None:  # sqlite-utils leaves it unset only when nothing was inserted
        raise sqlite3.DatabaseError(f"no row was inserted into {table}")
    return rowid


def _one(store: Store, sql: str, params: Iterable[Any] = ()) -> dict | None:
    rows = list(store.db.query(sql, tuple(params)))
    return decode_row(rows[0]) if rows else None


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


# --- checkpoints -------------------------------------------------------------------------------


def add_checkpoint(
    store: Store,
    path: str | os.PathLike[str],
    name: str | None = None,
    format: str | None = None,
    report: Mapping[str, Any] | None = None,
    sha256: str | None = None,
    uploaded: bool = False,
    content_digest: str | None = None,
) -> int:
    """Register a checkpoint (a user's path, or an upload under checkpoints/); return its id.

    A live checkpoint with the same path is updated (its name only when one is given) and its id
    returned. `content_digest` is `identity.checkpoint_digest` of its files.
    """
    text = str(path)
    with store.transaction() as db:
        same = db.execute(
            "SELECT id FROM checkpoints WHERE path = ? AND removed_at IS NULL ORDER BY id LIMIT 1",
            (text,),
        ).fetchone()
        if same is not None:
            given = {
                "name": name,
                "format": format,
                "sha256": sha256,
                "content_digest": content_digest,
            }
            changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
            if report is not None:
                changes["report_json"] = to_json(report)
            if uploaded:
                changes["uploaded"] = 1
            if changes:
                db.table("checkpoints").update(same[0], changes)
            return int(same[0])
        return insert_row(
            db,
            "checkpoints",
            {
                "path": text,
                "sha256": sha256,
                "name": name or Path(text).name,
                "format": format,
                "report_json": None if report is None else to_json(report),
                "created_at": now_iso(),
                "uploaded": int(uploaded),
                "content_digest": content_digest,
            },
        )


def checkpoints_with_digest(store: Store, content_digest: str) -> list[dict]:
    """Live checkpoints registered with this content digest, oldest first."""
    rows = store.db.query(
        "SELECT id, path, name, format, uploaded FROM checkpoints "
        "WHERE content_digest = ? AND removed_at IS NULL ORDER BY id",
        (content_digest,),
    )
    return [decode_row(r) for r in rows]


@dataclasses.dataclass(frozen=True)
class CheckpointRow:
    """A registered checkpoint as stored. `report` is its stored inspect report
    (InspectReport.to_json(), typed by diagnosis/stored.py `load_checkpoint_report`), read by
    `get_checkpoint` only; None when none was stored."""

    id: int
    path: str
    name: str
    format: str | None
    sha256: str | None
    created_at: str
    uploaded: bool
    removed: bool
    content_digest: str | None
    report: Any = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CheckpointRow:
        """From a `checkpoints` row (SELECT * or the listing's columns)."""
        return cls(
            id=int(row["id"]),
            path=str(row["path"]),
            name=str(row["name"] or Path(str(row["path"])).name),
            format=row["format"],
            sha256=row["sha256"],
            created_at=str(row["created_at"]),
            uploaded=bool(row["uploaded"]),
            removed=row["removed_at"] is not None,
            content_digest=row["content_digest"],
            report=_from_json(row["report_json"]) if "report_json" in row else None,
        )


def get_checkpoint(store: Store, checkpoint_id: int) -> CheckpointRow | None:
    """One checkpoint, its stored report included; removed ones too."""
    rows = list(store.db.query("SELECT * FROM checkpoints WHERE id = ?", (checkpoint_id,)))
    return CheckpointRow.from_row(rows[0]) if rows else None


def list_checkpoints(store: Store, include_removed: bool = False) -> list[CheckpointRow]:
    """Checkpoints, newest first (without the report)."""
    where = "" if include_removed else "WHERE removed_at IS NULL"
    rows = store.db.query(
        "SELECT id, path, sha256, name, format, created_at, uploaded, removed_at, "
        f"content_digest FROM checkpoints {where} ORDER BY id DESC"
    )
    return [CheckpointRow.from_row(r) for r in rows]


def remove_checkpoint(store: Store, checkpoint_id: int) -> bool:
    """Mark a checkpoint removed; delete its files only if uploaded into checkpoints/ here.

    A user's own path outside the home is never touched. Runs that used it keep their row and
    show it as removed. Returns whether files were deleted.
    """
    with store.transaction() as db:
        row = db.execute(
            "SELECT path, uploaded, removed_at FROM checkpoints WHERE id = ?", (checkpoint_id,)
        ).fetchone()
        if row is None:
            raise InputError(f"no checkpoint {checkpoint_id}")
        path, uploaded, removed_at = row
        if removed_at is None:
            db.execute(
                "UPDATE checkpoints SET removed_at = ? WHERE id = ?", (now_iso(), checkpoint_id)
            )
        shared = db.execute(
            "SELECT COUNT(*) FROM checkpoints WHERE path = ? AND removed_at IS NULL AND id != ?",
            (path, checkpoint_id),
        ).fetchone()[0]
    if not uploaded or shared:
        return False
    return delete_upload(store.home, path)


# --- endpoints ---------------------------------------------------------------------------------


def record_probe(store: Store, url: str, report: Mapping[str, Any]) -> None:
    """Remember an endpoint and what its latest probe found."""
    now = now_iso()
    version = report.get("version")
    store.db.execute(
        "INSERT INTO endpoints (url, last_probe_json, version, created_at, probed_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(url) DO UPDATE SET "
        "last_probe_json = excluded.last_probe_json, version = excluded.version, "
        "probed_at = excluded.probed_at, stopped_at = NULL",
        (url, to_json(dict(report)), None if version is None else str(version), now, now),
    )


def mark_endpoint_stopped(store: Store, url: str) -> None:
    """Remember that an endpoint is gone (its runs' URLs are dead) until it answers a probe."""
    now = now_iso()
    store.db.execute(
        "INSERT INTO endpoints (url, created_at, stopped_at) VALUES (?, ?, ?) "
        "ON CONFLICT(url) DO UPDATE SET stopped_at = excluded.stopped_at",
        (url, now, now),
    )


def get_endpoint(store: Store, url: str) -> dict | None:
    """One endpoint with its last probe parsed (`last_probe`)."""
    return _one(store, "SELECT * FROM endpoints WHERE url = ?", (url,))


def list_endpoints(store: Store) -> list[dict]:
    """Endpoints, most recently probed first (without the probe body)."""
    rows = store.db.query(
        "SELECT url, version, created_at, probed_at, stopped_at FROM endpoints "
        "ORDER BY COALESCE(probed_at, created_at) DESC"
    )
    return [dict(r) for r in rows]


# --- runs --------------------------------------------------------------------------------------

_RUN_JOIN = (
    ", checkpoints.name AS checkpoint_name, checkpoints.path AS checkpoint_path, "
    "(checkpoints.removed_at IS NOT NULL) AS checkpoint_removed, "
    "endpoints.stopped_at AS endpoint_stopped_at "
    "FROM runs LEFT JOIN checkpoints ON checkpoints.id = runs.checkpoint_id "
    "LEFT JOIN endpoints ON endpoints.url = runs.endpoint_url"
)
_RUN_SELECT = "SELECT runs.*" + _RUN_JOIN
# The Runs page lists summaries: everything but the diagnosis itself, with its verdict
# (`verdict`, Diagnosis.verdict()), the rule ids of the run's findings in order (`finding_ids`)
# and its endpoint's server info (`server_info`: whether a demo double's modelled cost made its
# tok/s).
_RUN_LIST_SELECT = (
    "SELECT "
    + ", ".join(f"runs.{c}" for c in RUN_COLUMNS if c != "diagnosis_json")
    + ", json_extract(runs.diagnosis_json, '$.verdict') AS verdict_json, "
    "(SELECT group_concat(rule_id, ', ') FROM "
    "(SELECT rule_id FROM findings WHERE findings.run_id = runs.id ORDER BY position)) "
    "AS finding_ids, "
    "json_extract(runs.diagnosis_json, '$.server.server_info') AS server_info_json, "
    "(SELECT placement_json FROM jobs WHERE jobs.run_id = runs.id "
    "AND placement_json IS NOT NULL ORDER BY jobs.id DESC LIMIT 1) AS placement_json" + _RUN_JOIN
)


def create_run(
    store: Store,
    checkpoint_id: int | None,
    endpoint_url: str | None,
    baseline_url: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> int:
    """Create a run (status 'queued'); return its id."""
    with store.transaction() as db:
        return insert_row(
            db,
            "runs",
            {
                "created_at": now_iso(),
                "status": "queued",
                "checkpoint_id": checkpoint_id,
                "endpoint_url": endpoint_url,
                "baseline_url": baseline_url,
                "options_json": to_json(dict(options or {})),
            },
        )


def get_run(store: Store, run_id: int) -> dict | None:
    """One run with `options` parsed, its checkpoint's name/path/removed flag and when its
    endpoint was marked stopped (`endpoint_stopped_at`, None while it may be up)."""
    return _one(store, f"{_RUN_SELECT} WHERE runs.id = ?", (run_id,))


def recent_timings(store: Store, limit: int = 10) -> list[tuple[dict, dict]]:
    """(timings, options) of the latest succeeded diagnoses that recorded stage timings."""
    rows = store.db.query(
        "SELECT json_extract(diagnosis_json, '$.timings') AS timings, options_json FROM runs "
        "WHERE status = 'succeeded' AND json_extract(diagnosis_json, '$.timings') IS NOT NULL "
        "ORDER BY id DESC LIMIT ?",
        (limit,),
    )
    return [(json.loads(r["timings"]), json.loads(r["options_json"] or "{}")) for r in rows]


def update_run(store: Store, run_id: int, **fields: Any) -> None:
    """Set run columns (`options=` is stored as options_json); unknown names raise ValueError."""
    if "options" in fields:
        fields["options_json"] = to_json(dict(fields.pop("options") or {}))
    bad = sorted(k for k in fields if k not in RUN_COLUMNS or k == "id")
    if bad:
        raise ValueError(f"not run columns: {', '.join(bad)}")
    if not fields:
        return
    assignments = ", ".join(f"[{k}] = ?" for k in fields)
    cur = store.db.execute(
        f"UPDATE runs SET {assignments} WHERE id = ?", (*fields.values(), run_id)
    )
    if cur.rowcount == 0:
        raise InputError(f"no run {run_id}")


def _run_filter(status: str | None, search: str | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if status:
        clauses.append("runs.status = ?")
        params.append(status)
    if search and search.strip():
        text = search.strip()
        like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        cols = (
            "checkpoints.name",
            "checkpoints.path",
            "runs.endpoint_url",
            "runs.baseline_url",
            "runs.status",
            "runs.engine",
        )
        ors = [f"{c} LIKE ? ESCAPE '\\'" for c in cols]
        params.extend([like] * len(cols))
        # Every finding of the run, by rule id or title (not only the worst one).
        ors.append(
            "EXISTS (SELECT 1 FROM findings WHERE findings.run_id = runs.id AND "
            "(findings.rule_id LIKE ? ESCAPE '\\' OR findings.title LIKE ? ESCAPE '\\'))"
        )
        params.extend([like, like])
        run_id = ascii_int(text.lstrip("#"))
        if run_id is not None:
            ors.append("runs.id = ?")
            params.append(run_id)
        clauses.append("(" + " OR ".join(ors) + ")")
    where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
    return where, params


def list_runs(
    store: Store,
    limit: int = 50,
    offset: int = 0,
    status: str | None = None,
    search: str | None = None,
) -> list[dict]:
    """One page of runs, newest first, optionally by status and a search text (or a run id)."""
    where, params = _run_filter(status, search)
    sql = f"{_RUN_LIST_SELECT}{where} ORDER BY runs.created_at DESC, runs.id DESC LIMIT ? OFFSET ?"
    rows = store.db.query(sql, (*params, int(limit), int(offset)))
    return [decode_row(r) for r in rows]


def checkpoint_runs(store: Store, checkpoint_id: int, limit: int = 20) -> list[dict]:
    """The runs that used a checkpoint, newest first (summaries, like `list_runs`)."""
    rows = store.db.query(
        f"{_RUN_LIST_SELECT} WHERE runs.checkpoint_id = ? "
        "ORDER BY runs.created_at DESC, runs.id DESC LIMIT ?",
        (checkpoint_id, int(limit)),
    )
    return [decode_row(r) for r in rows]


def count_checkpoint_runs(store: Store, checkpoint_id: int) -> int:
    """How many runs used a checkpoint."""
    row = store.db.execute(
        "SELECT COUNT(*) FROM runs WHERE checkpoint_id = ?", (checkpoint_id,)
    ).fetchone()
    return int(row[0])


def runs_fixed_by(store: Store, run_id: int) -> list[int]:
    """The runs whose fix this run applies (their options' "demo_fixed_run" names it)."""
    rows = store.db.query(
        "SELECT id FROM runs WHERE json_extract(options_json, '$.demo_fixed_run') = ? ORDER BY id",
        (run_id,),
    )
    return [int(r["id"]) for r in rows]


def count_runs(store: Store, status: str | None = None, search: str | None = None) -> int:
    """How many runs `list_runs` pages through with the same filters."""
    where, params = _run_filter(status, search)
    join = " LEFT JOIN checkpoints ON checkpoints.id = runs.checkpoint_id" if search else ""
    row = store.db.execute(f"SELECT COUNT(*) FROM runs{join}{where}", params).fetchone()
    return int(row[0])


# --- results of a run --------------------------------------------------------------------------


def save_findings(
    store: Store, run_id: int, findings: Iterable[Any], update_headline: bool = True
) -> None:
    """Replace a run's findings (findings.Finding, or dicts with rule_id/id, severity, title...).

    With `update_headline` the run's worst_severity / worst_finding_title follow them.
    """
    rows: list[dict[str, Any]] = [
        {
            "run_id": run_id,
            "rule_id": _finding_id(f),
            "severity": str(_field(f, "severity")),
            "title": str(_field(f, "title")),
            "evidence": _text(_field(f, "evidence")),
            "fix": _text(_field(f, "fix")),
            "position": i,
        }
        for i, f in enumerate(findings)
    ]
    worst = min(
        rows,
        key=lambda r: (-severity_rank(r["severity"]), r["position"]),
        default=None,
    )
    with store.transaction() as db:
        db.execute("DELETE FROM findings WHERE run_id = ?", (run_id,))
        if rows:
            db.table("findings").insert_all(rows)
        if update_headline:
            db.execute(
                "UPDATE runs SET worst_severity = ?, worst_finding_title = ? WHERE id = ?",
                (worst and worst["severity"], worst and worst["title"], run_id),
            )


def _finding_id(finding: Any) -> str:
    rule_id = _field(finding, "rule_id") or _field(finding, "id")
    if not rule_id:
        raise ValueError(f"a finding without a rule id: {finding!r}")
    return str(rule_id)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return to_json(value)


def get_findings(store: Store, run_id: int) -> list[dict]:
    """A run's findings in the order saved."""
    rows = store.db.query(
        "SELECT rule_id, severity, title, evidence, fix, position FROM findings "
        "WHERE run_id = ? ORDER BY position",
        (run_id,),
    )
    return [dict(r) for r in rows]
