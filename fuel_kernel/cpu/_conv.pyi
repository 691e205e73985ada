"""Type stub for fuel_kernel.cpu._conv, a typed CPU kernel module."""

def manifest() -> tuple[object, int]:
    """The module's kernels: a 'fuel_kernel.manifest' capsule and its row count."""
