"""schema.sql loaded per dialect; branch_types names (perf's and derived)."""

from __future__ import annotations

import sqlite3

import pytest

from ptexport.writers.branch_types import PERF_BRANCH_TYPES, branch_type_name, branch_type_rows
from ptexport.writers.schema import load_schema

PERF_SAMPLE_COLUMNS = ["id", "evsel_id", "machine_id", "thread_id", "comm_id", "dso_id", "symbol_id",
                       "sym_offset", "ip", "time", "cpu", "to_dso_id", "to_symbol_id", "to_sym_offset", "to_ip",
                       "branch_type", "in_tx", "call_path_id", "insn_count", "cyc_count", "flags"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_every_column_is_documented_and_tables_match_across_dialects(dialect):
    sch = load_schema(dialect)
    undocumented = [f"{t}.{c.name}" for t, cols in sch.tables.items() for c in cols if not c.doc]
    assert undocumented == []
    other = load_schema("postgresql" if dialect == "sqlite" else "sqlite")
    assert {t: sch.columns(t) for t in sch.tables} == {t: other.columns(t) for t in other.tables}
    assert set(sch.view_sql) == set(other.view_sql)


def test_samples_columns_are_perfs_then_ours():
    cols = load_schema("sqlite").columns("samples")
    assert cols[:21] == PERF_SAMPLE_COLUMNS
    assert cols[21:] == ["vcpu", "machine_pid"]


def test_postgres_adaptation():
    sch = load_schema("postgresql")
    assert "PRIMARY KEY" not in sch.table_sql["samples"]
    assert "printf" not in " ".join(sch.view_sql.values())
    assert "ALTER TABLE samples ADD PRIMARY KEY (id)" in sch.primary_key_sql()
    assert any(s.startswith('COMMENT ON COLUMN samples."vcpu"') for s in sch.comment_sql)
    lite = load_schema("sqlite")
    assert "to_hex" not in " ".join(lite.view_sql.values())
    assert "integer NOT NULL PRIMARY KEY" in lite.table_sql["samples"]


def test_sqlite_schema_creates_and_views_select():
    sch = load_schema("sqlite")
    c = sqlite3.connect(":memory:")
    for s in [*sch.table_sql.values(), *sch.view_sql.values(), *sch.index_sql.values()]:
        c.execute(s)
    for v in sch.view_sql:
        c.execute(f"SELECT * FROM {v}").fetchall()


def test_perf_branch_type_names():
    # the 42 rows perf 6.1's export writes (checked against a perf-made database in test_export_perf_compat)
    assert len(PERF_BRANCH_TYPES) == 42
    assert PERF_BRANCH_TYPES[0] == "no branch"
    assert PERF_BRANCH_TYPES[1] == "unconditional jump"
    assert PERF_BRANCH_TYPES[257] == "trace begin"
    assert PERF_BRANCH_TYPES[259] == "trace begin / call"
    assert PERF_BRANCH_TYPES[545] == "asynchronous branch / trace end"
    assert PERF_BRANCH_TYPES[4099] == "vm exit"
    assert PERF_BRANCH_TYPES[2307] == "trace begin / vm entry"


def test_derived_branch_type_names():
    assert branch_type_name(4131) == "vm exit (asynchronous)"
    assert branch_type_name(4131 | 256) == "trace begin / vm exit (asynchronous)"
    assert branch_type_name(3 | 1024) == "call (in transaction)"
    assert branch_type_name(1 | 8192) == "unconditional jump (interrupts disabled)"
    assert branch_type_name(9) == "conditional jump"
    names = [branch_type_name(v) for v in range(1 << 15)]
    assert len(set(names)) == len(names), "every flag value gets its own name"


def test_branch_type_rows_add_only_unknown_values():
    rows = branch_type_rows([3, 4131, 4131])
    assert len(rows) == 43
    assert (4131, "vm exit (asynchronous)") in rows
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
