"""Shared test helpers: operands in every memory layout, per-dtype random data, oracle comparison.

Every kernel test builds its inputs with make_operand(shape, dtype, layout, rng) so each binding
is exercised on the same set of layouts: contiguous, strided, broadcast (stride 0),
negative-stride, offset and transposed views.
"""
import os
from pathlib import Path

import ml_dtypes
import numpy as np

import fuel_kernel as fk
from fuel_kernel import spec

# the checkout (or unpacked sdist) holding these tests
SOURCE_TREE = Path(__file__).resolve().parent.parent


def imports_this_tree():
    """Whether the fuel_kernel under test is this source tree's own build (in place or editable)
    rather than an installed package: the checks of build outputs in the tree apply only then."""
    return Path(fk.__file__).resolve().parent == SOURCE_TREE / "fuel_kernel"


def _cpuinfo(field):
    """The first /proc/cpuinfo line's value for `field` ("" where there is none, or no such file)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field)), "")
    except OSError:
        return ""


def cpu_flags():
    """The CPU's feature flags as Linux lists them ("avx512f", "amx_bf16", ...); empty elsewhere.
    Under a build capped at x86-64-v3 (tools/isa_check.sh sets FUEL_KERNEL_MAX_ISA for its run) the
    AVX-512 and AMX flags are left out: the kernels do not use them there."""
    flags = set(_cpuinfo("flags").split())
    if os.environ.get("FUEL_KERNEL_MAX_ISA") == "x86-64-v3":
        flags = {f for f in flags if not f.startswith(("avx512", "amx"))}
    return flags


def cpu_vendor():
    """The CPU's vendor as Linux lists it ("GenuineIntel", "AuthenticAMD", ...); "" elsewhere."""
    return _cpuinfo("vendor_id")


LAYOUTS = ("contiguous", "strided", "broadcast", "negative", "offset", "transposed")

ALL_DTYPES = tuple(fk.DType)
FLOAT_DTYPES = tuple(fk.DType[name] for name in spec.FLOAT)
INT_DTYPES = tuple(fk.DType[name] for name in spec.INTEGER)
FLOAT8_DTYPES = tuple(fk.DType[name] for name in spec.FLOAT8)
ARITHMETIC_DTYPES = tuple(fk.DType[name] for name in spec.ARITHMETIC_DTYPES)   # every dtype but FP8


def np_dtype(dtype):
    return fk.DType.parse(dtype).numpy


def gemm_k_blocks(dtype, k):
    """How many K blocks the GEMM engine cuts a depth-k product of `dtype` into (its compute type's
    KC from spec.GEMM_BLOCKING; fk_gemm_kstep_*): tests that mean to span several blocks assert it."""
    return -(-k // spec.gemm_blocking(fk.DType(dtype).name)[4])


def random_values(shape, dtype, rng, special=True):
    """Random data of `dtype`; floats include NaN, +-Inf and -0.0 when `special`, ints their extremes
    (FP8 values are F64 values rounded by ml_dtypes: an infinity is E4M3's NaN)."""
    dtype = fk.DType.parse(dtype)
    nd = dtype.numpy
    size = int(np.prod(shape, dtype=np.int64))
    if dtype == fk.DType.BOOL:
        flat = rng.integers(0, 2, size).astype(np.bool_)
    elif dtype.is_float or dtype.is_float8:
        flat = (rng.standard_normal(size) * 4).astype(np.float64)
        if special and size >= 8:
            picks = rng.choice(size, size=min(size, 4), replace=False)
            flat[picks] = np.array([np.nan, np.inf, -np.inf, -0.0])[: len(picks)]
        flat = flat.astype(nd)
    else:
        info = np.iinfo(nd)
        flat = rng.integers(info.min, info.max, size, endpoint=True, dtype=nd)
        if not special:
            flat = (flat % 100).astype(nd)
    return flat.reshape(shape)


def make_operand(shape, dtype, layout, rng, values=None, special=True):
    """An array of `shape` and `dtype` laid out as `layout`, holding `values` (random if None).

    For "broadcast" the values are random along the first non-trivial axis only (stride 0 on it)."""
    shape = tuple(shape)
    nd = np_dtype(dtype)
    if layout == "broadcast":
        if len(shape) == 0:
            return np.asarray(random_values((), dtype, rng, special) if values is None else values, dtype=nd)
        small = (1,) + shape[1:]
        src = random_values(small, dtype, rng, special) if values is None else np.asarray(values)[:1]
        view = np.broadcast_to(np.asarray(src, dtype=nd), shape)
        assert view.size <= 1 or 0 in view.strides or shape[0] <= 1
        return view
    if values is None:
        values = random_values(shape, dtype, rng, special)
    values = np.asarray(values, dtype=nd)
    if layout == "contiguous":
        return np.ascontiguousarray(values)
    if layout == "strided":
        big = np.zeros(tuple(2 * s + 1 for s in shape), dtype=nd)
        view = big[tuple(slice(1, 1 + 2 * s, 2) for s in shape)]
        view[...] = values
        return view
    if layout == "negative":
        big = np.zeros(shape, dtype=nd)
        view = big[tuple(slice(None, None, -1) for _ in shape)]
        view[...] = values
        return view
    if layout == "offset":
        flat = np.zeros(values.size + 3, dtype=nd)
        view = flat[3:].reshape(shape)
        view[...] = values
        return view
    if layout == "transposed":
        if len(shape) < 2:
            return make_operand(shape, dtype, "negative", rng, values)
        base = np.zeros(shape[::-1], dtype=nd)
        view = base.T
        view[...] = values
        return view
    raise ValueError(layout)


def assert_same(actual, expected, dtype, ulp=0, rtol=0.0, atol=0.0):
    """Compare to an oracle: exact for ints/bools, NaN-aware with ULP or tolerance for floats."""
    dtype = fk.DType.parse(dtype)
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if not dtype.is_float and not dtype.is_float8:
        np.testing.assert_array_equal(actual, expected)
        return
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    same_nan = np.isnan(a) == np.isnan(e)
    assert same_nan.all(), f"NaN mismatch at {np.argwhere(~same_nan)[:5].tolist()}"
    finite = ~np.isnan(e)
    if ulp == 0 and rtol == 0.0 and atol == 0.0:
        bad = finite & (a != e)
        assert not bad.any(), f"mismatch at {np.argwhere(bad)[:5].tolist()}: {a[bad][:5]} vs {e[bad][:5]}"
        return
    if ulp:
        err = np.abs(a - e)
        bad = finite & (a != e) & (err > ulp * ulp_of(e, dtype))
        assert not bad.any(), f"> {ulp} ulp at {np.argwhere(bad)[:5].tolist()}: {a[bad][:5]} vs {e[bad][:5]}"
    else:
        np.testing.assert_allclose(a[finite], e[finite], rtol=rtol, atol=atol)


def ulp_of(values, dtype):
    """The size of one unit in the last place of `dtype` at each of `values` (as float64)."""
    dtype = fk.DType.parse(dtype)
    v = np.abs(np.asarray(values, dtype=np.float64))
    if dtype == fk.DType.F64:
        return np.spacing(v)
    if dtype == fk.DType.F32:
        return np.spacing(v.astype(np.float32)).astype(np.float64)
    mant, min_exp = (10, -14) if dtype == fk.DType.F16 else (7, -126)
    with np.errstate(divide="ignore"):
        exp = np.floor(np.log2(np.where(v > 0, v, 1.0)))
    exp = np.maximum(exp, min_exp)
    return 2.0 ** (exp - mant)


def central_difference(loss, x, h=1e-6):
    """d loss / d x by central differences in F64: loss(x) -> float, x an F64 array (not changed)."""
    numeric = np.empty_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        numeric[i] = (loss(up) - loss(down)) / (2 * h)
    return numeric
