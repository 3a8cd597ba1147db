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
