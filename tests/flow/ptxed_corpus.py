"""The libipt ptxed corpus: manifest rows -> (exp file, ptexport dump insns argv)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def read_manifest(libipt: Path):
    rows = []
    lines = (libipt / "manifest.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    for line in lines[1:]:
        cols = line.split("\t")
        cols += [""] * (len(head) - len(cols))
        rows.append(dict(zip(head, cols)))
    return rows


_CPU_RE = re.compile(r"-ptxed-cpu_(\d+)_(\d+)(?:_(\d+))?\.exp$")


def ptxed_cases(libipt: Path):
    """(exp path, argv for ``ptexport dump insns``) for every ptxed .exp file."""
    cases = []
    for row in read_manifest(libipt):
        d = libipt / row["dir"]
        t = row["test"]
        for exp in row["exp_files"].split():
            if "-ptxed" not in exp:
                continue
            argv = ["dump", "insns", "--raw", str(d / f"{t}.pt"),
                    "--image", f"{d / (t + '.bin')}:{row['org']}"]
            m = _CPU_RE.search(exp)
            if m:
                argv += ["--cpu", "/".join(g for g in m.groups() if g is not None)]
            opts = shlex.split(row["ptxed_opts"])
            i = 0
            while i < len(opts):
                o = opts[i]
                if o == "--raw":
                    # ptxed's --raw FILE:OFFSET:ADDR loads more code.
                    f, rest = opts[i + 1].split(":", 1)
                    argv += ["--image", f"{d / f}:{rest}"]
                    i += 2
                    continue
                argv.append(o)
                i += 1
            for sb in row.get("sb_files", "").split():
                kind = "--pevent:secondary" if "-pevent-secondary," in sb else "--pevent:primary"
                argv += [kind, str(d / sb)]
            cases.append((d / exp, argv, row))
    return cases


def normalize(text: str):
    """Lines with runs of whitespace collapsed (the corpus pads columns)."""
    out = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            out.append(line)
    return out
