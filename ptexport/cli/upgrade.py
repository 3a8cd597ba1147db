"""``ptexport upgrade DB``: bring a perf- or older ptexport-made database to the current schema."""

from __future__ import annotations

NAME = "upgrade"
HELP = "upgrade a database made by perf's export scripts or an older ptexport to the current schema"


def add_arguments(parser) -> None:
    parser.add_argument("db", metavar="DB", help="SQLite database file or postgresql://user@host/dbname")
    parser.add_argument("--dry-run", action="store_true", help="list the migrations that would run, change nothing")


def run(args, out) -> int:
    from ptexport.writers.migrate import upgrade

    names = upgrade(args.db, dry_run=args.dry_run)
    if not names:
        print(f"{args.db}: already up to date", file=out)
    for name in names:
        print(f"{'pending' if args.dry_run else 'applied'}: {name}", file=out)
    return 0
