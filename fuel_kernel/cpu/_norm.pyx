# cython: language_level=3
"""CPU SOFTMAX/LOG_SOFTMAX over the last dim, RMS_NORM and LAYER_NORM (C in norm_kernels.h); manifest() feeds fuel_kernel.cpu."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "norm_kernels.h":
    const fk_manifest_row fk_norm_manifest[]
    const int fk_norm_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every softmax and norm kernel."""
    return PyCapsule_New(<void *>fk_norm_manifest, b"fuel_kernel.manifest", NULL), fk_norm_manifest_len
