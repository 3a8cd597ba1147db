"""Disassembly of a branch's target block, checked against objdump on a binary compiled here,
and the viewer against the shared fixture database written by ptexport's own writer."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess

import pytest

from ptexport_viewer import disasm
from ptexport_viewer import queries as q
from ptexport_viewer.db import Database

SRC = r"""
int work(int n) { int s = 0; for (int i = 0; i < n; i++) s += i * i; return s; }
int main(int argc, char **argv) { return work(argc * 1000) & 0x7f; }
"""


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    if shutil.which("gcc") is None or shutil.which("objdump") is None:
        pytest.skip("gcc and objdump are needed to build the test binary")
    d = tmp_path_factory.mktemp("bin")
    (d / "t.c").write_text(SRC)
    exe = d / "t"
    subprocess.run(["gcc", "-O1", "-no-pie", "-fno-inline", "-o", str(exe), str(d / "t.c")], check=True)
    return exe


def objdump_insns(exe, symbol):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(exe)], capture_output=True, text=True,
                         check=True).stdout
    block = out.split(f"<{symbol}>:\n", 1)[1].split("\n\n", 1)[0]
    insns = []
    for line in block.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)", line)
        if m:
            insns.append((int(m.group(1), 16), m.group(2)))
    return insns


def symbol_address(exe, name):
    from elftools.elf.elffile import ELFFile

    with open(exe, "rb") as f:
        sym = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name(name)[0]
        return sym["st_value"]


def test_disassemble_matches_objdump(binary):
    addr = symbol_address(binary, "work")
    want = objdump_insns(binary, "work")
    code = disasm.read_code(binary, addr, 64)
    lines = disasm.disassemble(code, addr, want[4][0])
    got = [(int(ln.split()[0], 16), ln[63:].split()[0]) for ln in lines]
    assert [a for a, _ in got] == [a for a, _ in want[:5]]
    assert [m for _, m in got] == [m for _, m in want[:5]]


def test_branch_block_from_database(binary, fixture_path, tmp_path):
    """A branch whose target is 'work': the pane shows work's first instructions up to the next branch."""
    addr = symbol_address(binary, "work")
    want = objdump_insns(binary, "work")
    db_path = tmp_path / "disasm.db"
    shutil.copy(fixture_path, db_path)
    con = sqlite3.connect(db_path)
    con.execute("UPDATE dsos SET long_name = ?, build_id = '' WHERE id = 2", (str(binary),))
    con.execute("UPDATE symbols SET sym_start = ?, sym_end = ? WHERE id = 3", (addr, addr + 0x100))
    con.execute("UPDATE samples SET to_ip = ?, to_sym_offset = 0, to_symbol_id = 3, to_dso_id = 2 WHERE id = 1",
                (addr,))
    con.execute("UPDATE samples SET ip = ?, dso_id = 2 WHERE id = 3", (want[3][0],))
    con.commit()
    con.close()
    db = Database(db_path)
    try:
        with db.session() as s:
            block = disasm.branch_block(s, 1)
            assert (block.start_ip, block.end_ip, block.file_addr) == (addr, want[3][0], addr)
            lines = disasm.disassemble_branch(s, 1)
            assert lines[0].startswith(f"app: {addr:#x}..{want[3][0]:#x} from {binary}")
            assert [int(ln.split()[0], 16) for ln in lines[1:]] == [a for a, _ in want[:4]]
            # a branch whose next branch lies before its target has no block
            assert disasm.disassemble_branch(s, 4)[0].startswith("No disassembly")
    finally:
        db.close()


def test_missing_object_names_what_was_tried(fixture_database):
    with fixture_database.session() as s:
        block = disasm.branch_block(s, 20)      # app sample at 1750: bar+0x10, next branch at bar+0x11
        assert (block.start_ip, block.end_ip, block.file_addr) == (0x1210, 0x1211, 0x1210)
        text = disasm.disassemble_branch(s, 20)[0]
    assert text.startswith("No disassembly: object file for /usr/bin/app")
    assert "/usr/bin/app" in text and ".build-id/bb/" in text


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def shared_fixture(request, tmp_path_factory):
    """engineer F's fixture written by ptexport's own SQLite and PostgreSQL writers."""
    fixture = pytest.importorskip("known_db")
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("shared") / "shared.db"
        yield path, fixture.build_fixture_db(str(path))
        return
    import uuid

    from fixture_db import PG_ADMIN
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3)
    except Exception as e:
        pytest.skip(f"no PostgreSQL server at {PG_ADMIN}: {e}")
    url = f"{PG_ADMIN.rsplit('/', 1)[0]}/ptv_shared_{uuid.uuid4().hex[:12]}"
    try:
        yield url, fixture.build_fixture_db(url)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
        admin.close()


def test_shared_fixture_database(shared_fixture):
    """The database ptexport's writer produces (engineer F's fixture) through the viewer's queries."""
    path, expected = shared_fixture
    db = Database(path)
    try:
        assert db.caps.ptexport and db.caps.samples_vcpu
        with db.session() as s:
            assert [m.label for m in q.machines(s)] == ["host", "guest (hypervisor pid 200) /var/lib/guests/vm0"]
            assert q.vcpus(s) == [(2, 0, 4, 200, 201)]
            comms = dict((name, c) for c, name in q.comms_with_calls(s))
            assert set(comms) == {"app", "gapp"}
            threads = {f"{pid}:{tid}": t for t, pid, tid in q.threads_of_comm(s, comms["app"])}
            assert set(threads) == {"100:100", "100:101"}
            root = q.root_call_path(s)

            def paths(comm, thread, parent, prefix=""):
                out = {}
                for n in q.call_graph_children(s, comm, thread, parent):
                    name = f"{prefix}/{n.name}" if prefix else n.name
                    out[name] = n.time
                    out.update(paths(comm, thread, n.id, name))
                return out
            got = {}
            for th in threads.values():
                got.update(paths(comms["app"], th, root))
            got.update(paths(comms["gapp"], q.threads_of_comm(s, comms["gapp"])[0][0], root))
            assert sorted(got.items(), key=lambda kv: (-kv[1], kv[0])) == expected["call_paths"]
            hits = q.find_in_call_graph(s, "ba*", pattern=True)
            assert len(hits) == 4 and hits[0][:2] == [comms["app"], threads["100:100"]]
            tree = q.call_tree_children(s, comms["app"], threads["100:100"], 0)
            assert [(n.name, n.count, n.time) for n in tree] == [("main", 1000, 1000)]
            assert [(n.name, n.count) for n in q.call_tree_children(s, comms["app"], threads["100:100"], tree[0].id)] \
                == [("foo", 1100), ("baz", 1600)]
            page = q.branches_page(s, evsel_id=1)
            assert page.done and len(page.rows) == sum(n for _, _, n in expected["branch_mix"])
            names = {r[6] for r in page.rows}
            assert "vm exit (asynchronous)" in names
            assert q.switch_cpus(s) == [(1, 0), (1, 1)]
            kinds = {e.kind for e in q.point_events(s)}
            assert {"cbr", "ptwrite", "pwrx"} <= kinds
    finally:
        db.close()


def test_guest_objects_are_looked_up_under_the_guest_root():
    guest = disasm.Block(1, 0, 0x2100, 0x2110, 0x2100, "gapp", "/usr/bin/gapp", "", False, "/guests/vm1")
    paths = [str(p) for p in disasm.candidate_files(guest)]
    assert "/guests/vm1/usr/bin/gapp" in paths and "/usr/bin/gapp" not in paths
    kernel = disasm.Block(1, 0, 0xffffffff81000000, 0xffffffff81000010, None, "[kernel.kallsyms]",
                          "[kernel.kallsyms]", "", True, "/guests/vm1")
    assert "/proc/kcore" not in [str(p) for p in disasm.candidate_files(kernel)]
    host_kernel = disasm.Block(1, 0, 0xffffffff81000000, 0xffffffff81000010, None, "[kernel.kallsyms]",
                               "[kernel.kallsyms]", "", True)
    assert "/proc/kcore" in [str(p) for p in disasm.candidate_files(host_kernel)]
