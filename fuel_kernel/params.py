"""Constructors for OpParams, the typed extras an op needs beyond its operands.

Each function builds one family of the C tagged union fk_params (abi.h); arguments are validated
(in _dispatch._build_params), so a kernel never sees a nonsensical value from Python: anything that
is not a number of the right kind, does not fit its C field, or is a non-integral value for an
integer field (a stride of 1.5) is a ParamsError, never truncated.
"""
from ._dispatch import OpParams, _make_params
from .records import MatmulM

__all__ = ["OpParams", "MatmulM", "none", "reduce", "matmul", "conv2d", "slice", "affine", "clamp",
           "powi", "concat", "softmax_last_dim", "norm_last_dim", "index_select", "gather",
           "scatter", "cumsum", "flip", "roll", "triangular", "pad", "masked_fill", "rope",
           "flash_attn", "paged_attn"]


def none():
    return _make_params("none")


def reduce(dims, keepdim=False):
    return _make_params("reduce", dims=dims, keepdim=keepdim)


def matmul(m, n, k, batch=(), m_compute=None):
    """m is the row capacity; m_compute (MatmulM) says how many rows to compute."""
    return _make_params("matmul", m=m, n=n, k=k, batch=batch, m_compute=m_compute)


def conv2d(stride=1, padding=0, dilation=1, groups=1):
    return _make_params("conv2d", stride=stride, padding=padding, dilation=dilation, groups=groups)


def slice(start, stop, step=None):
    """step defaults to 1 on every dim."""
    return _make_params("slice", start=start, stop=stop, step=step)


def affine(mul, add):
    return _make_params("affine", mul=mul, add=add)


def clamp(min, max):
    return _make_params("clamp", min=min, max=max)


def powi(exp):
    return _make_params("powi", exp=exp)


def concat(axis):
    return _make_params("concat", axis=axis)


def softmax_last_dim():
    return _make_params("softmax_last_dim", axis=-1)


def norm_last_dim(eps=1e-5):
    return _make_params("norm_last_dim", eps=eps)


def index_select(axis):
    return _make_params("index_select", axis=axis)


def gather(axis):
    return _make_params("gather", axis=axis)


def scatter(axis):
    return _make_params("scatter", axis=axis)


def cumsum(axis, exclusive=False, reverse=False):
    return _make_params("cumsum", axis=axis, exclusive=exclusive, reverse=reverse)


def flip(dims):
    return _make_params("flip", dims=dims)


def roll(shifts, dims):
    return _make_params("roll", shifts=shifts, dims=dims)


def triangular(diagonal=0):
    return _make_params("triangular", diagonal=diagonal)


def pad(before, after, mode="constant", value=0.0):
    return _make_params("pad", before=before, after=after, mode=mode, value=value)


def masked_fill(value):
    return _make_params("masked_fill", value=value)


def rope(interleaved=False):
    return _make_params("rope", interleaved=interleaved)


def flash_attn(scale, causal=False, softcap=0.0, window_left=-1, window_right=-1):
    return _make_params("flash_attn", scale=scale, causal=causal, softcap=softcap,
                        window_left=window_left, window_right=window_right)


def paged_attn(scale, block_size, softcap=0.0, window_left=-1):
    return _make_params("paged_attn", scale=scale, block_size=block_size,
                        softcap=softcap, window_left=window_left)
