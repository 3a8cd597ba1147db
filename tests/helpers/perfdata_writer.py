"""A tiny perf.data writer for tests: builds records and file-/pipe-mode files byte by byte."""

from __future__ import annotations

import struct

ATTR_SIZE = 136


def pad8(b: bytes) -> bytes:
    return b + bytes(-len(b) % 8)


def cstr(s: str | bytes, align: int = 8) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    b += b"\0"
    return b + bytes(-len(b) % align)


def attr(*, type=1, config=0, period=1, sample_type=0, read_format=0, flags=0, size=ATTR_SIZE,
         branch_sample_type=0, regs_user=0, stack_user=0, regs_intr=0, config1=0, config2=0) -> bytes:
    raw = struct.pack("<IIQQQQQIIQQQQIiQIHHIIQQ", type, size, config, period, sample_type, read_format, flags,
                      0, 0, config1, config2, branch_sample_type, regs_user, stack_user, 0, regs_intr, 0, 0, 0,
                      0, 0, 0, 0)
    return raw[:size] + bytes(max(0, size - len(raw)))


def record(rtype: int, body: bytes, misc: int = 0, trailer: bytes = b"", pad: bool = True) -> bytes:
    b = body + trailer if not pad else pad8(body) + trailer
    return struct.pack("<IHH", rtype, misc, 8 + len(b)) + b


def file_mode(attrs: list[tuple[bytes, list[int]]], data: bytes, features: dict[int, bytes] | None = None) -> bytes:
    """A PERFILE2 file: header, ids, attrs (each ATTR_SIZE + ids section), data, feature table + sections."""
    features = features or {}
    entry = ATTR_SIZE + 16
    ids_off = 104
    ids_blob = b""
    id_secs = []
    for _a, ids in attrs:
        id_secs.append((ids_off + len(ids_blob), 8 * len(ids)))
        ids_blob += struct.pack(f"<{len(ids)}Q", *ids)
    attrs_off = ids_off + len(ids_blob)
    attrs_blob = b""
    for (a, _ids), (o, s) in zip(attrs, id_secs):
        a = a[:ATTR_SIZE] + bytes(ATTR_SIZE - len(a[:ATTR_SIZE]))
        attrs_blob += a + struct.pack("<QQ", o, s)
    data_off = attrs_off + len(attrs_blob)
    feat_off = data_off + len(data)
    fids = sorted(features)
    table_size = 16 * len(fids)
    sec = b""
    table = b""
    for fid in fids:
        table += struct.pack("<QQ", feat_off + table_size + len(sec), len(features[fid]))
        sec += features[fid]
    bits = 0
    for fid in fids:
        bits |= 1 << fid
    words = [(bits >> (64 * i)) & ((1 << 64) - 1) for i in range(4)]
    header = struct.pack("<8sQQQQQQQQ4Q", b"PERFILE2", 104, entry, attrs_off, len(attrs_blob), data_off, len(data),
                         0, 0, *words)
    return header + ids_blob + attrs_blob + data + table + sec


def pipe_mode(records: bytes) -> bytes:
    return struct.pack("<8sQ", b"PERFILE2", 16) + records


def header_attr(a: bytes, ids: list[int]) -> bytes:
    return record(64, a + struct.pack(f"<{len(ids)}Q", *ids), pad=False)


def feat_string(s: str) -> bytes:
    b = cstr(s, 64)
    return struct.pack("<I", len(b)) + b
