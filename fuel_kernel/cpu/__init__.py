"""The CPU backend: typed kernel modules that register their manifests at import.

Each module listed in KERNEL_MODULES (from fuel_kernel/spec.py) exports manifest() -> (capsule,
rows); register_cpu_kernels registers every row of every module in one transaction, then fills
family-default costs for any row without one, so importing fuel_kernel publishes exactly one snapshot for the CPU backend.
"""
import importlib

from fuel_kernel import spec

# every module in fuel_kernel/spec.py's KERNEL_MODULES, in that order (the BLAS sibling registers
# zero rows unless SciPy is importable)
KERNEL_MODULES = tuple(f"fuel_kernel.cpu._{module.name}" for module in spec.KERNEL_MODULES)


def register_cpu_kernels() -> None:
    """Publish every CPU kernel module's manifest in one transaction (importing fuel_kernel does)."""
    from fuel_kernel import _dispatch
    from fuel_kernel.types import Backend

    with _dispatch.edit_bindings() as tx:
        for name in KERNEL_MODULES:
            module = importlib.import_module(name)
            capsule, n_rows = module.manifest()
            tx.register_manifest(_dispatch.manifest_from_capsule(capsule, n_rows, owner=module),
                                 Backend.CPU)
        tx.fill_unset_cost(Backend.CPU)


def blas_sibling_loaded() -> bool:
    """Whether the BLAS-backed MATMUL sibling registered kernels (SciPy's BLAS is loaded)."""
    import sys
    module = sys.modules.get("fuel_kernel.cpu._matmul_blas")
    return module is not None and module.BLAS_MODULE is not None
