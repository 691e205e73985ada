"""The spec of fuel_kernel's public enums: dtypes, ops, params families and status codes, as data.

This module is the one place where a dtype, an op, a params family or a status code is named and
numbered.  It is plain Python data (in the manner of NumPy's numpy/_core/code_generators/
generate_umath.py) and imports nothing, so the build can read it before anything is compiled:

* tools/generate_abi.py (run by setup.py before cythonize) writes from it
    - fuel_kernel/include/fuel_kernel/abi_enums.h: the enums fk_dtype, fk_op, fk_params_kind and
      fk_status, which abi.h includes;
    - fuel_kernel/abi_enums.pxi: their Cython declarations, which abi.pxd includes.
  Both are build outputs: gitignored, never edited by hand.
* fuel_kernel/types.py builds the Python IntEnums DType and OpKind from it at import.
* tests/test_spec.py checks it against the runtime (every op has kernels and an oracle) and that
  the generated files are fresh.

Numbering is append-only and frozen by tests/test_abi.py (tests/data/abi_signature.json): add a
new dtype, op, params family or status at the END of its list with the next number; never
renumber, never reuse a number.

What is not here yet: the op schemas' shape and dtype rules (fuel_kernel/ops.py), the params
structs themselves and their Python constructors (abi.h, abi.pxd, params.py, _dispatch.pyx; the
PARAMS table below describes them and tests/test_spec.py holds it to abi.h), the exception
classes (errors.py; STATUSES names them and the test holds the two together), backends and
kernel caps (abi.h, types.py), and the per-family kernel tables (fuel_kernel/cpu/*.h).
"""
from collections import namedtuple

# ---- dtypes --------------------------------------------------------------------------------------
# code: the fk_dtype value; name: FK_<name> in C, DType.<name> in Python; short: the lower-case
# name printed by the coverage diagnostic; itemsize in bytes; numpy: the NumPy type that holds it
# ("module.name" when NumPy lacks it); kind: "bool", "uint", "int" or "float"; ctype: the C type
# that stores one element; compute: the C type kernels compute in (F16 and BF16 compute in float).
DTypeSpec = namedtuple("DTypeSpec", "code name short itemsize numpy kind ctype compute")

DTYPES = (
    DTypeSpec(0, "BOOL", "bool", 1, "bool", "bool", "uint8_t", "uint8_t"),
    DTypeSpec(1, "U8", "u8", 1, "uint8", "uint", "uint8_t", "uint8_t"),
    DTypeSpec(2, "I8", "i8", 1, "int8", "int", "int8_t", "int8_t"),
    DTypeSpec(3, "I16", "i16", 2, "int16", "int", "int16_t", "int16_t"),
    DTypeSpec(4, "I32", "i32", 4, "int32", "int", "int32_t", "int32_t"),
    DTypeSpec(5, "I64", "i64", 8, "int64", "int", "int64_t", "int64_t"),
    DTypeSpec(6, "U32", "u32", 4, "uint32", "uint", "uint32_t", "uint32_t"),
    DTypeSpec(7, "F16", "f16", 2, "float16", "float", "uint16_t", "float"),
    DTypeSpec(8, "BF16", "bf16", 2, "ml_dtypes.bfloat16", "float", "uint16_t", "float"),
    DTypeSpec(9, "F32", "f32", 4, "float32", "float", "float", "float"),
    DTypeSpec(10, "F64", "f64", 8, "float64", "float", "double", "double"),
)

# ---- params families -----------------------------------------------------------------------------
# kind: the fk_params_kind value (FK_PARAMS_<NAME>); name: the family's name in Python
# (fuel_kernel.params.<name>(...), OpParams.kind); member: the fk_params_union member the kernels
# read (None: no payload); fields: that member's struct as (C type, field name) pairs, as declared
# in abi.h (arrays as "int64_t[FK_MAX_DIMS]").  Several kinds may share one member (the "axis"
# families): the kind tells a kernel which op's params they are.
ParamsSpec = namedtuple("ParamsSpec", "kind name member fields")

_AXIS = (("int32_t", "axis"),)
PARAMS = (
    ParamsSpec(0, "none", None, ()),
    ParamsSpec(1, "reduce", "reduce", (("uint8_t", "ndims"), ("uint8_t", "keepdim"),
                                       ("int8_t[FK_MAX_DIMS]", "dims"))),
    ParamsSpec(2, "matmul", "matmul", (("int32_t", "batch_ndim"), ("int32_t", "reserved"),
                                       ("int64_t[FK_MAX_DIMS]", "batch"), ("int64_t", "m"),
                                       ("int64_t", "n"), ("int64_t", "k"),
                                       ("fk_matmul_m", "m_compute"))),
    ParamsSpec(3, "conv2d", "conv2d", (("int32_t[2]", "stride"), ("int32_t[2]", "padding"),
                                       ("int32_t[2]", "dilation"), ("int32_t", "groups"))),
    ParamsSpec(4, "slice", "slice", (("int32_t", "ndim"), ("int32_t", "reserved"),
                                     ("int64_t[FK_MAX_DIMS]", "start"),
                                     ("int64_t[FK_MAX_DIMS]", "stop"),
                                     ("int64_t[FK_MAX_DIMS]", "step"))),
    ParamsSpec(5, "affine", "affine", (("double", "mul"), ("double", "add"))),
    ParamsSpec(6, "clamp", "clamp", (("double", "min"), ("double", "max"))),
    ParamsSpec(7, "powi", "powi", (("int32_t", "exp"),)),
    ParamsSpec(8, "concat", "axis", _AXIS),
    ParamsSpec(9, "softmax_last_dim", "axis", _AXIS),
    ParamsSpec(10, "norm_last_dim", "norm", (("double", "eps"),)),
    ParamsSpec(11, "index_select", "axis", _AXIS),
    ParamsSpec(12, "gather", "axis", _AXIS),
    ParamsSpec(13, "scatter", "axis", _AXIS),
    ParamsSpec(14, "cumsum", "cumsum", (("int32_t", "axis"), ("uint8_t", "exclusive"),
                                        ("uint8_t", "reverse"))),
    ParamsSpec(15, "flip", "flip", (("uint8_t", "ndims"), ("int8_t[FK_MAX_DIMS]", "dims"))),
    ParamsSpec(16, "roll", "roll", (("uint8_t", "ndims"), ("int8_t[FK_MAX_DIMS]", "dims"),
                                    ("int64_t[FK_MAX_DIMS]", "shifts"))),
    ParamsSpec(17, "triangular", "triangular", (("int64_t", "diagonal"),)),
    ParamsSpec(18, "pad", "pad", (("int32_t", "mode"), ("int32_t", "ndim"),
                                  ("int64_t[FK_MAX_DIMS]", "before"),
                                  ("int64_t[FK_MAX_DIMS]", "after"), ("double", "value"))),
    ParamsSpec(19, "masked_fill", "masked_fill", (("double", "value"),)),
    ParamsSpec(20, "rope", "rope", (("uint8_t", "interleaved"),)),
    ParamsSpec(21, "flash_attn", "flash_attn", (("double", "scale"), ("double", "softcap"),
                                                ("uint8_t", "causal"), ("uint8_t[7]", "reserved"),
                                                ("int64_t", "window_left"),
                                                ("int64_t", "window_right"))),
    ParamsSpec(22, "paged_attn", "paged_attn", (("double", "scale"), ("double", "softcap"),
                                                ("int32_t", "block_size"), ("int32_t", "reserved"),
                                                ("int64_t", "window_left"))),
)

# ---- ops -----------------------------------------------------------------------------------------
# number: the fk_op value (append-only); name: FK_OP_<name> in C, OpKind.<name> in Python;
# inputs: the input count, or (fewest, most) when it varies; outputs: the output count; params:
# the params family (a name in PARAMS); doc: one line.
OpSpec = namedtuple("OpSpec", "number name inputs outputs params doc")

VARIADIC = (1, 7)        # CONCAT: 1 .. FK_MAX_OPERANDS - 1 inputs (one operand slot is the output)


def _op(number, name, inputs, params, doc, outputs=1):
    return OpSpec(number, name, inputs, outputs, params, doc)


OPS = (
    _op(0, "CAST", 1, "none", "convert to the output's dtype"),
    _op(1, "CONTIGUIZE", 1, "none", "copy a strided or broadcast input into a dense output"),
    # unary elementwise
    _op(2, "NEG", 1, "none", "-x"),
    _op(3, "ABS", 1, "none", "|x|"),
    _op(4, "SQR", 1, "none", "x * x"),
    _op(5, "SQRT", 1, "none", "square root"),
    _op(6, "RSQRT", 1, "none", "1 / sqrt(x)"),
    _op(7, "RECIP", 1, "none", "1 / x"),
    _op(8, "EXP", 1, "none", "e ** x"),
    _op(9, "LOG", 1, "none", "natural logarithm"),
    _op(10, "SIN", 1, "none", "sine"),
    _op(11, "COS", 1, "none", "cosine"),
    _op(12, "TANH", 1, "none", "hyperbolic tangent"),
    _op(13, "SIGMOID", 1, "none", "1 / (1 + e ** -x)"),
    _op(14, "RELU", 1, "none", "max(x, 0)"),
    _op(15, "SILU", 1, "none", "x * sigmoid(x)"),
    _op(16, "GELU", 1, "none", "GELU, tanh approximation"),
    _op(17, "GELU_ERF", 1, "none", "GELU, exact (erf) form"),
    _op(18, "ERF", 1, "none", "the error function"),
    _op(19, "STEP", 1, "none", "1 where x > 0, else 0 (NaN kept)"),
    _op(20, "FLOOR", 1, "none", "round toward -inf"),
    _op(21, "CEIL", 1, "none", "round toward +inf"),
    _op(22, "ROUND", 1, "none", "round half to even (np.round)"),
    _op(23, "SIGN", 1, "none", "the sign of x: -1, 0 or 1"),
    # binary elementwise (inputs broadcast together)
    _op(24, "ADD", 2, "none", "a + b"),
    _op(25, "SUB", 2, "none", "a - b"),
    _op(26, "MUL", 2, "none", "a * b"),
    _op(27, "DIV", 2, "none", "a / b (an integer division by zero is an error)"),
    _op(28, "MAXIMUM", 2, "none", "elementwise maximum (NaN propagates)"),
    _op(29, "MINIMUM", 2, "none", "elementwise minimum (NaN propagates)"),
    _op(30, "POW", 2, "none", "a ** b"),
    _op(31, "REM", 2, "none", "remainder of a / b (an integer division by zero is an error)"),
    # comparisons (BOOL output) and selection
    _op(32, "EQ", 2, "none", "a == b"),
    _op(33, "NE", 2, "none", "a != b"),
    _op(34, "LT", 2, "none", "a < b"),
    _op(35, "LE", 2, "none", "a <= b"),
    _op(36, "GT", 2, "none", "a > b"),
    _op(37, "GE", 2, "none", "a >= b"),
    _op(38, "WHERE", 3, "none", "cond ? a : b (cond BOOL)"),
    # unary elementwise with params
    _op(39, "AFFINE", 1, "affine", "x * mul + add"),
    _op(40, "CLAMP", 1, "clamp", "min(max(x, min), max)"),
    _op(41, "POWI", 1, "powi", "x ** exp for an integer exp"),
    # reductions
    _op(42, "SUM", 1, "reduce", "sum over dims (integers accumulate in I64)"),
    _op(43, "MAX", 1, "reduce", "maximum over dims"),
    _op(44, "MIN", 1, "reduce", "minimum over dims"),
    _op(45, "MEAN", 1, "reduce", "mean over dims (integers give F64)"),
    _op(46, "PROD", 1, "reduce", "product over dims (integers accumulate in I64)"),
    _op(47, "ARGMAX", 1, "reduce", "index of the first maximum (I64)"),
    _op(48, "ARGMIN", 1, "reduce", "index of the first minimum (I64)"),
    # compute
    _op(49, "MATMUL", (2, 3), "matmul", "batched A @ B; a third input is the run-time row count"),
    _op(50, "CONV2D", (2, 3), "conv2d", "NCHW 2-d convolution, optional bias"),
    _op(51, "SOFTMAX_LAST_DIM", 1, "softmax_last_dim", "softmax over the last dim"),
    _op(52, "LOG_SOFTMAX_LAST_DIM", 1, "softmax_last_dim", "log-softmax over the last dim"),
    _op(53, "RMS_NORM", 2, "norm_last_dim", "x / rms(x) * weight over the last dim"),
    _op(54, "LAYER_NORM", 3, "norm_last_dim", "(x - mean) / std * weight + bias over the last dim"),
    # data movement and indexing
    _op(55, "SLICE", 1, "slice", "strided slice per dim"),
    _op(56, "CONCAT", VARIADIC, "concat", "join inputs along an axis"),
    _op(57, "INDEX_SELECT", 2, "index_select", "pick slices along an axis by an index vector"),
    _op(58, "GATHER", 2, "gather", "pick elements along an axis by an index tensor"),
    _op(59, "SCATTER_ADD", 3, "scatter", "copy of x with src added at index along an axis"),
    _op(60, "INDEX_ADD", 3, "scatter", "copy of x with src slices added at an index vector"),
    _op(61, "FLIP", 1, "flip", "reverse along dims"),
    _op(62, "ROLL", 1, "roll", "rotate along dims by shifts"),
    _op(63, "CUMSUM", 1, "cumsum", "cumulative sum along an axis (exclusive, reverse options)"),
    _op(64, "TRIU", 1, "triangular", "zero below the diagonal of the last two dims"),
    _op(65, "TRIL", 1, "triangular", "zero above the diagonal of the last two dims"),
    _op(66, "PAD", 1, "pad", "pad each dim (constant, reflect or replicate)"),
    _op(67, "MASKED_FILL", 2, "masked_fill", "value where mask, else x"),
    # attention
    _op(68, "ROPE", 3, "rope", "rotary position embedding from cos and sin tables"),
    _op(69, "FLASH_ATTN", 3, "flash_attn", "softmax(q k^T * scale) v, causal / windowed / softcap"),
    _op(70, "PAGED_ATTN", 6, "paged_attn", "attention over a paged KV cache through a block table"),
)

# ---- status codes --------------------------------------------------------------------------------
# value: the fk_status value; name: FK_<name>; error: the fuel_kernel.errors class a Python caller
# sees (None for FK_OK); doc: when a kernel or the core returns it.
StatusSpec = namedtuple("StatusSpec", "value name error doc")

STATUSES = (
    StatusSpec(0, "OK", None, "success"),
    StatusSpec(1, "ERR_DTYPE", "DTypeError", "operand dtype does not match the binding"),
    StatusSpec(2, "ERR_SHAPE", "ShapeError", "shapes/ranks do not fit the op's schema"),
    StatusSpec(3, "ERR_INDEX", "KernelIndexError", "an index operand is out of range"),
    StatusSpec(4, "ERR_PARAMS", "ParamsError", "op parameters are missing or nonsensical"),
    StatusSpec(5, "ERR_ZERO_DIVISION", "KernelZeroDivisionError", "integer division by zero"),
    StatusSpec(6, "ERR_BACKEND", "BackendError", "storage lives on another backend"),
    StatusSpec(7, "ERR_NO_MEMORY", "KernelMemoryError", "scratch allocation failed"),
    StatusSpec(8, "ERR_ALIAS", "AliasError", "output overlaps an input in a way the kernel forbids"),
    StatusSpec(9, "ERR_READ_ONLY", "ReadOnlyError", "output storage is read-only"),
    StatusSpec(10, "ERR_OPERANDS", "OperandCountError", "wrong operand count"),
    StatusSpec(11, "ERR_NO_KERNEL", "NoKernelError", "lookup miss"),
    StatusSpec(12, "ERR_INVALID", "RegistrationError", "invalid registration or API use"),
    StatusSpec(13, "ERR_INTERNAL", "KernelError", "a kernel reported an internal failure"),
)


# ---- CPU kernel tables ---------------------------------------------------------------------------
# What each CPU kernel family registers, as data: tools/generate_kernels.py turns these into the
# family's manifest array (fk_<family>_manifest, fk_<family>_manifest_len), which the family's
# template emits with {{manifest("<family>")}}.  One KernelRows gives a row for every op in ops
# crossed with every dtype signature in signatures (operand dtype names, inputs then outputs):
#   kernel  the C kernel function, a str.format pattern over op (lower case) and the signature's
#           dtype names d0, d1, ... (upper case), e.g. "fk_{op}_{d0}";
#   claim   a name in CLAIMS, or a dict from the first operand's dtype name to one;
#   cost    the C cost function; caps: a C expression of FK_CAP_* flags; source: the source tag.
# A row's revision is a hash of (source, op, signature, kernel name): stable across builds and
# runs, and different for every implementation (tools/generate_kernels.py, revision()).
Claim = namedtuple("Claim", "max_ulp notes max_rel max_abs bit_stable", defaults=(0.0, 0.0, 1))
KernelRows = namedtuple("KernelRows", "ops signatures kernel claim cost caps source",
                        defaults=("native",))


def dtype_names(*kinds):
    """The dtype names of the given kinds ("bool", "uint", "int", "float"), in code order."""
    return tuple(d.name for d in DTYPES if d.kind in kinds)


def same(names, n):
    """Signatures with one dtype for all n operands: same(("F32", "F64"), 2) -> (("F32", "F32"), ...)."""
    return tuple((name,) * n for name in names)


FLOAT = dtype_names("float")
SIGNED = dtype_names("int")
UNSIGNED = dtype_names("uint")
INTEGER = dtype_names("int", "uint")
NUMERIC = dtype_names("int", "uint", "float")
ALL_DTYPES = tuple(d.name for d in DTYPES)

# Precision claims shared by families (a family adds its own with a unique name).
CLAIMS = {
    "EXACT": Claim(0, "exact: correctly rounded / bit-exact"),
}

# family -> tuple of KernelRows, in registration order (the first row at a key is what plain
# lookup returns).
CPU_KERNELS = {}


# cast: CAST for every dtype pair, CONTIGUIZE for every dtype (cpu/cast_kernels.h.in)
CLAIMS["EXACT_CAST"] = Claim(0, "exact: conversion rules in the module docs")
CLAIMS["BIT_COPY"] = Claim(0, "exact: bit copy")
_COPY_CAPS = "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT | FK_CAP_INPLACE"
CPU_KERNELS["cast"] = (
    KernelRows(("CAST",), tuple((s, d) for s in ALL_DTYPES for d in ALL_DTYPES), "fk_cast_{d0}_{d1}",
               "EXACT_CAST", "fk_copy_cost", _COPY_CAPS),
    KernelRows(("CONTIGUIZE",), same(ALL_DTYPES, 2), "fk_cast_{d0}_{d1}", "BIT_COPY", "fk_copy_cost",
               _COPY_CAPS),
)

# binary: ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, REM on every numeric dtype, and the logical
# ADD, MUL, MAXIMUM, MINIMUM on BOOL; key [T, T, T] (cpu/binary_kernels.h.in)
CLAIMS["BINARY_HALF"] = Claim(0, "computed in F32, rounded once: correctly rounded")
CLAIMS["BINARY_POW"] = Claim(1, "C pow (F16/BF16 via powf); <= 1 ulp of the correctly rounded result")
CLAIMS["BINARY_REM"] = Claim(0, "bit-exact with np.remainder (fmod then sign fix-up)")
_BINARY_ROUNDED = {d.name: "BINARY_HALF" if d.ctype != d.compute else "EXACT" for d in DTYPES}
CPU_KERNELS["binary"] = (
    KernelRows(("ADD", "SUB", "MUL", "DIV"), same(NUMERIC, 3), "fk_{op}_{d0}", _BINARY_ROUNDED,
               "fk_cost_simple", "FK_ELEMENTWISE_CAPS"),
    KernelRows(("MAXIMUM", "MINIMUM"), same(NUMERIC, 3), "fk_{op}_{d0}", "EXACT", "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    KernelRows(("POW",), same(NUMERIC, 3), "fk_{op}_{d0}", "BINARY_POW", "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    KernelRows(("REM",), same(NUMERIC, 3), "fk_{op}_{d0}", "BINARY_REM", "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    KernelRows(("ADD", "MUL", "MAXIMUM", "MINIMUM"), same(dtype_names("bool"), 3), "fk_{op}_{d0}", "EXACT",
               "fk_cost_simple", "FK_ELEMENTWISE_CAPS"),
)

# compare: EQ, NE, LT, LE, GT, GE on every dtype (key [T, T, BOOL]) and WHERE(cond, a, b) on every
# dtype (key [BOOL, T, T, T]) (cpu/compare_kernels.h.in)
CLAIMS["COMPARE"] = Claim(0, "exact: IEEE comparison")
CLAIMS["WHERE_COPY"] = Claim(0, "exact: bit copy of the chosen operand")
CPU_KERNELS["compare"] = (
    KernelRows(("EQ", "NE", "LT", "LE", "GT", "GE"), tuple((n, n, "BOOL") for n in ALL_DTYPES), "fk_{op}_{d0}",
               "COMPARE", "fk_cost_simple", "FK_ELEMENTWISE_CAPS"),
    KernelRows(("WHERE",), tuple(("BOOL", n, n, n) for n in ALL_DTYPES), "fk_{op}_{d1}", "WHERE_COPY",
               "fk_cost_simple", "FK_ELEMENTWISE_CAPS"),
)

# attention: ROPE, FLASH_ATTN, PAGED_ATTN on every float dtype (F16/BF16 compute in F32)
# (cpu/attention_kernels.h.in); tolerances are relative to max|v| over the attended rows
CLAIMS["ROPE"] = Claim(1, "F32 math (F64 for f64), FMA may fuse: err <= 1 ulp of |a c|+|b s| plus one rounding")
CLAIMS["FLASH_ATTN_F32"] = Claim(0, "abs err <= 2e-5 * max|v| (f32 math, fast exp); blocked order is fixed",
                                 0.0, 2e-5)
CLAIMS["FLASH_ATTN_F64"] = Claim(0, "abs err <= 1e-12 * max|v| (f64 math, libm exp)", 0.0, 1e-12)
CLAIMS["FLASH_ATTN_F16"] = Claim(0, "f32 math, one f16 rounding: abs err <= 2e-3 * max|v|", 0.0, 2e-3)
CLAIMS["FLASH_ATTN_BF16"] = Claim(0, "f32 math, one bf16 rounding: abs err <= 1.6e-2 * max|v|", 0.0, 1.6e-2)
_ATTN_CLAIMS = {name: "FLASH_ATTN_" + name for name in FLOAT}
CPU_KERNELS["attention"] = (
    KernelRows(("ROPE",), same(FLOAT, 4), "fk_rope", "ROPE", "fk_rope_cost", "FK_ATTN_CAPS | FK_CAP_INPLACE"),
    KernelRows(("FLASH_ATTN",), same(FLOAT, 4), "fk_flash_attn", _ATTN_CLAIMS, "fk_flash_attn_cost", "FK_ATTN_CAPS"),
    KernelRows(("PAGED_ATTN",), tuple((n, n, n, "I32", "I32", "F32", n) for n in FLOAT), "fk_paged_attn",
               _ATTN_CLAIMS, "fk_paged_attn_cost", "FK_ATTN_CAPS"),
)

def check():
    """Raise ValueError if the tables break their own rules: numbers are 0..n-1 in order (so that
    appending is the only way to add), names are unique, every op's params family exists."""
    for table, number in ((DTYPES, "code"), (OPS, "number"), (PARAMS, "kind"), (STATUSES, "value")):
        numbers = [getattr(row, number) for row in table]
        if numbers != list(range(len(table))):
            raise ValueError(f"spec: {type(table[0]).__name__} numbers must run 0..{len(table) - 1} "
                             f"in order, got {numbers}")
        names = [row.name for row in table]
        if len(set(names)) != len(names):
            raise ValueError(f"spec: duplicate names in {type(table[0]).__name__}")
    families = {p.name for p in PARAMS}
    for op in OPS:
        if op.params not in families:
            raise ValueError(f"spec: op {op.name} names an unknown params family {op.params!r}")
        lo, hi = op.inputs if isinstance(op.inputs, tuple) else (op.inputs, op.inputs)
        if not 1 <= lo <= hi or hi + op.outputs > 8:
            raise ValueError(f"spec: op {op.name} has an impossible operand count {op.inputs}")
    check_kernel_tables()


def check_kernel_tables():
    """Raise ValueError if a CPU kernel table names an unknown op, dtype or claim, or gives an op
    a signature with the wrong operand count."""
    ops = {op.name: op for op in OPS}
    dtypes = set(ALL_DTYPES)
    for family, groups in CPU_KERNELS.items():
        for group in groups:
            claims = [group.claim] if isinstance(group.claim, str) else list(group.claim.values())
            for claim in claims:
                if claim not in CLAIMS:
                    raise ValueError(f"spec: CPU_KERNELS[{family!r}] names an unknown claim {claim!r}")
            for name in group.ops:
                op = ops.get(name)
                if op is None:
                    raise ValueError(f"spec: CPU_KERNELS[{family!r}] names an unknown op {name!r}")
                lo, hi = op.inputs if isinstance(op.inputs, tuple) else (op.inputs, op.inputs)
                for signature in group.signatures:
                    if not lo + op.outputs <= len(signature) <= hi + op.outputs:
                        raise ValueError(f"spec: {name} cannot take the {len(signature)} operands "
                                         f"of {signature} (CPU_KERNELS[{family!r}])")
                    if not set(signature) <= dtypes:
                        raise ValueError(f"spec: CPU_KERNELS[{family!r}] names unknown dtypes in "
                                         f"{signature}")
                    if isinstance(group.claim, dict) and signature[0] not in group.claim:
                        raise ValueError(f"spec: CPU_KERNELS[{family!r}] has no {name} claim for "
                                         f"{signature[0]}")


check()
