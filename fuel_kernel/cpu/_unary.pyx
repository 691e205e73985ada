# cython: language_level=3
"""CPU elementwise unary kernels (C in unary_kernels.h); manifest() feeds fuel_kernel.cpu's registration."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "unary_kernels.h":
    const fk_manifest_row fk_unary_manifest[]
    const int fk_unary_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every kernel of this module."""
    return PyCapsule_New(<void *>fk_unary_manifest, b"fuel_kernel.manifest", NULL), fk_unary_manifest_len
