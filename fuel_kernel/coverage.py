"""`python -m fuel_kernel.coverage`: which kernels the binding table holds, and which are missing.

Reads the current snapshot (importing fuel_kernel registers the CPU backend) and prints one row per
key grouped by backend and op: operand dtypes, number of alternatives, caps, sources and whether a
cost is set.  --json / --markdown change the format, --backend / --op filter, --missing lists
(op, dtypes) combinations registered for some dtypes of a family but not for others.
"""
import argparse
import json
import sys
from collections import defaultdict

import fuel_kernel as fk
from fuel_kernel._dispatch import backend_from_name, backend_name

# dtype families used by --missing: a key covered for one member of a family should be covered
# for the others, with every operand of the same family moved together.
FAMILIES = {
    "float": (fk.DType.F16, fk.DType.BF16, fk.DType.F32, fk.DType.F64),
    "signed": (fk.DType.I8, fk.DType.I16, fk.DType.I32, fk.DType.I64),
    "unsigned": (fk.DType.U8, fk.DType.U32),
}


def _family_of(dtype):
    for name, members in FAMILIES.items():
        if dtype in members:
            return name
    return None


def _op_name(op):
    return op.short_name if isinstance(op, fk.OpKind) else op.name


def _caps_names(caps):
    return [flag.name.lower() for flag in fk.KernelCaps if flag.value and flag in caps]


def collect(table, backend=None, op=None):
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


def _row_order(row):
    op = row["op"].upper()
    op_rank = int(fk.OpKind[op]) if op in fk.OpKind.__members__ else len(fk.OpKind)
    return (row["backend"] != "cpu", row["backend"], op_rank, row["op"],
            [int(fk.DType.parse(d)) for d in row["dtypes"]])


def missing(rows):
    """(backend, op, dtypes) that a registered sibling of the same dtype family implies."""
    present = {(r["backend"], r["op"], tuple(r["dtypes"])) for r in rows}
    wanted = set()
    for backend, op, dtypes in present:
        families = {_family_of(fk.DType.parse(d)) for d in dtypes} - {None}
        for family in families:
            for member in FAMILIES[family]:
                candidate = tuple(member.short_name if _family_of(fk.DType.parse(d)) == family else d
                                  for d in dtypes)
                if (backend, op, candidate) not in present:
                    wanted.add((backend, op, candidate))
    return sorted(wanted)


def _summary(alternatives):
    sources = ",".join(a["source"] for a in alternatives)
    caps = sorted({c for a in alternatives for c in a["caps"]})
    cost = "yes" if all(a["cost"] for a in alternatives) else ("some" if any(a["cost"] for a in alternatives) else "no")
    return sources, ",".join(caps) or "-", cost


def render_text(rows):
    lines = []
    by_group = defaultdict(list)
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
    return "\n".join(lines)


def render_markdown(rows):
    lines = ["| backend | op | dtypes | alternatives | source | caps | cost |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        sources, caps, cost = _summary(r["alternatives"])
        lines.append(f"| {r['backend']} | {r['op']} | {', '.join(r['dtypes'])} | {len(r['alternatives'])} "
                     f"| {sources} | {caps} | {cost} |")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    parser = _Parser(prog="python -m fuel_kernel.coverage",
                     description="List the kernels fuel_kernel's binding table holds.")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON list of bindings")
    fmt.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--backend", metavar="NAME", help="only this backend (cpu, cuda, ... or a claimed name)")
    parser.add_argument("--op", metavar="NAME", help="only this op (e.g. cast, add)")
    parser.add_argument("--missing", action="store_true",
                        help="list (op, dtypes) missing for some members of a dtype family")
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
        if args.json:
            print(json.dumps([{"backend": b, "op": o, "dtypes": list(d)} for b, o, d in gaps], indent=2))
        elif args.markdown:
            print("| backend | op | missing dtypes |\n|---|---|---|")
            for b, o, d in gaps:
                print(f"| {b} | {o} | {', '.join(d)} |")
        else:
            for b, o, d in gaps:
                print(f"{b:8} {o:20} {', '.join(d)}")
            print(f"{len(gaps)} missing combinations")
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
