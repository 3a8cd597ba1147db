"""``ptexport convert DB OUT``: an existing export written again into DuckDB, Parquet or another database."""

from __future__ import annotations

import sys

NAME = "convert"
HELP = "write an existing export (SQLite, PostgreSQL or DuckDB) into a DuckDB file, Parquet files or another database"


def add_arguments(parser) -> None:
    parser.add_argument("source", metavar="DB", help="the export to read: SQLite file, postgresql://user@host/dbname "
                                                     "or NAME.duckdb (current schema: see ptexport upgrade)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("out", metavar="OUT", nargs="?",
                       help="the target, as --db takes it: NAME.duckdb (or duckdb:PATH), a SQLite file or a URL")
    where.add_argument("--parquet", metavar="DIR",
                       help="a directory of Parquet files (one per table, samples partitioned by cpu, schema.json)")
    parser.add_argument("-f", "--force", action="store_true", help="replace an existing target")
    parser.add_argument("-q", "--quiet", action="store_true", help="no summary")


def run(args, out) -> int:
    from ptexport.writers.convert import convert

    target = f"parquet:{args.parquet}" if args.parquet is not None else args.out
    summary = convert(args.source, target, force=args.force)
    if summary.rows and not args.quiet:
        rows = ", ".join(f"{k} {v}" for k, v in summary.rows.items())
        out.write(f"{summary.target}: {rows}; {summary.seconds:.2f} s\n")
    elif not args.quiet:
        print(f"{summary.target}: written ({summary.seconds:.2f} s)", file=sys.stderr)
    return 0
