"""The command-line front: exit codes and error rendering in one place."""

import io

from ptexport.cli import main
from ptexport.errors import InputError


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "ptexport" in capsys.readouterr().out


def test_no_arguments_prints_help():
    out = io.StringIO()
    assert main([], out=out) == 2
    assert "usage:" in out.getvalue()


def test_unknown_option_is_usage_error(capsys):
    assert main(["--no-such-option"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_input_error_names_source_offset_and_what():
    err = InputError("size 4 is below the 8-byte header", source="perf.data", offset=0x1F2C, what="record SAMPLE")
    assert str(err) == "perf.data+0x1f2c: record SAMPLE: size 4 is below the 8-byte header"
    moved = err.relocated(source="big.data", offset_base=0x1000)
    assert str(moved) == "big.data+0x2f2c: record SAMPLE: size 4 is below the 8-byte header"


def test_input_error_pickles_whole():
    """A worker's InputError (a --jobs pool's, a dask cluster's) is raised again with its what, where and why."""
    import pickle

    from ptexport.errors import TruncatedError

    err = TruncatedError("cut", source="perf.data", offset=0x10, what="record MMAP2")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is TruncatedError and str(back) == str(err) == "perf.data+0x10: record MMAP2: cut"
    assert (back.cause, back.source, back.offset, back.what) == ("cut", "perf.data", 0x10, "record MMAP2")


def test_numba_is_a_core_dependency_and_loads():
    """`pip install .` brings numba: the compiled decoder is what users get."""
    import importlib.metadata as md

    from ptexport import jit
    reqs = md.requires("ptexport") or []
    assert any(r.split(";")[0].strip().startswith("numba") and "extra" not in r for r in reqs), reqs
    assert jit.available() and jit.unavailable_reason() == ""


def test_reference_path_is_announced_on_stderr(monkeypatch, capsys, tmp_path):
    """Without a loadable numba, decoding says once on stderr that it runs the slow reference path."""
    import ptexport.cli as cli
    from ptexport import jit
    trace = tmp_path / "t.pt"
    trace.write_bytes(bytes([0x02, 0x82] * 8) + b"\x02\x23")
    monkeypatch.setattr(jit, "numba", None)
    monkeypatch.setattr(jit, "PROBLEM", "numba cannot be imported (test)")
    monkeypatch.setattr(cli, "_warned", False)
    assert cli.main(["dump", "packets", "--raw", str(trace)], io.StringIO()) == 0
    assert cli.main(["dump", "packets", "--raw", str(trace)], io.StringIO()) == 0
    err = capsys.readouterr().err
    assert err.count("slow reference path") == 1 and "numba cannot be imported (test)" in err
    monkeypatch.setattr(cli, "_warned", False)
    assert cli.main(["info", str(trace)], io.StringIO()) in (0, 1, 2, 3, 4)
    assert "slow reference path" not in capsys.readouterr().err


def test_a_run_ended_by_a_signal_prints_no_unraisable_traceback(tmp_path):
    """A signal can cut a library while it builds an object (numba's LLVM binding loading the
    kernels); the half-built object's ``__del__`` then fails at collection.  The run ends with the
    one ``interrupted`` line, not with "Exception ignored ... Traceback" (CI saw it once)."""
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import sys\n"
        "from ptexport import cli\n"
        "class HalfBuilt:\n"
        "    def __del__(self):\n"
        "        raise AttributeError('no _as_parameter_')\n"
        "def interrupted(argv, out, guard):\n"
        "    a = HalfBuilt(); a.me = a  # a cycle: collected by the gc, not at once\n"
        "    raise KeyboardInterrupt\n"
        "cli._main = interrupted\n"
        "cli.entry()\n"
    )
    import os
    from pathlib import Path

    import ptexport

    env = {**os.environ, "PYTHONPATH": str(Path(ptexport.__file__).parents[1])}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 130, r.stderr
    assert r.stderr == "ptexport: interrupted\n"


def test_subcommand_words_are_the_modules_names_and_only_the_one_given_is_imported():
    import subprocess
    import sys

    from ptexport import cli

    for word, name in cli.SUBCOMMANDS.items():
        assert cli._load(name).NAME == word
    code = ("import contextlib, io, sys\n"
            "from ptexport.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        main(['dump', 'branches', '--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('ptexport.cli.')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = r.stdout.strip()
    assert "ptexport.cli.dump_branches" in loaded, r.stderr
    assert "ptexport.cli.info" not in loaded and "ptexport.cli.synth" not in loaded, loaded
