"""``ptexport check DB...``: PRAGMA integrity_check (full) and the header against the file size."""

from __future__ import annotations

NAME = "check"
HELP = "check SQLite databases: PRAGMA integrity_check and the header's page count (exit 1 if one fails)"


def add_arguments(parser) -> None:
    parser.add_argument("dbs", metavar="DB", nargs="+", help="SQLite database file")


def run(args, out) -> int:
    import os

    from ptexport.errors import UsageError
    from ptexport.writers.verify import check_database

    for db in args.dbs:
        if not os.path.isfile(db):
            raise UsageError(f"{db}: no such database")
    failed = 0
    for db in args.dbs:
        problems = check_database(db)
        if not problems:
            print(f"{db}: ok", file=out)
            continue
        failed += 1
        for p in problems:
            print(f"{db}: {p}", file=out)
    return 1 if failed else 0
