"""The twins convention (docs/architecture.md, "Twins"): a reference module X and its compiled twin
X_compiled define the same public names with the same signatures, and the constants both define
have the same values.  That they compute the same results is the business of each pair's oracle
test (the table in docs/architecture.md names them); this file holds the interfaces together so
that the compiled path stays a drop-in for the reference one.

Each pair lists the names its docs table row names (they must exist in both); beyond those, every
public name the two modules both define is checked the same way (a function: its signature; a
class: the signatures of its public methods; a constant: its value), so a constant copied into a
kernel "with the same numbers" cannot drift unseen.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types
from dataclasses import dataclass, field

import numpy as np
import pytest

from ptxtest import REPO


@dataclass(frozen=True)
class Twin:
    reference: str  # module under ptexport
    compiled: str
    names: tuple[str, ...]  # the public names of the docs table (required in both)
    #: documented differences: "Class.method" -> (parameters only the reference has, only the compiled one has)
    extra_params: dict[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.reference}<->{self.compiled}"


TWINS = [
    Twin("pt.packets", "pt.packets_compiled", ("decode_columns",)),
    Twin("pt.perfpkt", "pt.perfpkt_compiled", ("tokenize", "PacketColumns")),
    Twin("calltree.threadstack", "calltree.threadstack_compiled",
         ("CallTree", "CALLS_COLUMNS", "SAMPLE_COLUMNS", "CALL_RETURN_NO_CALL", "CALL_RETURN_NO_RETURN",
          "CALL_RETURN_NON_CALL"),
         # the reference can share a CallPathTable; the compiled tree keeps its paths in its own arrays,
         # grown from ``capacity`` rows
         extra_params={"CallTree.__init__": (frozenset({"call_paths"}), frozenset({"capacity"}))}),
    # the reference walks plain stretches inside raw.ptxed.walk with raw.insn.InsnDecoder.next_many;
    # the compiled Walker implements the interface walk(fast=) takes (raw.ptxed.Walker)
    Twin("raw.ptxed", "raw.insn_compiled", ("Walker", "FAST")),
    Twin("raw.insn", "raw.insn_compiled", ()),  # what both define (Insn, the instruction record, is one)
    Twin("samples.text", "samples.text_compiled", ("sample_lines",)),
    # perf's code walk: the compiled decoder's walker decodes its instructions in a kernel
    Twin("decoder.codewalk", "decoder.codewalk_compiled", ("PerfCodeWalker", "InsnDecoder")),
    Twin("dbexport.samples", "dbexport.samples_compiled", ("export_samples",)),
    # perf's decoder: the backends' packages export one interface (decoder/backend.py picks); the
    # numbers the reference and the compiled kernel share are checked by tests/flow/test_constants.py
    Twin("decoder.reference.decoder", "decoder.compiled.decoder", ()),
    Twin("decoder.reference", "decoder.compiled", ("decode_queue", "supported")),
    # perf's VM time correlation: the reference walks a queue in vmtime._Queue._run_python, the twin one
    # buffer per kernel call (walk_buffer), both driven by vmtime._Queue.run
    Twin("pt.vmtime", "pt.vmtime_compiled", ()),
]


def _mod(name: str) -> types.ModuleType:
    return importlib.import_module(f"ptexport.{name}")


def _params(fn, bound: bool = False) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter (``bound``: without the first, self or cls);
    annotations are left out (spelled differently in both, e.g. ``int`` and ``np.int64``, while
    meaning the same)."""
    params = list(inspect.signature(fn).parameters.values())
    return [(p.name, p.kind, p.default) for p in params[1 if bound else 0:]]


def _public_methods(cls) -> dict[str, list[tuple[str, object, object]]]:
    """The parameters (self or cls left out) of the public methods (and ``__init__``) of ``cls`` and
    its bases, Protocol machinery left out."""
    out = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass.__module__ in ("typing", "typing_extensions", "abc"):
            continue
        for name, v in vars(klass).items():
            if name.startswith("_") and name != "__init__":
                continue
            if isinstance(v, (staticmethod, classmethod)):
                out[name] = _params(v.__func__, bound=isinstance(v, classmethod))
            elif inspect.isfunction(v):
                out[name] = _params(v, bound=True)
    if getattr(cls, "_is_protocol", False):
        out.pop("__init__", None)
    return out


def _is_constant(v) -> bool:
    return isinstance(v, (int, float, str, bytes, tuple, frozenset, dict)) and not isinstance(v, type)


def _defined_here(mod: types.ModuleType, v) -> bool:
    """Whether ``v`` (a function or class) is defined in ``mod`` rather than imported into it."""
    return getattr(v, "__module__", None) == mod.__name__


def _compare_callable(twin: Twin, name: str, ref, comp) -> list[str]:
    problems = []
    if inspect.isclass(ref) != inspect.isclass(comp):
        return [f"{name}: a {'class' if inspect.isclass(ref) else 'function'} in the reference only"]
    if not inspect.isclass(ref):
        if _params(ref) != _params(comp):
            problems.append(f"{name}{inspect.signature(ref)} != {name}{inspect.signature(comp)}")
        return problems
    rm, cm = _public_methods(ref), _public_methods(comp)
    for meth, a in rm.items():
        if meth not in cm:
            problems.append(f"{name}.{meth}: missing in the compiled twin")
            continue
        only_ref, only_comp = twin.extra_params.get(f"{name}.{meth}", (frozenset(), frozenset()))
        a = [p for p in a if p[0] not in only_ref]
        b = [p for p in cm[meth] if p[0] not in only_comp]
        if a != b:
            problems.append(f"{name}.{meth}: parameters {[p[0] for p in a]} != {[p[0] for p in b]} "
                            f"(or their kinds or defaults differ)")
    for meth in cm:
        if meth not in rm and meth != "__init__":
            problems.append(f"{name}.{meth}: only in the compiled twin")
    return problems


def _compare(twin: Twin, name: str, ref_mod, comp_mod) -> list[str]:
    ref, comp = getattr(ref_mod, name), getattr(comp_mod, name)
    if ref is comp:
        return []  # one object both import: the same by construction
    if callable(ref) and not _is_constant(ref):
        if not callable(comp):
            return [f"{name}: callable in the reference only"]
        return _compare_callable(twin, name, ref, comp)
    if _is_constant(ref) or _is_constant(comp):
        if ref != comp:
            return [f"{name} = {ref!r} in the reference, {comp!r} in the compiled twin"]
    return []


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.id)
def test_docs_names_exist_in_both(twin):
    ref, comp = _mod(twin.reference), _mod(twin.compiled)
    missing = [f"{m.__name__}.{n}" for n in twin.names for m in (ref, comp) if not hasattr(m, n)]
    assert not missing, f"names of the docs table missing: {missing}"


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.id)
def test_same_signatures_and_constants(twin):
    ref, comp = _mod(twin.reference), _mod(twin.compiled)
    shared = {n for n in set(vars(ref)) & set(vars(comp)) if not n.startswith("_")}
    shared |= {n for n in twin.names if hasattr(ref, n) and hasattr(comp, n)}
    problems = []
    for name in sorted(shared):
        problems += _compare(twin, name, ref, comp)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("twin", [t for t in TWINS if t.names], ids=lambda t: t.id)
def test_docs_functions_are_the_twins_own(twin):
    """A docs-table function or class of the compiled twin is its own code, not the reference's
    imported under the same name (constants may be shared, from one module both import)."""
    ref, comp = _mod(twin.reference), _mod(twin.compiled)
    for name in twin.names:
        r, c = getattr(ref, name), getattr(comp, name)
        if (inspect.isfunction(r) or inspect.isclass(r)) and _defined_here(ref, r):
            if name == "PacketColumns":
                continue  # the data type both return, declared once in the reference
            assert _defined_here(comp, c), f"{comp.__name__}.{name} is the reference's {r!r}"


def test_perf_packet_kinds_equal_in_the_compiled_tokenizer():
    """The compiled tokenizer and perf's decoder kernel use plain ints for perf's packet kinds."""
    from ptexport.pt import perfpkt, perfpkt_compiled

    wrong = {k.name: getattr(perfpkt_compiled, k.name, None) for k in perfpkt.Pkt
             if getattr(perfpkt_compiled, k.name, None) != int(k)}
    assert not wrong, wrong


def test_raw_walkers_implement_the_walk_interface():
    """Both walkers ``ptxed.walk(fast=)`` may get - the compiled one and the lazy switch - have the
    interface it uses."""
    from ptexport.raw import backend, insn_compiled, ptxed

    if insn_compiled._run_kernel is None:
        pytest.skip("numba not available")
    trace = bytes.fromhex("0282" * 8 + "0223")
    walker = insn_compiled.Walker(trace)
    assert isinstance(walker, ptxed.Walker)
    lazy = backend.LazyWalker(None, ptxed.PtxedOptions(), trace, False)
    assert isinstance(lazy, ptxed.Walker)
    protocol, lazy_methods = _public_methods(ptxed.Walker), _public_methods(backend.LazyWalker)
    assert {m: lazy_methods.get(m) for m in protocol} == protocol
    assert walker.format_ips(np.array([0x1000], np.uint64), True) == "? 0000000000001000\n"


def test_decoder_backends_export_the_same_names():
    ref, comp = _mod("decoder.reference"), _mod("decoder.compiled")
    assert hasattr(ref, "__all__") and hasattr(comp, "__all__")
    assert sorted(ref.__all__) == sorted(comp.__all__)
    problems = []
    for name in ref.__all__:
        problems += _compare(TWINS[-1], name, ref, comp)
    assert not problems, "\n".join(problems)


def _docs_twin_rows() -> list[list[str]]:
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## Twins", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split(" | ") for line in section.splitlines()
            if line.startswith("| `")]
    assert rows, "no twins table in docs/architecture.md"
    return rows


def _in_cell(module: str, cell: str) -> bool:
    path = module.replace(".", "/")
    return f"`{path}.py`" in cell or any(f"`{p}/`" in cell for p in (path, path.rsplit("/", 1)[0]))


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.id)
def test_docs_table_lists_the_pair_and_its_oracle(twin):
    """docs/architecture.md's twins table has a row for the pair naming its public names and an
    oracle test that exists."""
    rows = [r for r in _docs_twin_rows() if _in_cell(twin.reference, r[0]) and _in_cell(twin.compiled, r[0])]
    assert len(rows) == 1, f"{twin.id}: {len(rows)} rows in the docs table"
    row = rows[0]
    assert [n for n in twin.names if n not in row[1]] == []
    oracles = re.findall(r"`(tests/[^`:]+)", row[2])
    assert oracles, f"{twin.id}: no oracle test named"
    assert [o for o in oracles if not (REPO / o).exists()] == []
