"""Render the CPU kernel templates (fuel_kernel/cpu/*.h.in) with the spec, into build/generated/.

    python tools/generate_kernels.py           # render them (setup.py does this before cythonize)
    python tools/generate_kernels.py --check   # exit 1 if an output is missing or stale

A template is C with Tempita blocks (Tempita ships with Cython): `{{for d in FLOAT}}` ...
`{{endfor}}` writes one typed copy of a kernel per dtype, and `{{manifest("family")}}` writes the
family's registration rows from spec.CPU_KERNELS.  fuel_kernel/cpu/<name>.h.in renders to
build/generated/fuel_kernel/cpu/<name>.h, which setup.py puts on every kernel module's include
path; outputs are build products (never committed) and open with a "do not edit" line.

What a template sees (namespace()): every public name of fuel_kernel/spec.py (DTYPES, OPS, FLOAT,
SIGNED, INTEGER, NUMERIC, ALL_DTYPES, CLAIMS, CPU_KERNELS, dtype_names, same, ...), `dtype(name)`
for a DTypeSpec by name, `manifest(family)` (with row=, setup=, ctx=, skip=: its tile-row table), and
`half_table(op, dtype)`, the C table of op at every F16 or BF16 input (tools/half_tables.py).

An output is rewritten only when its text changes, so an unchanged spec and template leave the
build up to date.
"""
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate_abi  # noqa: E402
import half_tables  # noqa: E402
from generate_abi import ROOT, load_spec  # noqa: E402
sys.path.pop(0)

TEMPLATES = ROOT / "fuel_kernel" / "cpu"
GENERATED = ROOT / "build" / "generated"
NOTICE = "generated from {template} by tools/generate_kernels.py; do not edit"


def revision(source, op, signature, kernel):
    """A manifest row's revision: the first 8 bytes of a BLAKE2b hash of what identifies the
    implementation, so it is the same in every build and run and differs between siblings."""
    payload = "\0".join(["fuel_kernel.cpu.revision.1", source, op, ",".join(signature), kernel])
    return int.from_bytes(hashlib.blake2b(payload.encode(), digest_size=8).digest(), "little")


def c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def c_double(value):
    return repr(float(value)) if value == value and abs(value) != float("inf") else "0.0"


def manifest_rows(spec, family):
    """[(op, signature, kernel, Claim, cost, caps, source)] for every row of a family, in order."""
    ops = {o.name: o for o in spec.OPS}
    rows = []
    for group in spec.CPU_KERNELS[family]:
        for op in group.ops:
            if op not in ops:
                raise ValueError(f"spec: CPU_KERNELS[{family!r}] names an unknown op {op}")
            for signature in group.signatures:
                names = {f"d{i}": name for i, name in enumerate(signature)}
                kernel = group.kernel.format(op=op.lower(), **names)
                claim_name = group.claim if isinstance(group.claim, str) else group.claim[signature[0]]
                rows.append((op, signature, kernel, spec.CLAIMS[claim_name], group.cost, group.caps,
                             group.source))
    return rows


def manifest_text(spec, family, row=None, setup=None, ctx=None, skip=()):
    """The C array fk_<family>_manifest and its length fk_<family>_manifest_len, preceded by the
    threaded wrapper (cpu/parallel.h) of every kernel whose op spec.split_rule cuts into blocks,
    followed by its tile-row table (tile_rows_text)."""
    dtype_codes = {d.name for d in spec.DTYPES}
    wrappers, rows = {}, []
    for op, signature, kernel, claim, cost, caps, source in manifest_rows(spec, family):
        unknown = [name for name in signature if name not in dtype_codes]
        if unknown:
            raise ValueError(f"spec: CPU_KERNELS[{family!r}] names unknown dtypes {unknown}")
        rule = spec.split_rule(op, signature, source)
        registered = kernel
        if rule is not None:
            registered = f"{kernel}_threaded"
            if wrappers.setdefault(registered, (kernel, rule)) != (kernel, rule):
                raise ValueError(f"spec: kernel {kernel} is registered under two split rules")
        dtypes = ", ".join(f"FK_{name}" for name in signature)
        precision = (f"{{1, {claim.bit_stable}, {{0, 0}}, {claim.max_ulp}, {c_double(claim.max_rel)}, "
                     f"{c_double(claim.max_abs)}, {c_string(claim.notes)}}}")
        rows.append(f"    {{FK_OP_{op}, {{{len(signature)}, {{{dtypes}}}}}, {{{registered}, {caps}, 0, "
                    f"{precision}, {cost}, {c_string(source)}, "
                    f"0x{revision(source, op, signature, kernel):016x}ull}}}},")
    out = ['#include "parallel.h"'] if wrappers else []
    for registered, (kernel, rule) in wrappers.items():
        out.append(f"static int {registered}(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,\n"
                   f"        const fk_layout *layouts, const fk_params *params) {{\n"
                   f"    return fk_split_run({kernel}, FK_SPLIT_{rule}, inputs, n_in, outputs, n_out, layouts, params);\n"
                   f"}}")
    out.append(f"static const fk_manifest_row fk_{family}_manifest[] = {{")
    out.extend(rows)
    out.append("};")
    out.append(f"static const int fk_{family}_manifest_len = "
               f"(int)(sizeof(fk_{family}_manifest) / sizeof(fk_{family}_manifest[0]));")
    out.extend(tile_rows_text(spec, family, row, setup, ctx, skip))
    return "\n".join(out)


def tile_rows_text(spec, family, row, setup, ctx, skip):
    """The C array fk_<family>_tile_rows (strided.h's fk_tile_row) and its length: for every
    manifest row that splits into blocks (the kernels a fused group may run on tiles) and whose op
    is not in `skip`, its registered kernel, the row function named by `row` and the ctx setup
    named by `setup` (formats of op, OP and d0, d1, ...: the signature's dtype names; setup None:
    no ctx), ctx the C type the setup fills.  No `row`: an empty table."""
    entries = []
    for op, signature, kernel, *_, source in manifest_rows(spec, family) if row else ():
        if op in skip or spec.split_rule(op, signature, source) is None:
            continue
        names = {f"d{i}": name for i, name in enumerate(signature)}
        fill = setup.format(op=op.lower(), OP=op, **names) if setup else "NULL"
        size = f"(int32_t)sizeof({ctx})" if setup else "0"
        entries.append(f"    {{{kernel}_threaded, {row.format(op=op.lower(), OP=op, **names)}, {fill}, {size}}},")
    count = len(entries)
    if not entries:                  # C has no empty arrays: one unused row
        entries.append("    {NULL, NULL, NULL, 0},")
    return [f"static const fk_tile_row fk_{family}_tile_rows[] __attribute__((unused)) = {{", *entries, "};",
            f"static const int fk_{family}_tile_rows_len __attribute__((unused)) = {count};"]


def namespace(spec):
    names = {name: getattr(spec, name) for name in dir(spec) if not name.startswith("_")}
    by_name = {d.name: d for d in spec.DTYPES}
    names["dtype"] = by_name.__getitem__
    names["manifest"] = lambda family, **rows: manifest_text(spec, family, **rows)
    names["half_table"] = half_tables.c_table
    return names


def templates():
    return sorted(TEMPLATES.glob("*.h.in"))


def output_path(template):
    return GENERATED / template.relative_to(ROOT).with_suffix("")


def outputs(spec=None):
    """{output path: text} for every template."""
    from Cython import Tempita

    spec = spec or load_spec()
    names = namespace(spec)
    files = {}
    for template in templates():
        relative = template.relative_to(ROOT).as_posix()
        body = Tempita.Template(template.read_text(), name=relative).substitute(names)
        files[output_path(template)] = f"/* {NOTICE.format(template=relative)} */\n" + body
    return files


def stale(files=None):
    return generate_abi.stale(outputs() if files is None else files)


def write(verbose=True):
    return generate_abi.write_files(outputs(), "generate_kernels", verbose)


def main(argv=None):
    return generate_abi.run(argv, outputs, "tools/generate_kernels.py", __doc__)


if __name__ == "__main__":
    sys.exit(main())
