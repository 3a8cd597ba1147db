"""Fixtures of the VM export tests: one generated VM recording (guest kernel and user space, two VCPUs on
two host CPUs) run through perf's workflow, exported by perf and by ptexport."""

from __future__ import annotations

import io

import pytest

from ptexport.cli import main


@pytest.fixture(scope="session")
def mixed(tmp_path_factory):
    from vmexporttest import have_exporter, make_vm_trace, perf_export

    import shutil

    if shutil.which("perf") is None:
        pytest.skip("perf (Debian linux-perf) is not installed: perf inject makes the VM recording")
    base = tmp_path_factory.mktemp("vm_mixed")
    vm = make_vm_trace(base, guest="mixed", seed=3, branches=4000)
    theirs, ours = base / "perf.db", base / "ours.db"
    if have_exporter():
        perf_export(vm.data, theirs)
    out = io.StringIO()
    assert main([str(vm.data), "--db", str(ours), "-q"], out=out) == 0, out.getvalue()
    return vm, theirs, ours


@pytest.fixture(scope="session")
def pg_admin():
    from vmexporttest import PG_BASE

    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed")
    try:
        conn = psycopg.connect(f"{PG_BASE}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL server reachable at {PG_BASE}: {str(e).strip().splitlines()[0]}")
    yield conn
    conn.close()
