"""Decoder error codes and status flags, with libipt's names and messages.

Inside the flow decoders an error is a :class:`FlowError` carrying one of the
``pte_*`` codes below; the ptxed-style output prints ``pt_errstr`` texts, and
library users get typed :mod:`ptexport.errors` exceptions from the CLI.
"""

from __future__ import annotations

# pt_error_code
INTERNAL = 1
INVALID = 2
NOSYNC = 3
BAD_OPC = 4
BAD_PACKET = 5
BAD_CONTEXT = 6
EOS = 7
BAD_QUERY = 8
NOMEM = 9
BAD_CONFIG = 10
NOIP = 11
IP_SUPPRESSED = 12
NOMAP = 13
BAD_INSN = 14
NO_TIME = 15
NO_CBR = 16
BAD_IMAGE = 17
BAD_LOCK = 18
NOT_SUPPORTED = 19
RETSTACK_EMPTY = 20
BAD_RETCOMP = 21
BAD_STATUS_UPDATE = 22
NO_ENABLE = 23
EVENT_IGNORED = 24
OVERFLOW = 25
BAD_FILE = 26
BAD_CPU = 27

ERRSTR = {
    0: "success",
    INTERNAL: "internal error",
    INVALID: "invalid argument",
    NOSYNC: "decoder out of sync",
    BAD_OPC: "unknown opcode",
    BAD_PACKET: "unknown packet",
    BAD_CONTEXT: "unexpected packet context",
    EOS: "reached end of trace stream",
    BAD_QUERY: "trace stream does not match query",
    NOMEM: "out of memory",
    BAD_CONFIG: "bad configuration",
    NOIP: "no ip",
    IP_SUPPRESSED: "ip has been suppressed",
    NOMAP: "no memory mapped at this address",
    BAD_INSN: "unknown instruction",
    NO_TIME: "no timing information",
    NO_CBR: "no core:bus ratio",
    BAD_IMAGE: "bad image",
    BAD_LOCK: "locking error",
    NOT_SUPPORTED: "not supported",
    RETSTACK_EMPTY: "compressed return without call",
    BAD_RETCOMP: "bad compressed return",
    BAD_STATUS_UPDATE: "bad status update",
    NO_ENABLE: "expected tracing enabled event",
    EVENT_IGNORED: "event ignored",
    OVERFLOW: "overflow",
    BAD_FILE: "bad file",
    BAD_CPU: "unknown cpu",
}

# pt_status_flag
EVENT_PENDING = 1
IP_SUPPRESSED_FLAG = 2
EOS_FLAG = 4


class FlowError(Exception):
    """A libipt-style decode error: ``code`` is a pte_* constant."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code
        super().__init__(ERRSTR.get(code, "internal error."))

    @property
    def text(self) -> str:
        return ERRSTR.get(self.code, "internal error.")
