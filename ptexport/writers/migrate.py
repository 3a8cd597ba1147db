"""Named, re-runnable migrations (``migrations/NNNN_name.py``) and ``ptexport upgrade DB``.

Each migration module defines ``migrate(db: MigrationDb) -> None`` and a
docstring.  Applied names are recorded in ``ptexport_migrations``; running
the upgrade again applies only the ones not recorded (sqlite-utils' way).
Migrations check before they change (a column already there is left alone),
so a database written by perf's export-to-sqlite.py / export-to-postgresql.py,
or by any older ptexport, reaches the current schema.

Safety: a SQLite database is upgraded in a copy that replaces the original
only when every migration succeeded (and, with ``verify`` or
``$PTEXPORT_VERIFY_DB``, the copy passes :mod:`ptexport.writers.verify`'s
check); PostgreSQL upgrades run in one transaction.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptexport.errors import ExportError, InputError, UsageError
from ptexport.writers.schema import SCHEMA_VERSION, Schema, load_schema, utc_now
from ptexport.writers.verify import require_sound, verify_requested
from ptexport.writers.targets import is_postgres_target, parse_target, target_kind

MIGRATIONS_TABLE = "ptexport_migrations"


@dataclass(frozen=True)
class Migration:
    name: str
    doc: str
    func: Callable[["MigrationDb"], None]


def migrations_dir() -> Path:
    """Where the migration modules are: $PTEXPORT_MIGRATIONS, the installed package, or the repo."""
    env = os.environ.get("PTEXPORT_MIGRATIONS")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("ptexport_migrations")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(__file__).resolve().parents[2] / "migrations"


def load_migrations(directory: Path | None = None) -> list[Migration]:
    directory = directory or migrations_dir()
    if not directory.is_dir():
        raise ExportError(f"migrations directory {directory} not found")
    out = []
    for path in sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.py")):
        spec = importlib.util.spec_from_file_location(f"ptexport_migration_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.append(Migration(path.stem, (mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else "",
                             mod.migrate))
    return out


class MigrationDb:
    """What a migration sees: the dialect, the current schema, introspection and execute."""

    def __init__(self, dialect: str, conn: Any) -> None:
        self.dialect = dialect
        self.conn = conn
        self.schema: Schema = load_schema(dialect)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.dialect == "postgresql":
            sql = sql.replace("?", "%s")
        # psycopg without parameters does not look for placeholders: a '%' is the operator
        cur = self.conn.execute(sql, tuple(params)) if params or self.dialect != "postgresql" else self.conn.execute(sql)
        if cur.description is None:  # a statement without rows (DDL, UPDATE ...)
            return []
        return list(cur.fetchall())

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self.dialect == "postgresql":
            with self.conn.cursor() as cur:
                cur.executemany(sql.replace("?", "%s"), rows)
        else:
            self.conn.executemany(sql, rows)

    def tables(self) -> set[str]:
        if self.dialect == "sqlite":
            return {r[0] for r in self.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {r[0] for r in self.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
            "AND table_type = 'BASE TABLE'")}

    def views(self) -> set[str]:
        if self.dialect == "sqlite":
            return {r[0] for r in self.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
        return {r[0] for r in self.execute(
            "SELECT table_name FROM information_schema.views WHERE table_schema = current_schema()")}

    def columns(self, table: str) -> list[str]:
        if self.dialect == "sqlite":
            return [r[1] for r in self.execute(f"PRAGMA table_info({table})")]
        return [r[0] for r in self.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = ? ORDER BY ordinal_position", (table,))]

    def create_table(self, name: str) -> None:
        self.execute(self.schema.table_sql[name])
        if self.dialect == "postgresql":
            self.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id)") if self.schema.columns(name)[0] == "id" else None

    def create_missing_views(self, names: Sequence[str] | None = None) -> list[str]:
        have = self.views()
        made = []
        for name, sql in self.schema.view_sql.items():
            if (names is None or name in names) and name not in have:
                self.execute(sql)
                made.append(name)
        return made

    def add_column(self, table: str, column: str, default: Any = None) -> bool:
        """Add a trailing column (type from schema.sql) unless it is there; True if added."""
        if column in self.columns(table):
            return False
        ctype = next(c.type for c in self.schema.tables[table] if c.name == column)
        dflt = "" if default is None else f" DEFAULT {default}"
        self.execute(f'ALTER TABLE {table} ADD COLUMN "{column}" {ctype}{dflt}')
        return True


def _applied(db: MigrationDb) -> set[str]:
    if MIGRATIONS_TABLE not in db.tables():
        db.create_table(MIGRATIONS_TABLE)
        return set()
    return {r[0] for r in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}


def _run(db: MigrationDb, migrations: list[Migration], dry_run: bool) -> list[str]:
    done = _applied(db)
    pending = [m for m in migrations if m.name not in done]
    if dry_run:
        return [m.name for m in pending]
    for m in pending:
        m.func(db)
        db.execute(f"INSERT INTO {MIGRATIONS_TABLE} (name, applied) VALUES (?, ?)", (m.name, utc_now()))
    if pending or "schema_version" in db.tables():
        rows = db.execute("SELECT MAX(version) FROM schema_version") if "schema_version" in db.tables() else [(None,)]
        if rows[0][0] is None or rows[0][0] < SCHEMA_VERSION:
            db.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (SCHEMA_VERSION, "ptexport upgrade", utc_now()))
    return [m.name for m in pending]


def _check_sqlite(path: Path) -> None:
    if not path.exists():
        raise UsageError(f"{path}: no such database")
    with open(path, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise InputError("not a SQLite database", source=str(path), offset=0)


def upgrade(target: str, *, dry_run: bool = False, migrations: list[Migration] | None = None,
            verify: bool | None = None) -> list[str]:
    """Bring ``target`` to the current schema; returns the names of the migrations applied (or pending).

    ``verify`` (None: as ``$PTEXPORT_VERIFY_DB`` says): the upgraded SQLite copy must pass
    ``PRAGMA integrity_check`` before it replaces the original.
    """
    migrations = load_migrations() if migrations is None else migrations
    if is_postgres_target(target):
        return _upgrade_postgres(target, dry_run, migrations)
    if target_kind(target) in ("duckdb", "parquet"):
        raise UsageError(f"{target}: DuckDB and Parquet exports are written with the current schema; upgrade "
                         "takes SQLite and PostgreSQL databases (`ptexport convert` an upgraded one to make a new "
                         "DuckDB or Parquet copy)")
    path = Path(target)
    _check_sqlite(path)
    tmp = path.with_name(f".{path.name}.ptexport-upgrade-{os.getpid()}")
    if dry_run:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            db = MigrationDb("sqlite", conn)
            done = {r[0] for r in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")} \
                if MIGRATIONS_TABLE in db.tables() else set()
            return [m.name for m in migrations if m.name not in done]
        except sqlite3.Error as e:
            raise ExportError(f"{target}: cannot read it: {e}") from e
        finally:
            conn.close()
    try:
        shutil.copy2(path, tmp)
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            _require_perf_tables(MigrationDb("sqlite", conn), target)
            conn.execute("BEGIN")
            names = _run(MigrationDb("sqlite", conn), migrations, False)
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise ExportError(f"{target}: upgrade failed: {e}") from e
        finally:
            conn.close()
        if verify_requested(verify):
            require_sound(tmp, target, "the upgraded database", source=path)
        os.replace(tmp, path)
        return names
    finally:
        if tmp.exists():
            tmp.unlink()


def _require_perf_tables(db: MigrationDb, target: str) -> None:
    missing = {"samples", "threads", "comms", "machines"} - db.tables()
    if missing:
        raise InputError(f"not a perf or ptexport export database (no {', '.join(sorted(missing))} table)",
                         source=target)


def _upgrade_postgres(target: str, dry_run: bool, migrations: list[Migration]) -> list[str]:
    import psycopg  # ~0.6 s to import: only for a PostgreSQL target

    params = parse_target(target)
    try:
        conn = psycopg.connect(**params)
    except psycopg.Error as e:
        raise ExportError(f"{target}: cannot connect: {str(e).strip()}") from e
    try:
        db = MigrationDb("postgresql", conn)
        _require_perf_tables(db, target)
        names = _run(db, migrations, dry_run)
        if dry_run:
            conn.rollback()
        else:
            conn.commit()
        return names
    except psycopg.Error as e:
        conn.rollback()
        raise ExportError(f"{target}: upgrade failed: {str(e).strip()}") from e
    finally:
        conn.close()
