"""Write the build-time files generated from fuel_kernel/spec.py.

    python tools/generate_abi.py           # write them (setup.py does this before cythonize)
    python tools/generate_abi.py --check   # exit 1 if a file is missing or stale

Outputs (gitignored, shipped as package data; each opens with a "do not edit" line):
  fuel_kernel/include/fuel_kernel/abi_enums.h  fk_dtype, fk_op, fk_params_kind, fk_status (abi.h
                                               includes it)
  fuel_kernel/abi_enums.pxi                    the same enums for Cython (abi.pxd includes it)
  fuel_kernel/include/fuel_kernel/dtype_tables.h  item size, its log2 and short name per dtype
                                               (strided.h includes it)
  fuel_kernel/graph/_generated_builders.py     GeneratedBuilders: a Graph builder per op of a fixed
                                               input count (Graph derives from it)
  fuel_kernel/_params_constructors.py          the fuel_kernel.params constructors
  fuel_kernel/_params_generated.pxi            their checks, the fk_params fill and OpParams.fields()
                                               (_dispatch.pyx includes it)
  fuel_kernel/cpu/_<family>.pyx                each generated kernel module, from
                                               fuel_kernel/cpu/kernel_module.pyx.in (Cython's Tempita),
                                               and its type stub _<family>.pyi

A file is rewritten only when its text changes, so a rebuild with an unchanged spec does not
make every extension look out of date.  The spec is loaded by path: the package itself cannot be
imported before its extensions are built.
"""
import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "fuel_kernel" / "spec.py"
HEADER = ROOT / "fuel_kernel" / "include" / "fuel_kernel" / "abi_enums.h"
PXI = ROOT / "fuel_kernel" / "abi_enums.pxi"
DTYPE_TABLES = ROOT / "fuel_kernel" / "include" / "fuel_kernel" / "dtype_tables.h"
NOTICE = "generated from fuel_kernel/spec.py by tools/generate_abi.py; do not edit"
WIDTH = 100


def load_spec(path=SPEC):
    spec = importlib.util.spec_from_file_location("_fuel_kernel_spec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wrap(items, indent, sep=", ", width=WIDTH, trailing=True):
    """Items joined by sep into lines no longer than width, each starting with indent; with
    trailing, every line but the last ends with the separator (C), else none does (Cython)."""
    lines, line = [], ""
    for item in items:
        candidate = f"{line}{sep}{item}" if line else item
        if line and len(indent) + len(candidate) + len(sep.rstrip()) > width:
            lines.append(indent + line + (sep.rstrip() if trailing else ""))
            line = item
        else:
            line = candidate
    if line:
        lines.append(indent + line)
    return lines


def c_enum(name, members, comment):
    """A `typedef enum {...} name;` with `FK_X = n` members (members: [(c_name, value)])."""
    out = [f"/* ---- {comment} " + "-" * max(3, WIDTH - 12 - len(comment)) + " */",
           "typedef enum {"]
    out += wrap([f"{m} = {v}" for m, v in members], "    ")
    out += [f"}} {name};", ""]
    return out


def header_text(spec):
    dtypes = [(f"FK_{d.name}", d.code) for d in spec.DTYPES] + [("FK_DTYPE_COUNT", len(spec.DTYPES))]
    ops = [(f"FK_OP_{o.name}", o.number) for o in spec.OPS] + [("FK_OP_COUNT", len(spec.OPS))]
    params = [(f"FK_PARAMS_{p.name.upper()}", p.kind) for p in spec.PARAMS] + \
        [("FK_PARAMS_KIND_COUNT", len(spec.PARAMS))]
    out = [f"/* fuel_kernel ABI enums: {NOTICE}.",
           " *",
           " * Included by abi.h, which holds the rest of the ABI.  Numbering is append-only: change",
           " * fuel_kernel/spec.py and rebuild. */",
           "#ifndef FUEL_KERNEL_ABI_ENUMS_H",
           "#define FUEL_KERNEL_ABI_ENUMS_H",
           ""]
    out += c_enum("fk_dtype", dtypes, "dtypes")
    out += c_enum("fk_op", ops, "ops (append-only numbering)")
    out += c_enum("fk_params_kind", params, "params families: which member of fk_params_union is meaningful")
    ranges = [output_range(o) for o in spec.OPS]
    out += ["/* ---- operand counts per op: a static key's dtypes are the op's inputs, then its outputs.",
            " * An op writes fk_op_min_outputs .. fk_op_max_outputs outputs; when the two differ (optional",
            " * trailing outputs) its input count is fixed, fk_op_fixed_inputs, and the key's length says",
            " * how many outputs it writes (fk_key_outputs).  fk_op_fixed_inputs is 0 for a varying count. */",
            "static const uint8_t fk_op_min_outputs[FK_OP_COUNT] __attribute__((unused)) = {"]
    out += wrap([str(lo) for lo, _ in ranges], "    ") + ["};",
            "static const uint8_t fk_op_max_outputs[FK_OP_COUNT] __attribute__((unused)) = {"]
    out += wrap([str(hi) for _, hi in ranges], "    ") + ["};",
            "static const uint8_t fk_op_fixed_inputs[FK_OP_COUNT] __attribute__((unused)) = {"]
    out += wrap([str(o.inputs if isinstance(o.inputs, int) else 0) for o in spec.OPS], "    ") + ["};", ""]
    out += [f"/* ---- status codes (kernels return one; FK_OK is success) " + "-" * 35 + " */",
            "typedef enum {"]
    width = max(len(f"FK_{s.name} = {s.value}") for s in spec.STATUSES) + 1
    for i, s in enumerate(spec.STATUSES):
        text = f"FK_{s.name} = {s.value}" + ("," if i < len(spec.STATUSES) - 1 else "")
        error = f" -> {s.error}" if s.error else ""
        out.append(f"    {text:<{width}} /* {s.doc}{error} */")
    out += ["} fk_status;", "", "#endif /* FUEL_KERNEL_ABI_ENUMS_H */", ""]
    return "\n".join(out)


def pxi_text(spec):
    def block(name, members):
        return [f"    ctypedef enum {name}:"] + wrap(members, "        ", trailing=False) + [""]

    out = [f"# {NOTICE}.",
           "# Included by fuel_kernel/abi.pxd: the enums of fuel_kernel/include/fuel_kernel/abi_enums.h.",
           "",
           'cdef extern from "fuel_kernel/abi.h" nogil:']
    out += block("fk_dtype", [f"FK_{d.name}" for d in spec.DTYPES] + ["FK_DTYPE_COUNT"])
    out += block("fk_op", [f"FK_OP_{o.name}" for o in spec.OPS] + ["FK_OP_COUNT"])
    out += block("fk_params_kind", [f"FK_PARAMS_{p.name.upper()}" for p in spec.PARAMS] +
                 ["FK_PARAMS_KIND_COUNT"])
    out += block("fk_status", [f"FK_{s.name}" for s in spec.STATUSES])
    return "\n".join(out).rstrip("\n") + "\n"


def dtype_tables_text(spec):
    """Per-dtype facts indexed by fk_dtype: item size, its log2, and the short name."""
    itemsizes = [d.itemsize for d in spec.DTYPES]
    shifts = [d.itemsize.bit_length() - 1 for d in spec.DTYPES]
    names = [f'"{d.short}"' for d in spec.DTYPES]
    out = [f"/* fuel_kernel per-dtype tables: {NOTICE}.",
           " *",
           " * Included by strided.h.  Indexed by fk_dtype. */",
           "#ifndef FUEL_KERNEL_DTYPE_TABLES_H",
           "#define FUEL_KERNEL_DTYPE_TABLES_H",
           "",
           "/* bytes per element */",
           "static const int fk_dtype_itemsize[FK_DTYPE_COUNT] = {"]
    out += wrap([str(v) for v in itemsizes], "    ") + ["};",
            "/* log2 of the item size: bounds checks shift instead of dividing (this runs on every call) */",
            "static const int fk_dtype_shift[FK_DTYPE_COUNT] = {"]
    out += wrap([str(v) for v in shifts], "    ") + ["};",
            "/* the lower-case names used in messages and by the coverage diagnostic */",
            "static const char *const fk_dtype_short_name[FK_DTYPE_COUNT] = {"]
    out += wrap(names, "    ") + ["};", "", "#endif /* FUEL_KERNEL_DTYPE_TABLES_H */", ""]
    return "\n".join(out)


def outputs(spec=None):
    """{path: text} of every generated file."""
    spec = spec or load_spec()
    return {HEADER: header_text(spec), PXI: pxi_text(spec), DTYPE_TABLES: dtype_tables_text(spec),
            **generated_sources(spec)}


def stale(files=None):
    """The generated files that are missing or differ from what the spec gives."""
    files = outputs() if files is None else files
    return [path for path, text in files.items()
            if not path.exists() or path.read_text() != text]


def write_files(files, tool, verbose=True):
    """Write each of {path: text} whose text changed (so unchanged outputs keep their mtimes)."""
    for path in stale(files):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[path])
        if verbose:
            print(f"{tool}: wrote {path.relative_to(ROOT)}")
    return list(files)


def write(verbose=True):
    return write_files(outputs(), "generate_abi", verbose)


def run(argv, outputs_fn, script, doc):
    """The command line of a generator: no argument writes, --check reports stale outputs."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--check"]:
        old = stale(outputs_fn())
        for path in old:
            print(f"stale or missing: {path.relative_to(ROOT)} (run python {script})")
        return 1 if old else 0
    if argv:
        print(doc)
        return 2
    write_files(outputs_fn(), Path(script).stem)
    return 0


def main(argv=None):
    return run(argv, outputs, "tools/generate_abi.py", __doc__)


# ---- sources generated from the spec's op, params and kernel-module tables ------------------------
# Each writer below returns the text of one gitignored file; generated_sources() lists them all, and
# outputs() adds them to the enum files.
BUILDERS = ROOT / "fuel_kernel" / "graph" / "_generated_builders.py"
PARAMS_PY = ROOT / "fuel_kernel" / "_params_constructors.py"
PARAMS_PXI = ROOT / "fuel_kernel" / "_params_generated.pxi"
KERNEL_MODULE_TEMPLATE = ROOT / "fuel_kernel" / "cpu" / "kernel_module.pyx.in"


def hanging(head, items, tail, width=WIDTH):
    """`head` + items joined by ", " + `tail`, continuation lines aligned under the first item."""
    indent = " " * len(head)
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else tail)
        if line.strip() and line != head and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = indent
        line += piece
    if not items:
        line += tail
    lines.append(line)
    return lines


def output_range(op):
    """(fewest, most) outputs of a spec op row (outputs is a count or a (fewest, most) pair)."""
    return op.outputs if isinstance(op.outputs, tuple) else (op.outputs, op.outputs)


def builder_ops(spec):
    """The ops whose Graph builder is generated: a fixed input count and an inferred output dtype, and
    not in spec.HANDWRITTEN_BUILDERS (the others, cast, matmul, conv2d, conv1d, conv_transpose2d, qmatmul,
    nf4_matmul, flash_attn and concat, are written by hand in graph/builders.py)."""
    return [o for o in spec.OPS if isinstance(o.inputs, int) and o.dtype is not None
            and o.name not in spec.HANDWRITTEN_BUILDERS]


def python_arguments(constructor):
    """The arguments of a params constructor a caller passes (a "const" one is not passed)."""
    return [a for a in constructor.args if a.kind != "const"]


# The annotation of a params argument of each spec kind (fuel_kernel/spec.py, PARAMS_CONSTRUCTORS)
ARGUMENT_TYPES = {"int": "int", "float": "float", "real": "float", "finite": "float", "bool": "bool",
                  "ints": "Sequence[int]", "dims": "Sequence[int]",
                  "pair": "Union[int, Sequence[int]]", "choice": "str", "matmul_m": "Optional[MatmulM]"}


def optional(annotation):
    return annotation if annotation.startswith("Optional[") else f"Optional[{annotation}]"


def argument_type(a):
    """`a`'s annotation in its params constructor (a None default: None is accepted too)."""
    return optional(ARGUMENT_TYPES[a.kind]) if a.default is None else ARGUMENT_TYPES[a.kind]


def builders_text(spec):
    constructors = {c.name: c for c in spec.PARAMS_CONSTRUCTORS}
    out = [f"# {NOTICE}.",
           '"""Graph\'s op builders for every spec op with a fixed input count and an inferred output',
           "dtype; Graph (fuel_kernel/graph/builders.py) derives from GeneratedBuilders and writes by hand",
           'the builders whose signature is special (cast, matmul, conv2d, conv1d, conv_transpose2d, qmatmul, nf4_matmul, flash_attn, concat)."""',
           "from __future__ import annotations", "",
           "from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union", "",
           "from ..types import Backend, OpKind", "",
           "if TYPE_CHECKING:",
           "    from .._dispatch import OpParams",
           "    from ..records import MatmulM",
           "    from .values import Value", "", "",
           "class GeneratedBuilders:",
           '    """One method per op of fuel_kernel/spec.py: its inputs, the keywords of its',
           '    fuel_kernel.params constructor (None: not given), params= and backend=."""']
    out += ["", "    _node: Callable[..., Any]     # Graph's: one op node from inputs, params and keywords;",
            "                                  # its output Value, or the tuple of them for several"]
    for o in builder_ops(spec):
        arguments = python_arguments(constructors[o.params])
        keywords = [a.name for a in arguments]
        signature = ["self", *[f"{name}: Value" for name in o.args], "*",
                     *[f"{a.name}: {optional(ARGUMENT_TYPES[a.kind])} = None" for a in arguments],
                     "params: Optional[OpParams] = None", "backend: Union[Backend, int, str, None] = None"]
        out.append("")
        fewest, most = output_range(o)
        returns = "Value" if fewest == 1 else "tuple[" + ", ".join(["Value"] * fewest) + "]"
        out += hanging(f"    def {o.name.lower()}(", signature, f") -> {returns}:")
        text = f"Output shape: ops.{o.shape}_shape; dtype: ops.{o.dtype}_dtype."
        if fewest > 1:
            text = f"Returns its {fewest} outputs as a tuple of Values. " + text
        if most > fewest:
            text += (f" Its optional outputs (up to {most}): Graph.op(OpKind.{o.name}, ..., outputs={most}).")
        if keywords:
            text += f" Keywords {', '.join(keywords)} build fuel_kernel.params.{o.params}(...); or pass params=."
        out += [f'        """{o.doc}.', ""]
        out += textwrap.wrap(text, WIDTH, initial_indent=" " * 8, subsequent_indent=" " * 8)
        out.append('        """')
        inputs = "(" + ", ".join(o.args) + ("," if len(o.args) == 1 else "") + ")"
        call = [f"OpKind.{o.name}", inputs, "params", "backend=backend", *[f"{k}={k}" for k in keywords]]
        out += hanging("        return self._node(", call, ")")
    return "\n".join(out) + "\n"


def params_constructors_text(spec):
    out = [f"# {NOTICE}.",
           '"""The fuel_kernel.params constructors, one per family of fuel_kernel/spec.py',
           "(PARAMS_CONSTRUCTORS); fuel_kernel.params re-exports them.  _dispatch checks the arguments",
           '(_params_generated.pxi): a bad one is a ParamsError."""',
           "from __future__ import annotations", "",
           "from typing import Optional, Sequence, Union", "",
           "from ._dispatch import OpParams, _make_params",
           "from .records import MatmulM", ""]
    out += hanging("__all__ = [", [repr(c.name) for c in spec.PARAMS_CONSTRUCTORS], "]")
    for c in spec.PARAMS_CONSTRUCTORS:
        arguments = python_arguments(c)
        signature = [f"{a.name}: {argument_type(a)}" + ("" if a.default == spec.REQUIRED else f" = {a.default!r}")
                     for a in arguments]
        out += ["", ""]
        out += hanging(f"def {c.name}(", signature, ") -> OpParams:")
        doc = textwrap.wrap(f'"""{c.doc}"""', WIDTH, initial_indent="    ", subsequent_indent="    ")
        out += doc
        out += hanging("    return _make_params(", [repr(c.name), *[f"{a.name}={a.name}" for a in arguments]], ")")
    return "\n".join(out) + "\n"


def _refuse(condition, message):
    """Cython lines raising ParamsError(f"message") when `condition` holds."""
    return [f"    if {condition}:", f'        raise ParamsError(f"{message}")']


def _fill_lines(spec, family, constructor):
    """The body of _fill_<family>: convert and check every argument into a local, check lengths
    against each other, then write the C struct (nothing is written before every check passed)."""
    member = f"c.u.{family.member}"
    out = [f"    c.kind = FK_PARAMS_{family.name.upper()}"]
    convert, compare, store = [], [], []
    for a in constructor.args:
        what = f"{family.name} {a.name}"
        local, given, field = f"a_{a.name}", f'f["{a.name}"]', f"{member}.{a.field or a.name}"
        if a.kind == "const":
            store.append(f"    {field} = {a.default!r}")
            continue
        if a.kind in ("int", "float", "real", "finite", "bool", "pair"):
            function = {"int": "_int", "float": "_float", "real": "_float", "finite": "_float", "pair": "_pair"}.get(a.kind)
            value = f"bool({given})" if a.kind == "bool" else f'{function}({given}, "{what}")'
        elif a.kind == "ints":
            value = f'_ints({given}, "{what}")'
            if a.fill is not None:
                value = f"({a.fill!r},) * len(a_{a.same_as}) if {given} is None else {value}"
        elif a.kind == "dims":
            value = f'_dims({given}, "{what}")'
        elif a.kind == "choice":
            value = f'_choice({given}, "{what}", {{{", ".join(f"{n!r}: {k}" for n, k in a.choices)}}})'
        else:                                                   # matmul_m
            value = f"_matmul_m({given}, a_{a.same_as})"
        convert.append(f"    {local} = {value}")
        if a.kind == "real":
            convert += _refuse(f"{local} != {local}", f"{what} must be a number, not NaN")
        if a.kind == "finite":
            convert += _refuse(f"not math.isfinite({local})", f"{what} must be finite, not {{{local}!r}}")
        if a.length:
            convert += _refuse(f"len({local}) > {a.length}",
                               f"{what} lists {{len({local})}} values; at most {{{a.length}}}")
        if a.check and a.kind in ("ints", "pair"):
            convert += _refuse(f"not all(v {a.check} for v in {local})",
                               f"{what} values must be {a.check}, not {{{local}!r}}")
        elif a.check:
            convert += _refuse(f"not {local} {a.check}", f"{what} must be {a.check}, not {{{local}!r}}")
        if a.same_as and a.kind in ("ints", "dims"):
            other = f"a_{a.same_as}"
            compare += _refuse(f"len({local}) != len({other})",
                               f"{what} needs one value per {a.same_as} ({{len({other})}}), not {{len({local})}}")
        if a.kind in ("ints", "dims"):
            if not a.same_as:
                store.append(f"    {member}.{a.count} = len({local})")
            store += [f"    for i in range(len({local})):", f"        {field}[i] = {local}[i]"]
        elif a.kind == "pair":
            store += [f"    {field}[0] = {local}[0]", f"    {field}[1] = {local}[1]"]
        elif a.kind == "matmul_m":
            store += [f"    {field}.kind = {local}[0]", f"    {field}.value = {local}[1]"]
        else:
            store.append(f"    {field} = {local}")
    return out + convert + compare + store


def _read_expression(family, a):
    """The Python value of argument `a` read back from a filled fk_params `c` (OpParams.fields)."""
    field = f"c.u.{family.member}.{a.field or a.name}"
    if a.kind == "bool":
        return f"bool({field})"
    if a.kind in ("ints", "dims"):
        return f"tuple([{field}[i] for i in range(c.u.{family.member}.{a.count})])"
    if a.kind == "pair":
        return f"({field}[0], {field}[1])"
    if a.kind == "choice":
        return "{" + ", ".join(f"{k}: {n!r}" for n, k in a.choices) + f"}}[{field}]"
    if a.kind == "matmul_m":
        return f"MatmulM({field}.kind, {field}.value)"
    return field


def params_pxi_text(spec):
    pairs = list(zip(spec.PARAMS, spec.PARAMS_CONSTRUCTORS))
    out = [f"# {NOTICE}.",
           "# Included by fuel_kernel/_dispatch.pyx: per params family, the fill of fk_params from the",
           "# constructor's keywords (every argument checked first: a bad one is a ParamsError and",
           "# nothing is written) and the read-back of OpParams.fields().  The converters it calls (_int,",
           "# _float, _ints, _dims, _pair, _choice, _matmul_m) are written in _dispatch.pyx.", ""]
    for family, constructor in pairs:
        out += ["", f"cdef int _fill_{family.name}(fk_params *c, dict f) except -1:"]
        out += _fill_lines(spec, family, constructor)
        out.append("    return 0")
    out += ["", "", "cdef OpParams _build_params(str family, dict fields):",
            "    cdef OpParams p = OpParams.__new__(OpParams)"]
    for i, (family, _) in enumerate(pairs):
        out += [f'    {"if" if i == 0 else "elif"} family == "{family.name}":',
                f"        _fill_{family.name}(&p.c, fields)"]
    out += ["    else:", '        raise ParamsError(f"unknown params family {family!r}")', "    return p",
            "", "", "cdef dict _params_fields(const fk_params *c):",
            '    """The meaningful fields of a filled fk_params, as OpParams.fields() returns them."""']
    for family, constructor in pairs:
        if not constructor.args:
            continue
        out.append(f"    if c.kind == FK_PARAMS_{family.name.upper()}:")
        items = [f'"{a.name}": {_read_expression(family, a)}' for a in constructor.args]
        out += hanging("        return {", items, "}")
    out.append("    return {}")
    return "\n".join(out) + "\n"


def kernel_module_text(spec, module):
    from Cython import Tempita
    template = Tempita.Template(KERNEL_MODULE_TEMPLATE.read_text(), name=str(KERNEL_MODULE_TEMPLATE))
    return template.substitute(notice=NOTICE, doc=module.doc, header=module.header,
                               manifest=module.manifest, tile_rows=f"fk_{module.name}_tile_rows")


def kernel_module_path(module):
    return ROOT / "fuel_kernel" / "cpu" / f"_{module.name}.pyx"


def kernel_module_stub_text(module):
    """The type stub of a generated kernel module (PEP 561: shipped beside the extension)."""
    return (f'"""Type stub for fuel_kernel.cpu._{module.name}: {NOTICE}."""\n\n'
            "def manifest() -> tuple[object, int]:\n"
            '    """The module\'s kernels: a \'fuel_kernel.manifest\' capsule and its row count."""\n\n'
            "def tile_rows() -> tuple[object, int]:\n"
            '    """Row functions fused groups call directly: a \'fuel_kernel.tile_rows\' capsule and its count."""\n')


def generated_sources(spec):
    """{path: text} of the files generated from the op, params and kernel-module tables."""
    files = {BUILDERS: builders_text(spec), PARAMS_PY: params_constructors_text(spec),
             PARAMS_PXI: params_pxi_text(spec)}
    for module in spec.KERNEL_MODULES:
        if module.generated:
            files[kernel_module_path(module)] = kernel_module_text(spec, module)
            files[kernel_module_path(module).with_suffix(".pyi")] = kernel_module_stub_text(module)
    return files


if __name__ == "__main__":
    sys.exit(main())
