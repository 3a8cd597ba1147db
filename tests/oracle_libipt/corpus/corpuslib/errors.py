"""Decode errors and resynchronisation: no-map, bad query, bad status; ptxed's error lines and recovery.

Faults make the trace disagree with the code in a defined way:

* ``# @nomap START END``: the code between the labels START and END runs (and is traced) but is left
  out of the image the decoder gets (two ``--image`` files around the hole, :func:`image_segments`),
  so the decoder hits "no memory mapped at this address" where the flow first enters it;
* ``@after LABEL fault-tip``: a conditional branch gets a TIP (to its real successor) instead of its
  TNT bit; ``@after LABEL fault-tnt``: an indirect branch gets a TNT bit instead of its TIP;
  ``@after LABEL fault-drop``: the branch's packet is missing.  The decoder's query at that branch
  does not match the trace ("trace stream does not match query");
* ``@at LABEL fault-psb-mode MODE``: a PSB+ whose MODE.Exec disagrees with the code ("bad status
  update" where the decoder binds the PSB+).

The expected lines come from the recorded packets and the emulator's flow (libipt's ptxed
conventions): the error line ``[<offset>, <ip>: error: <text>]`` carries the IP where the decoder
stands (the unmapped instruction, or the branch whose query failed) and the offset ptxed reports:
that of the packet the decoder holds after reading ahead to the next event (a TIP/FUP/TIP.PGE-ended
event: its last packet; PSB+: its PSBEND; a TNT, a lone TIP.PGD, an OVF without FUP: the packet after
it).  Recovery: without ``--resync-on-error`` nothing until the next PSB after that packet, then the
flow from there; with it, the flow continues at the next event that gives an IP (TNT skipped, TIP: its
target, FUP+TIP: the interrupt, OVF, PSB+ with FUP, TIP.PGE after a "[disabled]", TIP.PGD:
"[disabled]", MODE.TSX/PTWRITE+FUP: that event at its IP).

Truth extension (:class:`_Resync`, only for cases with faults): a :class:`_Recorder` is made when the
run starts; it sees every line as written (before timing.py stamps it, so it is registered first) and
every instruction line's IP; when the run ends, the expected lines are replaced by its replay.

Kept wrapper: the recorder wraps the packet methods of that one run's ``PacketWriter`` instance
(``flush_tnt`` and :data:`_PKT_METHODS`) to note each packet's kind, IP and offset.  That is an
instance-level recording proxy, not a Truth method: every family writes packets through ``t.pw``
(including timing.py's ``TimedWriter``), and the writer (``ptexport.synth.ptencode``) has no hooks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptexport.synth import ptencode as _pe

from .case import CASE_DIRECTIVES, Case, CaseError, Event, after_event, at_event
from .truth import (BUILD_HOOKS, K_CALL_IND, K_FAR, K_JCC, K_JMP_IND, K_RET, Built, Extension, Truth, _kind,
                    register)

_FAULT_NOMAP = "no memory mapped at this address"
_FAULT_QUERY = "trace stream does not match query"
_PKT_METHODS = ("ip_packet", "psb", "psbend", "mode_exec", "mode_exec64", "mode_tsx", "pip", "vmcs",
                "tracestop", "mnt", "cfe", "evd", "pad", "ovf", "tsc", "tma", "mtc", "cyc", "cbr",
                "ptwrite", "mwait", "pwre", "exstop", "pwrx")
_IP_KIND = {_pe.OP_TIP: "tip", _pe.OP_TIP_PGE: "tip_pge", _pe.OP_TIP_PGD: "tip_pgd", _pe.OP_FUP: "fup"}
_TIMING = ("pad", "tsc", "tma", "mtc", "cyc", "mode_exec", "mode_exec64", "mnt")


def _nomap_directive(case: Case, words: list[str]) -> None:
    case.extra.setdefault("nomap", []).append((words[0], words[1]))


CASE_DIRECTIVES["nomap"] = _nomap_directive


def _has_faults(case: Case) -> bool:
    return bool(case.extra.get("nomap")) or any(ev.name.startswith("fault-") for ev in case.events)


@dataclass
class _Pkt:
    off: int
    kind: str
    ip: int | None = None
    flag: bool = False        # PTWRITE: IP bit


class _Recorder:
    """Packets as written (with offsets) and the expected lines around them, in order."""

    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.pkts: list[_Pkt] = []
        self.tl: list[tuple] = []     # ("pkt", index) | ("line", text, insn_ip, npkts, tnt) | ("fault", ...)
        self.depth = 0
        self.insn_ip = None
        pw = truth.pw
        orig_flush = pw.flush_tnt

        def flush_tnt():
            if pw.tnt_pending:
                off = len(pw.buf)
                orig_flush()
                self.add(_Pkt(off, "tnt"))

        pw.flush_tnt = flush_tnt
        for name in _PKT_METHODS:
            setattr(pw, name, self._wrap(pw, name, getattr(pw, name)))

    def on_line(self, s: str) -> None:
        """A line is written (_Resync.line): note it with the packets before it."""
        ip, self.insn_ip = self.insn_ip, None
        self.tl.append(("line", s, ip, len(self.pkts), self.truth.pw.tnt_pending))

    def on_insn_line(self, ip: int) -> None:
        """The next line is the instruction at ``ip`` (_Resync.before_insn_line)."""
        self.insn_ip = ip

    def add(self, pkt: _Pkt) -> None:
        self.tl.append(("pkt", len(self.pkts)))
        self.pkts.append(pkt)

    def _wrap(self, pw, name, fn):
        def wrapped(*args, **kw):
            if self.depth:
                return fn(*args, **kw)
            pw.flush_tnt()
            off = len(pw.buf)
            self.depth += 1
            try:
                r = fn(*args, **kw)
            finally:
                self.depth -= 1
            if len(pw.buf) > off or name == "pad":
                if name == "ip_packet":
                    self.add(_Pkt(off, _IP_KIND[args[0]], args[1]))
                elif name == "ptwrite":
                    self.add(_Pkt(off, "ptw", None, bool(kw.get("ip", args[2] if len(args) > 2 else False))))
                else:
                    self.add(_Pkt(off, name))
            return r
        return wrapped

    def fault(self, kind: str, ip: int, through_tnt: bool = False) -> None:
        self.truth.pw.flush_tnt()
        self.tl.append(("fault", kind, ip, len(self.pkts), through_tnt))

    # -- what the decoder sees ------------------------------------------------------------------
    def off(self, i: int) -> int:
        return self.pkts[i].off if i < len(self.pkts) else len(self.truth.pw.buf)

    def consumed(self, npkts: int, tnt: int) -> int:
        """Index of the first packet the decoder has not consumed (pending TNT bits: their packet is)."""
        if not tnt:
            return npkts
        for i in range(npkts, len(self.pkts)):
            if self.pkts[i].kind == "tnt":
                return i + 1
        raise CaseError(f"{self.truth.case.name}: TNT bits never written")

    def event(self, i: int) -> dict | None:
        """The event the decoder reads ahead to from packet ``i``: kind, first/last packet, offset, ip."""
        pk, n = self.pkts, len(self.pkts)
        start, bound, fup, bfirst = i, None, None, i
        while i < n:
            p = pk[i]
            k = p.kind
            if k in _TIMING:
                i += 1
                continue
            ev = dict(first=start, last=i, ip=p.ip, kind=k)
            if k == "tnt":
                return ev | dict(offset=self.off(i + 1))
            if k == "tip":
                if fup is not None:
                    return ev | dict(kind="async_branch", first=fup, ip=pk[fup].ip, to=p.ip, offset=p.off)
                return ev | dict(offset=p.off)
            if k == "tip_pge":
                return ev | dict(kind="enabled", offset=p.off)
            if k == "tip_pgd":
                if fup is not None:
                    return ev | dict(kind="async_disabled", offset=p.off)
                return ev | dict(kind="disabled", offset=self.off(i + 1))
            if k == "fup":
                if bound is not None:
                    return ev | dict(kind=bound, first=bfirst, offset=p.off)
                fup = i
                i += 1
                continue
            if k == "psb":
                j = i
                hdr_ip = None
                while j < n and pk[j].kind != "psbend":
                    if pk[j].kind == "fup":
                        hdr_ip = pk[j].ip
                    j += 1
                return dict(kind="psb", first=i, last=j, ip=hdr_ip, offset=self.off(j))
            if k == "mode_tsx":
                bound = "tsx"
            elif k == "ptw" and p.flag:
                bound = "ptwrite"
            elif k == "ovf":
                bound = "overflow"
                nxt = next((q for q in pk[i + 1:] if q.kind not in ("pad", "tsc", "tma", "mtc", "cyc", "cbr")), None)
                if nxt is None or nxt.kind != "fup":
                    return ev | dict(kind="overflow", ip=None, offset=self.off(i + 1))
            elif k in ("ptw", "cbr", "pwrx", "tracestop"):
                return ev | dict(kind=k, ip=None, offset=self.off(i + 1))
            else:
                raise CaseError(f"{self.truth.case.name}: resync model does not know packet {k!r}")
            bfirst = i
            i += 1
        return None

    def recovery(self, ev: dict | None, err_off: int, resync: bool):
        """(packet index to go on after, extra lines) or None (no more flow)."""
        if not resync:
            for i, p in enumerate(self.pkts):
                if p.kind == "psb" and p.off > err_off:
                    return i, []
            return None
        while ev is not None:
            k = ev["kind"]
            if k == "tip" and ev["ip"] is not None:
                return ev["last"], []
            if k == "enabled":
                return ev["last"], ["[disabled]"]
            if k in ("disabled", "async_branch"):
                return ev["first"], []
            if k == "overflow":
                return ev["first"], []
            if k == "psb" and ev["ip"] is not None:
                return ev["first"], []
            if k in ("tsx", "ptwrite"):
                return ev["first"], ["@insn-at-ip"]
            ev = self.event(ev["last"] + 1)
        return None

    # -- the expected lines ---------------------------------------------------------------------
    def replay(self) -> list[str]:
        case = self.truth.case
        resync = "--resync-on-error" in case.ptxed
        holes = [(self.truth.labels[a], self.truth.labels[b]) for a, b in case.extra.get("nomap", [])]
        out: list[str] = []
        lost = None          # packet index where the flow comes back
        last_insn = None     # the last instruction line seen (ip, text), lost or not
        fresh = False        # right after a recovery: "[resumed]" is "[enabled]" for the decoder
        errors = 0
        for ent in self.tl:
            if ent[0] == "pkt":
                if lost is not None and ent[1] == lost[0]:
                    for extra in lost[1]:
                        if extra == "@insn-at-ip":
                            if last_insn and last_insn[0] == self.event(lost[0])["ip"]:
                                out.append(last_insn[1])
                        else:
                            out.append(extra)
                    lost, fresh = None, True
                continue
            if ent[0] == "line":
                _, text, ip, npkts, tnt = ent
                if ip is not None:
                    last_insn = (ip, text)
                if lost is not None:
                    continue
                if ip is not None and any(a <= ip < b for a, b in holes):
                    ev = self.event(self.consumed(npkts, tnt))
                    if ev is not None and ev["kind"] == "overflow":
                        raise CaseError(f"{case.name}: an overflow is pending at {ip:#x}: the decoder "
                                        "applies it before it fetches the unmapped instruction")
                    lost = self._error(out, ev, ip, _FAULT_NOMAP, resync)
                    errors += 1
                    continue
                if fresh and ip is None and text.startswith("[resumed"):
                    text = "[enabled" + text[len("[resumed"):]
                if ip is not None:
                    fresh = False
                out.append(text)
                continue
            _, kind, ip, npkts, through_tnt = ent
            if lost is not None:
                continue
            if kind == "status":
                # The PSB+ (written right after the fault) binds at its FUP IP; its MODE.Exec is the
                # status that disagrees: ptxed reports that packet, resync fails the same way, and
                # decoding restarts at the next PSB.
                j = npkts
                while self.pkts[j].kind != "mode_exec":
                    j += 1
                off = self.pkts[j].off
                out.append(f"[{off:x}, {ip:x}: error: bad status update]")
                if resync:
                    out.append(f"[{off:x}, {ip:x}: resync error: bad status update]")
                lost = self.recovery(None, off, False) or (len(self.pkts) + 1, [])
                errors += 1
                continue
            start = self.consumed(npkts, 1 if through_tnt else 0)
            ev = self.event(start)
            want_tnt = kind in ("tip", "drop-jcc")
            if ev is not None and ((want_tnt and ev["kind"] == "tnt") or (not want_tnt and ev["kind"] == "tip")):
                raise CaseError(f"{case.name}: the fault at {ip:#x} would go unnoticed "
                                f"(the decoder takes the {ev['kind']} at {ev['offset']:#x})")
            lost = self._error(out, ev, ip, _FAULT_QUERY, resync)
            errors += 1
        if not errors:
            raise CaseError(f"{case.name}: a fault case without a decode error")
        return out

    def _error(self, out: list[str], ev, ip: int, text: str, resync: bool):
        off = ev["offset"] if ev is not None else len(self.truth.pw.buf)
        out.append(f"[{off:x}, {ip:x}: error: {text}]")
        rec = self.recovery(ev, off, resync)
        return rec if rec is not None else (len(self.pkts) + 1, [])


def _fault_after(kind: str):
    def fn(truth: Truth, ev: Event, insn, nxt: int) -> bool:
        rec = getattr(truth, "_resync_rec", None)
        if rec is None:
            raise CaseError(f"{truth.case.name}: fault events need the resync recorder")
        k = _kind(insn)
        if k == K_RET and truth.retstack:
            truth.retstack.pop()
        if kind == "tip":
            if k != K_JCC:
                raise CaseError(f"{truth.case.name}: fault-tip needs a conditional branch")
            rec.fault("tip", insn.address)
            truth.pw.tip(nxt)
        elif kind == "tnt":
            if k not in (K_JMP_IND, K_CALL_IND, K_RET, K_FAR):
                raise CaseError(f"{truth.case.name}: fault-tnt needs an indirect branch")
            if k == K_CALL_IND:
                truth.retstack.append(insn.address + insn.size)
            rec.fault("tnt", insn.address, through_tnt=True)
            truth.pw.tnt(True)
            truth.pw.flush_tnt()
        else:
            if k == K_CALL_IND:
                truth.retstack.append(insn.address + insn.size)
            rec.fault("drop-jcc" if k == K_JCC else "drop", insn.address)
        return True
    return fn


for _k in ("tip", "tnt", "drop"):
    after_event(f"fault-{_k}")(_fault_after(_k))

def _recorder(t: Truth) -> _Recorder | None:
    return t.__dict__.get("_resync_rec")


class _Resync(Extension):
    def run_start(self, t: Truth) -> None:
        if _has_faults(t.case):
            t._resync_rec = _Recorder(t)

    def run_end(self, t: Truth) -> None:
        rec = _recorder(t)
        if rec is not None:
            t.lines[:] = rec.replay()

    def line(self, t: Truth, s: str) -> str:
        rec = _recorder(t)
        if rec is not None:
            rec.on_line(s)
        return s

    def before_insn_line(self, t: Truth, ip: int) -> None:
        rec = _recorder(t)
        if rec is not None:
            rec.on_insn_line(ip)


register(_Resync())


def image_segments(b: Built) -> list[tuple[bytes, int]]:
    """The code the decoder gets: (bytes, address) pieces, without the case's @nomap holes."""
    segs = [(b.image.code, b.image.org)]
    for a, z in b.case.extra.get("nomap", []):
        lo, hi = b.image.labels[a], b.image.labels[z]
        new = []
        for code, org in segs:
            end = org + len(code)
            if hi <= org or lo >= end:
                new.append((code, org))
                continue
            if lo > org:
                new.append((code[: lo - org], org))
            if hi < end:
                new.append((code[hi - org:], hi))
        segs = new
    return segs


def _nomap_images(b: Built, workdir: Path, truth: Truth) -> None:
    """The decoder's image files around the case's @nomap holes (dump_argv passes them)."""
    case = b.case
    if case.extra.get("nomap"):
        b.images = []
        for n, (code, org) in enumerate(image_segments(b)):
            p = workdir / f"{case.name}.code{n}"
            p.write_bytes(code)
            b.images.append((p, org))


BUILD_HOOKS.append(_nomap_images)


@at_event("fault-psb-mode")
def _fault_psb_mode(truth: Truth, ev: Event, ip: int):
    """A PSB+ whose MODE.Exec (``ev.args[0]``: 64, 32 or 16) disagrees with the code's mode:
    "bad status update" where the decoder binds the PSB+ (its FUP IP)."""
    rec = getattr(truth, "_resync_rec", None)
    if rec is None or not truth.on:
        raise CaseError(f"{truth.case.name}: fault-psb-mode needs tracing on")
    rec.fault("status", ip)
    pw = truth.pw
    pw.psb()
    pw.fup(ip)
    pw.mode_exec(int(ev.args[0]))
    pw.psbend()
    return None
