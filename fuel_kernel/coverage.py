"""`python -m fuel_kernel.coverage`: which kernels the binding table holds, and which are missing.

Reads the current snapshot (importing fuel_kernel registers the CPU backend) and prints one row per
key grouped by backend and op: operand dtypes, number of alternatives, caps, sources and whether a
cost is set.  --json / --markdown change the format, --backend / --op filter, --missing lists
(op, dtypes) combinations registered for some dtypes of a family but not for others.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NoReturn, Optional, Union

import fuel_kernel as fk
from fuel_kernel import ops, spec
from fuel_kernel._dispatch import BindingTable, backend_from_name, backend_name
from fuel_kernel.records import BindingKey

# One row of --json: backend, op and dtype names, and each alternative's source, caps, cost, precision.
Row = dict[str, Any]
# One --missing line: (backend, op, dtypes, "gap" or "by design").
Missing = tuple[str, str, tuple[str, ...], str]

# dtype families used by --missing: a key covered for one member of a family should be covered
# for the others, with every operand of the same family moved together.
FAMILIES = {family: tuple(fk.DType[name] for name in spec.dtype_names(kind))
            for family, kind in (("float", "float"), ("signed", "int"), ("unsigned", "uint"),
                                 ("float8", "float8"))}


def _family_of(dtype: fk.DType) -> Optional[str]:
    for name, members in FAMILIES.items():
        if dtype in members:
            return name
    return None


def _op_name(op: Union[fk.OpKind, BindingKey]) -> str:
    return op.short_name if isinstance(op, fk.OpKind) else op.name


def _caps_names(caps: fk.KernelCaps) -> list[str]:
    return [str(flag.name).lower() for flag in fk.KernelCaps if flag.value and flag in caps]


def collect(table: BindingTable, backend: Optional[int] = None, op: Optional[str] = None) -> list[Row]:
    """Rows as dicts, in the --json shape, filtered by backend id and op name."""
    rows = []
    for binding in table.coverage():
        if backend is not None and binding.backend != backend:
            continue
        if op is not None and _op_name(binding.op) != op:
            continue
        alternatives = table.alternatives(binding.op if isinstance(binding.op, fk.OpKind) else binding.op,
                                          binding.dtypes, binding.backend)
        rows.append({
            "backend": backend_name(binding.backend),
            "op": _op_name(binding.op),
            "dtypes": [d.short_name for d in binding.dtypes],
            "alternatives": [{
                "source": k.source,
                "caps": _caps_names(k.caps),
                "cost": k.has_cost,
                "precision": k.precision.as_dict() if k.precision is not None else None,
            } for k in alternatives],
        })
    rows.sort(key=_row_order)
    return rows


def _row_order(row: Row) -> tuple[Any, ...]:
    op = row["op"].upper()
    op_rank = int(fk.OpKind[op]) if op in fk.OpKind.__members__ else len(fk.OpKind)
    return (row["backend"] != "cpu", row["backend"], op_rank, row["op"],
            [int(fk.DType.parse(d)) for d in row["dtypes"]])


def missing(rows: Sequence[Row]) -> list[Missing]:
    """(backend, op, dtypes, kind) that a registered sibling of the same dtype family implies.

    kind is "gap" when the combination could exist, or "by design" when the op never takes one of
    the moved dtypes at that operand position on that backend: its dtype rule pins the operand
    (ARGMAX/ARGMIN give I64, integer SUM and PROD accumulate in I64, integer MEAN gives F64, index
    operands are I32 or I64), or its output-dtype rule (fuel_kernel.ops) gives another output."""
    present = {(r["backend"], r["op"], tuple(r["dtypes"])) for r in rows}
    seen_at: defaultdict[tuple[str, str, int, int], set[str]] = defaultdict(set)           # (backend, op, arity, position) -> dtypes registered there
    for backend, op, dtypes in present:
        for position, name in enumerate(dtypes):
            seen_at[(backend, op, len(dtypes), position)].add(name)
    wanted: set[Missing] = set()
    for backend, op, dtypes in present:
        families = {f for f in (_family_of(fk.DType.parse(d)) for d in dtypes) if f is not None}
        for family in families:
            for member in FAMILIES[family]:
                candidate = tuple(member.short_name if _family_of(fk.DType.parse(d)) == family else d
                                  for d in dtypes)
                if (backend, op, candidate) in present:
                    continue
                # Pinned by the op's output-dtype rule, or at an operand the op types apart from
                # its first input (an index or count operand, an output without a rule) where the
                # op never takes that dtype.
                rule = _output_rule(op, candidate)
                n = len(candidate)
                apart = [p for p in range(1, n - (rule is not None))
                         if seen_at[(backend, op, n, p)] != seen_at[(backend, op, n, 0)]]
                pinned = (rule is not None and rule != candidate[-1]) or any(
                    candidate[p] not in seen_at[(backend, op, n, p)] for p in apart)
                wanted.add((backend, op, candidate, "by design" if pinned else "gap"))
    return sorted(wanted, key=lambda g: (g[3] != "gap",) + g[:3])


def _output_rule(op: str, dtypes: Sequence[str]) -> Optional[str]:
    """The last output's dtype (short name) op's dtype rule gives for these inputs (the dtypes
    before the op's outputs), or None when the op has no rule and its output dtype is the caller's
    choice."""
    kind = op.upper()
    if kind not in fk.OpKind.__members__:
        return None
    schema = ops.schema(fk.OpKind[kind])
    n_in = schema.n_inputs if schema.n_inputs is not None else len(dtypes) - schema.n_outputs
    try:
        return ops.infer_output_dtypes(fk.OpKind[kind], [fk.DType.parse(d) for d in dtypes[:n_in]])[-1].short_name
    except fk.FuelKernelError:
        return None


def _summary(alternatives: Sequence[dict[str, Any]]) -> tuple[str, str, str]:
    sources = ",".join(a["source"] for a in alternatives)
    caps = sorted({c for a in alternatives for c in a["caps"]})
    cost = "yes" if all(a["cost"] for a in alternatives) else ("some" if any(a["cost"] for a in alternatives) else "no")
    return sources, ",".join(caps) or "-", cost


def render_text(rows: Sequence[Row]) -> str:
    lines = []
    by_group: defaultdict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        by_group[(r["backend"], r["op"])].append(r)
    current_backend = None
    for (backend, op), group in by_group.items():
        if backend != current_backend:
            total = sum(1 for r in rows if r["backend"] == backend)
            lines.append(f"backend {backend}: {total} keys")
            current_backend = backend
        lines.append(f"  {op} ({len(group)} keys)")
        for r in group:
            sources, caps, cost = _summary(r["alternatives"])
            lines.append(f"    {', '.join(r['dtypes']):36} alts={len(r['alternatives'])}  "
                         f"source={sources:10} cost={cost:4} caps={caps}")
    if not rows:
        lines.append("no bindings match")
    lines += float8_summary(rows)
    return "\n".join(lines)


def float8_summary(rows: Sequence[Row]) -> list[str]:
    """The FP8 rule as the rows show it: the ops holding an FP8 operand (CAST, the ops that move
    elements by their bits, MATMUL), and that no other op takes one (docs/design.md, "8-bit floats")."""
    names = {fk.DType[name].short_name for name in spec.FLOAT8}
    fp8_rows = [r for r in rows if names & set(r["dtypes"])]
    if not fp8_rows:
        return []
    ops_with = sorted({r["op"] for r in fp8_rows}, key=lambda o: int(fk.OpKind[o.upper()]))
    return [f"FP8 ({', '.join(sorted(names))}) are storage formats: {len(fp8_rows)} keys, on "
            f"{', '.join(ops_with)}; every other op computes on them only after a CAST"]


def render_markdown(rows: Sequence[Row]) -> str:
    lines = ["| backend | op | dtypes | alternatives | source | caps | cost |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        sources, caps, cost = _summary(r["alternatives"])
        lines.append(f"| {r['backend']} | {r['op']} | {', '.join(r['dtypes'])} | {len(r['alternatives'])} "
                     f"| {sources} | {caps} | {cost} |")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = _Parser(prog="python -m fuel_kernel.coverage",
                     description="List the kernels fuel_kernel's binding table holds.")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list of bindings")
    fmt.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--backend", metavar="NAME", help="only this backend (cpu, cuda, ... or a claimed name)")
    parser.add_argument("--op", metavar="NAME", help="only this op (e.g. cast, add)")
    parser.add_argument("--missing", action="store_true",
                        help="list (op, dtypes) missing for some members of a dtype family, "
                             "real gaps first, then those the op's dtype rule excludes")
    args = parser.parse_args(argv)

    backend = None
    if args.backend is not None:
        try:
            backend = backend_from_name(args.backend)
        except ValueError:
            parser.error(f"unknown backend {args.backend!r}")
    op = None
    if args.op is not None:
        op = args.op.lower()
        if op.upper() not in fk.OpKind.__members__ and not op.startswith("fused#"):
            parser.error(f"unknown op {args.op!r}")

    rows = collect(fk.bindings(), backend, op)
    if args.missing:
        gaps = missing(rows)
        real = sum(1 for g in gaps if g[3] == "gap")
        if args.json:
            print(json.dumps([{"backend": b, "op": o, "dtypes": list(d), "kind": k} for b, o, d, k in gaps],
                             indent=2))
        elif args.markdown:
            print("| backend | op | missing dtypes | kind |\n|---|---|---|---|")
            for b, o, d, k in gaps:
                print(f"| {b} | {o} | {', '.join(d)} | {k} |")
        else:
            for b, o, d, k in gaps:
                print(f"{b:8} {o:20} {', '.join(d):36} {k}")
            print(f"{real} gaps; {len(gaps) - real} combinations absent by design (the op's dtype rule "
                  f"pins an operand)")
        return 0
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.markdown:
        print(render_markdown(rows))
    else:
        print(render_text(rows))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:          # e.g. piped into `head`
        sys.stderr.close()
        sys.exit(0)
