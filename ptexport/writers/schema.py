"""``ptexport/schema.sql`` loaded and adapted to one SQL dialect.

The schema file is the single source of truth; every SQLite/PostgreSQL/DuckDB
difference is handled here:

* ``-- @sqlite`` ... ``-- @end``, ``-- @postgresql`` ... ``-- @end`` and
  ``-- @duckdb`` ... ``-- @end`` blocks (a marker may name several dialects);
* ``to_hex(x)`` (PostgreSQL) becomes ``printf('%x', x)`` for SQLite and
  ``lower(to_hex(CAST(x AS BIGINT)))`` for DuckDB (whose to_hex is upper case);
* ``id integer NOT NULL PRIMARY KEY`` (SQLite's rowid alias) becomes
  ``id bigint NOT NULL`` for PostgreSQL, whose primary keys are added after
  the COPY (as perf's export-to-postgresql.py does), and for DuckDB, which
  keeps no key (an index would cost more than it serves an analytic store);
* the ``-- `` comment after each column becomes ``COMMENT ON COLUMN`` in
  PostgreSQL and DuckDB (SQLite keeps it in ``sqlite_master.sql``).
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

SCHEMA_VERSION = 1

DIALECTS = ("sqlite", "postgresql", "duckdb")

_CREATE_TABLE = re.compile(r"^CREATE TABLE (\w+) \(", re.M)
_CREATE_VIEW = re.compile(r"^CREATE VIEW (\w+) AS", re.M)
_CREATE_INDEX = re.compile(r"^CREATE INDEX (\w+) ON (\w+)", re.M)
_COLUMN = re.compile(r'^\s+("?\w+"?)\s+([a-z]+(?:\(\d+\))?)(?:\s+NOT NULL)?(?:\s+PRIMARY KEY)?'
                     r'(?:\s+DEFAULT\s+(-?\d+))?\s*,?\s*(?:--\s*(.*))?$')
_PK = "integer NOT NULL PRIMARY KEY"


def utc_now() -> str:
    """The time stamp of ``schema_version`` and ``ptexport_migrations`` rows."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str
    default: int | None = None


@dataclass
class Schema:
    """The schema for one dialect: statements by kind, tables' columns in order."""

    dialect: str
    tables: dict[str, list[Column]] = field(default_factory=dict)
    table_sql: dict[str, str] = field(default_factory=dict)
    view_sql: dict[str, str] = field(default_factory=dict)
    index_sql: dict[str, str] = field(default_factory=dict)
    index_table: dict[str, str] = field(default_factory=dict)
    comment_sql: list[str] = field(default_factory=list)

    def columns(self, table: str) -> list[str]:
        return [c.name for c in self.tables[table]]

    def primary_key_sql(self) -> list[str]:
        """PostgreSQL: the primary keys to add after loading (DuckDB has none)."""
        return [s for s in map(self.primary_key_of, self.tables) if s is not None]

    def primary_key_of(self, table: str) -> str | None:
        """PostgreSQL: the statement adding ``table``'s primary key after loading (None: it has none)."""
        cols = self.tables[table]
        return f"ALTER TABLE {table} ADD PRIMARY KEY (id)" if cols and cols[0].name == "id" else None


def schema_text() -> str:
    return resources.files("ptexport").joinpath("schema.sql").read_text(encoding="utf-8")


def _select_dialect(text: str, dialect: str) -> str:
    out: list[str] = []
    keep = True
    for line in text.splitlines():
        s = line.strip()
        names = s[3:].split() if s.startswith("-- @") and s != "-- @end" else []
        if names and all(n.startswith("@") and n[1:] in DIALECTS for n in names):
            keep = f"@{dialect}" in names
            continue
        if s == "-- @end":
            keep = True
            continue
        if keep:
            out.append(line)
    return "\n".join(out)


def _statements(text: str) -> list[str]:
    stmts, cur = [], []
    for line in text.splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("--")):
            continue
        cur.append(line)
        if line.rstrip().endswith(";") and "--" not in line.split(";")[-1]:
            stmts.append("\n".join(cur).rstrip().rstrip(";"))
            cur = []
    if cur:
        stmts.append("\n".join(cur))
    return stmts


def _hex_for_sqlite(sql: str) -> str:
    return sql.replace("to_hex(", "printf('%x', ")


def _hex_for_duckdb(sql: str) -> str:
    """``to_hex(x)`` -> ``lower(to_hex(CAST(x AS BIGINT)))``: PostgreSQL's lower-case digits, and SQLite's
    64-bit two's complement of an integer column (DuckDB's to_hex of an INTEGER gives 32 bits)."""
    out, i = [], 0
    while (j := sql.find("to_hex(", i)) >= 0:
        k, depth = j + len("to_hex("), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[k], 0)
            k += 1
        out.append(f"{sql[i:j]}lower(to_hex(CAST({sql[j + len('to_hex('):k - 1]} AS BIGINT)))")
        i = k
    return "".join(out) + sql[i:]


_VIEW_FOR = {"sqlite": _hex_for_sqlite, "duckdb": _hex_for_duckdb}


@lru_cache(maxsize=None)
def load_schema(dialect: str) -> Schema:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}")
    text = _select_dialect(schema_text(), dialect)
    sch = Schema(dialect)
    for stmt in _statements(text):
        if m := _CREATE_TABLE.search(stmt):
            name = m.group(1)
            cols: list[Column] = []
            for line in stmt.splitlines()[1:]:
                cm = _COLUMN.match(line)
                if cm and not line.strip().startswith(")"):
                    ctype = cm.group(2)
                    if dialect != "sqlite" and _PK in line:
                        ctype = "bigint"
                    default = int(cm.group(3)) if cm.group(3) is not None else None
                    cols.append(Column(cm.group(1).strip('"'), ctype, (cm.group(4) or "").strip(), default))
            sch.tables[name] = cols
            if dialect != "sqlite":
                stmt = stmt.replace(_PK, "bigint NOT NULL")
            if dialect != "sqlite":  # PostgreSQL and DuckDB keep column comments
                for c in cols:
                    if c.doc:
                        doc = c.doc.replace("'", "''")
                        sch.comment_sql.append(f"COMMENT ON COLUMN {name}.\"{c.name}\" IS '{doc}'")
            sch.table_sql[name] = stmt
        elif m := _CREATE_VIEW.search(stmt):
            adapt = _VIEW_FOR.get(dialect)
            sch.view_sql[m.group(1)] = adapt(stmt) if adapt else stmt
        elif m := _CREATE_INDEX.search(stmt):
            sch.index_sql[m.group(1)] = stmt
            sch.index_table[m.group(1)] = m.group(2)
        else:  # pragma: no cover - schema.sql is ours
            raise ValueError(f"schema.sql: unexpected statement: {stmt[:60]!r}")
    return sch
