"""The CPU backend: typed kernel modules that register their manifests at import.

Each module listed in KERNEL_MODULES exports manifest() -> (capsule, rows); register_cpu_kernels
registers every row of every module in one transaction, then fills family-default costs for any
row without one, so importing fuel_kernel publishes exactly one snapshot for the CPU backend.
"""
import importlib

KERNEL_MODULES = (
    "fuel_kernel.cpu._cast",
    "fuel_kernel.cpu._binary",
    "fuel_kernel.cpu._compare",
    "fuel_kernel.cpu._unary",
    "fuel_kernel.cpu._movement",
    "fuel_kernel.cpu._index",
    "fuel_kernel.cpu._attention",
    "fuel_kernel.cpu._reduce",
    "fuel_kernel.cpu._matmul",
    "fuel_kernel.cpu._matmul_blas",      # zero rows unless SciPy is importable
    "fuel_kernel.cpu._norm",
    "fuel_kernel.cpu._conv",
)


def register_cpu_kernels():
    from fuel_kernel import _dispatch
    from fuel_kernel.types import Backend

    with _dispatch.edit_bindings() as tx:
        for name in KERNEL_MODULES:
            module = importlib.import_module(name)
            capsule, n_rows = module.manifest()
            tx.register_manifest(_dispatch.manifest_from_capsule(capsule, n_rows, owner=module),
                                 Backend.CPU)
        tx.fill_unset_cost(Backend.CPU)
