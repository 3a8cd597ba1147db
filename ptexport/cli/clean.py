"""``ptexport clean DIR|DB|URL``: remove what exports that died (SIGKILL, a crash) left behind."""

from __future__ import annotations

NAME = "clean"
HELP = "remove the temporary files or databases of exports that died (their process is gone)"


def add_arguments(parser) -> None:
    parser.add_argument("target", metavar="DIR|DB|URL",
                        help="a directory (every target in it), a SQLite database path, or postgresql://user@host/dbname")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")


def run(args, out) -> int:
    from ptexport.cli.export import _mib
    from ptexport.writers import clean

    report = clean(args.target, dry_run=args.dry_run)
    for target in report.busy:
        print(f"busy: {target} (an export is writing it: left alone)", file=out)
    verb = "would remove" if args.dry_run else "removed"
    kept = []
    for x in report.leftovers:
        if not args.dry_run and not x.removed:
            kept.append(x)
            continue
        what = {"lock": "stale lock", "database": "temporary database"}.get(x.kind, "temporary")
        pid = f"pid {x.pid}, " if x.pid else ""
        print(f"{verb}: {x.what} ({what}, {pid}{_mib(x.size)})", file=out)
    for x in kept:
        print(f"cannot remove: {x.what}", file=out)
    done = [x for x in report.leftovers if args.dry_run or x.removed]
    if not done:
        print(f"{args.target}: nothing to clean", file=out)
    else:
        print(f"{args.target}: {verb} {len(done)} ({_mib(sum(x.size for x in done))})", file=out)
    return 1 if kept else 0
