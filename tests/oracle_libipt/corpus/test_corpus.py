"""ptexport's own instruction-level corpus through ``dump insns --raw`` (insn and block decoders).

Each case in cases/ is assembled here, run in the emulator, encoded as Intel PT by the synth encoder,
and decoded by ptexport; the output must equal the flow the emulator executed (corpuslib), for
every CPU the case names (errata) and with both decoders.
"""

from __future__ import annotations

import difflib
import io
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpuslib as C  # noqa: E402

from ptexport.cli import main  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("as") is None or shutil.which("ld") is None,
                                reason="binutils (as, ld) not installed; .ci/run installs them")

CASES = C.all_cases()

# What the corpus must cover (issue #12): every name here is claimed by some case's @covers line.
REQUIRED = [
    "call_direct", "call_indirect", "ret_compressed", "ret_uncompressed",
    "ip-compression", "syscall", "sysret", "int", "iret", "interrupt",
    "tip_pge", "tip_pgd", "tip_pgd_noip", "fup-tip_pgd", "filtering",
    "ovf-fup", "ovf-tip_pge", "resync-on-error", "nomap", "bad_query",
    "tsx-begin", "tsx-commit", "tsx-abort", "pip", "vmcs", "vm-entry", "vm-exit",
    "ptwrite", "ptw-fup", "mwait", "pwre", "pwrx", "exstop",
    "cbr", "tsc", "mtc", "cyc", "tma", "event-time", "event-tick",
    "32-bit", "16-bit",
    # CPU errata ptexport works around with --cpu (the manifest's names)
    "apl11", "apl12", "bdm64", "bdm70", "skd007", "skd010", "skd022", "skl014", "skl168", "skz84",
]

_built: dict[str, C.Built] = {}


def built(case: C.Case, tmp_path_factory) -> C.Built:
    if case.name not in _built:
        _built[case.name] = C.build(case, tmp_path_factory.mktemp(case.name))
    return _built[case.name]


def _params():
    out = []
    for case in CASES:
        for cpu in case.cpus or [None]:
            for block in (False, True):
                tag = f"{case.name}{'-cpu_' + cpu.replace('/', '_') if cpu else ''}-{'block' if block else 'insn'}"
                out.append(pytest.param(case, cpu, block, id=tag))
    return out


def decode(b: C.Built, cpu, block) -> list[str]:
    out = io.StringIO()
    rc = main(C.dump_argv(b, block=block, cpu=cpu), out)
    assert rc == 0
    return C.normalize(out.getvalue())


@pytest.mark.parametrize("case,cpu,block", _params())
def test_corpus_flow(case, cpu, block, tmp_path_factory):
    b = built(case, tmp_path_factory)
    exp = C.normalize("\n".join(b.expected))
    got = decode(b, cpu, block)
    if got != exp:
        diff = "\n".join(difflib.unified_diff(exp, got, "emulator", "ptexport", lineterm="", n=2))
        pytest.fail(f"{case.name}: decoded flow differs from the emulator's\n{diff}")


def test_corpus_covers_required():
    covered = {c for case in CASES for c in case.covers}
    missing = [r for r in REQUIRED if r not in covered]
    assert not missing, f"no corpus case covers {missing}"


def test_corpus_cases_trace_something(tmp_path_factory):
    """Every case executes instructions and expects some of them in the flow."""
    for case in CASES:
        b = built(case, tmp_path_factory)
        assert b.executed > 0, case.name
        assert any(not line.startswith("[") for line in b.expected) or case.name.startswith("ptw"), case.name
