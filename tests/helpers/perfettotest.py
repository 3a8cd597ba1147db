"""A Perfetto trace read back with the ``perfetto`` package's protos (tests/writers/test_perfetto*.py).

:func:`read_trace` resolves what the writer interned (per packet sequence) and gives the tracks and
events as plain objects; :func:`slices` pairs each track's begin/end events into slices the way
trace_processor does (events in timestamp order, equal times in file order; an end closes the
innermost open slice), checking that every end has a begin and nothing is left open.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


@dataclass
class Track:
    uuid: int
    parent: int | None
    name: str
    pid: int | None = None
    tid: int | None = None
    counter: bool = False


@dataclass
class Event:
    seq: int  # file order
    ts: int
    type: int
    track: int
    name: str | None
    categories: list[str]
    args: dict[str, Any]
    value: float | None = None


@dataclass
class Slice:
    track: int
    name: str
    ts: int
    end: int
    depth: int
    categories: list[str]
    args: dict[str, Any]
    children: list["Slice"] = field(default_factory=list)


@dataclass
class ReadTrace:
    tracks: dict[int, Track]
    events: list[Event]

    def by_track(self) -> dict[int, list[Event]]:
        out: dict[int, list[Event]] = {}
        for e in self.events:
            out.setdefault(e.track, []).append(e)
        return out


def _arg(a: Any, strings: dict[int, str]) -> Any:
    kind = a.WhichOneof("value")
    if kind == "string_value_iid":
        return strings[a.string_value_iid]
    return getattr(a, kind) if kind else None


def read_trace(path: Path) -> ReadTrace:
    trace = pb.Trace()
    trace.ParseFromString(Path(path).read_bytes())
    tracks: dict[int, Track] = {}
    events: list[Event] = []
    state: dict[int, dict[str, dict[int, str]]] = {}
    for i, pk in enumerate(trace.packet):
        seq = pk.trusted_packet_sequence_id
        if pk.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED or seq not in state:
            if not pk.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
                assert not pk.HasField("track_event"), "events before the sequence's state was cleared"
            state[seq] = {"names": {}, "args": {}, "strings": {}, "cats": {}}
        st = state[seq]
        if pk.HasField("interned_data"):
            d = pk.interned_data
            st["names"].update({x.iid: x.name for x in d.event_names})
            st["args"].update({x.iid: x.name for x in d.debug_annotation_names})
            st["strings"].update({x.iid: x.str.decode() for x in d.debug_annotation_string_values})
            st["cats"].update({x.iid: x.name for x in d.event_categories})
        if pk.HasField("track_descriptor"):
            d = pk.track_descriptor
            assert d.uuid not in tracks, f"track {d.uuid} declared twice"
            t = Track(d.uuid, d.parent_uuid if d.HasField("parent_uuid") else None, d.name,
                      counter=d.HasField("counter"))
            if d.HasField("process"):
                t.pid, t.name = d.process.pid, d.process.process_name
            if d.HasField("thread"):
                t.pid, t.tid, t.name = d.thread.pid, d.thread.tid, d.thread.thread_name
            tracks[d.uuid] = t
        if pk.HasField("track_event"):
            te = pk.track_event
            assert pk.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            assert te.track_uuid in tracks, f"event on undeclared track {te.track_uuid}"
            args = {st["args"][a.name_iid]: _arg(a, st["strings"]) for a in te.debug_annotations}
            name = st["names"][te.name_iid] if te.HasField("name_iid") else (te.name or None)
            value = te.double_counter_value if te.HasField("double_counter_value") else None
            events.append(Event(i, pk.timestamp, te.type, te.track_uuid, name,
                                [st["cats"][c] for c in te.category_iids], args, value))
    return ReadTrace(tracks, events)


def slices(tr: ReadTrace) -> dict[int, list[Slice]]:
    """Each track's slices in begin order (nested: every slice within its parent)."""
    out: dict[int, list[Slice]] = {}
    for track, evs in tr.by_track().items():
        evs = sorted(evs, key=lambda e: (e.ts, e.seq))
        stack: list[Slice] = []
        got: list[Slice] = []
        for e in evs:
            if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                s = Slice(track, e.name or "", e.ts, -1, len(stack), e.categories, e.args)
                if stack:
                    stack[-1].children.append(s)
                stack.append(s)
                got.append(s)
            elif e.type == pb.TrackEvent.TYPE_SLICE_END:
                assert stack, f"track {track}: an end at {e.ts} without a begin"
                s = stack.pop()
                s.end = e.ts
                assert s.end >= s.ts
        assert not stack, f"track {track}: {len(stack)} slices never end"
        if got:
            out[track] = got
    return out
