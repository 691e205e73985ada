# cython: language_level=3
"""CPU attention kernels (C in attention_kernels.h): ROPE, FLASH_ATTN, PAGED_ATTN.  manifest() feeds
fuel_kernel.cpu's registration; operand conventions and masking rules are documented at the top of
attention_kernels.h."""
from cpython.pycapsule cimport PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "attention_kernels.h":
    const fk_manifest_row fk_attention_manifest[]
    const int fk_attention_manifest_len

fk_import_api()


def manifest():
    """(capsule of the fk_manifest_row array, row count) for every attention kernel."""
    return PyCapsule_New(<void *>fk_attention_manifest, b"fuel_kernel.manifest", NULL), fk_attention_manifest_len
