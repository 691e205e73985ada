"""Write the build-time files generated from fuel_kernel/spec.py.

    python tools/generate_abi.py           # write them (setup.py does this before cythonize)
    python tools/generate_abi.py --check   # exit 1 if a file is missing or stale

Outputs (gitignored, shipped as package data; each opens with a "do not edit" line):
  fuel_kernel/include/fuel_kernel/abi_enums.h  fk_dtype, fk_op, fk_params_kind, fk_status (abi.h
                                               includes it)
  fuel_kernel/abi_enums.pxi                    the same enums for Cython (abi.pxd includes it)
  fuel_kernel/include/fuel_kernel/dtype_tables.h  item size, its log2 and short name per dtype
                                               (strided.h includes it)

A file is rewritten only when its text changes, so a rebuild with an unchanged spec does not
make every extension look out of date.  The spec is loaded by path: the package itself cannot be
imported before its extensions are built.
"""
import importlib.util
import sys
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
    return {HEADER: header_text(spec), PXI: pxi_text(spec), DTYPE_TABLES: dtype_tables_text(spec)}


def stale(files=None):
    """The generated files that are missing or differ from what the spec gives."""
    files = files or outputs()
    return [path for path, text in files.items()
            if not path.exists() or path.read_text() != text]


def write(verbose=True):
    files = outputs()
    for path in stale(files):
        path.write_text(files[path])
        if verbose:
            print(f"generate_abi: wrote {path.relative_to(ROOT)}")
    return list(files)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--check"]:
        old = stale()
        for path in old:
            print(f"stale or missing: {path.relative_to(ROOT)} (run python tools/generate_abi.py)")
        return 1 if old else 0
    if argv:
        print(__doc__)
        return 2
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
