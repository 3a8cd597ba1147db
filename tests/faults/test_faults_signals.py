"""SIGTERM and SIGHUP end ``ptexport TRACE --db`` as Ctrl-C does (issue #18).

The export is signalled at three moments, seen from outside: while the subcommands and numba
load (its SigCgt mask in /proc shows main() has installed its handlers; no writer yet), while the pages of the big tables are being spooled (the
``.samples.pages`` file has grown past 8 MB) and while the database is being finished (the
samples' pages were spliced into the temporary database and removed: indexes, ANALYZE, fsync).
Each time: exit 128 + N, one line on stderr, no temporary file and no lock file left, no
database at the target, no process of the export left (with ``--jobs 2`` too, the signal sent to
the process alone or to its whole process group).
"""

from __future__ import annotations

import os
import signal

import pytest

from faultstest import finish, start, wait_for

LINES = {signal.SIGTERM: "ptexport: terminated", signal.SIGHUP: "ptexport: hangup"}


def _pages(directory, name):
    found = [p for p in directory.iterdir() if p.name.startswith(f".{name}.ptexport-tmp-")
             and p.name.endswith(".samples.pages")]
    return found[0] if found else None


def _catches(pid: int, sig: int) -> bool:
    """The process has a handler for ``sig`` (SigCgt of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except FileNotFoundError:
        pass
    return False


def _moment(p, directory, name, moment):
    if moment == "loading":  # main() has installed its handlers, the subcommands and numba are loading
        return wait_for(p, lambda: _catches(p.pid, signal.SIGTERM))
    if moment == "spooling":
        def big():
            f = _pages(directory, name)
            try:
                return f is not None and f.stat().st_size > 8 << 20
            except FileNotFoundError:
                return False
        return wait_for(p, big)
    assert moment == "finishing"
    assert wait_for(p, lambda: _pages(directory, name) is not None)
    return wait_for(p, lambda: _pages(directory, name) is None)


@pytest.mark.slow
@pytest.mark.parametrize("sig,moment,jobs,group", [
    (signal.SIGTERM, "loading", 1, False),
    # slow: SIGINT and SIGTERM at random moments (test_faults_sweep_signals.py) cover these by default
    pytest.param(signal.SIGTERM, "spooling", 1, False, marks=pytest.mark.slow),
    pytest.param(signal.SIGTERM, "finishing", 1, False, marks=pytest.mark.slow),
    (signal.SIGTERM, "spooling", 2, True),  # as systemd or `kill -TERM -PGID` does: the workers get it too
    pytest.param(signal.SIGHUP, "spooling", 2, False, marks=pytest.mark.slow),  # the parent alone: it stops its workers
    pytest.param(signal.SIGHUP, "finishing", 1, True, marks=pytest.mark.slow),  # the terminal went away: the whole process group
])
def test_signal_ends_the_export_cleanly(big_trace, tmp_path, sig, moment, jobs, group):
    target = tmp_path / "t.db"
    p = start([str(big_trace), "--db", str(target), "--jobs", str(jobs)])
    if not _moment(p, tmp_path, "t.db", moment):
        finish(p)
        pytest.fail(f"the export ended before the {moment} moment")
    if group:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    r = finish(p)
    assert r.returncode == 128 + sig, (r.returncode, r.stderr[-3000:])
    assert r.stderr.splitlines() == [LINES[sig]], r.stderr[-3000:]
    assert r.stdout == ""  # no summary: it did not finish
    assert not target.exists(), "a signalled export leaves no database at the target"
    assert list(tmp_path.iterdir()) == [], "temporary files and the lock file are removed"


@pytest.mark.slow
def test_rerun_after_sigterm_succeeds_without_force(small_trace, tmp_path):
    """Nothing is left that would make the next export refuse (an existing target, a held lock)."""
    target = tmp_path / "t.db"
    p = start([str(small_trace), "--db", str(target)])
    # as soon as main() catches SIGTERM: the export cannot have finished yet (no skip on fast machines)
    assert _moment(p, tmp_path, "t.db", "loading")
    p.send_signal(signal.SIGTERM)
    r = finish(p)
    assert r.returncode == 143 and r.stderr.splitlines() == ["ptexport: terminated"], r.stderr
    assert list(tmp_path.iterdir()) == []
    p = start([str(small_trace), "--db", str(target)])
    r = finish(p)
    assert r.returncode == 0, r.stderr
    assert "samples 200419" in r.stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.db"]


def test_signal_handlers_are_restored_after_main(small_trace, tmp_path):
    """main() installs its handlers for the run only (it is also called in-process)."""
    import io

    from ptexport.cli import main

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert main([str(small_trace), "--db", str(tmp_path / "t.db"), "-q"], out=io.StringIO()) == 0
    assert {s: signal.getsignal(s) for s in before} == before
