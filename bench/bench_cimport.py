"""C-level lookup through the cimport API, from a nogil Cython loop, beside dict lookups with a
tuple key.  Each contender runs a counted loop; the harness divides by the loop count, so every
time below is per lookup."""
import fuel_kernel as fk
from bench import native
from bench.harness import Case

C_LOOKUPS = 1_000_000
PY_LOOKUPS = 100_000


def cases():
    loops = native.load("cimport_lookup")
    cpu = int(fk.Backend.CPU)
    cast = (int(fk.OpKind.CAST), (int(fk.DType.F32), int(fk.DType.F64)), cpu)
    keys = [(int(row.op), tuple(int(d) for d in row.dtypes), row.backend)
            for row in fk.bindings().coverage() if row.backend == cpu and isinstance(row.op, fk.OpKind)]
    assert loops.lookup_one_key(*cast, 10) == 10, "the benchmark key is not registered"
    table = {key: object() for key in keys}
    key = cast

    def python_dict_loop():
        for _ in range(PY_LOOKUPS):
            table[key]

    yield Case(
        name="one lookup (CAST f32->f64 on cpu); time per lookup",
        contenders={
            "py dict[tuple], py loop": python_dict_loop,
            "PyDict_GetItem(tuple), C": lambda: loops.dict_lookup_c(table, key, C_LOOKUPS),
            "fk_lookup, nogil loop": lambda: loops.lookup_one_key(*cast, C_LOOKUPS),
            f"fk_lookup, {len(keys)} keys cycled": lambda: loops.lookup_many_keys(keys, C_LOOKUPS),
            "fk_key_make+lookup_with_caps": lambda: loops.build_key_and_lookup(*cast, C_LOOKUPS),
        },
        items={
            "py dict[tuple], py loop": PY_LOOKUPS,
            "PyDict_GetItem(tuple), C": C_LOOKUPS,
            "fk_lookup, nogil loop": C_LOOKUPS,
            f"fk_lookup, {len(keys)} keys cycled": C_LOOKUPS,
            "fk_key_make+lookup_with_caps": C_LOOKUPS,
        },
        baseline="py dict[tuple], py loop",
        target="fk_lookup <= 10 ns per lookup (>= 100 M lookups/s on one core)",
    )
