"""Decoding on a dask cluster (``--scheduler``, session/cluster.py) gives the ``--jobs 1`` database.

One LocalCluster of 2 worker processes (1 thread each, loopback) serves the module; exports reach it
by its tcp:// address, as a real cluster's.  Segments are made tiny in this process (the coordinator
plans them; workers only get positions) so every trace is cut into many Dask tasks and every join
is exercised.  Each generator variant of the export tests (threads on two CPUs, per-thread, fork and
exec with corruption, overflows, power events and ptwrite, pipe mode, kcore), event trace and a VM
recording must give the same rows in every table, in SQLite and in PostgreSQL (decoded on the
cluster, written by this process).  A worker SIGKILLed while it decodes costs a retry, not a row;
a failed run leaves no database; an unreachable scheduler, a worker that cannot read the recording,
a bad option end in one typed error, never a traceback.  Without ``--scheduler`` dask is not imported.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest

from exporttest import EXPORT_VARIANTS, PG_BASE
from ptxtest import REPO
from ptexport.cli import main
from ptexport.dbexport.exporter import ExportConfig
from ptexport.errors import ClusterError, InputError, UsageError
from ptexport.samples.itrace import export_default, parse_itrace
from ptexport.session import cluster as C
from ptexport.session import parallel
from ptexport.session.export import export_trace

distributed = pytest.importorskip("distributed", reason="the cluster extra (pip install 'ptexport[cluster]')")

_VOLATILE = {("schema_version", "created"), ("ptexport_migrations", "applied")}
_BRANCHES = "8000"


def _local_cluster(scratch) -> "distributed.LocalCluster":
    """2 worker processes of 1 thread each on loopback, their scratch space (and the scheduler's) in
    ``scratch``, not in /tmp."""
    import dask

    with dask.config.set({"temporary-directory": str(scratch)}):
        return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                        dashboard_address=":0", silence_logs=logging.CRITICAL,
                                        local_directory=str(scratch))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A LocalCluster of 2 worker processes of 1 thread each, and a client to watch it."""
    lc = _local_cluster(tmp_path_factory.mktemp("dask"))
    client = distributed.Client(lc)
    yield lc.scheduler_address, client
    client.close()
    lc.close()


@pytest.fixture
def tiny(monkeypatch):
    """Segments of 1 KB from any trace size on: an 8000-branch trace is a dozen tasks or more."""
    monkeypatch.setattr(parallel, "MIN_SEGMENT_BYTES", 1)
    monkeypatch.setattr(parallel, "STREAM_SEGMENT_BYTES", 1024)


def _trace(synth_trace, name: str) -> str:
    """The variant with a PSB every 512 bytes at least (the segments' cuts)."""
    opts = EXPORT_VARIANTS[name]
    if "--psb-period" not in opts:
        opts = (*opts, "--psb-period", "512")
    d = synth_trace("--branches", _BRANCHES, "--seed", "5", *opts)
    return str(d) if "--kcore" in opts else str(d / "perf.data")  # the kcore form: a perf.data directory


def dump(path) -> dict[str, list[tuple]]:
    """Every table's rows in rowid order (creation timestamps blanked)."""
    con = sqlite3.connect(path)
    try:
        out = {}
        for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall():
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')]
            sel = ", ".join("NULL" if (t, c) in _VOLATILE else f'"{c}"' for c in cols)
            out[t] = con.execute(f'SELECT {sel} FROM "{t}" ORDER BY rowid').fetchall()
        return out
    finally:
        con.close()


def _config(itrace: str | None = None, **kw) -> ExportConfig:
    return ExportConfig(itrace=parse_itrace(itrace) if itrace else export_default(), force=True, **kw)


def _assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for t in want:
        assert got[t] == want[t], t
    assert want["samples"], "no samples: the comparison says nothing"


def _jobs1(path: str, tmp_path, itrace: str | None = None) -> dict:
    db = tmp_path / "jobs1.sqlite"
    export_trace(path, str(db), _config(itrace, jobs=1))
    return dump(db)


# ------------------------------------------------------------------ same rows


CASES = [(name, None) for name in EXPORT_VARIANTS] + [("threads-2cpus-cyc", "bepZ"), ("forkexec-corrupt", "bepi100"),
                                                      ("threads-2cpus-cyc", "bei7i")]


@pytest.mark.parametrize("name,itrace", CASES, ids=[n + (f"-{i}" if i else "") for n, i in CASES])
def test_cluster_gives_the_jobs1_sqlite_database(cluster, synth_trace, tmp_path, tiny, name, itrace):
    addr, _ = cluster
    path = _trace(synth_trace, name)
    want = _jobs1(path, tmp_path, itrace)
    db = tmp_path / "cluster.sqlite"
    s = export_trace(path, str(db), _config(itrace, scheduler=addr, cluster_trees=True))
    _assert_same(dump(db), want)
    assert s.cluster_workers == 2
    if itrace != "bei7i":  # instruction samples every N instructions are not cut: decoded by the coordinator
        assert s.cluster_units >= 4, s.cluster_units  # the trace really went through the cluster (i100: 100 ns)
    assert s.cluster_tree_steps >= 2, s.cluster_tree_steps  # the workers built the call tree (and its flush)


def test_event_trace_on_the_cluster(cluster, synth_trace, tmp_path, tiny):
    addr, _ = cluster
    path = str(synth_trace("--program", "threads", "--cpus", "2", "--preempt", "400", "--event-trace",
                           "--psb-period", "1024", "--branches", _BRANCHES, "--seed", "11") / "perf.data")
    want = _jobs1(path, tmp_path, "bepI")
    db = tmp_path / "cluster.sqlite"
    s = export_trace(path, str(db), _config("bepI", scheduler=addr))
    _assert_same(dump(db), want)
    assert s.cluster_units >= 4


@pytest.mark.slow
@pytest.mark.perf
def test_vm_recording_on_the_cluster(cluster, mixed, tmp_path, tiny):
    """A generated VM recording (guest kernel and user, two VCPUs on two host CPUs, perf inject's
    output): the cluster's database is the in-process one."""
    addr, _ = cluster
    vm, _theirs, _ours = mixed
    want = _jobs1(str(vm.data), tmp_path)
    db = tmp_path / "cluster.sqlite"
    s = export_trace(str(vm.data), str(db), _config(scheduler=addr, cluster_trees=True))
    _assert_same(dump(db), want)
    assert s.cluster_units >= 4
    assert want["vcpus"] and any(r[1] != -1 for r in want["machines"] if len(r) > 1)


# ------------------------------------------------------------------ PostgreSQL


def _pg_dump(url: str) -> dict[str, list[tuple]]:
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables WHERE "
                                             "table_schema = 'public' AND table_type = 'BASE TABLE'")]
        out = {}
        for t in sorted(tables):
            cols = [r[0] for r in conn.execute("SELECT column_name FROM information_schema.columns WHERE "
                                               "table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
                                               (t,))]
            sel = ", ".join("NULL" if (t, c) in _VOLATILE else f'"{c}"' for c in cols)
            order = ", ".join(str(i + 1) for i in range(len(cols)))
            out[t] = conn.execute(f'SELECT {sel} FROM "{t}" ORDER BY {order}').fetchall()
        return out


@pytest.fixture
def small_copies(monkeypatch):
    """The workers load 1500 rows a task, 2 tasks out at once: a trace of 8000 branches is a dozen loads
    or more, and the writer waits for the oldest at most of them."""
    monkeypatch.setattr(C, "COPY_ROWS", 1500)
    monkeypatch.setattr(C, "MAX_COPIES", 2)


@pytest.fixture
def pg_names(pg_admin):
    """Names of test databases (made on demand), dropped at the end with any temporary of them."""
    names: list[str] = []

    def make() -> str:
        names.append(f"ptx_cluster_{uuid.uuid4().hex[:10]}")
        return names[-1]

    yield make
    for n in names:
        for (db,) in _pg_databases(pg_admin, n):
            pg_admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _pg_databases(pg_admin, name: str) -> list[tuple[str]]:
    """``name`` and its temporaries, as they exist."""
    return pg_admin.execute("SELECT datname FROM pg_database WHERE datname = %s OR datname LIKE %s",
                            (name, f"{name[:30]}__ptexport_tmp_%")).fetchall()


@pytest.mark.postgres
@pytest.mark.parametrize("name", ["threads-2cpus-cyc", "forkexec-corrupt"])
def test_cluster_gives_the_jobs1_postgres_database(cluster, synth_trace, pg_names, tiny, small_copies, name):
    """Decoded on the workers, samples and calls loaded by them (many small loads, in no set order),
    the rest by this process: the --jobs 1 database."""
    addr, _ = cluster
    path = _trace(synth_trace, name)
    urls = [f"{PG_BASE}/{pg_names()}" for _ in range(2)]
    export_trace(path, urls[0], _config(jobs=1))
    s = export_trace(path, urls[1], _config(scheduler=addr, cluster_trees=True))
    assert s.cluster_units >= 4 and s.cluster_tree_steps >= 2
    want = _pg_dump(urls[0])
    # (tasks of 1500 to 2999 rows: small batches are gathered until they reach 1500)
    assert s.cluster_copies >= (len(want["samples"]) + len(want["calls"])) // 3000 >= 3, s.cluster_copies
    assert not s.warnings
    _assert_same(_pg_dump(urls[1]), want)


def _dying_copy(marker: str, stage: str):
    """A stand-in for the workers' load task: the first samples load to reach ``stage`` ("copied": the
    rows sent, not committed; "committed") kills its worker there (once: ``marker`` is the file that
    says it happened).  Defined here, it is sent to the workers by value."""
    from ptexport.writers.pg_copy import copy_batch

    def task(params, shown, table, columns, cols, n, key):
        def hook(at):
            if at == stage and table == "samples" and not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(1)  # the worker process ends here, its session with it

        return copy_batch(params, shown, table, columns, cols, n, key, hook=hook)

    return task


@pytest.mark.postgres
@pytest.mark.parametrize("stage", ["copied", "committed"])
def test_a_worker_dying_while_it_loads_costs_a_retry_not_a_row(cluster, synth_trace, pg_names, tiny, small_copies,
                                                               tmp_path, monkeypatch, stage):
    """A worker that dies in a load - before its commit (the server rolls the rows back) or after it (the
    rows are in, the scheduler never hears): the batch is sent again, loaded once; the --jobs 1 database."""
    addr, client = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    urls = [f"{PG_BASE}/{pg_names()}" for _ in range(2)]
    export_trace(path, urls[0], _config(jobs=1))
    marker = tmp_path / "died"
    monkeypatch.setattr(C, "copy_batch", _dying_copy(str(marker), stage))
    export_trace(path, urls[1], _config(scheduler=addr))
    assert marker.exists(), "no worker died: the test says nothing"
    _assert_same(_pg_dump(urls[1]), _pg_dump(urls[0]))
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it: the other tests keep two workers


@pytest.mark.postgres
def test_a_batch_that_never_lands_is_an_error_not_a_short_table(cluster, synth_trace, pg_admin, pg_names, tiny,
                                                                 small_copies, monkeypatch):
    """A load that reports success but left no rows (a task that went wrong without a word): the batches
    the workers recorded do not add up to those sent, and the export fails before its database is placed."""
    from ptexport.errors import ExportError

    addr, _ = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    name = pg_names()

    def lossy(params, shown, table, columns, cols, n, key):
        import numpy as np

        from ptexport.writers.pg_copy import copy_batch

        return 0 if table == "samples" and int(np.asarray(cols["id"])[0]) > 1 else \
            copy_batch(params, shown, table, columns, cols, n, key)

    monkeypatch.setattr(C, "copy_batch", lossy)
    with pytest.raises(ExportError, match=r"the cluster's workers loaded \d+ batches \(\d+ rows\), \d+ \(\d+ rows\) were sent"):
        export_trace(path, f"{PG_BASE}/{name}", _config(scheduler=addr))
    assert _pg_databases(pg_admin, name) == []


@pytest.mark.postgres
def test_workers_that_cannot_reach_the_database_leave_the_loads_here(cluster, synth_trace, pg_names, tiny,
                                                                     monkeypatch):
    """Workers that cannot open a session on the database (a localhost URL seen from another machine):
    one warning, and this process loads every table; the same rows."""
    addr, _ = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    urls = [f"{PG_BASE}/{pg_names()}" for _ in range(2)]
    export_trace(path, urls[0], _config(jobs=1))
    monkeypatch.setattr(C, "_probe_database", lambda params, shown: f"cannot reach {shown}: connection refused")
    s = export_trace(path, urls[1], _config(scheduler=addr))
    assert s.cluster_copies == 0
    assert len(s.warnings) == 1 and "connection refused: the workers only decode" in s.warnings[0], s.warnings
    _assert_same(_pg_dump(urls[1]), _pg_dump(urls[0]))


@pytest.mark.postgres
def test_a_failed_load_on_a_worker_leaves_no_database(cluster, synth_trace, pg_admin, pg_names, tiny, small_copies,
                                                      monkeypatch):
    """A load that fails on a worker (the server's disk full) ends the export with that typed error;
    neither the database nor its temporary is left."""
    from ptexport.errors import StorageError

    addr, _ = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    name = pg_names()

    def full(params, shown, table, columns, cols, n, key):
        raise StorageError(f"{shown}: writing {table}: the server's disk is full (test)")

    monkeypatch.setattr(C, "copy_batch", full)
    with pytest.raises(StorageError, match=r"writing samples: the server's disk is full"):
        export_trace(path, f"{PG_BASE}/{name}", _config(scheduler=addr))
    assert _pg_databases(pg_admin, name) == []


# ------------------------------------------------------------------ faults


def _kill_a_busy_worker(client, monkeypatch, after: int = 6) -> dict:
    """From the ``after``-th segment submitted on: SIGKILL a worker while it decodes one (once);
    the dict says which worker and which tasks it was running.

    The scheduler's ``processing`` can name a task whose result is already on its way: a worker
    killed then lost nothing (the run had no failure to retry or to report). So the worker is
    stopped first (SIGSTOP: it can finish nothing more), and killed only if, once what it sent
    has had time to arrive, the scheduler still has a segment processing on it; otherwise it
    goes on (SIGCONT) and another is tried."""
    pids = client.run(os.getpid)
    killed: dict = {}
    submit = C.DaskUnits.submit

    def segments_on(w):
        return [k for k in client.processing([w]).get(w, ()) if str(k).startswith("_segment_job")]

    def submit_and_kill(self, fn, *args):
        fut = submit(self, fn, *args)
        if not killed and self.submitted >= after:
            for _ in range(2000):  # until a worker is caught busy with a segment
                busy = sorted(w for w in pids if segments_on(w))  # (not the warm-up)
                if not busy:
                    continue
                w = busy[0]
                os.kill(pids[w], signal.SIGSTOP)
                time.sleep(0.3)  # a result sent before the stop reaches the scheduler
                keys = segments_on(w)
                if keys:
                    killed.update(worker=w, keys=keys)
                    os.kill(pids[w], signal.SIGKILL)
                    break
                os.kill(pids[w], signal.SIGCONT)
        return fut

    monkeypatch.setattr(C.DaskUnits, "submit", submit_and_kill)
    return killed


def test_a_worker_killed_mid_task_costs_a_retry_not_a_row(cluster, synth_trace, tmp_path, tiny, monkeypatch):
    """SIGKILL a worker while it decodes a segment: the scheduler runs that segment again on the other
    (or the restarted) worker; the database is the --jobs 1 one, no row lost or repeated."""
    addr, client = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    want = _jobs1(path, tmp_path)
    killed = _kill_a_busy_worker(client, monkeypatch)
    db = tmp_path / "cluster.sqlite"
    export_trace(path, str(db), _config(scheduler=addr))
    assert killed, "no worker was busy: nothing was killed"
    _assert_same(dump(db), want)
    # the segment the killed worker was decoding ran again (processing twice in the scheduler's story)
    story = client.run_on_scheduler(lambda dask_scheduler, keys=killed["keys"]: [
        (t[0], t[1], t[2]) for t in dask_scheduler.story(*keys)])
    assert sum(1 for key, _start, finish in story if finish == "processing") >= 2, story
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it: the other tests keep two workers


def _dying_tree_step(marker: str):
    """A stand-in for a call tree shard's step: the first to resume a shard's stacks (a step after its
    first) ends its worker process before it returns (once: ``marker``).  Sent to the workers by value."""
    from ptexport.calltree.sharded import tree_step

    def step(params, state, root_id, part, flush):
        out = tree_step(params, state, root_id, part, flush)
        if state is not None and len(state["E"]) and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return out

    return step


def test_a_worker_dying_in_a_call_tree_step_costs_a_retry_not_a_row(cluster, synth_trace, tmp_path, tiny,
                                                                    monkeypatch):
    """The workers build the call tree, a shard of threads a task (calltree/sharded.py); a worker that
    dies in one (with calls open from the batch before) has it run again from the same stacks: the
    --jobs 1 database, no call lost, repeated or renumbered."""
    from ptexport.calltree import sharded

    addr, client = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    want = _jobs1(path, tmp_path)
    marker = tmp_path / "died"
    monkeypatch.setattr(sharded, "tree_step", _dying_tree_step(str(marker)))
    db = tmp_path / "cluster.sqlite"
    s = export_trace(path, str(db), _config(scheduler=addr, cluster_trees=True))
    assert marker.exists(), "no worker died: the test says nothing"
    marker.unlink()
    _assert_same(dump(db), want)
    assert want["calls"] and s.cluster_tree_steps >= 2
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it: the other tests keep two workers


def test_a_failed_run_leaves_no_database(cluster, synth_trace, tmp_path, tiny, monkeypatch):
    """Workers that fail mid-run (here: every task finds another recording than the coordinator's) end the
    export with their typed error, and neither the database nor a temporary of it is left."""
    addr, _ = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    def bind_then_break(view, session):
        session.worker_path, session.worker_config = view.path, view.config
        session.worker_ident = (1, "not this file")  # after the probe: the tasks themselves refuse

    monkeypatch.setattr(C.WorkerView, "bind", bind_then_break)
    db = tmp_path / "cluster.sqlite"
    # the worker's InputError crosses as it was raised (what, where, why), not re-rendered
    with pytest.raises(InputError, match=rf"^{re.escape(path)}: worker on \S+: not the coordinator's recording"):
        export_trace(path, str(db), _config(scheduler=addr))
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_cluster_path_maps_where_workers_read(cluster, synth_trace, tmp_path, tiny):
    """--cluster-path LOCAL=WORKER: the workers open the copy under WORKER; a copy that is another file
    is refused before any database is opened, naming the worker."""
    addr, _ = cluster
    src = os.path.dirname(_trace(synth_trace, "threads-2cpus-cyc"))
    here, there, other = tmp_path / "here", tmp_path / "there", tmp_path / "other"
    for d in (here, there):
        shutil.copytree(src, d)
    want = _jobs1(str(here / "perf.data"), tmp_path)
    db = tmp_path / "cluster.sqlite"
    s = export_trace(str(here / "perf.data"), str(db), _config(scheduler=addr, cluster_paths=((str(here), str(there)),)))
    assert s.cluster_units >= 4
    _assert_same(dump(db), want)

    shutil.copytree(os.path.dirname(_trace(synth_trace, "forkexec-corrupt")), other)
    db.unlink()
    with pytest.raises(ClusterError, match=r"worker tcp://127\.0\.0\.1:\d+.*not the coordinator's recording"):
        export_trace(str(here / "perf.data"), str(db), _config(scheduler=addr, cluster_paths=((str(here), str(other)),)))
    with pytest.raises(ClusterError, match="cannot read the recording"):
        export_trace(str(here / "perf.data"), str(db),
                     _config(scheduler=addr, cluster_paths=((str(here), str(tmp_path / "nowhere")),)))
    assert not db.exists()


def test_unreachable_scheduler_is_one_line_and_no_database(synth_trace, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(C, "CONNECT_TIMEOUT", 1.0)
    path = _trace(synth_trace, "threads-2cpus-cyc")
    db = tmp_path / "x.sqlite"
    rc = main([path, "--db", str(db), "--scheduler", "tcp://127.0.0.1:9", "-q"], out=io.StringIO())
    err = capsys.readouterr().err
    assert rc == ClusterError.exit_code == 69
    assert "cannot reach scheduler tcp://127.0.0.1:9" in err and "Traceback" not in err, err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv,msg", [
    (["--scheduler", "127.0.0.1:8786"], "expected tcp://HOST:PORT"),
    (["--scheduler", "local:0"], "N >= 1"),
    (["--cluster-path", "/a=/b"], "only with --scheduler"),
    (["--no-worker-loads"], "only with --scheduler"),
    (["--cluster-trees"], "--cluster-trees: only with --scheduler"),
    (["--scheduler", "local:2", "--cluster-path", "/a"], "expected LOCAL=WORKER"),
])
def test_bad_cluster_options(synth_trace, tmp_path, capsys, argv, msg):
    path = _trace(synth_trace, "threads-2cpus-cyc")
    rc = main([path, "--db", str(tmp_path / "x.sqlite"), "-q", *argv], out=io.StringIO())
    err = capsys.readouterr().err
    assert rc == UsageError.exit_code and msg in err and "Traceback" not in err, err
    assert os.listdir(tmp_path) == []


def test_map_path_and_worker_config():
    from ptexport.session.guestdata import GuestDataSpec
    from ptexport.session.perfsession import DecodeConfig

    m = (("/data", "/mnt/nfs/data"), ("/data/deep", "/deep"), ("/opt/sym", "/sym"))
    assert C.map_path("/data/a/perf.data", m) == "/mnt/nfs/data/a/perf.data"
    assert C.map_path("/data/deep/x", m) == "/deep/x"  # the longest prefix
    assert C.map_path("/database/x", m) == "/database/x"  # a prefix of a name is no directory
    assert C.map_path("/data", m) == "/mnt/nfs/data"
    assert C.map_path(None, m) is None
    cfg = DecodeConfig(itrace=export_default(), symfs="/opt/sym", buildid_dir="/data/.debug",
                       guest_data=(GuestDataSpec("/data/guest.data", 7),))
    w = C.worker_config(cfg, m)
    assert (w.symfs, w.buildid_dir, w.guest_data[0].path, w.guest_data[0].machine_pid) == \
        ("/sym", "/mnt/nfs/data/.debug", "/mnt/nfs/data/guest.data", 7)
    assert C.parse_cluster_path("/x/=/y/") == ("/x", "/y")


def test_without_scheduler_dask_is_not_imported(synth_trace, tmp_path):
    path = _trace(synth_trace, "threads-2cpus-cyc")
    code = ("import sys\nfrom ptexport.cli import main\n"
            f"rc = main([{path!r}, '--db', {str(tmp_path / 'x.sqlite')!r}, '-q', '--jobs', '2'])\n"
            "assert rc == 0, rc\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
            "assert not bad, bad\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "x.sqlite").exists()


@pytest.mark.slow
def test_cli_local_cluster(synth_trace, tmp_path, tiny):
    """``--scheduler local:2`` starts its own LocalCluster, says where the segments went and gives the
    --jobs 1 rows."""
    path = _trace(synth_trace, "forkexec-corrupt")
    want = _jobs1(path, tmp_path)
    out = io.StringIO()
    db = tmp_path / "local.sqlite"
    assert main([path, "--db", str(db), "--scheduler", "local:2"], out=out) == 0
    assert "cluster workers" in out.getvalue() and " on 2 cluster workers" in out.getvalue(), out.getvalue()
    assert "call tree steps" not in out.getvalue()  # by default this process builds the trees
    _assert_same(dump(db), want)
    out = io.StringIO()
    assert main([path, "--db", str(db), "--force", "--scheduler", "local:2", "--cluster-trees"], out=out) == 0
    assert "call tree steps built by them" in out.getvalue(), out.getvalue()
    _assert_same(dump(db), want)


@pytest.mark.postgres
def test_cli_worker_loads_and_no_worker_loads(cluster, synth_trace, pg_names, tiny):
    """Into PostgreSQL the summary says how many batches the workers loaded; with --no-worker-loads
    they load none (this process does); the same rows either way."""
    addr, _ = cluster
    path = _trace(synth_trace, "threads-2cpus-cyc")
    urls = [f"{PG_BASE}/{pg_names()}" for _ in range(2)]
    outs = []
    for url, extra in zip(urls, ([], ["--no-worker-loads"])):
        out = io.StringIO()
        assert main([path, "--db", url, "--scheduler", addr, *extra], out=out) == 0
        outs.append(out.getvalue())
    assert re.search(r"on 2 cluster workers, [1-9]\d* batches loaded by them", outs[0]), outs[0]
    assert "cluster workers" in outs[1] and "loaded by them" not in outs[1], outs[1]
    _assert_same(_pg_dump(urls[1]), _pg_dump(urls[0]))


def test_ordered_keeps_the_budget_over_all_streams():
    """units.ordered: each stream has its next unit whatever the budget; beyond that the streams together
    keep at most ``budget`` submitted and not taken; results in order; closing cancels and gives back."""
    from concurrent.futures import Future

    from ptexport.session.units import ordered

    class Ex:
        width, window, budget, in_flight = 2, 4, 3, 0
        peak = 0

        def submit(self, fn, *args):
            f = Future()
            f.set_result(fn(*args))
            Ex.peak = max(Ex.peak, self.in_flight + 1)
            return f

        def release(self):
            pass

    def calls(q):
        return ((lambda k=k: (q, k), ()) for k in range(10))

    ex = Ex()
    streams = [ordered(ex, calls(q), ex.window) for q in range(5)]
    got = {q: [] for q in range(5)}
    for step in range(10):
        for q, s in enumerate(streams):
            got[q].append(next(s))
            assert ex.in_flight <= ex.budget + len(streams)
    assert all(got[q] == [(q, k) for k in range(10)] for q in got)
    assert Ex.peak <= ex.budget + len(streams)
    s = ordered(ex, ((lambda k=k: k, ()) for k in range(10)), ex.window)
    assert next(s) == 0 and ex.in_flight > 0
    s.close()
    assert ex.in_flight == 0


@pytest.mark.slow
def test_no_retries_left_is_one_error_and_no_database(synth_trace, tmp_path, tmp_path_factory, tiny, monkeypatch):
    """With dask's allowed-failures at 0, the worker killed mid-task ends the run: a ClusterError
    (KilledWorker), and neither the database nor a temporary of it."""
    import dask

    path = _trace(synth_trace, "threads-2cpus-cyc")
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        lc = _local_cluster(tmp_path_factory.mktemp("dask"))
    try:
        with distributed.Client(lc) as client:
            killed = _kill_a_busy_worker(client, monkeypatch)
            db = tmp_path / "x.sqlite"
            with pytest.raises(ClusterError, match="a decode task lost its worker 1 time "):
                export_trace(path, str(db), _config(scheduler=lc.scheduler_address))
            assert killed
    finally:
        lc.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_lost_scheduler_is_one_error_and_no_database(synth_trace, tmp_path, tmp_path_factory, tiny, monkeypatch,
                                                       capfd):
    """The scheduler (and its workers) gone in the middle of the run: a ClusterError, no database, and
    nothing of dask's on stderr from this process."""
    path = _trace(synth_trace, "threads-2cpus-cyc")
    lc = _local_cluster(tmp_path_factory.mktemp("dask"))
    submit = C.DaskUnits.submit

    def submit_then_lose(self, fn, *args):
        fut = submit(self, fn, *args)
        if self.submitted == 6:
            lc.close()
        return fut

    monkeypatch.setattr(C.DaskUnits, "submit", submit_then_lose)
    monkeypatch.setattr(C, "CONNECT_TIMEOUT", 3.0)
    db = tmp_path / "lost.sqlite"
    try:
        with pytest.raises(ClusterError, match="lost the cluster"):
            export_trace(path, str(db), _config(scheduler=lc.scheduler_address))
    finally:
        lc.close()
    assert os.listdir(tmp_path) == []
    err = capfd.readouterr().err
    assert "distributed.client" not in err and "Traceback" not in err, err[-2000:]


def test_copy_batches_cut_gather_and_keep_values(monkeypatch):
    """The workers' load tasks: big batches cut to COPY_ROWS, small ones gathered until they reach it,
    each table on its own; the values as COPY takes them (uint64 addresses beside int64 defaults stay
    exact, not floats), scalars kept while every part has the same; the caller's arrays copied."""
    import numpy as np

    monkeypatch.setattr(C, "COPY_ROWS", 10)
    cols_of = [("id", "bigint"), ("ip", "bigint"), ("flags", "integer"), ("in_tx", "boolean")]
    g = C.CopyBatches()
    out = []
    ids = np.arange(1, 26, dtype=np.int64)
    ip = np.arange(25, dtype=np.uint64) + np.uint64(0xFFFF_FFFF_FFFF_FF00)
    out += g.add("samples", cols_of, {"id": ids, "ip": ip, "flags": 7, "in_tx": ids % 2}, 25)  # 10 + 10 + 5 kept
    ids[:] = -1  # the caller reuses its arrays
    out += g.add("calls", cols_of, {"id": np.array([4, 2]), "ip": 3, "flags": 0, "in_tx": 0}, 2)
    out += g.add("samples", cols_of, {"id": np.arange(26, 30), "ip": np.arange(4, dtype=np.int64), "flags": 7,
                                      "in_tx": np.zeros(4, bool)}, 4)
    out += g.add("samples", cols_of, {"id": np.arange(30, 31), "ip": np.array([5], dtype=np.uint64),
                                      "flags": np.array([1]), "in_tx": np.array([1])}, 1)  # 5 + 4 + 1: out
    out += g.add("samples", cols_of, {"id": np.arange(31, 32), "ip": 6, "flags": 2, "in_tx": 1}, 1)
    out += g.flush()
    assert [(t, n) for t, _c, _v, n in out] == [("samples", 10), ("samples", 10), ("samples", 10), ("calls", 2),
                                                ("samples", 1)]
    _t, _c, first, _n = out[0]
    assert first["id"].tolist() == list(range(1, 11)) and first["flags"] == 7
    gathered = out[2][2]
    assert gathered["id"].tolist() == list(range(21, 31))
    assert gathered["ip"].dtype == np.int64
    want_ip = [int(v) - (1 << 64) for v in ip[20:25].tolist()] + [0, 1, 2, 3, 5]
    assert gathered["ip"].tolist() == want_ip  # two's complement of the addresses, exact
    assert gathered["flags"].tolist() == [7] * 9 + [1]
    assert gathered["in_tx"].tolist() == [True, False, True, False, True] + [False] * 4 + [True]
    assert out[3][2]["id"].tolist() == [4, 2] and out[3][2]["ip"] == 3
    assert out[4][2]["id"].tolist() == [31]  # one row: its id an array all the same (a task's key)


def test_copy_batches_send_a_column_of_one_value_as_that_value(monkeypatch):
    """A column whose rows all hold one value (an event, a machine, a CPU for a whole batch) goes to the
    worker as that value, as COPY writes it (an address as its two's complement); the loads' rows are
    the same."""
    import numpy as np

    from ptexport.writers.pg_copy import encode_binary

    monkeypatch.setattr(C, "COPY_ROWS", 8)
    cols_of = [("id", "bigint"), ("ip", "bigint"), ("cpu", "integer"), ("in_tx", "boolean")]
    cols = {"id": np.arange(1, 9), "ip": np.full(8, 0xFFFF_FFFF_FFFF_FFF0, dtype=np.uint64),
            "cpu": np.full(8, 3, dtype=np.int32), "in_tx": np.zeros(8, dtype=np.int64)}
    [(_t, _c, sent, n)] = C.CopyBatches().add("samples", cols_of, cols, 8)
    assert sent["ip"] == 0xFFFF_FFFF_FFFF_FFF0 - (1 << 64) and sent["cpu"] == 3 and sent["in_tx"] is False
    assert isinstance(sent["id"], np.ndarray)
    assert bytes(b"".join(encode_binary(cols_of, sent, n))) == bytes(b"".join(encode_binary(cols_of, cols, 8)))


class _Hanging:
    """A dask future that never finishes (its task forgotten with its lost data, the scheduler silent)."""

    status = "pending"

    def result(self, timeout=None):
        time.sleep(timeout or 0)
        raise TimeoutError("still pending")

    def done(self):
        return False


class _Done:
    status = "finished"

    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value

    def done(self):
        return True


def test_a_call_tree_step_whose_branches_are_lost_is_sent_again(monkeypatch):
    """A call tree step waits on its task only as long as the branches it was sent with exist: once
    dask reports them lost (their worker died before the task read them), the step is sent again
    instead of waiting on a task the scheduler forgot; the retries stay bounded."""
    monkeypatch.setattr(C, "_LOST_POLL_S", 0.01)
    lost = _Done(None)
    lost.status = "lost"
    sends = []

    def send(fn, args, data_at):
        sends.append(args)
        return (_Hanging(), lost) if len(sends) == 1 else (_Done("rows"), _Done(None))

    trees = C.DaskTrees.__new__(C.DaskTrees)
    trees.units = type("U", (), {"where": "scheduler tcp://x:1"})()
    trees._workers, trees._turn = ["w"], 0
    monkeypatch.setattr(trees, "_send", send)
    task = C._TreeTask(trees, lambda *a: None, (1, 2, 3, "branches"))
    assert task.result() == "rows" and task.tries == 1 and len(sends) == 2
    assert task._data is None  # released once the rows are back

    sends.clear()
    monkeypatch.setattr(trees, "_send", lambda fn, args, data_at: sends.append(args) or (_Hanging(), lost))
    task = C._TreeTask(trees, lambda *a: None, (1, 2, 3, "branches"))
    with pytest.raises(ClusterError, match="branches were lost"):
        task.result()
    assert len(sends) == C.COPY_RETRIES + 1
