"""ptexport's own instruction-level corpus: program + scenario -> (code image, PT stream, expected flow).

A case is one assembly file in ``cases/`` (GNU as, Intel syntax), written here.  Comment lines of the
form ``# @key value`` describe the case (see README.md):

* the program is assembled with the machine's binutils at ``@org`` and run, instruction by
  instruction, in unicorn (the emulator the generator uses);
* ``@at LABEL[#N] EVENT ...`` lines script what the hardware does around the program (trace
  enable/disable, PSB, interrupts, overflows, power events, timing ...);
* an encoder turns the executed instructions and the scripted events into Intel PT packets by the
  SDM's rules (TNT for conditional branches and compressed returns, TIP for indirect and far
  transfers, FUP+TIP for asynchronous ones ...), written by ``ptexport synth``'s
  :class:`~ptexport.synth.ptencode.PacketWriter`;
* the expected flow, in ptxed's ``--no-inst`` format, comes from the same ground truth: the IPs the
  emulator executed while tracing was on, the scripted events in brackets.

Nothing here imports ptexport's decoders: the expected output never comes from the code under test.

Modules (one per concern):

* ``case``: Case, Event, directives, parsing, the event/directive registries;
* ``assemble``: binutils, the code image;
* ``truth``: the Truth core (emulation, encoder, expected lines), its extension points, build, dump_argv;
* ``flowctl``: IP compression, enable/disable, IP filtering, overflow variants, VMX;
* ``errata``: CPU errata (``--cpu``);
* ``errors``: decode errors and resynchronisation (@nomap, fault-* events);
* ``timing``: TSC/TMA/MTC/CYC/CBR, the decoder's time, --event:time/tick;
* ``power``: MWAIT/PWRE/EXSTOP/PWRX;
* ``perfmode``: the executed flow (Step), perf script's samples, perf.data wrapping.

The family modules register into the core when imported.  The import order below is the order their
Truth extensions nest in (errors, timing, flowctl, perfmode: earlier is outer) -- do not reorder.
"""

from __future__ import annotations

from .case import (AFTER_EVENTS, AT_EVENTS, CASE_DIRECTIVES, CASES, HERE, Case, CaseError, Event, after_event,
                   all_cases, at_event, parse_case)
from .assemble import ASSEMBLE_HOOKS, Image, assemble
from .truth import (BUILD_HOOKS, DUMP_ARGV_HOOKS, EXTENSIONS, K_CALL, K_CALL_IND, K_FAR, K_JCC, K_JMP,
                    K_JMP_IND, K_OTHER, K_RET, RUN_HOOKS, SPECIAL_INSNS, STACK_SIZE, STACK_TOP, Built,
                    Extension, Truth, build, dump_argv, normalize, register)
from . import errors, timing, power, flowctl, errata, perfmode  # noqa: E402,F401  (registration order)
from .errors import image_segments
from .timing import DecoderTime, HwClock, TimedWriter
from .errata import (_SKD007_CYC_BYTE, SKL168_CTC0, SKL168_MTC_SHIFT, SKL168_PTXED, SKL168_TSC0,
                     SKL168_TSC_PER_CTC, SKL168_TSC_PER_CYC)
from .perfmode import (PERF_PID, PF_ASYNC, PF_BRANCH, PF_CALL, PF_COND, PF_IN_TX, PF_INTR, PF_RETURN,
                       PF_SYSCALLRET, PF_TR_BEGIN, PF_TR_END, PF_TX_ABORT, Step, build_perf, perf_flags_text,
                       perf_samples, perf_script_lines, ptexport_branch_lines, wrap_perf)

__all__ = [
    "AFTER_EVENTS", "AT_EVENTS", "CASE_DIRECTIVES", "CASES", "HERE", "Case", "CaseError", "Event", "after_event",
    "all_cases", "at_event", "parse_case",
    "ASSEMBLE_HOOKS", "Image", "assemble",
    "BUILD_HOOKS", "DUMP_ARGV_HOOKS", "EXTENSIONS", "K_CALL", "K_CALL_IND", "K_FAR", "K_JCC", "K_JMP",
    "K_JMP_IND", "K_OTHER", "K_RET", "RUN_HOOKS", "SPECIAL_INSNS", "STACK_SIZE", "STACK_TOP", "Built",
    "Extension", "Truth", "build", "dump_argv", "normalize", "register",
    "image_segments", "DecoderTime", "HwClock", "TimedWriter",
    "_SKD007_CYC_BYTE", "SKL168_CTC0", "SKL168_MTC_SHIFT", "SKL168_PTXED", "SKL168_TSC0", "SKL168_TSC_PER_CTC",
    "SKL168_TSC_PER_CYC",
    "PERF_PID", "PF_ASYNC", "PF_BRANCH", "PF_CALL", "PF_COND", "PF_IN_TX", "PF_INTR", "PF_RETURN",
    "PF_SYSCALLRET", "PF_TR_BEGIN", "PF_TR_END", "PF_TX_ABORT", "Step", "build_perf", "perf_flags_text",
    "perf_samples", "perf_script_lines", "ptexport_branch_lines", "wrap_perf",
]

# The nesting order of the Truth extensions (see truth.py): the former wrappers' order.
assert [type(x).__module__.rsplit(".", 1)[-1] for x in EXTENSIONS] == ["errors", "timing", "flowctl", "perfmode"], \
    EXTENSIONS
