"""Intel PT packet encoder (Intel SDM vol. 3C, chapter "Intel Processor Trace").

:class:`PacketWriter` appends packets to a byte buffer.  It keeps the two
pieces of encoder state the format has: the *last IP* used for IP
compression, and the pending TNT bits (a TNT packet is written when it is full
or when any other packet has to follow it).  Which IP compression and which
TNT size to use are choices of the writer (``ip_mode``, ``tnt_mode``), so
every form the SDM defines can be produced on purpose.
"""

from __future__ import annotations

import random
import struct

# IPBytes values (bits 7:5 of TIP/TIP.PGE/TIP.PGD/FUP).
IPB_SUPPRESSED = 0b000
IPB_16 = 0b001          # update last IP[15:0]
IPB_32 = 0b010          # update last IP[31:0]
IPB_48_SEXT = 0b011     # IP[47:0] sign-extended
IPB_48 = 0b100          # update last IP[47:0]
IPB_64 = 0b110          # full IP
IPB_PAYLOAD_LEN = {IPB_SUPPRESSED: 0, IPB_16: 2, IPB_32: 4, IPB_48_SEXT: 6, IPB_48: 6, IPB_64: 8}

# Opcodes of the IP packets (bits 4:0).
OP_TIP = 0x0D
OP_TIP_PGE = 0x11
OP_TIP_PGD = 0x01
OP_FUP = 0x1D

PSB = bytes([0x02, 0x82] * 8)
PSBEND = b"\x02\x23"
OVF = b"\x02\xf3"

IP_MODES = ("auto", "full", "sext48", "upd48", "mixed")
TNT_MODES = ("short", "long")


def _canonical_sext48(ip: int) -> bool:
    top = ip >> 47
    return top == 0 or top == (1 << 17) - 1


class PacketWriter:
    """Appends Intel PT packets to ``self.buf``.

    ``ip_mode``: ``auto`` uses the smallest valid IP compression, ``full``
    always 8 bytes, ``sext48`` / ``upd48`` always a 6-byte form, ``mixed``
    picks any valid form at random (seeded), so a trace holds every size.
    ``tnt_mode``: ``short`` (1 byte, up to 6 bits) or ``long`` (8 bytes, up to 47 bits).
    """

    def __init__(self, *, ip_mode: str = "auto", tnt_mode: str = "long", seed: int = 1) -> None:
        if ip_mode not in IP_MODES:
            raise ValueError(f"ip_mode {ip_mode!r}")
        if tnt_mode not in TNT_MODES:
            raise ValueError(f"tnt_mode {tnt_mode!r}")
        self.buf = bytearray()
        self.last_ip = 0
        self.ip_mode = ip_mode
        self.tnt_max = 6 if tnt_mode == "short" else 47
        self._tnt = 0
        self._tnt_n = 0
        self._rng = random.Random(seed)
        self.ipbytes_used: dict[int, int] = {}

    # -- TNT ---------------------------------------------------------------

    def tnt(self, taken: bool) -> None:
        self._tnt = (self._tnt << 1) | (1 if taken else 0)
        self._tnt_n += 1
        if self._tnt_n == self.tnt_max:
            self.flush_tnt()

    @property
    def tnt_pending(self) -> int:
        return self._tnt_n

    def flush_tnt(self) -> None:
        n = self._tnt_n
        if not n:
            return
        payload = (1 << n) | self._tnt   # stop bit above the oldest branch
        if n <= 6 and self.tnt_max == 6:
            self.buf.append(payload << 1)
        else:
            self.buf += b"\x02\xa3" + payload.to_bytes(6, "little")
        self._tnt = 0
        self._tnt_n = 0

    # -- IP packets ----------------------------------------------------------

    def _choose_ipbytes(self, ip: int) -> int:
        last = self.last_ip
        valid = [IPB_64]
        if ip >> 48 == last >> 48:
            valid.append(IPB_48)
        if _canonical_sext48(ip):
            valid.append(IPB_48_SEXT)
        if ip >> 32 == last >> 32:
            valid.append(IPB_32)
        if ip >> 16 == last >> 16:
            valid.append(IPB_16)
        mode = self.ip_mode
        if mode == "full":
            return IPB_64
        if mode == "upd48":
            return IPB_48 if IPB_48 in valid else IPB_64
        if mode == "sext48":
            return IPB_48_SEXT if IPB_48_SEXT in valid else IPB_64
        if mode == "mixed":
            return self._rng.choice(valid)
        for ipb in (IPB_16, IPB_32, IPB_48_SEXT, IPB_48):
            if ipb in valid:
                return ipb
        return IPB_64

    def ip_packet(self, opcode: int, ip: int | None) -> None:
        """TIP / TIP.PGE / TIP.PGD / FUP with ``ip`` (None: IP suppressed)."""
        self.flush_tnt()
        if ip is None:
            self.buf.append(opcode)
            self.ipbytes_used[IPB_SUPPRESSED] = self.ipbytes_used.get(IPB_SUPPRESSED, 0) + 1
            return
        ipb = self._choose_ipbytes(ip)
        self.ipbytes_used[ipb] = self.ipbytes_used.get(ipb, 0) + 1
        self.buf.append((ipb << 5) | opcode)
        n = IPB_PAYLOAD_LEN[ipb]
        self.buf += (ip & ((1 << (8 * n)) - 1)).to_bytes(n, "little")
        self.last_ip = ip if ipb in (IPB_64, IPB_48_SEXT) else (
            (self.last_ip & ~((1 << (8 * n)) - 1)) | (ip & ((1 << (8 * n)) - 1)))

    def tip(self, ip: int) -> None:
        self.ip_packet(OP_TIP, ip)

    def tip_pge(self, ip: int) -> None:
        self.ip_packet(OP_TIP_PGE, ip)

    def tip_pgd(self, ip: int | None = None) -> None:
        self.ip_packet(OP_TIP_PGD, ip)

    def fup(self, ip: int) -> None:
        self.ip_packet(OP_FUP, ip)

    # -- synchronisation and mode -------------------------------------------

    def psb(self) -> int:
        """PSB; returns its offset.  Resets the last IP, as the SDM says."""
        self.flush_tnt()
        off = len(self.buf)
        self.buf += PSB
        self.last_ip = 0
        return off

    def psbend(self) -> None:
        self.buf += PSBEND

    def mode_exec64(self, iflag: bool = False) -> None:
        self.flush_tnt()
        # MODE.Exec: CS.L=1 (64-bit); bit 2 is RFLAGS.IF when Event Trace is on
        self.buf += b"\x99\x05" if iflag else b"\x99\x01"

    def mode_exec(self, bits: int, iflag: bool = False) -> None:
        """MODE.Exec for a code size: ``bits`` 64 (CS.L), 32 (CS.D) or 16 (neither)."""
        self.flush_tnt()
        payload = {64: 0x01, 32: 0x02, 16: 0x00}[bits] | (0x04 if iflag else 0)
        self.buf += bytes([0x99, payload])

    def mode_tsx(self, intx: bool, abrt: bool = False) -> None:
        """MODE.TSX: InTX (transaction begins / executing) and TXAbort."""
        self.flush_tnt()
        self.buf += bytes([0x99, 0x20 | (0x02 if abrt else 0) | (0x01 if intx else 0)])

    def pip(self, cr3: int, nr: bool = False) -> None:
        """PIP: CR3[51:5] and NR (non-root, a VMX guest runs)."""
        self.flush_tnt()
        payload = ((cr3 >> 5) << 1) | (1 if nr else 0)
        self.buf += b"\x02\x43" + payload.to_bytes(6, "little")

    def vmcs(self, base: int) -> None:
        """VMCS: the current VMCS pointer's bits 51:12."""
        self.flush_tnt()
        self.buf += b"\x02\xc8" + (base >> 12).to_bytes(5, "little")

    def tracestop(self) -> None:
        self.flush_tnt()
        self.buf += b"\x02\x83"

    def mnt(self, payload: int) -> None:
        """Maintenance packet (model specific; decoders skip it)."""
        self.flush_tnt()
        self.buf += b"\x02\xc3\x88" + payload.to_bytes(8, "little")

    def cfe(self, typ: int, vector: int = 0, ip: bool = False) -> None:
        """Control Flow Event (Event Trace): ``typ`` (1 INTR, 2 IRET, ...), ``vector``; with
        ``ip`` a FUP with the event's IP must follow."""
        self.flush_tnt()
        self.buf += bytes((0x02, 0x13, (0x80 if ip else 0) | (typ & 0x1F), vector & 0xFF))

    def evd(self, typ: int, payload: int) -> None:
        """Event Data (Event Trace) for the next CFE: ``typ`` 0 = CR2 (page-fault address)."""
        self.flush_tnt()
        self.buf += bytes((0x02, 0x53, typ & 0x3F)) + (payload & (2**64 - 1)).to_bytes(8, "little")

    def pad(self, n: int = 1) -> None:
        self.buf += b"\x00" * n

    def ovf(self) -> None:
        self.flush_tnt()
        self.buf += OVF

    # -- timing ---------------------------------------------------------------

    def tsc(self, value: int) -> int:
        """TSC packet; returns the offset of its 7-byte payload."""
        self.flush_tnt()
        self.buf.append(0x19)
        off = len(self.buf)
        self.buf += (value & ((1 << 56) - 1)).to_bytes(7, "little")
        return off

    def tma(self, ctc: int, fast: int) -> int:
        """TMA: CTC[15:0] and the fast counter FC[8:0] at the last TSC."""
        self.flush_tnt()
        self.buf += b"\x02\x73"
        off = len(self.buf)
        self.buf += struct.pack("<HBBB", ctc & 0xFFFF, 0, fast & 0xFF, (fast >> 8) & 1)
        return off

    def mtc(self, ctc8: int) -> int:
        self.flush_tnt()
        self.buf.append(0x59)
        off = len(self.buf)
        self.buf.append(ctc8 & 0xFF)
        return off

    def cyc(self, cycles: int) -> None:
        """CYC with a cycle count (the exponent form for counts above 31)."""
        self.flush_tnt()
        if cycles < 32:
            self.buf.append(((cycles & 0x1F) << 3) | 0x03)
            return
        self.buf.append(((cycles & 0x1F) << 3) | 0x07)
        cycles >>= 5
        while True:
            b = (cycles & 0x7F) << 1
            cycles >>= 7
            if cycles:
                self.buf.append(b | 1)
            else:
                self.buf.append(b)
                break

    def cbr(self, ratio: int) -> None:
        self.flush_tnt()
        self.buf += bytes([0x02, 0x03, ratio & 0xFF, 0])

    # -- PTWRITE and power events -------------------------------------------

    def ptwrite(self, value: int, size: int = 8, ip: bool = False) -> None:
        self.flush_tnt()
        sz = 1 if size == 8 else 0
        self.buf += bytes([0x02, 0x12 | (sz << 5) | (0x80 if ip else 0)])
        self.buf += value.to_bytes(8 if sz else 4, "little")

    def mwait(self, hints: int, ext: int) -> None:
        self.flush_tnt()
        self.buf += b"\x02\xc2" + struct.pack("<II", hints & 0xFF, ext & 0x3)

    def pwre(self, hw: bool, cstate: int, sub: int) -> None:
        self.flush_tnt()
        self.buf += bytes([0x02, 0x22, 0x80 if hw else 0, ((cstate & 0xF) << 4) | (sub & 0xF)])

    def exstop(self, ip: bool) -> None:
        self.flush_tnt()
        self.buf += bytes([0x02, 0xE2 if ip else 0x62])

    def pwrx(self, last_core: int, deepest_core: int, wake_reason: int) -> None:
        self.flush_tnt()
        self.buf += bytes([0x02, 0xA2, ((last_core & 0xF) << 4) | (deepest_core & 0xF),
                           wake_reason & 0xF, 0, 0, 0])
