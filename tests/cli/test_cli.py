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
