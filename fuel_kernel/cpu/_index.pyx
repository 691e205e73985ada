# cython: language_level=3
"""CPU indexing kernels (C in index_kernels.h.in): INDEX_SELECT, GATHER, SCATTER_ADD, INDEX_ADD.
manifest() feeds fuel_kernel.cpu's registration; operand conventions are
documented at the top of index_kernels.h.in."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "index_kernels.h":
    const fk_manifest_row fk_index_manifest[]
    const int fk_index_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every indexing kernel."""
    return PyCapsule_New(<void *>fk_index_manifest, b"fuel_kernel.manifest", NULL), fk_index_manifest_len
