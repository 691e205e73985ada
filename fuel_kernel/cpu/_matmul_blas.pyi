"""Type stub for fuel_kernel.cpu._matmul_blas, the SciPy BLAS MATMUL sibling."""
from types import ModuleType

BLAS_MODULE: ModuleType | None
AVAILABLE: bool

def _bind_scipy_blas() -> ModuleType | None: ...

def manifest() -> tuple[object, int]:
    """(capsule, row count) for the BLAS MATMUL rows; zero rows when SciPy is not importable."""
