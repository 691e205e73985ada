# cython: language_level=3
"""The BLAS MATMUL sibling (C: template matmul_blas_kernels.h.in): registers only when SciPy is importable.

SciPy is not a build dependency: at import we look up sgemm/dgemm in the capsules of
scipy.linalg.cython_blas.__pyx_capi__ and bind them once (see the header for why a module-level
pointer is safe here); manifest() returns zero rows when SciPy is absent.
"""
from cpython.pycapsule cimport PyCapsule_GetName, PyCapsule_GetPointer, PyCapsule_New

from fuel_kernel.abi cimport fk_import_api, fk_manifest_row

cdef extern from "matmul_blas_kernels.h":
    const fk_manifest_row fk_matmul_blas_manifest[]
    const int fk_matmul_blas_manifest_len
    void fk_matmul_blas_bind(void *sgemm, void *dgemm)

fk_import_api()


cdef void *capsule_pointer(object capsule) except NULL:
    return PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule))


def _bind_scipy_blas():
    """The cython_blas module (kept referenced so its library stays loaded), or None."""
    try:
        from scipy.linalg import cython_blas
        capi = cython_blas.__pyx_capi__
        sgemm, dgemm = capi["sgemm"], capi["dgemm"]
    except (ImportError, AttributeError, KeyError):
        return None
    fk_matmul_blas_bind(capsule_pointer(sgemm), capsule_pointer(dgemm))
    return cython_blas


BLAS_MODULE = _bind_scipy_blas()
AVAILABLE = BLAS_MODULE is not None


def manifest():
    """(capsule, row count) for the BLAS MATMUL rows; zero rows when SciPy is not importable."""
    return (PyCapsule_New(<void *>fk_matmul_blas_manifest, b"fuel_kernel.manifest", NULL),
            fk_matmul_blas_manifest_len if AVAILABLE else 0)
