# cython: language_level=3
"""CPU data-movement kernels (C in movement_kernels.h.in): SLICE, CONCAT, FLIP, ROLL, TRIU, TRIL, PAD,
MASKED_FILL, CUMSUM.  manifest() feeds fuel_kernel.cpu's registration; operand conventions are
documented at the top of movement_kernels.h.in."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "movement_kernels.h":
    const fk_manifest_row fk_movement_manifest[]
    const int fk_movement_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every movement kernel."""
    return PyCapsule_New(<void *>fk_movement_manifest, b"fuel_kernel.manifest", NULL), fk_movement_manifest_len
