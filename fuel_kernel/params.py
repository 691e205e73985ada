"""Constructors for OpParams, the typed extras an op needs beyond its operands.

Each function builds one family of the C tagged union fk_params (abi.h).  The constructors are
generated at build time from fuel_kernel/spec.py (PARAMS_CONSTRUCTORS: each family's arguments,
defaults and checks) into fuel_kernel/_params_constructors.py, and their checks into
_params_generated.pxi (run by _dispatch._make_params), so a kernel never sees a nonsensical value
from Python: anything that is not a number of the right kind, does not fit its C field, or is a
non-integral value for an integer field (a stride of 1.5) is a ParamsError, never truncated.
"""
from ._dispatch import OpParams
from ._params_constructors import *  # noqa: F401,F403  (the constructors, one per family)
from ._params_constructors import __all__ as _CONSTRUCTORS
from .records import MatmulM

__all__ = ["OpParams", "MatmulM", *_CONSTRUCTORS]
