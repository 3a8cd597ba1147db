"""Last-IP reconstruction for IP packets (libipt pt_last_ip).

IP compression (IPC) of TIP/TIP.PGE/TIP.PGD/FUP payloads:

    0 suppressed   no payload; the IP is not known from this packet
    1 update 16    replace bits 15:0 of the last IP
    2 update 32    replace bits 31:0
    3 sext 48      a full 48-bit IP, sign-extended from bit 47
    4 update 48    replace bits 47:0
    6 full         a full 64-bit IP
"""

from __future__ import annotations

from ptexport.errors import PacketError

_M16 = 0xFFFF
_M32 = 0xFFFFFFFF
_M48 = 0xFFFFFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF


def sext48(ip: int) -> int:
    ip &= _M48
    return ip | 0xFFFF000000000000 if ip & 0x800000000000 else ip


class LastIp:
    """State of libipt's last-IP: the IP and whether it is valid or suppressed.

    ``update(ip, ipc)`` applies a packet; ``query()`` returns the IP or raises
    PacketError (``reason`` "noip" before any full IP, "suppressed").
    """

    __slots__ = ("ip", "have_ip", "suppressed")

    def __init__(self) -> None:
        self.ip = 0
        self.have_ip = False
        self.suppressed = False

    def reset(self) -> None:
        self.ip = 0
        self.have_ip = False
        self.suppressed = False

    def update(self, ip: int, ipc: int) -> None:
        if ipc == 0:
            self.suppressed = True
            return
        if ipc == 1:
            self.ip = (self.ip & ~_M16 & _M64) | (ip & _M16)
        elif ipc == 2:
            self.ip = (self.ip & ~_M32 & _M64) | (ip & _M32)
        elif ipc == 3:
            self.ip = sext48(ip)
        elif ipc == 4:
            self.ip = (self.ip & ~_M48 & _M64) | (ip & _M48)
        elif ipc == 6:
            self.ip = ip & _M64
        else:
            raise PacketError(f"bad IP compression {ipc}", what="packet")
        self.have_ip = True
        self.suppressed = False

    def query(self) -> int | None:
        """The current IP; None when suppressed; raises when no IP was seen yet (libipt order)."""
        if not self.have_ip:
            err = PacketError("no IP yet", what="last-ip")
            err.reason = "noip"  # type: ignore[attr-defined]
            raise err
        if self.suppressed:
            return None
        return self.ip
