# cython: language_level=3
"""CPU CONV2D kernels, im2col+GEMM and direct siblings (C: template conv_kernels.h.in); manifest() feeds fuel_kernel.cpu."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "conv_kernels.h":
    const fk_manifest_row fk_conv_manifest[]
    const int fk_conv_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every CONV2D kernel."""
    return PyCapsule_New(<void *>fk_conv_manifest, b"fuel_kernel.manifest", NULL), fk_conv_manifest_len
