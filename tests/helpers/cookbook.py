"""docs/cookbook.md and docs/cookbook-raw.md (the raw forms of the queries over the aggregates), read the one way.

    from cookbook import cookbook_queries, cookbook_sql
    cookbook_queries()   # {name: sql} of every named block of both files
    cookbook_sql()       # every ```sql block of both files, named or not
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
FILES = (DOCS / "cookbook.md", DOCS / "cookbook-raw.md")
_NAMED = re.compile(r"<!-- query: (\w+) -->\s*```sql\n(.*?)```", re.S)
_BLOCK = re.compile(r"```sql\n(.*?)```", re.S)


def cookbook_queries() -> dict[str, str]:
    queries: dict[str, str] = {}
    for f in FILES:
        text = f.read_text(encoding="utf-8")
        named = dict(_NAMED.findall(text))
        assert len(named) == len(_BLOCK.findall(text)), f"every SQL block of {f.name} is named and tested"
        assert not set(named) & set(queries), f"a query name of {f.name} is used twice"
        queries.update(named)
    return queries


def cookbook_sql() -> list[str]:
    return [sql for f in FILES for sql in _BLOCK.findall(f.read_text(encoding="utf-8"))]
