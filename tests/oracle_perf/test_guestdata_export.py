"""``ptexport host.data --db DB --guest-data guest.data,PID,OFFSET[,SCALE]`` writes the database that
``ptexport injected.data --db DB`` writes (injected.data: ``perf inject --guest-data``'s output): every
table row for row (machines, threads, comms, dsos, symbols, samples with machine_pid/vcpu, calls,
context switches, vcpus, vm_exits ...). Only where the files lie differs: the kernel dsos' long names
are kcore paths (host.data/kcore_dir/kcore and guest.data/kcore_dir/kcore against inj.data/kcore_dir/
kcore and inj.data/kcore_dir__PID/kcore, the copies perf inject and the test made), and the
schema_version / ptexport_migrations rows carry the time they were written.

A bad --guest-data leaves no database (and no temporary file) behind.
"""

from __future__ import annotations

import sqlite3

import pytest

from guestdatatest import make, run
from ptxtest import needs_perf

_STAMPED = {"schema_version", "ptexport_migrations"}


def _tables(db) -> dict[str, list[tuple]]:
    con = sqlite3.connect(db)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        out = {}
        for name in names:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({name})")]
            if name in _STAMPED:
                cols = [c for c in cols if not any(w in c for w in ("time", "date", "applied", "created"))]
            out[name] = [tuple(cols)] + con.execute(f"SELECT {', '.join(cols)} FROM {name} ORDER BY rowid").fetchall()
        return out
    finally:
        con.close()


@pytest.mark.slow
@needs_perf
@pytest.mark.parametrize("name", ["mixed", "kernel", "scale2", "vcpus3"])
def test_export_equals_injected(tmp_path, name):
    t = make(tmp_path, name)
    ours, theirs = tmp_path / "ours.db", tmp_path / "inj.db"
    rc, text = run([t.host, "--db", ours, "-q", "--guest-data", t.spec])
    assert rc == 0, text
    rc, text = run([t.inj, "--db", theirs, "-q"])
    assert rc == 0, text
    a, b = _tables(ours), _tables(theirs)
    # kernel dsos' long names are their kcore paths: the host's and the guest's copies in inj.data, the
    # originals here
    paths = ((f"{t.inj}/kcore_dir__{t.pid}/", f"{t.guest}/kcore_dir/"), (f"{t.inj}/kcore_dir/", f"{t.host}/kcore_dir/"))

    def moved(v):
        for old, new in paths:
            v = v.replace(old, new) if isinstance(v, str) else v
        return v

    b["dsos"] = [tuple(moved(v) for v in row) for row in b["dsos"]]
    assert a.keys() == b.keys()
    for table in a:
        assert a[table] == b[table], table
    # the guest is there: its machine, VCPUs, threads and samples
    con = sqlite3.connect(ours)
    try:
        assert con.execute("SELECT pid FROM machines WHERE id > 0 ORDER BY id").fetchall() == [(-1,), (t.pid,)]
        nv = 3 if name == "vcpus3" else 2
        vcpus = con.execute("SELECT machine_id, vcpu FROM vcpus WHERE vcpu >= 0 ORDER BY vcpu").fetchall()
        assert [v for _m, v in vcpus] == list(range(nv))
        got = con.execute("SELECT DISTINCT machine_pid, vcpu FROM samples WHERE machine_pid > 0 "
                          "ORDER BY vcpu").fetchall()
        assert got == [(t.pid, v) for v in range(nv)]
        assert con.execute("SELECT COUNT(*) FROM threads WHERE machine_id = 2").fetchone()[0] > 1
    finally:
        con.close()


@needs_perf
def test_bad_guest_data_leaves_no_database(tmp_path, capsys):
    t = make(tmp_path, "user", branches=1000)
    (tmp_path / "text.data").write_text("no perf.data\n")
    out = tmp_path / "out"
    out.mkdir()
    for spec, rc in ((f"{tmp_path / 'missing.data'},{t.pid}", 2), (f"{t.guest},{t.pid + 7}", 2),
                     (f"{t.guest},{t.pid},0x1,nan", 2), (f"{tmp_path / 'text.data'},{t.pid}", 1)):
        got, _ = run([t.host, "--db", out / "x.db", "-q", "--guest-data", spec])
        err = capsys.readouterr().err
        assert got == rc and err.startswith("ptexport: error: ") and "Traceback" not in err, (spec, err)
        assert list(out.iterdir()) == [], spec


@needs_perf
def test_export_jobs_workers(tmp_path, monkeypatch):
    """export --jobs 3 (a decoding child whose 2 workers decode PSB segments) with --guest-data: the same tables."""
    from ptexport.session import parallel
    t = make(tmp_path, "mixed", branches=8000)
    monkeypatch.setattr(parallel, "MIN_SEGMENT_BYTES", 1 << 12)
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 1 << 12)
    ours, theirs = tmp_path / "ours.db", tmp_path / "inj.db"
    assert run([t.host, "--db", ours, "-q", "--jobs", "3", "--guest-data", t.spec])[0] == 0
    assert run([t.inj, "--db", theirs, "-q"])[0] == 0
    a, b = _tables(ours), _tables(theirs)
    for table in a:
        if table != "dsos":  # kcore paths (see test_export_equals_injected)
            assert a[table] == b[table], table
