"""What a killed export leaves is removed by the next export or by ``ptexport clean``; two exports
to one target at once: the second refuses and the first is not disturbed (issue #18)."""

from __future__ import annotations

import os
import signal
import sqlite3

import pytest

from faultstest import dead_pid, finish, looks_complete, run_here, start, tmp_files, wait_for


def _kill_while_spooling(trace, target, jobs: int = 1) -> list[str]:
    """SIGKILL an export of ``trace`` once its samples' pages are on disk; what it left.  With
    ``jobs`` > 1 the export alone is killed: its workers end with it (finish() checks that its
    process group is gone), as they would otherwise keep waiting for work, and the lock."""
    d = target.parent
    p = start([str(trace), "--db", str(target), "--jobs", str(jobs)])
    pages = lambda: [n for n in tmp_files(d, target.name) if n.endswith(".samples.pages")  # noqa: E731
                     and (d / n).stat().st_size > 4 << 20]
    assert wait_for(p, lambda: bool(pages())), "the export ended before it spooled pages"
    if jobs > 1:
        p.send_signal(signal.SIGKILL)
    else:
        os.killpg(p.pid, signal.SIGKILL)
    r = finish(p)
    assert r.returncode == -signal.SIGKILL
    left = tmp_files(d, target.name)
    assert f".{target.name}.ptexport-tmp-{p.pid}" in left and f".{target.name}.ptexport-lock" in left
    assert any(n.endswith(".pages") for n in left) and not target.exists()
    return left


@pytest.mark.slow
def test_next_export_removes_what_a_killed_one_left(big_trace, small_trace, tmp_path, capsys):
    target = tmp_path / "t.db"
    left = _kill_while_spooling(big_trace, target)
    size = sum((tmp_path / n).stat().st_size for n in left)
    other = tmp_path / ".u.db.ptexport-tmp-1"  # another target's temporary (PID 1 is alive): not ours to touch
    other.write_bytes(b"x")
    r = run_here([str(small_trace), "--db", str(target)], capsys)
    assert r.returncode == 0, r.stderr
    files = len(left) - 1  # the lock file is taken over, not counted
    assert r.stderr.splitlines() == [
        f"ptexport: removed {files} temporary files ({size / (1 << 20):.1f} MiB) of exports to {target} that died"]
    assert sorted(x.name for x in tmp_path.iterdir()) == [".u.db.ptexport-tmp-1", "t.db"]
    assert looks_complete(target)


@pytest.mark.slow
def test_clean_lists_then_removes(big_trace, tmp_path, capsys):
    target = tmp_path / "t.db"
    left = _kill_while_spooling(big_trace, target, jobs=2)
    stale = tmp_path / f".v.db.ptexport-tmp-{dead_pid()}"  # another target's, of a PID no process has
    stale.write_bytes(b"y" * 1000)
    upgrade = tmp_path / f".w.db.ptexport-upgrade-{dead_pid()}"  # a killed `ptexport upgrade`'s copy
    upgrade.write_bytes(b"z")
    live = tmp_path / f".v.db.ptexport-tmp-{os.getpid()}"  # a live process's: left alone
    live.write_bytes(b"")
    everything = sorted(x.name for x in tmp_path.iterdir())

    r = run_here(["clean", str(tmp_path), "--dry-run"], capsys)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    listed = sorted(line.split(": ", 1)[1].split(" (")[0].rsplit("/", 1)[1]
                    for line in r.stdout.splitlines() if line.startswith("would remove: "))
    assert listed == sorted([*left, stale.name, upgrade.name])
    assert r.stdout.splitlines()[-1].startswith(f"{tmp_path}: would remove {len(listed)} (")
    assert sorted(x.name for x in tmp_path.iterdir()) == everything, "--dry-run removes nothing"

    r = run_here(["clean", str(target)], capsys)  # one target: only its leftovers (its lock is free: workers gone)
    assert r.returncode == 0, r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([stale.name, upgrade.name, live.name])
    assert sum(line.startswith("removed: ") for line in r.stdout.splitlines()) == len(left)

    r = run_here(["clean", str(tmp_path)], capsys)
    assert r.returncode == 0, r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == [live.name]
    r = run_here(["clean", str(tmp_path)], capsys)
    assert r.stdout == f"{tmp_path}: nothing to clean\n"


@pytest.mark.slow
def test_two_exports_at_once_the_second_refuses(big_trace, small_trace, tmp_path, capsys):
    target = tmp_path / "t.db"
    first = start([str(big_trace), "--db", str(target)])
    assert wait_for(first, lambda: any(n.endswith(".samples.pages") for n in tmp_files(tmp_path, "t.db")))
    # Hold the first export where it is (its lock stays held) so a fast machine cannot finish it
    # before the second one starts; it goes on after the checks.
    os.kill(first.pid, signal.SIGSTOP)
    try:
        _second_refused(first, small_trace, target, tmp_path, capsys)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    r = finish(first)
    assert r.returncode == 0, r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.db"]
    with sqlite3.connect(f"file:{target}?mode=ro", uri=True) as c:
        assert c.execute("PRAGMA quick_check").fetchone() == ("ok",)
        n = c.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert f"samples {n - 1}," in r.stdout and n > 1_500_000  # the summary leaves out the id-0 row


def _second_refused(first, small_trace, target, tmp_path, capsys):
    for argv in ([str(small_trace), "--db", str(target)], [str(small_trace), "--db", str(target), "--force"]):
        r = run_here(argv, capsys)
        assert r.returncode == 75, r.stderr
        assert r.stderr.splitlines() == [
            f"ptexport: error: {target}: another export (pid {first.pid}) is writing it "
            f"(lock {tmp_path}/.t.db.ptexport-lock); try again when it has finished"]
    # clean leaves a target that is being written alone
    r = run_here(["clean", str(tmp_path)], capsys)
    assert r.stdout.splitlines()[0] == f"busy: {target} (an export is writing it: left alone)"
    assert {f".t.db.ptexport-tmp-{first.pid}", ".t.db.ptexport-lock"} <= set(tmp_files(tmp_path, "t.db"))


def test_the_lock_is_taken_over_from_a_dead_holder_and_released(tmp_path):
    """Library level: a stale lock file (its holder gone) is taken; a held one refuses; release removes it."""
    from ptexport.errors import TargetBusyError
    from ptexport.writers.leftovers import TargetLock

    target = tmp_path / "t.db"
    (tmp_path / ".t.db.ptexport-lock").write_text(f"{dead_pid()}\n")
    lock = TargetLock.acquire(target)
    assert (tmp_path / ".t.db.ptexport-lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(TargetBusyError, match=f"pid {os.getpid()}"):
        TargetLock.acquire(target)  # another open file description: flock conflicts in one process too
    lock.release()
    assert list(tmp_path.iterdir()) == []
    TargetLock.acquire(target).release()
