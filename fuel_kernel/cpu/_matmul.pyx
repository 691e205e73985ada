# cython: language_level=3
"""Native CPU MATMUL kernels (C: templates matmul_kernels.h.in, gemm_core.h.in); manifest() feeds fuel_kernel.cpu."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "matmul_kernels.h":
    const fk_manifest_row fk_matmul_manifest[]
    const int fk_matmul_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every native MATMUL kernel."""
    return PyCapsule_New(<void *>fk_matmul_manifest, b"fuel_kernel.manifest", NULL), fk_matmul_manifest_len
