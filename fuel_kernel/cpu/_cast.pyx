# cython: language_level=3
"""CPU CAST and CONTIGUIZE kernels (C in cast_kernels.h); manifest() feeds fuel_kernel.cpu's registration."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "cast_kernels.h":
    const fk_manifest_row fk_cast_manifest[]
    const int fk_cast_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every CAST and CONTIGUIZE kernel."""
    return PyCapsule_New(<void *>fk_cast_manifest, b"fuel_kernel.manifest", NULL), fk_cast_manifest_len
