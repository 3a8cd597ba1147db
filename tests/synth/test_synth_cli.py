"""``ptexport synth``: the command line, and clear errors (no tracebacks) for bad input."""

from __future__ import annotations

import io
import json
import shutil
import subprocess

import pytest

from ptexport.cli import main
from ptxtest import REPO

SRC = REPO / "sample_data" / "src"
CFLAGS = ["-O1", "-static", "-nostdlib", "-fno-pie", "-no-pie", "-fcf-protection=none",
          "-fno-stack-protector", f"-I{SRC}"]


def run(argv, capsys):
    out = io.StringIO()
    rc = main(argv, out)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, out.getvalue(), err


def test_synth_writes_everything(tmp_path, capsys):
    rc, out, err = run(["synth", "--out", str(tmp_path), "--program", "calls", "--branches",
                        "5k", "--cpus", "2", "--no-retcomp", "--tnt", "short"], capsys)
    assert rc == 0, err
    assert "branches" in out and "perf.data" in out
    for name in ("perf.data", "calls", "truth.npz", "truth.json", "truth_insns.npz"):
        assert (tmp_path / name).exists(), name
    meta = json.loads((tmp_path / "truth.json").read_text())
    assert meta["options"]["retcomp"] is False and meta["options"]["tnt"] == "short"
    assert meta["branches"] >= 5000


@pytest.mark.parametrize("argv,needle", [
    (["--tnt", "huge"], "invalid choice"),
    (["--branches", "0"], "must be at least 1"),
    (["--branches", "many"], "not a number"),
    (["--program", "no-such-program"], "no program 'no-such-program'"),
    (["--mtc-period", "99"], "--mtc-period must be 0..15"),
    (["--cbr", "300"], "--cbr must be 1..255"),
    (["--program", "threads", "--replay", "on"], "cannot be replayed"),
    (["--replay", "on", "--ovf", "1"], "replay"),
])
def test_bad_options_are_clear_errors(tmp_path, capsys, argv, needle):
    rc, out, err = run(["synth", "--out", str(tmp_path / "o")] + argv, capsys)
    assert rc == 2 or rc == 1
    assert needle in err


def test_not_an_elf(tmp_path, capsys):
    bad = tmp_path / "prog"
    bad.write_bytes(b"#!/bin/sh\necho hi\n")
    rc, _, err = run(["synth", "--out", str(tmp_path / "o"), "--program", str(bad)], capsys)
    assert rc == 1 and "not a readable ELF file" in err


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")


def _build(tmp_path, name, body, static=True):
    src = tmp_path / f"{name}.c"
    src.write_text(body)
    exe = tmp_path / name
    flags = CFLAGS if static else ["-O1"]
    subprocess.run(["gcc", *flags, "-o", str(exe), str(src)], check=True, capture_output=True)
    return exe


@needs_gcc
@pytest.mark.parametrize("name,body,needle", [
    ("getpid", '#include "rt.h"\nint main(void){ return (int)sys3(39,0,0,0); }\n',
     "system call 39 at 0x"),
    ("ud2", '#include "rt.h"\nint main(void){ __asm__ volatile("ud2"); return 0; }\n',
     "the emulator cannot run it"),
    pytest.param("spin", '#include "rt.h"\nint main(void){ for(;;) __asm__ volatile(""); }\n',
                 "endless loop", marks=pytest.mark.slow),
])
def test_programs_the_emulator_cannot_run(tmp_path, capsys, name, body, needle):
    exe = _build(tmp_path, name, body)
    rc, _, err = run(["synth", "--out", str(tmp_path / "o"), "--program", str(exe)], capsys)
    assert rc == 1 and needle in err, err


@needs_gcc
def test_dynamic_program_is_refused(tmp_path, capsys):
    exe = _build(tmp_path, "dyn", "int main(void){ return 0; }\n", static=False)
    rc, _, err = run(["synth", "--out", str(tmp_path / "o"), "--program", str(exe)], capsys)
    assert rc == 1 and "static" in err


def test_named_programs_are_found_where_an_install_carries_them(tmp_path, monkeypatch):
    """Outside a checkout (no sample_data/), `--program calls` finds the copy setup.py put in the package."""
    from ptexport.errors import UsageError
    from ptexport.synth import model

    carried = tmp_path / "programs"
    carried.mkdir()
    (carried / "calls").write_bytes(b"\x7fELF")
    (carried / "calls").chmod(0o755)
    monkeypatch.setattr(model, "PROGRAM_DIRS", (tmp_path / "no-checkout", carried))
    assert model.find_program("calls") == carried / "calls"
    with pytest.raises(UsageError, match="one of calls"):
        model.find_program("nosuch")
