# cython: language_level=3
"""CPU reductions SUM/MAX/MIN/MEAN/PROD/ARGMAX/ARGMIN (C in reduce_kernels.h); manifest() feeds fuel_kernel.cpu."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "reduce_kernels.h":
    const fk_manifest_row fk_reduce_manifest[]
    const int fk_reduce_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every reduction kernel."""
    return PyCapsule_New(<void *>fk_reduce_manifest, b"fuel_kernel.manifest", NULL), fk_reduce_manifest_len
