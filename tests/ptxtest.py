"""Shared test helpers: corpus paths, perf availability, perf's Python environment.

Imported by name (``from ptxtest import ...``): a module called ``conftest`` would be
shadowed by the conftest.py files of sub-folders.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PTEXPORT_SHARED", REPO.parent / "shared"))
TESTDATA = SHARED / "testdata"
QUIPPER = TESTDATA / "perf-quipper" / "perf.data.intel_pt-4.14"
LIBIPT = TESTDATA / "libipt"

HAVE_PERF = shutil.which("perf") is not None

needs_perf = pytest.mark.skipif(not HAVE_PERF, reason="perf (Debian linux-perf) is not installed")


def slow_after(values, keep: int = 1, unpack: bool = False) -> list:
    """The cases of a parametrized matrix with all but the first ``keep`` marked ``slow``: the quick loop
    (``-m "not slow"``) runs one representative, the default run (and CI) every case.  ``unpack``: each
    value is a tuple of several argnames' values.  Ids are the ones the bare values get."""
    out = []
    for i, v in enumerate(values):
        if i < keep:
            out.append(v)
        elif isinstance(v, type(pytest.param(0))):
            out.append(pytest.param(*v.values, marks=[*v.marks, pytest.mark.slow], id=v.id))
        else:
            out.append(pytest.param(*(v if unpack else (v,)), marks=pytest.mark.slow))
    return out


def perf_python_env() -> dict[str, str]:
    """Environment for perf's embedded (Debian) Python, e.g. for export-to-sqlite.py.

    perf's embedded interpreter finds its prefix through the first ``python3`` on
    PATH; with pyenv or a virtualenv first it would load that library, which has
    no PySide2.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    return env


# ---------------------------------------------------------------- damaged recordings

def collapse_lines(text: str) -> list[str]:
    """Non-blank lines with runs of blanks collapsed (perf script pads its columns)."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def damage_aux(data: bytes, spans, rng) -> bytes:
    """1-8 byte flips, PAD runs or garbage runs, inside AUXTRACE payloads only (the file stays well formed).

    The draws from ``rng`` are part of the contract: the same seed gives the same damaged file.
    """
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        start, size = rng.choice(spans)
        i = start + rng.randrange(size)
        kind = rng.random()
        if kind < 0.5:
            b[i] = rng.randrange(256)  # one byte flipped
        elif kind < 0.75:
            n = min(rng.randint(1, 200), start + size - i)
            b[i:i + n] = bytes(n)  # a run of PAD
        else:
            n = min(rng.randint(1, 32), start + size - i)
            b[i:i + n] = bytes(rng.randrange(256) for _ in range(n))  # garbage
    return bytes(b)


def mutate_trace(trace: bytes, rng, max_edits: int) -> bytes:
    """1..max_edits random edits of a PT stream: a byte changed (1/2), 1-8 bytes deleted or inserted, or a
    prefix of the trace spliced in (a PSB+ in the middle); never empty."""
    buf = bytearray(trace)
    for _ in range(rng.randint(1, max_edits)):
        kind = rng.random()
        pos = rng.randrange(len(buf))
        if kind < 0.5:
            buf[pos] = rng.randrange(256)
        elif kind < 0.7:
            del buf[pos:pos + rng.randint(1, 8)]
        elif kind < 0.9:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            buf[pos:pos] = trace[: rng.randint(16, len(trace))]
        if not buf:
            buf = bytearray(trace)
    return bytes(buf)


def kernel_traced(data: bytes) -> bytes:
    """Clear exclude_kernel in every perf_event_attr of a file-mode perf.data (the attrs section)."""
    import struct

    from ptexport.perfdata.constants import AttrFlag

    b = bytearray(data)
    attr_size, off, size = struct.unpack_from("<QQQ", b, 16)
    for at in range(off, off + size, attr_size):
        (flags,) = struct.unpack_from("<Q", b, at + 40)
        struct.pack_into("<Q", b, at + 40, flags & ~(1 << AttrFlag.EXCLUDE_KERNEL))
    return bytes(b)


#: perf script's fields for branch-line comparisons with times (``--ns``)
BRANCH_FIELDS = ["-F", "pid,tid,cpu,time,ip,addr,flags", "--ns"]


def perf_branch_lines(path) -> list[str]:
    """perf script --itrace=be lines (BRANCH_FIELDS), blanks collapsed."""
    import subprocess

    r = subprocess.run(["perf", "script", "-i", str(path), "--itrace=be", *BRANCH_FIELDS], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-500:]
    return collapse_lines(r.stdout)


def our_branch_lines(path) -> list[str]:
    """ptexport dump branches --itrace=be --jobs 1 lines, blanks collapsed (in this process)."""
    import io

    from ptexport.cli import main

    out = io.StringIO()
    assert main(["dump", "branches", "--jobs", "1", str(path), "--itrace=be"], out=out) == 0, out.getvalue()[-500:]
    return collapse_lines(out.getvalue())


def first_difference(mine: list[str], theirs: list[str]) -> str:
    """An assertion message: line counts and the first line that differs."""
    i = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
    return (f"{len(mine)} lines vs perf's {len(theirs)}; first difference at line {i}:\n"
            f"  ours: {mine[i] if i < len(mine) else None}\n  perf: {theirs[i] if i < len(theirs) else None}")


# ---------------------------------------------------------------- the project's own corpus

def corpus_build(name: str, workdir: Path):
    """Build ``tests/corpus/cases/NAME.s`` (assemble, emulate, encode) into ``workdir``.

    Returns corpuslib's ``Built``: ``pt_path``, ``expected`` (ptxed lines), ``image`` (code, org,
    labels); :func:`corpus_image` gives the decoder's image (without the case's @nomap holes).
    """
    import sys

    corpus = str(REPO / "tests" / "oracle_libipt" / "corpus")
    if corpus not in sys.path:
        sys.path.insert(0, corpus)
    import corpuslib

    return corpuslib.build(corpuslib.parse_case(corpuslib.CASES / f"{name}.s"), Path(workdir))


def corpus_segments(built) -> list[tuple[bytes, int]]:
    """The code a built corpus case gives the decoder: (bytes, address) pieces."""
    import corpuslib

    return corpuslib.image_segments(built)


def corpus_image(built, name: str | None = None):
    """A fresh :class:`ptexport.images.image.Image` with a built corpus case's code."""
    from ptexport.images.image import Image

    image = Image(name) if name is not None else Image()
    for code, org in corpus_segments(built):
        image.add_bytes(code, org)
    return image
