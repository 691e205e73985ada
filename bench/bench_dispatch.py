"""Dispatch overhead: a pre-resolved Kernel call and a Python-level lookup, against their floors."""
import numpy as np

import fuel_kernel as fk
from bench import native
from bench.harness import Case


def cases():
    floor = native.load("floor")
    table = fk.bindings()
    cast = table.lookup(fk.OpKind.CAST, [fk.DType.F32, fk.DType.F64], fk.Backend.CPU)
    a = np.arange(8, dtype=np.float32)
    c = np.empty(8, dtype=np.float64)
    noop = floor.noop
    noop_callable = floor.NoopCallable()
    yield Case(
        name="CAST f32->f64, 8 elements, pre-resolved Kernel",
        contenders={
            "floor: no-op Cython def": "noop(a, out=c)",
            "floor: no-op cdef __call__": "noop_callable(a, out=c)",
            "fuel_kernel Kernel call": "cast(a, out=c)",
            "numpy np.copyto": "copyto(c, a)",
        },
        baseline="floor: no-op Cython def",
        target="Kernel call <= 3x the floor (np.copyto ~11x)",
        namespace={"noop": noop, "noop_callable": noop_callable, "cast": cast, "a": a, "c": c,
                   "copyto": np.copyto},
    )

    op, dtypes, backend = fk.OpKind.CAST, [fk.DType.F32, fk.DType.F64], fk.Backend.CPU
    int_key_dict = {(0, (9, 10), 0): cast}
    enum_key_dict = {(op, (fk.DType.F32, fk.DType.F64), backend): cast}
    dts_tuple = (fk.DType.F32, fk.DType.F64)
    yield Case(
        name="Python-level lookup (op, dtypes, backend)",
        contenders={
            "dict, tuple key of ints": "int_key_dict[(cast_op, (f32, f64), cpu)]",
            "dict, tuple key of enums": "enum_key_dict[(op, dts_tuple, backend)]",
            "fuel_kernel t.lookup": "table.lookup(op, dtypes, backend)",
        },
        baseline="dict, tuple key of ints",
        target="t.lookup no slower than a dict lookup with a tuple key",
        namespace={"int_key_dict": int_key_dict, "enum_key_dict": enum_key_dict, "op": op,
                   "dts_tuple": dts_tuple, "backend": backend, "table": table, "dtypes": dtypes,
                   "cast_op": 0, "f32": 9, "f64": 10, "cpu": 0},
    )
