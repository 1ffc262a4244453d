"""The store on real SQLite files: migrations, WAL, concurrency, queries, files in the home."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from eagle3dash.errors import InputError
from eagle3dash.jobs import cancel_job, job_status, list_jobs, submit_job
from eagle3dash.store import (
    SCHEMA_VERSION,
    SchemaTooNewError,
    Store,
    UnsafePathError,
    add_checkpoint,
    capture_dir,
    content_address,
    count_runs,
    create_run,
    get_checkpoint,
    get_endpoint,
    get_findings,
    get_run,
    list_checkpoints,
    list_endpoints,
    list_runs,
    open_store,
    record_probe,
    remove_checkpoint,
    safe_join,
    save_findings,
    save_upload,
    schema_version,
    to_json,
    update_run,
)

ROOT = Path(__file__).resolve().parent.parent

# Schema version 1 exactly as it shipped: a database an older eagle3dash left behind.
V1_SCHEMA = """
CREATE TABLE migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL);
INSERT INTO migrations VALUES (1, 'initial schema', '2026-01-01T00:00:00.000000Z');
CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, path TEXT NOT NULL, sha256 TEXT, name TEXT,
    format TEXT, report_json TEXT, created_at TEXT NOT NULL, uploaded INTEGER NOT NULL DEFAULT 0);
CREATE TABLE endpoints (url TEXT PRIMARY KEY, last_probe_json TEXT, version TEXT,
    created_at TEXT NOT NULL);
CREATE TABLE runs (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued', checkpoint_id INTEGER REFERENCES checkpoints(id),
    endpoint_url TEXT, baseline_url TEXT, options_json TEXT, measured_accept_length REAL,
    sim_accept_training REAL, sim_accept_serving REAL, tok_s REAL, baseline_tok_s REAL,
    speedup REAL, worst_severity TEXT, worst_finding_title TEXT, error TEXT);
CREATE INDEX runs_created_at ON runs(created_at DESC, id DESC);
CREATE INDEX runs_status ON runs(status, created_at DESC, id DESC);
CREATE TABLE jobs (id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'queued'
    CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    params_json TEXT, result_json TEXT, progress REAL NOT NULL DEFAULT 0, message TEXT,
    created_at TEXT NOT NULL, heartbeat_at TEXT, started_at TEXT, finished_at TEXT,
    log_path TEXT, needs_gpu INTEGER NOT NULL DEFAULT 0, worker_pid INTEGER, error TEXT);
CREATE INDEX jobs_run_id ON jobs(run_id);
CREATE INDEX jobs_status ON jobs(status);
CREATE TABLE layouts (id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, side TEXT NOT NULL,
    slot INTEGER NOT NULL, depth INTEGER, post_norm INTEGER NOT NULL DEFAULT 0, description TEXT);
CREATE INDEX layouts_run_id ON layouts(run_id);
CREATE TABLE metrics (id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, source TEXT NOT NULL,
    name TEXT NOT NULL, step INTEGER, request INTEGER, value REAL);
CREATE INDEX metrics_run_id ON metrics(run_id, source, name);
CREATE TABLE findings (id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, rule_id TEXT NOT NULL,
    severity TEXT NOT NULL, title TEXT NOT NULL, evidence TEXT, fix TEXT,
    position INTEGER NOT NULL DEFAULT 0);
CREATE INDEX findings_run_id ON findings(run_id);
CREATE TABLE bench_results (id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, role TEXT NOT NULL,
    result_json TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE UNIQUE INDEX bench_results_run_role ON bench_results(run_id, role);
"""

V1_DATA = """
INSERT INTO checkpoints (id, path, name, format, created_at, uploaded)
    VALUES (1, '/data/drafts/llama-eagle3', 'llama-eagle3', 'specforge', '2026-01-02T00:00:00Z', 0);
INSERT INTO endpoints VALUES ('http://gpubox:30000', '{"version": "0.5.20"}', '0.5.20',
    '2026-01-02T00:00:00Z');
INSERT INTO runs (id, created_at, status, checkpoint_id, endpoint_url, options_json,
    measured_accept_length, tok_s, worst_severity, worst_finding_title)
    VALUES (7, '2026-01-02T00:00:01Z', 'succeeded', 1, 'http://gpubox:30000', '{"steps": 5}',
    1.4, 88.5, 'critical', 'Every slot is shifted by one');
INSERT INTO jobs (id, run_id, kind, status, params_json, result_json, progress, created_at)
    VALUES (3, 7, 'diagnose', 'succeeded', '{}', '{"ok": true}', 1.0, '2026-01-02T00:00:01Z');
INSERT INTO layouts (run_id, side, slot, depth, description)
    VALUES (7, 'training', 0, 0, 'Tap(0)'), (7, 'serving', 0, 1, 'Tap(1)');
INSERT INTO metrics (run_id, source, name, step, value) VALUES (7, 'training', 'accuracy', 0, 0.8);
INSERT INTO bench_results (run_id, role, result_json, created_at)
    VALUES (7, 'spec', '{"tok_s": 88.5}', '2026-01-02T00:00:01Z');
INSERT INTO findings (run_id, rule_id, severity, title, position)
    VALUES (7, 'layout-shift', 'critical', 'Every slot is shifted by one', 0);
"""


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = open_store(tmp_path / "home")
    yield s
    s.close()


# --- opening and migrating ---------------------------------------------------------------------


def test_open_creates_the_home_in_wal_mode(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("EAGLE3DASH_HOME", str(tmp_path / "h"))
    with open_store() as s:
        assert s.home == (tmp_path / "h").resolve()
        for sub in ("checkpoints", "captures", "logs"):
            assert (s.home / sub).is_dir()
        assert s.db_path == s.home / "eagle3dash.db"
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.db.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000
        assert s.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert schema_version(s.db) == SCHEMA_VERSION
        run = create_run(s, None, "http://x")
        assert capture_dir(s.home, run) == s.home / "captures" / str(run)
    with open_store(tmp_path / "h") as again:  # reopening applies nothing, keeps data
        assert get_run(again, run)["endpoint_url"] == "http://x"
        rows = again.db.execute("SELECT version FROM migrations ORDER BY version").fetchall()
        assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_a_version_1_database_is_upgraded_and_keeps_its_data(tmp_path: Path) -> None:
    home = tmp_path / "old"
    home.mkdir()
    conn = sqlite3.connect(home / "eagle3dash.db")
    conn.executescript(V1_SCHEMA + V1_DATA)
    conn.close()

    with open_store(home) as s:
        assert schema_version(s.db) == SCHEMA_VERSION > 1
        run = get_run(s, 7)
        assert run["status"] == "succeeded" and run["tok_s"] == 88.5
        assert run["options"] == {"steps": 5}
        assert run["checkpoint_name"] == "llama-eagle3" and run["checkpoint_removed"] is False
        assert run["diagnosis"] is None  # stored before the diagnosis JSON existed
        # the old per-run tables are no longer written or read, but their rows stay
        assert s.db.execute(
            "SELECT run_id, side, slot, depth, post_norm, description FROM layouts ORDER BY id"
        ).fetchall() == [(7, "training", 0, 0, 0, "Tap(0)"), (7, "serving", 0, 1, 0, "Tap(1)")]
        assert s.db.execute(
            "SELECT run_id, source, name, step, request, value FROM metrics"
        ).fetchall() == [(7, "training", "accuracy", 0, None, 0.8)]
        assert s.db.execute("SELECT run_id, role, result_json FROM bench_results").fetchall() == [
            (7, "spec", '{"tok_s": 88.5}')
        ]
        assert get_findings(s, 7)[0]["rule_id"] == "layout-shift"
        assert get_endpoint(s, "http://gpubox:30000")["version"] == "0.5.20"
        old_job = job_status(s, 3)
        assert old_job["result"] == {"ok": True} and old_job["cancel_requested"] is False
        # the new columns work on old rows
        assert remove_checkpoint(s, 1) is False  # a user's path: the row is marked only
        assert get_run(s, 7)["checkpoint_removed"] is True
        new_job = submit_job(s, "diagnose", {}, run_id=7)
        assert cancel_job(s, new_job) == "cancelled"
        assert [j["id"] for j in list_jobs(s, 7)] == [3, new_job]
        assert list_runs(s, 10, 0)[0]["id"] == 7


def test_a_newer_database_is_refused(tmp_path: Path) -> None:
    with open_store(tmp_path / "h") as s:
        s.db.execute("INSERT INTO migrations VALUES (?, 'from the future', 'x')", (99,))
    with pytest.raises(SchemaTooNewError, match="schema version 99"):
        open_store(tmp_path / "h")


def test_concurrent_first_opens_migrate_once(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait()
            open_store(home).close()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    with open_store(home) as s:
        assert s.db.execute("SELECT COUNT(*) FROM migrations").fetchone()[0] == SCHEMA_VERSION


# --- concurrency -------------------------------------------------------------------------------


def test_a_writer_waits_for_the_lock_instead_of_failing(store: Store) -> None:
    run = create_run(store, None, "http://x")
    holder = sqlite3.connect(store.db_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE runs SET status = 'running' WHERE id = ?", (run,))
    timer = threading.Timer(0.4, lambda: holder.execute("COMMIT"))
    timer.start()
    t0 = time.monotonic()
    update_run(store, run, tok_s=12.0)  # blocks until the other writer commits
    waited = time.monotonic() - t0
    timer.join()
    holder.close()
    assert waited >= 0.3
    assert get_run(store, run)["status"] == "running" and get_run(store, run)["tok_s"] == 12.0


WRITER = """
import sys
from eagle3dash.store import create_run, open_store, save_findings, to_json, update_run
s = open_store(sys.argv[1])
for i in range(int(sys.argv[2])):
    run = create_run(s, None, "http://writer")
    update_run(s, run, status="running", tok_s=float(i), diagnosis_json=to_json({"i": i}))
    save_findings(s, run, [{"rule_id": f"r{k}", "severity": "info", "title": "t"}
                           for k in range(5)])
print("ok")
"""


def test_processes_and_threads_write_at_once_without_lock_errors(store: Store) -> None:
    n = 300
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store.home), str(n)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    errors: list[BaseException] = []

    def thread_writer() -> None:
        try:
            for _ in range(n):
                run = create_run(store, None, "http://thread")
                save_findings(store, run, [{"rule_id": "r", "severity": "info", "title": "t"}])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=thread_writer)
    thread.start()
    for _ in range(n):  # and this thread too, through the same Store
        record_probe(store, "http://main", {"version": "0.5.23"})
        list_runs(store, 20, 0)
    thread.join(60)
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.strip() == "ok"
    assert errors == []
    assert count_runs(store) == 3 * n  # two processes and one thread
    assert count_runs(store, status="running") == 2 * n
    assert (
        store.db.execute("SELECT COUNT(*) FROM runs WHERE diagnosis_json IS NOT NULL").fetchone()[0]
        == 2 * n
    )
    assert store.db.execute("SELECT COUNT(*) FROM findings").fetchone()[0] == 2 * n * 5 + n


READER = """
import json, sys
from eagle3dash.store import get_findings, get_run, list_runs, open_store
s = open_store(sys.argv[1])
runs = [[r["id"], r["status"], get_run(s, r["id"])["diagnosis"]] for r in list_runs(s)]
findings = [[r["id"], [f["rule_id"] for f in get_findings(s, r["id"])]] for r in list_runs(s)]
print(json.dumps({"runs": runs, "findings": findings}))
"""


def test_readers_are_not_blocked_by_a_long_write_transaction(store: Store) -> None:
    """WAL: processes read the last committed state while a big write transaction is open.

    The writer's page cache is made small so that its transaction spills pages to the database
    file, as a large one does: without WAL that takes the exclusive lock and every reader waits
    for the commit (the busy timeout, then "database is locked").
    """
    first, second, third = (create_run(store, None, f"http://r{i}") for i in range(3))
    update_run(store, first, status="succeeded", diagnosis_json=to_json({"verdict": ["ok"]}))
    save_findings(store, first, [{"rule_id": "layout-shift", "severity": "critical", "title": "t"}])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    big = {"verdict": ["big"], "requests": [{"request": i, "tok_s": i / 3} for i in range(5000)]}
    with store.transaction() as db:
        db.execute("PRAGMA cache_size = 8")
        create_run(store, None, "http://uncommitted")
        update_run(store, second, status="succeeded", diagnosis_json=to_json(big))
        many = [{"rule_id": f"r{i}", "severity": "info", "title": "t"} for i in range(5000)]
        save_findings(store, second, many)
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, str(store.home)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        seen = []
        for p in readers:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            seen.append(json.loads(out))
        assert db.execute("SELECT COUNT(*) FROM findings").fetchone()[0] == 5001  # still open
    committed = {
        "runs": [
            [third, "queued", None],
            [second, "queued", None],
            [first, "succeeded", {"verdict": ["ok"]}],
        ],
        "findings": [[third, []], [second, []], [first, ["layout-shift"]]],
    }
    assert seen == [committed] * 4
    assert count_runs(store) == 4
    assert get_run(store, second)["diagnosis"] == big
    assert len(get_findings(store, second)) == 5000


def test_each_thread_gets_its_own_connection(store: Store) -> None:
    here = store.db
    there: list = []
    t = threading.Thread(target=lambda: there.append(store.db))
    t.start()
    t.join()
    assert there[0] is not here and there[0].conn is not here.conn
    assert store.db is here


# --- runs --------------------------------------------------------------------------------------


def _make_runs(store: Store, n: int) -> list[int]:
    a = add_checkpoint(store, "/models/alpha-draft", format="specforge")
    b = add_checkpoint(store, "/models/beta_100%", name="beta_100%")
    statuses = ["succeeded", "failed", "running"]
    ids = []
    for i in range(n):
        run = create_run(store, a if i % 2 else b, f"http://box{i % 5}:30000", options={"i": i})
        update_run(store, run, status=statuses[i % 3], speedup=1.0 + i / 100)
        ids.append(run)
    return ids


def test_list_runs_pages_filters_and_searches(store: Store) -> None:
    ids = _make_runs(store, 300)
    newest_first = ids[::-1]
    assert count_runs(store) == 300
    pages = [list_runs(store, limit=50, offset=o) for o in range(0, 300, 50)]
    assert [r["id"] for page in pages for r in page] == newest_first
    assert list_runs(store, limit=50, offset=300) == []

    assert count_runs(store, status="failed") == 100
    failed = list_runs(store, limit=1000, offset=0, status="failed")
    assert {r["status"] for r in failed} == {"failed"} and len(failed) == 100
    assert [r["id"] for r in list_runs(store, 10, 20, status="failed")] == [
        r["id"] for r in failed[20:30]
    ]

    assert count_runs(store, search="alpha") == 150  # checkpoint name
    assert count_runs(store, search="box3") == 60  # endpoint
    assert count_runs(store, search="box3", status="running") == 20
    assert count_runs(store, search="100%") == 150  # % is literal, not a wildcard
    assert count_runs(store, search="a%") == 0  # (as a wildcard it would match every run)
    assert count_runs(store, search="a_1") == 150 and count_runs(store, search="a_p") == 0
    assert [r["id"] for r in list_runs(store, 10, 0, search=f"#{ids[42]}")] == [ids[42]]
    row = list_runs(store, 1, 0, search="alpha")[0]
    assert row["checkpoint_name"] == "alpha-draft" and row["checkpoint_path"].endswith(
        "alpha-draft"
    )
    assert row["options"]["i"] == 299 and row["speedup"] == pytest.approx(3.99)


def test_search_covers_every_finding_and_rows_carry_the_verdict(store: Store) -> None:
    slow, mixed, clean = (create_run(store, None, f"http://gpu{i}:30000") for i in range(3))
    save_findings(
        store,
        mixed,
        [
            {"rule_id": "layout-mismatch", "severity": "critical", "title": "Layers differ."},
            {"rule_id": "slower-than-baseline", "severity": "critical", "title": "It is slower."},
        ],
    )
    save_findings(
        store,
        slow,
        [{"rule_id": "slower-than-baseline", "severity": "critical", "title": "It is slower."}],
    )
    verdict = {"root_cause": {"title": "Layers differ."}, "problems_found": True}
    update_run(store, mixed, diagnosis_json=json.dumps({"verdict": verdict, "findings": []}))

    def found(text: str) -> list[int]:
        return [r["id"] for r in list_runs(store, 10, 0, search=text)]

    # A rule id or a title of any finding finds the run, not only its worst finding's title.
    assert found("layout-mismatch") == [mixed]
    assert found("slower") == [mixed, slow]
    assert found("LAYERS DIFFER") == [mixed] and count_runs(store, search="slower") == 2
    assert found("gpu2") == [clean]  # endpoints as before
    rows = {r["id"]: r for r in list_runs(store, 10, 0)}
    assert rows[mixed]["verdict"] == verdict  # the stored verdict, not recomputed
    assert rows[mixed]["finding_ids"] == "layout-mismatch, slower-than-baseline"  # in order
    assert rows[clean]["verdict"] is None and rows[clean]["finding_ids"] is None


def test_list_runs_stays_fast_with_10000_runs(store: Store) -> None:
    ck = add_checkpoint(store, "/models/draft")
    with store.transaction() as db:
        db.conn.executemany(
            "INSERT INTO runs (created_at, status, checkpoint_id, endpoint_url) VALUES (?,?,?,?)",
            (
                (f"2026-01-01T00:{i // 600:02d}:{i // 10 % 60:02d}.{i:06d}Z", "succeeded", ck, "u")
                for i in range(10_000)
            ),
        )
    plan = store.db.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM runs ORDER BY created_at DESC, id DESC LIMIT 50"
    ).fetchall()
    assert "runs_created_at" in str(plan)
    page = list_runs(store, limit=50, offset=9_900)
    total = count_runs(store)
    found = count_runs(store, search="draft")
    assert len(page) == 50 and total == 10_000 and found == 10_000
    assert page[-1]["created_at"] < page[0]["created_at"]


def test_update_and_get_run(store: Store) -> None:
    run = create_run(store, None, "http://e", "http://b", {"num_prompts": 4})
    update_run(store, run, options={"num_prompts": 8}, measured_accept_length=2.5)
    got = get_run(store, run)
    assert got["options"] == {"num_prompts": 8} and got["baseline_url"] == "http://b"
    assert got["measured_accept_length"] == 2.5 and got["checkpoint_name"] is None
    with pytest.raises(ValueError, match="not run columns: nope"):
        update_run(store, run, nope=1)
    with pytest.raises(ValueError):
        update_run(store, run, id=5)
    with pytest.raises(InputError):
        update_run(store, 9999, status="failed")
    assert get_run(store, 9999) is None


# --- results -----------------------------------------------------------------------------------


def test_findings_and_probes(store: Store) -> None:
    run = create_run(store, None, "http://e")
    findings = [
        {"rule_id": "aux-missing", "severity": "warning", "title": "ids not nested"},
        {
            "rule_id": "layout-shift",
            "severity": "critical",
            "title": "Every slot is shifted by one",
            "evidence": {"training": [0, 3, 31], "serving": [4, 32, 60]},
            "fix": "set eagle_config.eagle_aux_hidden_state_layer_ids",
        },
    ]
    save_findings(store, run, findings)
    got = get_findings(store, run)
    assert [f["rule_id"] for f in got] == ["aux-missing", "layout-shift"]
    assert json.loads(got[1]["evidence"])["serving"] == [4, 32, 60]
    assert get_run(store, run)["worst_severity"] == "critical"
    assert get_run(store, run)["worst_finding_title"] == "Every slot is shifted by one"
    save_findings(store, run, [])
    assert get_findings(store, run) == [] and get_run(store, run)["worst_severity"] is None

    record_probe(store, "http://e", {"version": "0.5.22", "healthy": True})
    first = get_endpoint(store, "http://e")
    record_probe(store, "http://e", {"version": "0.5.23", "healthy": True})
    ep = get_endpoint(store, "http://e")
    assert ep["version"] == "0.5.23" and ep["last_probe"]["healthy"] is True
    assert ep["created_at"] == first["created_at"] and ep["probed_at"] >= first["probed_at"]
    assert [e["url"] for e in list_endpoints(store)] == ["http://e"]


# --- checkpoints and files ---------------------------------------------------------------------


def test_add_and_list_checkpoints(store: Store) -> None:
    a = add_checkpoint(store, "/m/a", format="speculators", report={"num_aux": 3})
    assert add_checkpoint(store, "/m/a", name="renamed") == a  # same live path: same row
    b = add_checkpoint(store, "/m/b")
    ck = get_checkpoint(store, a)
    assert ck.name == "renamed" and ck.format == "speculators"
    assert ck.report == {"num_aux": 3} and ck.uploaded is False and ck.removed is False
    assert [c.id for c in list_checkpoints(store)] == [b, a]
    assert get_checkpoint(store, 999) is None
    with pytest.raises(InputError):
        remove_checkpoint(store, 999)


def test_remove_checkpoint_deletes_only_uploads_inside_the_home(
    store: Store, tmp_path: Path
) -> None:
    files = {"config.json": b"{}", "model.safetensors": io.BytesIO(b"x")}
    sha, folder = save_upload(store.home, files)
    assert folder == store.home / "checkpoints" / sha and (folder / "config.json").is_file()
    uploaded = add_checkpoint(store, folder, sha256=sha, uploaded=True)
    run = create_run(store, uploaded, "http://e")

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")
    own = add_checkpoint(store, mine, uploaded=True)  # even if wrongly flagged as an upload
    escape = add_checkpoint(store, store.home / "checkpoints" / ".." / ".." / "mine", uploaded=True)
    link = store.home / "checkpoints" / "link"
    link.symlink_to(mine, target_is_directory=True)
    linked = add_checkpoint(store, link, uploaded=True)

    assert remove_checkpoint(store, uploaded) is True
    assert not folder.exists()
    assert (store.home / "checkpoints").is_dir()
    for ck in (own, escape, linked):
        assert remove_checkpoint(store, ck) is False
    assert (mine / "config.json").read_text() == "{}"
    assert link.is_symlink()

    assert list_checkpoints(store) == []
    assert len(list_checkpoints(store, include_removed=True)) == 4
    shown = get_run(store, run)
    assert shown["checkpoint_removed"] is True and shown["checkpoint_name"] == sha
    assert get_checkpoint(store, uploaded).removed is True
    assert remove_checkpoint(store, uploaded) is False  # again: nothing left to delete


def test_save_upload_is_content_addressed_and_refuses_traversal(store: Store) -> None:
    sha1, f1 = save_upload(store.home, {"config.json": b"{}", "model.safetensors": b"abc"})
    sha2, f2 = save_upload(store.home, {"model.safetensors": b"abc", "config.json": b"{}"})
    assert (sha1, f1) == (sha2, f2)  # same files, same folder
    sha3, _ = save_upload(store.home, {"config.json": b"{}", "weights.safetensors": b"abc"})
    assert sha3 != sha1  # names count
    for bad in ("../evil", "/etc/passwd", "a/../../evil"):
        with pytest.raises(UnsafePathError):
            save_upload(store.home, {bad: b"x"})
    assert sorted(p.name for p in (store.home / "checkpoints").iterdir()) == sorted({sha1, sha3})
    assert not (store.home / "evil").exists() and not (store.home.parent / "evil").exists()
    with pytest.raises(InputError):
        save_upload(store.home, {})


def test_content_address(tmp_path: Path) -> None:
    data = b"eagle" * 100_000
    f = tmp_path / "w.bin"
    f.write_bytes(data)
    expected = hashlib.sha256(data).hexdigest()
    assert content_address(f) == content_address(str(f)) == expected
    buf = io.BytesIO(b"head" + data)
    buf.seek(4)
    assert content_address(buf) == expected and buf.tell() == 4  # position kept

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    for d in (d1, d2):
        (d / "sub").mkdir(parents=True)
        (d / "config.json").write_text("{}")
        (d / "sub" / "x").write_bytes(b"1")
    assert content_address(d1) == content_address(d2)
    (d2 / "sub" / "x").rename(d2 / "sub" / "y")
    assert content_address(d1) != content_address(d2)


def test_safe_join_refuses_paths_out_of_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "captures" / "1").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (home / "out").symlink_to(outside, target_is_directory=True)
    (home / "in").symlink_to(home / "captures", target_is_directory=True)

    assert safe_join(home, "captures", "1", "shard.safetensors") == (
        home.resolve() / "captures" / "1" / "shard.safetensors"
    )
    assert safe_join(home, "captures/1") == home.resolve() / "captures" / "1"
    assert safe_join(home, "in", "1") == home.resolve() / "in" / "1"  # a link inside is fine
    assert safe_join(home) == home.resolve()
    for parts in (
        ("../x",),
        ("captures", "..", "..", "x"),
        ("captures/../../x",),
        ("/etc/passwd",),
        ("captures", "/etc/passwd"),
        ("out", "secret"),
        ("out",),
        ("",),
        ("a\\..\\b",),
        ("a\0b",),
    ):
        with pytest.raises(UnsafePathError):
            safe_join(home, *parts)


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_home_that_cannot_be_a_folder_is_one_clear_line(tmp_path, where) -> None:
    from eagle3dash.store import HomeError

    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    home = blocker if where == "file" else blocker / "home"
    with pytest.raises(HomeError, match="EAGLE3DASH_HOME"):
        open_store(home)
    out = subprocess.run(
        [sys.executable, "-m", "eagle3dash", "worker", "--once", "--home", str(home)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: the home {home}") and out.stderr.count("\n") == 1


def test_a_stopped_endpoint_shows_on_its_runs_until_it_answers_again(store: Store) -> None:
    from eagle3dash.store import mark_endpoint_stopped

    run = create_run(store, None, "http://127.0.0.1:40001", None, {"demo": "mismatched"})
    assert get_run(store, run)["endpoint_stopped_at"] is None
    mark_endpoint_stopped(store, "http://127.0.0.1:40001")  # never probed: the row is made
    stopped = get_run(store, run)["endpoint_stopped_at"]
    assert stopped and stopped.endswith("Z")
    assert list_runs(store)[0]["endpoint_stopped_at"] == stopped
    assert list_endpoints(store)[0]["stopped_at"] == stopped
    record_probe(store, "http://127.0.0.1:40001", {"version": "0.5.23"})
    assert get_run(store, run)["endpoint_stopped_at"] is None


def test_the_runs_of_a_checkpoint_newest_first(store: Store) -> None:
    from eagle3dash.store import checkpoint_runs, count_checkpoint_runs

    mine = add_checkpoint(store, "/d/mine", name="mine")
    other = add_checkpoint(store, "/d/other", name="other")
    runs = [create_run(store, ck, "http://x") for ck in (mine, other, mine, mine)]
    assert [r["id"] for r in checkpoint_runs(store, mine)] == [runs[3], runs[2], runs[0]]
    assert [r["id"] for r in checkpoint_runs(store, mine, limit=1)] == [runs[3]]
    assert checkpoint_runs(store, mine)[0]["checkpoint_name"] == "mine"
    assert (count_checkpoint_runs(store, mine), count_checkpoint_runs(store, other)) == (3, 1)
