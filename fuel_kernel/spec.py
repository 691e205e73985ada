"""The spec of fuel_kernel's public enums: dtypes, ops, params families and status codes, as data.

This module is the one place where a dtype, an op, a params family or a status code is named and
numbered.  It is plain Python data (in the manner of NumPy's numpy/_core/code_generators/
generate_umath.py) and imports nothing, so the build can read it before anything is compiled:

* tools/generate_abi.py (run by setup.py before cythonize) writes from it
    - fuel_kernel/include/fuel_kernel/abi_enums.h: the enums fk_dtype, fk_op, fk_params_kind and
      fk_status, which abi.h includes;
    - fuel_kernel/abi_enums.pxi: their Cython declarations, which abi.pxd includes;
    - fuel_kernel/graph/_generated_builders.py: the Graph builders of the ops (OPS);
    - fuel_kernel/_params_constructors.py and _params_generated.pxi: the fuel_kernel.params
      constructors and their checks and C fill (PARAMS_CONSTRUCTORS);
    - fuel_kernel/cpu/_<family>.pyx: the kernel modules (KERNEL_MODULES).
  All are build outputs: gitignored, never edited by hand.
* At import, fuel_kernel/types.py builds the Python IntEnums DType and OpKind from it, ops.py the
  op schemas, errors.py STATUS_ERRORS and fuel_kernel/cpu KERNEL_MODULES.
* tests/test_spec.py checks it against the runtime (every op has kernels and an oracle) and that
  the generated files are fresh.

Numbering is append-only and frozen by tests/test_abi.py (tests/data/abi_signature.json): add a
new dtype, op, params family or status at the END of its list with the next number; never
renumber, never reuse a number.

What is not here yet: the shape and dtype rule functions the ops name (fuel_kernel/ops.py), the
params structs themselves (abi.h, abi.pxd; the PARAMS table below describes them and
tests/core/test_spec_abi.py holds it to abi.h), the exception classes (errors.py; STATUSES names
them), backends and kernel caps (abi.h, types.py), and the per-family kernel tables
(fuel_kernel/cpu/*.h).
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Optional, Sequence, Union

# ---- dtypes --------------------------------------------------------------------------------------
# code: the fk_dtype value; name: FK_<name> in C, DType.<name> in Python; short: the lower-case
# name printed by the coverage diagnostic; itemsize in bytes; numpy: the NumPy type that holds it
# ("module.name" when NumPy lacks it); kind: "bool", "uint", "int", "float" or "float8"; ctype: the C
# type that stores one element; compute: the C type kernels compute in (F16, BF16 and the FP8 formats
# compute in float).  Kind "float8" marks the 8-bit floats (E4M3 is the "fn" variant: no infinity,
# one NaN per sign; E5M2 has infinities): storage formats, as in PyTorch, served by CAST, the ops
# that move elements without computing on them, and MATMUL into F32 or BF16 with per-tensor scales,
# never by the element-math families (FLOAT, NUMERIC and ARITHMETIC_DTYPES leave them out).
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
    DTypeSpec(11, "F8E4M3", "f8e4m3", 1, "ml_dtypes.float8_e4m3fn", "float8", "uint8_t", "float"),
    DTypeSpec(12, "F8E5M2", "f8e5m2", 1, "ml_dtypes.float8_e5m2", "float8", "uint8_t", "float"),
)

# ---- params families -----------------------------------------------------------------------------
# kind: the fk_params_kind value (FK_PARAMS_<NAME>); name: the family's name in Python
# (fuel_kernel.params.<name>(...), OpParams.kind); member: the fk_params_union member the kernels
# read (None: no payload); fields: that member's struct as (C type, field name) pairs, as declared
# in abi.h (arrays as "int64_t[FK_MAX_DIMS]").  Several kinds may share one member (the "axis"
# families): the kind tells a kernel which op's params they are.
ParamsSpec = namedtuple("ParamsSpec", "kind name member fields")

_AXIS = (("int32_t", "axis"),)
_SSM = (("int32_t", "activation"), ("uint8_t", "delta_softplus"), ("uint8_t[3]", "reserved"),
        ("int64_t", "chunk_size"))
PARAMS = (
    ParamsSpec(0, "none", None, ()),
    ParamsSpec(1, "reduce", "reduce", (("uint8_t", "ndims"), ("uint8_t", "keepdim"),
                                       ("int8_t[FK_MAX_DIMS]", "dims"), ("uint8_t", "select_last"))),
    ParamsSpec(2, "matmul", "matmul", (("int32_t", "batch_ndim"), ("int32_t", "reserved"),
                                       ("int64_t[FK_MAX_DIMS]", "batch"), ("int64_t", "m"),
                                       ("int64_t", "n"), ("int64_t", "k"),
                                       ("fk_matmul_m", "m_compute"), ("double", "scale_a"),
                                       ("double", "scale_b"))),
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
                                                ("uint8_t", "causal"), ("uint8_t", "top_left"),
                                                ("uint8_t[6]", "reserved"),
                                                ("int64_t", "window_left"),
                                                ("int64_t", "window_right"))),
    ParamsSpec(22, "paged_attn", "paged_attn", (("double", "scale"), ("double", "softcap"),
                                                ("int32_t", "block_size"), ("int32_t", "reserved"),
                                                ("int64_t", "window_left"))),
    ParamsSpec(23, "cross_entropy", "cross_entropy", (("int64_t", "ignore_index"),
                                                      ("double", "label_smoothing"))),
    # conv2d backward: CONV2D_BACKWARD_INPUT, CONV2D_BACKWARD_WEIGHT
    ParamsSpec(24, "conv2d_backward", "conv2d_backward",
               (("int32_t[2]", "stride"), ("int32_t[2]", "padding"), ("int32_t[2]", "dilation"),
                ("int32_t", "groups"), ("int32_t", "reserved"), ("int64_t[2]", "input_size"),
                ("int64_t[2]", "kernel_size"))),
    # ---- training: the target shape of a reduction to a broadcast-compatible shape
    ParamsSpec(25, "reduce_to", "reduce_to", (("int32_t", "ndim"), ("int32_t", "reserved"),
                                              ("int64_t[FK_MAX_DIMS]", "shape"))),
    # ---- KV-cache writes: where the source lands in the destination, and the ring or position axis
    ParamsSpec(26, "write_slice", "write_slice", (("int32_t", "ndim"), ("int32_t", "axis"),
                                                  ("int64_t[FK_MAX_DIMS]", "start"))),
    # ---- quantized matmul: the GGML quant type of W and the extents of A (m, k) @ dequant(W).T
    ParamsSpec(27, "qmatmul", "qmatmul", (("int32_t", "quant_type"), ("int32_t", "reserved"),
                                          ("int64_t", "m"), ("int64_t", "n"), ("int64_t", "k"))),
    ParamsSpec(28, "nf4_matmul", "nf4_matmul", (("int64_t", "m"), ("int64_t", "n"), ("int64_t", "k"))),
    # state-space models: the three ops share one member (each family reads its own fields)
    ParamsSpec(29, "causal_conv1d", "ssm", _SSM),
    ParamsSpec(30, "selective_scan", "ssm", _SSM),
    ParamsSpec(31, "ssd_chunk_scan", "ssm", _SSM),
    # pooling: MAX_POOL2D, AVG_POOL2D (ONNX MaxPool / AveragePool on NCHW)
    ParamsSpec(32, "pool2d", "pool2d", (("int32_t[2]", "kernel"), ("int32_t[2]", "stride"),
                                        ("int32_t[2]", "pads_begin"), ("int32_t[2]", "pads_end"),
                                        ("int32_t[2]", "dilation"), ("uint8_t", "ceil_mode"),
                                        ("uint8_t", "count_include_pad"))),
    # selection: TOPK
    ParamsSpec(33, "topk", "topk", (("int64_t", "k"), ("uint8_t", "largest"), ("uint8_t", "sorted"))),
    # SCATTER (ONNX ScatterElements): the axis and the reduction applied at each index
    ParamsSpec(34, "scatter_reduce", "scatter_reduce", (("int32_t", "axis"), ("int32_t", "reduction"))),
    # CONV1D: CONV2D's options on one axis, the padding (begin, end) as ONNX Conv's pads
    ParamsSpec(35, "conv1d", "conv1d", (("int32_t", "stride"), ("int32_t[2]", "padding"), ("int32_t", "dilation"),
                                        ("int32_t", "groups"))),
    # CONV_TRANSPOSE2D: ONNX ConvTranspose's attributes (pads [t, l, b, r] as pads_begin, pads_end)
    ParamsSpec(36, "conv_transpose2d", "conv_transpose2d",
               (("int32_t[2]", "stride"), ("int32_t[2]", "pads_begin"), ("int32_t[2]", "pads_end"),
                ("int32_t[2]", "dilation"), ("int32_t[2]", "output_padding"), ("int32_t", "groups"))),
    # QEMBEDDING: the quant type and extents of its table, in QMATMUL's member (m unused, always 0)
    ParamsSpec(37, "qembedding", "qmatmul", (("int32_t", "quant_type"), ("int32_t", "reserved"),
                                             ("int64_t", "m"), ("int64_t", "n"), ("int64_t", "k"))),
)

# ---- ops -----------------------------------------------------------------------------------------
# number: the fk_op value (append-only); name: FK_OP_<name> in C, OpKind.<name> in Python;
# inputs: the input count, or (fewest, most) when it varies; outputs: the output count, or
# (fewest, most) for an op with optional trailing outputs (its input count must be fixed, so a key's
# length says how many it writes: FLASH_ATTN's log-sum-exp); params:
# the params family (a name in PARAMS); doc: one line; args: the inputs' names (the Graph builder's
# positional parameters; by default x, or x, y); shape: the output-shape rule, the function
# <shape>_shape in fuel_kernel/ops.py (by default "broadcast": inputs broadcast, NumPy rules);
# dtype: the output-dtype rule, the function <dtype>_dtype in ops.py (by default
# "same_as_first"; None: the caller names it with an explicit output, as CAST).
OpSpec = namedtuple("OpSpec", "number name inputs outputs params doc args shape dtype")

VARIADIC = (1, 7)        # CONCAT: 1 .. FK_MAX_OPERANDS - 1 inputs (one operand slot is the output)
# Ops of a fixed input count and an inferred output dtype whose Graph builder is still written by hand
# in fuel_kernel/graph/builders.py, not generated: FLASH_ATTN's takes FLASH_ATTN_MASKED's optional
# inputs as keywords (mask=, alibi_slopes=, key_lens=) and builds that op when any is given;
# MATMUL_PACK_B's output size depends on B's dtype (a shape rule sees shapes only) and
# MATMUL_PREPACKED takes the column view of a packed buffer, which its builder makes
HANDWRITTEN_BUILDERS = ("FLASH_ATTN", "MATMUL_PACK_B", "MATMUL_PREPACKED")
_DEFAULT_ARGS = {1: ("x",), 2: ("x", "y")}


def _op(number: int, name: str, inputs: Union[int, tuple[int, int]], params: str, doc: str,
        outputs: Union[int, tuple[int, int]] = 1, args: Optional[tuple[str, ...]] = None,
        shape: str = "broadcast",
        dtype: Optional[str] = "same_as_first") -> OpSpec:
    if args is None:
        if not isinstance(inputs, int):
            raise ValueError(f"spec: {name} takes a varying input count, so it names its args")
        args = _DEFAULT_ARGS[inputs]
    return OpSpec(number, name, inputs, outputs, params, doc, args, shape, dtype)


OPS = (
    _op(0, "CAST", 1, "none", "convert to the output's dtype", dtype=None),
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
    _op(16, "GELU", 1, "none",
        "GELU, tanh approximation: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))"),
    _op(17, "GELU_ERF", 1, "none", "GELU, exact (erf) form: 0.5x(1 + erf(x / sqrt 2))"),
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
    _op(32, "EQ", 2, "none", "a == b", dtype="boolean"),
    _op(33, "NE", 2, "none", "a != b", dtype="boolean"),
    _op(34, "LT", 2, "none", "a < b", dtype="boolean"),
    _op(35, "LE", 2, "none", "a <= b", dtype="boolean"),
    _op(36, "GT", 2, "none", "a > b", dtype="boolean"),
    _op(37, "GE", 2, "none", "a >= b", dtype="boolean"),
    _op(38, "WHERE", 3, "none", "cond ? a : b (cond BOOL)",
        args=("cond", "a", "b"), dtype="same_as_second"),
    # unary elementwise with params
    _op(39, "AFFINE", 1, "affine", "x * mul + add"),
    _op(40, "CLAMP", 1, "clamp", "min(max(x, min), max)"),
    _op(41, "POWI", 1, "powi", "x ** exp for an integer exp"),
    # reductions
    _op(42, "SUM", 1, "reduce", "sum over dims (integers accumulate in I64)",
        shape="reduce", dtype="accumulate"),
    _op(43, "MAX", 1, "reduce", "maximum over dims", shape="reduce"),
    _op(44, "MIN", 1, "reduce", "minimum over dims", shape="reduce"),
    _op(45, "MEAN", 1, "reduce", "mean over dims (integers give F64)",
        shape="reduce", dtype="mean"),
    _op(46, "PROD", 1, "reduce", "product over dims (integers accumulate in I64)",
        shape="reduce", dtype="accumulate"),
    _op(47, "ARGMAX", 1, "reduce", "index of the first (or with select_last_index the last) maximum (I64)",
        shape="reduce", dtype="index"),
    _op(48, "ARGMIN", 1, "reduce", "index of the first (or with select_last_index the last) minimum (I64)",
        shape="reduce", dtype="index"),
    # compute
    _op(49, "MATMUL", (2, 3), "matmul", "batched A @ B; a third input is the run-time row count",
        args=("a", "b", "count"), shape="matmul", dtype="matmul"),
    _op(50, "CONV2D", (2, 3), "conv2d", "NCHW 2-d convolution, optional bias",
        args=("x", "w", "bias"), shape="conv2d"),
    _op(51, "SOFTMAX_LAST_DIM", 1, "softmax_last_dim", "softmax over the last dim",
        shape="same_as_first"),
    _op(52, "LOG_SOFTMAX_LAST_DIM", 1, "softmax_last_dim", "log-softmax over the last dim",
        shape="same_as_first"),
    _op(53, "RMS_NORM", 2, "norm_last_dim", "x / rms(x) * weight over the last dim",
        args=("x", "weight"), shape="same_as_first"),
    _op(54, "LAYER_NORM", 3, "norm_last_dim", "(x - mean) / std * weight + bias over the last dim",
        args=("x", "weight", "bias"), shape="same_as_first"),
    # data movement and indexing
    _op(55, "SLICE", 1, "slice", "strided slice per dim", shape="slice"),
    _op(56, "CONCAT", VARIADIC, "concat", "join inputs along an axis",
        args=("xs",), shape="concat"),
    _op(57, "INDEX_SELECT", 2, "index_select", "pick slices along an axis by an index vector",
        args=("x", "idx"), shape="index_select"),
    _op(58, "GATHER", 2, "gather", "pick elements along an axis by an index tensor",
        args=("x", "idx"), shape="gather"),
    _op(59, "SCATTER_ADD", 3, "scatter", "copy of x with src added at index along an axis",
        args=("x", "idx", "src"), shape="same_as_first"),
    _op(60, "INDEX_ADD", 3, "scatter", "copy of x with src slices added at an index vector",
        args=("x", "idx", "src"), shape="same_as_first"),
    _op(61, "FLIP", 1, "flip", "reverse along dims", shape="same_as_first"),
    _op(62, "ROLL", 1, "roll", "rotate along dims by shifts", shape="same_as_first"),
    _op(63, "CUMSUM", 1, "cumsum", "cumulative sum along an axis (exclusive, reverse options)",
        shape="same_as_first"),
    _op(64, "TRIU", 1, "triangular", "zero below the diagonal of the last two dims",
        shape="same_as_first"),
    _op(65, "TRIL", 1, "triangular", "zero above the diagonal of the last two dims",
        shape="same_as_first"),
    _op(66, "PAD", 1, "pad", "pad each dim (constant, reflect or replicate)", shape="pad"),
    _op(67, "MASKED_FILL", 2, "masked_fill", "value where mask, else x", args=("x", "mask")),
    # attention
    _op(68, "ROPE", 3, "rope", "rotary position embedding from cos and sin tables",
        args=("x", "cos", "sin"), shape="same_as_first"),
    _op(69, "FLASH_ATTN", 3, "flash_attn",
        "softmax(q k^T * scale) v, causal / windowed / softcap; optionally each row's log-sum-exp",
        outputs=(1, 2), args=("q", "k", "v"), shape="flash_attn", dtype="flash_attn"),
    _op(70, "PAGED_ATTN", 6, "paged_attn", "attention over a paged KV cache through a block table",
        args=("q", "k_cache", "v_cache", "block_table", "context_lens", "alibi_slopes"),
        shape="attention"),
    # training: norm gradients (several outputs)
    _op(71, "RMS_NORM_BACKWARD", 3, "norm_last_dim", "RMS_NORM's gradients: dx and dweight from x, weight, dy",
        outputs=2, args=("x", "weight", "dy"), shape="rms_norm_backward", dtype="rms_norm_backward"),
    _op(72, "LAYER_NORM_BACKWARD", 4, "norm_last_dim",
        "LAYER_NORM's gradients: dx, dweight and dbias from x, weight, bias, dy", outputs=3,
        args=("x", "weight", "bias", "dy"), shape="layer_norm_backward", dtype="layer_norm_backward"),
    # training: the fused loss
    _op(73, "FUSED_SOFTMAX_CROSS_ENTROPY", 2, "cross_entropy",
        "per-row cross entropy of softmax(logits) against class targets, and the rows' log-sum-exp",
        outputs=2, args=("logits", "targets"), shape="cross_entropy", dtype="cross_entropy"),
    _op(74, "FUSED_SOFTMAX_CROSS_ENTROPY_BACKWARD", 4, "cross_entropy",
        "the logits' gradient of FUSED_SOFTMAX_CROSS_ENTROPY from logits, targets, lse, dloss",
        args=("logits", "targets", "lse", "dloss"), shape="same_as_first"),
    # conv2d backward (cpu/conv_kernels.h.in)
    _op(75, "CONV2D_BACKWARD_INPUT", 2, "conv2d_backward",
        "gradient of CONV2D with respect to x: (dy, w) -> dx of params.input_size",
        args=("dy", "w"), shape="conv2d_backward_input"),
    _op(76, "CONV2D_BACKWARD_WEIGHT", 2, "conv2d_backward",
        "gradient of CONV2D with respect to w: (x, dy) -> dw of params.kernel_size",
        args=("x", "dy"), shape="conv2d_backward_weight"),
    # ---- training: reductions to a shape, their backward, PAD's backward, a fused linear layer
    _op(77, "REDUCE_SUM_TO", 1, "reduce_to",
        "sum x down to a shape that broadcasts to x's (the backward of broadcasting)",
        shape="reduce_to", dtype="accumulate"),
    _op(78, "REDUCE_MAX_TO", 1, "reduce_to",
        "maximum of x down to a shape that broadcasts to x's (NaN propagates)", shape="reduce_to"),
    _op(79, "REDUCE_MAX_TO_BACKWARD", 2, "reduce_to",
        "dy at the maxima of each group of x, split evenly among tied maxima, else 0",
        args=("x", "dy"), shape="same_as_first"),
    _op(80, "PAD_BACKWARD", 1, "pad",
        "the gradient of PAD: dy's interior, plus the padded cells added onto the cells they copied",
        args=("dy",), shape="pad_backward"),
    _op(81, "FUSED_LINEAR", 3, "none", "x @ w + b for x [M, K], w [K, N], b [N]",
        args=("x", "w", "b"), shape="linear"),
    # training: backward ops of softmax and the activations (dx from the forward's y or x and dy)
    _op(82, "SOFTMAX_LAST_DIM_BACKWARD", 2, "softmax_last_dim",
        "y * (dy - sum(dy * y)) over the last dim, y the softmax output", args=("y", "dy"),
        shape="same_as_first"),
    _op(83, "LOG_SOFTMAX_LAST_DIM_BACKWARD", 2, "softmax_last_dim",
        "dy - exp(y) * sum(dy) over the last dim, y the log-softmax output", args=("y", "dy"),
        shape="same_as_first"),
    _op(84, "GELU_BACKWARD", 2, "none", "dy * GELU'(x), tanh form", args=("x", "dy")),
    _op(85, "GELU_ERF_BACKWARD", 2, "none", "dy * GELU_ERF'(x) = dy (Phi(x) + x phi(x))", args=("x", "dy")),
    _op(86, "SILU_BACKWARD", 2, "none", "dy * SILU'(x) = dy s (1 + x (1 - s)), s = sigmoid(x)",
        args=("x", "dy")),
    _op(87, "SIGMOID_BACKWARD", 2, "none", "dy * s (1 - s), s = sigmoid(x)", args=("x", "dy")),
    _op(88, "TANH_BACKWARD", 2, "none", "dy * (1 - tanh(x)^2)", args=("x", "dy")),
    _op(89, "RELU_BACKWARD", 2, "none", "0 where x <= 0, else dy (NaN x passes dy)", args=("x", "dy")),
    _op(90, "POWI_BACKWARD", 2, "powi", "dy * (exp * x ** (exp - 1)); exp 0 gives 0", args=("x", "dy")),
    # attention training
    _op(91, "FLASH_ATTN_BACKWARD", 5, "flash_attn",
        "gradients (dq, dk, dv) of FLASH_ATTN from q, k, v, its lse and the output gradient do",
        outputs=3, args=("q", "k", "v", "lse", "do"), shape="flash_attn_backward",
        dtype="flash_attn_backward"),
    # KV-cache writes: the output is the destination, updated in place (only the region is written);
    # an optional second input, a one-element I64 tensor, adds a run-time position on params.axis
    _op(92, "WRITE_SLICE", (1, 2), "write_slice",
        "write src into the destination at start (plus a run-time position), in place",
        args=("src", "position"), shape="destination"),
    _op(93, "WRITE_SLICE_ROTATING", (1, 2), "write_slice",
        "write src into a ring buffer: start on the ring axis modulo its extent, wrapping around",
        args=("src", "position"), shape="destination"),
    # quantized matmul (cpu/quant_kernels.h.in)
    # an optional third input, a one-element I32/I64 tensor, is the run-time row count (as MATMUL's)
    _op(94, "QMATMUL", (2, 3), "qmatmul",
        "A (m, k) @ dequant(W).T: W holds n rows of k GGML-quantized values (QUANT_TYPES); "
        "a third input is the run-time row count",
        args=("a", "w", "count"), shape="qmatmul", dtype="qmatmul"),
    _op(95, "NF4_MATMUL", (3, 4), "nf4_matmul",
        "A (m, k) @ dequant(W).T: W (n, k) in bitsandbytes NF4, 4-bit codes and an F32 absmax per 64 values; "
        "a fourth input is the run-time row count",
        args=("a", "codes", "absmax", "count"), shape="nf4_matmul", dtype="nf4_matmul"),
    # state-space models (Mamba): cpu/ssm_kernels.h.in defines each exactly
    _op(96, "CAUSAL_CONV1D", 3, "causal_conv1d",
        "depthwise causal conv: y[b,d,t] = act(bias[d] + sum_k w[d,k] x[b,d,t-W+1+k]), zeros before t=0",
        args=("x", "weight", "bias"), shape="causal_conv1d"),
    _op(97, "SELECTIVE_SCAN", 6, "selective_scan",
        "Mamba selective scan: h = exp(dt A) h + dt B u, y = C h + D u; outputs y and the last state",
        outputs=2, args=("u", "delta", "A", "B", "C", "D"), shape="selective_scan", dtype="two_same_as_first"),
    _op(98, "SSD_CHUNK_SCAN", 4, "ssd_chunk_scan",
        "Mamba-2 SSD scan by chunks: h_t = exp(A_t) h + B_t x_t, y_t = C_t h_t; outputs Y and the last state",
        outputs=2, args=("X", "A", "B", "C"), shape="ssd_chunk_scan", dtype="two_same_as_first"),
    # pooling (cpu/pool_kernels.h.in)
    _op(99, "MAX_POOL2D", 1, "pool2d", "NCHW max pooling (ONNX MaxPool: pads, dilation, ceil mode; NaN propagates)",
        shape="pool2d"),
    _op(100, "AVG_POOL2D", 1, "pool2d", "NCHW average pooling (ONNX AveragePool: pads, dilation, ceil mode, "
        "count_include_pad)", shape="pool2d"),
    # selection (cpu/topk_kernels.h.in)
    _op(101, "TOPK", 1, "topk", "the k largest (or smallest) along the last dim and their I64 indices; "
        "ties to the lower index, NaN above every number", outputs=2, shape="topk", dtype="topk"),
    # C-style integer division (ONNX Mod with fmod=1, Div on integers): DIV and REM keep NumPy's floor
    _op(102, "FMOD", 2, "none", "C fmod: a - trunc(a / b) b, the sign of a (an integer division by zero is an error)"),
    _op(103, "TRUNC_DIV", 2, "none", "integer a / b rounded toward zero, as C (a division by zero is an error)"),
    # ONNX indexing (cpu/index_kernels.h.in): ScatterElements with a reduction; NonZero, whose count is
    # data-dependent: indices has room for every element and the count output says how many are valid
    _op(104, "SCATTER", 3, "scatter_reduce",
        "copy of x with src written (none: last in index order wins) or folded (max, min, mul) at index along an axis",
        args=("x", "idx", "src"), shape="same_as_first"),
    _op(105, "NONZERO", 1, "none",
        "the indices [ndim, numel] of x's nonzero elements in row-major order (the first count columns) "
        "and their count (0-d I64)", outputs=2, shape="nonzero", dtype="nonzero"),
    # attention for serving (cpu/attention_kernels.h.in): FLASH_ATTN's options that need operands.  Six
    # fixed inputs, an absent one passed as an empty [0] tensor (as PAGED_ATTN's ALiBi slopes), so a
    # key's length still says whether it writes the lse
    _op(106, "FLASH_ATTN_MASKED", 6, "flash_attn",
        "FLASH_ATTN plus a mask [B|1, H|1, Sq|1, Sk] (additive in q's dtype, or BOOL: False excludes the key), "
        "ALiBi slopes [H] and key lengths [B], each [0] when absent",
        outputs=(1, 2), args=("q", "k", "v", "mask", "alibi_slopes", "key_lens"), shape="flash_attn",
        dtype="flash_attn"),
    # convolutions of ONNX's Conv and ConvTranspose (cpu/conv_kernels.h.in)
    _op(107, "CONV1D", (2, 3), "conv1d", "NCL 1-d convolution, optional bias (CONV2D's kernels on a height-1 view)",
        args=("x", "w", "bias"), shape="conv1d"),
    _op(108, "CONV_TRANSPOSE2D", (2, 3), "conv_transpose2d",
        "NCHW transposed 2-d convolution, w (C, O/groups, KH, KW), optional bias (CONV2D_BACKWARD_INPUT's code)",
        args=("x", "w", "bias"), shape="conv_transpose2d"),
    # quantized token embedding (cpu/quant_kernels.h.in): QMATMUL's table format, gathered by id
    _op(109, "QEMBEDDING", 2, "qembedding",
        "rows of a GGML-quantized table W (n rows of k values) at I32/I64 ids, dequantized: out (*ids.shape, k)",
        args=("w", "ids"), shape="qembedding", dtype="qembedding"),
    # pre-packed constant weights (cpu/matmul_kernels.h.in): Graph.compile packs a constant MATMUL B once
    _op(110, "MATMUL_PACK_B", 1, "none",
        "B (k, n) packed into the GEMM engine's panels: U8 (matmul_packed_nbytes,), a header then the panels",
        args=("b",), shape="matmul_pack_b", dtype="matmul_pack_b"),
    _op(111, "MATMUL_PREPACKED", 2, "none",
        "A (..., m, k) @ B with B pre-packed by MATMUL_PACK_B, given as the (k, n) view of its columns "
        "(strides (0, 1) at byte 64 + first column)",
        args=("a", "b_packed"), shape="matmul_prepacked"),
)

# ---- GGML quant types (QMATMUL's W) ----------------------------------------------------------------
# code: the GGML type id (gguf's GGMLQuantizationType), the value of params.qmatmul's quant_type;
# name: GGML's name; block_size: values per block; block_bytes: bytes per block (gguf's
# GGML_QUANT_SIZES).  A row of k values is k / block_size consecutive blocks.
QuantSpec = namedtuple("QuantSpec", "code name block_size block_bytes")
QUANT_TYPES = (
    QuantSpec(8, "Q8_0", 32, 34),
    QuantSpec(2, "Q4_0", 32, 18),
    QuantSpec(3, "Q4_1", 32, 20),
    QuantSpec(6, "Q5_0", 32, 22),
    QuantSpec(7, "Q5_1", 32, 24),
    QuantSpec(12, "Q4_K", 256, 144),
    QuantSpec(13, "Q5_K", 256, 176),
    QuantSpec(14, "Q6_K", 256, 210),
)
# NF4_MATMUL's W: bitsandbytes' 4-bit NormalFloat, blocks of NF4_BLOCK values of W (n, k) flattened
# row-major, each a code per value and one F32 absmax; a value is NF4_CODE[code] * absmax.  The code
# book is the QLoRA paper's (bitsandbytes' get_4bit_type("nf4")), as F32.
NF4_BLOCK = 64
NF4_CODE = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
            -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
            0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
            0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)

# ---- threads --------------------------------------------------------------------------------------
# How a large call of an op is cut into blocks that run on the intra-op threads (the rules are
# described in fuel_kernel/cpu/parallel.h; tools/generate_kernels.py registers each such kernel
# through a threaded wrapper).  An op not named here always runs whole on the calling thread: its
# kernels check data (index bounds, block tables) that a block cannot check for the whole call,
# or map output blocks to inputs through params this table does not model (SLICE, CONCAT; WRITE_SLICE
# and WRITE_SLICE_ROTATING, which read a position operand and cut their copies inside the kernel).
_ELEMENTWISE_OPS = tuple(op.name for op in OPS if op.shape == "broadcast") + ("CONTIGUIZE",)
SPLIT_RULES = {
    **{name: "ROWS_0" for name in _ELEMENTWISE_OPS},
    **{name: "ROWS_1" for name in ("SOFTMAX_LAST_DIM", "LOG_SOFTMAX_LAST_DIM", "RMS_NORM",
                                   "LAYER_NORM", "ROPE")},
    # softmax backward: rows of the last dim, as the forward
    **{name: "ROWS_1" for name in ("SOFTMAX_LAST_DIM_BACKWARD", "LOG_SOFTMAX_LAST_DIM_BACKWARD")},
    "TRIU": "ROWS_2", "TRIL": "ROWS_2",
    **{name: "MOVEMENT" for name in ("CUMSUM", "FLIP", "ROLL", "PAD")},
    **{op.name: "REDUCE" for op in OPS if op.shape == "reduce"},
    "MATMUL": "MATMUL", "CONV2D": "CONV2D", "FLASH_ATTN": "ATTN",
    # MATMUL_PREPACKED: MATMUL's blocks; its packed B view is cut on columns as B is
    "MATMUL_PREPACKED": "MATMUL",
    # conv2d backward.  Their runs cut their own tasks after their checks (parallel.h runs the calls
    # whole): CONV2D_BACKWARD_INPUT's (image, group, channel block), and CONV_TRANSPOSE2D's, whose kernel
    # is that run; CONV2D_BACKWARD_WEIGHT's (group, block of dw's rows).  (CONV1D has no rule of its own:
    # its kernel runs CONV2D's through CONV2D's rules)
    "CONV2D_BACKWARD_INPUT": "CONV2D_BACKWARD_INPUT", "CONV2D_BACKWARD_WEIGHT": "CONV2D_BACKWARD_WEIGHT",
    "CONV_TRANSPOSE2D": "CONV_TRANSPOSE2D",
    # ---- training
    "PAD_BACKWARD": "MOVEMENT",
    # attention training
    "FLASH_ATTN_BACKWARD": "ATTN_BACKWARD",
    # pooling: (N, C) planes, each output plane from its own input plane; TOPK: rows of the last dim
    # (both outputs share one shape, so ROWS_1 cuts them alike)
    "MAX_POOL2D": "ROWS_2", "AVG_POOL2D": "ROWS_2", "TOPK": "ROWS_1",
}
# siblings whose kernel cuts its own tasks after its checks (parallel.h runs them whole): CONV2D's
# im2col, by (image, group, chunk of output pixels), so no task repeats another's im2col
SIBLING_SPLIT_RULES = {("CONV2D", "im2col"): "CONV2D_IM2COL"}
# integer kernels of these refuse a zero divisor or a negative exponent before writing anything
_INTEGER_CHECKS_DATA = ("DIV", "REM", "POW", "FMOD", "TRUNC_DIV")


def split_rule(op: str, signature: Sequence[str], source: str) -> Optional[str]:
    """The parallel.h rule (FK_SPLIT_<rule>) a kernel row runs under, or None: whole calls only.
    BLAS-backed siblings thread inside the BLAS library."""
    kinds = {d.name: d.kind for d in DTYPES}
    if source == "blas" or op not in SPLIT_RULES:
        return None
    if op in _INTEGER_CHECKS_DATA and kinds[signature[0]] != "float":
        return None
    if op == "MATMUL" and len(signature) != 3:     # the deferred row count is data, read at run time
        return None
    return SIBLING_SPLIT_RULES.get((op, source), SPLIT_RULES[op])


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


def dtype_names(*kinds: str) -> tuple[str, ...]:
    """The dtype names of the given kinds ("bool", "uint", "int", "float", "float8"), in code order."""
    return tuple(d.name for d in DTYPES if d.kind in kinds)


def same(names: tuple[str, ...], n: int) -> tuple[tuple[str, ...], ...]:
    """Signatures with one dtype for all n operands: same(("F32", "F64"), 2) -> (("F32", "F32"), ...)."""
    return tuple((name,) * n for name in names)


FLOAT = dtype_names("float")
SIGNED = dtype_names("int")
UNSIGNED = dtype_names("uint")
INTEGER = dtype_names("int", "uint")
NUMERIC = dtype_names("int", "uint", "float")
# FLOAT8: the 8-bit storage floats.  ALL_DTYPES serves the ops that move elements by their bits
# (CAST, CONTIGUIZE, SLICE, CONCAT, GATHER, WHERE, WRITE_SLICE, ...); ARITHMETIC_DTYPES, every
# dtype but FLOAT8, the ops over every dtype that compute with the values (comparisons, reductions,
# SCATTER_ADD / INDEX_ADD).
FLOAT8 = dtype_names("float8")
ALL_DTYPES = tuple(d.name for d in DTYPES)
ARITHMETIC_DTYPES = tuple(name for name in ALL_DTYPES if name not in FLOAT8)

# Precision claims shared by families (a family adds its own with a unique name).
CLAIMS = {
    "EXACT": Claim(0, "exact: correctly rounded / bit-exact"),
}

# family -> tuple of KernelRows, in registration order (the first row at a key is what plain
# lookup returns).
CPU_KERNELS: dict[str, tuple[KernelRows, ...]] = {}


# ---- training: PAD_BACKWARD's claims.  Constant mode copies dy's interior bit for bit; reflect and
# replicate add each cell's contributions (at most 2^16 of them) in F64 in a fixed order and round
# once, so |err| <= max_rel * (the sum of |contributions|) + max_abs.
_PAD_BACKWARD_NOTES = "constant: exact copy; reflect/replicate: F64 sum of <= 2^16 terms, rounded once"
CLAIMS.update({
    "PAD_BACKWARD_F16": Claim(0, _PAD_BACKWARD_NOTES, 4.9e-4, 3.0e-8),
    "PAD_BACKWARD_BF16": Claim(0, _PAD_BACKWARD_NOTES, 3.9e-3, 1e-40),
    "PAD_BACKWARD_F32": Claim(0, _PAD_BACKWARD_NOTES, 6.0e-8, 1e-45),
    "PAD_BACKWARD_F64": Claim(0, _PAD_BACKWARD_NOTES, 1.0e-11, 0.0),
})

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

# movement: SLICE, FLIP, ROLL, TRIU, TRIL, PAD, MASKED_FILL and CONCAT (2 .. 7 inputs) for every
# dtype, CUMSUM for every numeric dtype (cpu/movement_kernels.h.in, helpers in
# cpu/movement_common.h.in).  Data is moved by element size: ELEMENT_CARRIERS pairs each itemsize
# of DTYPES with the unsigned C type that moves one element of that size.
ELEMENT_CARRIERS = tuple((size, f"uint{8 * size}_t") for size in sorted({d.itemsize for d in DTYPES}))
CLAIMS["MOVEMENT_COPY"] = Claim(0, "exact: elements are copied bit for bit")
CLAIMS["CUMSUM_SEQUENTIAL"] = Claim(
    0, "sequential sum in the dtype (ints wrap): equals numpy.cumsum(x, dtype=x.dtype)")
CLAIMS["CUMSUM_HALF"] = Claim(1, "F32 accumulator rounded once per output: <=1 ulp of the f32 prefix sum")
_MOVE_CAPS = "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"
_MOVE_INPLACE_CAPS = _MOVE_CAPS + " | FK_CAP_INPLACE"
CPU_KERNELS["movement"] = (
    KernelRows(("SLICE", "FLIP", "ROLL"), same(ALL_DTYPES, 2), "fk_{op}", "MOVEMENT_COPY",
               "fk_mv_copy_cost", _MOVE_CAPS),
    KernelRows(("TRIU", "TRIL"), same(ALL_DTYPES, 2), "fk_{op}", "MOVEMENT_COPY", "fk_mv_copy_cost",
               _MOVE_INPLACE_CAPS),
    KernelRows(("PAD",), same(ALL_DTYPES, 2), "fk_{op}", "MOVEMENT_COPY", "fk_mv_copy_cost", _MOVE_CAPS),
    KernelRows(("MASKED_FILL",), tuple((d, "BOOL", d) for d in ALL_DTYPES), "fk_{op}", "MOVEMENT_COPY",
               "fk_mv_copy_cost", _MOVE_INPLACE_CAPS),
    KernelRows(("CONCAT",), tuple((d,) * (k + 1) for d in ALL_DTYPES for k in range(2, VARIADIC[1] + 1)),
               "fk_{op}", "MOVEMENT_COPY", "fk_mv_copy_cost", _MOVE_CAPS),
    # 16-bit floats (stored as bits, computed in float) accumulate in F32 and round per output
    KernelRows(("CUMSUM",), same(NUMERIC, 2), "fk_{op}_{d0}",
               {d.name: "CUMSUM_HALF" if d.ctype != d.compute else "CUMSUM_SEQUENTIAL"
                for d in DTYPES if d.name in NUMERIC},
               "fk_mv_add_cost", _MOVE_INPLACE_CAPS),
    # ---- training: PAD_BACKWARD on every float dtype
    KernelRows(("PAD_BACKWARD",), same(FLOAT, 2), "fk_{op}_{d0}", {n: "PAD_BACKWARD_" + n for n in FLOAT},
               "fk_mv_add_cost", _MOVE_CAPS),
)

# index: INDEX_SELECT, GATHER, SCATTER_ADD, INDEX_ADD and SCATTER for every data dtype crossed with each
# index dtype, NONZERO for every dtype (cpu/index_kernels.h.in).  INDEX_DTYPES are the index operand
# dtypes the kernels load.
INDEX_DTYPES = ("I32", "I64")
CLAIMS["INDEX_ADD_IN_ORDER"] = Claim(
    0, "adds in index order, one rounding per add (= numpy.add.at); ints wrap; bool ORs")
# none: the last src in index order wins (a bit copy); max / min: exact, NaN propagates as np.maximum;
# mul: one rounding per product in index order (16-bit floats through F32), integers wrap
CLAIMS["SCATTER_IN_ORDER"] = Claim(0, "in index order: none copies (last wins), max/min exact, mul one rounding per product")
CLAIMS["NONZERO_EXACT"] = Claim(0, "exact: the row-major multi-indices of the nonzero elements (np.nonzero)")
NONZERO_INDEX_DTYPE = "I64"
CPU_KERNELS["index"] = (
    KernelRows(("INDEX_SELECT", "GATHER"), tuple((d, i, d) for d in ALL_DTYPES for i in INDEX_DTYPES),
               "fk_{op}", "MOVEMENT_COPY", "fk_mv_copy_cost", _MOVE_CAPS),
    KernelRows(("SCATTER_ADD", "INDEX_ADD"), tuple((d, i, d, d) for d in ARITHMETIC_DTYPES for i in INDEX_DTYPES),
               "fk_{op}_{d0}", "INDEX_ADD_IN_ORDER", "fk_mv_add_cost", _MOVE_INPLACE_CAPS),
    KernelRows(("SCATTER",), tuple((d, i, d, d) for d in ARITHMETIC_DTYPES for i in INDEX_DTYPES),
               "fk_{op}_{d0}", "SCATTER_IN_ORDER", "fk_mv_add_cost", _MOVE_INPLACE_CAPS),
    KernelRows(("NONZERO",), tuple((d, NONZERO_INDEX_DTYPE, NONZERO_INDEX_DTYPE) for d in ARITHMETIC_DTYPES),
               "fk_{op}_{d0}", "NONZERO_EXACT", "fk_mv_copy_cost", _MOVE_CAPS),
)

# reduce: SUM, MAX, MIN, MEAN, PROD, ARGMAX, ARGMIN for every dtype (cpu/reduce_kernels.h.in)
REDUCE_OPS = tuple(op.name for op in OPS if op.params == "reduce")
# The output dtype per input kind; a kind not listed keeps the input's dtype.  SUM and PROD
# accumulate bool and integers in I64 (two's-complement wrap-around), MEAN of them gives F64,
# ARGMAX and ARGMIN give the I64 index.
_REDUCE_I64 = {"bool": "I64", "uint": "I64", "int": "I64"}
REDUCE_OUTPUT = {
    "SUM": _REDUCE_I64,
    "PROD": _REDUCE_I64,
    "MEAN": {"bool": "F64", "uint": "F64", "int": "F64"},
    "ARGMAX": dict(_REDUCE_I64, float="I64"),
    "ARGMIN": dict(_REDUCE_I64, float="I64"),
}
_REDUCE_KIND = {d.name: d.kind for d in DTYPES}


def reduce_output(op: str, name: str) -> str:
    """The output dtype name of reduction op (an OPS name) over an input of dtype name."""
    return REDUCE_OUTPUT.get(op, {}).get(_REDUCE_KIND[name], name)


# Precision claims (tests/cpu/reduce checks each against an exact oracle): integer results,
# MAX/MIN and ARG* are exact; SUM and MEAN into a float dtype claim its SUM_<dtype> bound (one
# rounding of that dtype plus the F64 pairwise bound (log2(n) + 32) * 2^-53 for n < 2^40, F32
# adding 7 * 2^-24 for its F32 lanes on contiguous leaves), relative to sum(|x|); PROD of floats
# claims its PROD_<dtype> bound relative to |result|, plus one subnormal, for n <= 2^20.
_SUM_BOUND = "|err| <= max_rel*sum|x| + max_abs; F64 pairwise accumulation"
_PROD_BOUND = "|err| <= max_rel*|prod| + max_abs, n <= 2^20; F64 accumulation"
CLAIMS.update({
    "EXACT_REDUCE": Claim(0, "exact"),
    "SUM_F16": Claim(0, _SUM_BOUND, 4.9e-4, 3.0e-8),
    "SUM_BF16": Claim(0, _SUM_BOUND, 3.9e-3, 1e-40),
    "SUM_F32": Claim(0, _SUM_BOUND, 5.0e-7, 1e-45),
    "SUM_F64": Claim(0, _SUM_BOUND, 1.0e-14, 0.0),
    "PROD_F16": Claim(0, _PROD_BOUND, 4.9e-4, 6.0e-8),
    "PROD_BF16": Claim(0, _PROD_BOUND, 3.9e-3, 1e-40),
    "PROD_F32": Claim(0, _PROD_BOUND, 6.0e-8, 1.5e-45),
    "PROD_F64": Claim(0, _PROD_BOUND, 2.4e-10, 5e-324),
})


def reduce_claim(op: str, name: str) -> str:
    """The claim of reduction op over an input of dtype name: a float SUM or MEAN result claims
    SUM_<its dtype>, a float PROD PROD_<its dtype>, everything else is exact."""
    output = reduce_output(op, name)
    if _REDUCE_KIND[output] != "float" or op not in ("SUM", "MEAN", "PROD"):
        return "EXACT_REDUCE"
    return ("PROD_" if op == "PROD" else "SUM_") + output


CPU_KERNELS["reduce"] = tuple(
    KernelRows((op,), tuple((name, reduce_output(op, name)) for name in ARITHMETIC_DTYPES), "fk_{op}_{d0}",
               {name: reduce_claim(op, name) for name in ARITHMETIC_DTYPES}, "fk_reduce_cost",
               "FK_CAP_STRIDED_INPUT")
    for op in REDUCE_OPS)

# ---- KV-cache writes: WRITE_SLICE and WRITE_SLICE_ROTATING [src, dst] and with a run-time position
# [src, position (I64), dst] for every dtype (cpu/movement_kernels.h.in); the destination is updated in
# place, and large copies are cut into blocks on the intra-op threads inside the kernel, after every
# check (the position is data, so the generic split of SPLIT_RULES does not apply)
WRITE_SLICE_POSITION_DTYPE = "I64"
CPU_KERNELS["movement"] += (
    KernelRows(("WRITE_SLICE", "WRITE_SLICE_ROTATING"),
               same(ALL_DTYPES, 2) + tuple((d, WRITE_SLICE_POSITION_DTYPE, d) for d in ALL_DTYPES),
               "fk_{op}", "MOVEMENT_COPY", "fk_mv_write_cost", _MOVE_CAPS),
)

# ---- training: REDUCE_SUM_TO and REDUCE_MAX_TO (SUM's and MAX's reduce code, output dtype and
# claims) on the float dtypes and I32, I64; REDUCE_MAX_TO_BACKWARD [x, dy, dx] on the float dtypes,
# dy / (count of maxima) in the compute type, rounded once
REDUCE_TO_DTYPES = FLOAT + ("I32", "I64")
CLAIMS["REDUCE_MAX_TO_BACKWARD"] = Claim(
    1, "dy / (count of maxima) in the compute type, rounded once; exact for a unique maximum")
CPU_KERNELS["reduce"] += (
    KernelRows(("REDUCE_SUM_TO",), tuple((name, reduce_output("SUM", name)) for name in REDUCE_TO_DTYPES),
               "fk_{op}_{d0}", {name: reduce_claim("SUM", name) for name in REDUCE_TO_DTYPES},
               "fk_reduce_cost", "FK_CAP_STRIDED_INPUT"),
    KernelRows(("REDUCE_MAX_TO",), same(REDUCE_TO_DTYPES, 2), "fk_{op}_{d0}", "EXACT_REDUCE",
               "fk_reduce_cost", "FK_CAP_STRIDED_INPUT"),
    KernelRows(("REDUCE_MAX_TO_BACKWARD",), same(FLOAT, 3), "fk_{op}_{d0}", "REDUCE_MAX_TO_BACKWARD",
               "fk_reduce_max_to_backward_cost", "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"),
)

# The GEMM engine's blocking per compute C type (cpu/gemm_core.h.in), tuned on x86-64: VL lanes per
# vector, an MR x NR register tile, K blocks of up to KC, MC rows of A and NC columns of B per packed
# block.  MATMUL_PACK_B's buffer is laid out by it (matmul_packed_nbytes in ops.py sizes it).  KC
# fixes the products' bits (docs/design.md: F32's 768 writes C once up to a depth of 768).
GEMM_BLOCKING = (("float", 16, 8, 32, 768, 128, 1024),
                 ("double", 8, 8, 16, 256, 64, 512))


def gemm_blocking(dtype_name: str) -> tuple[Any, ...]:
    """The GEMM_BLOCKING row (compute, VL, MR, NR, KC, MC, NC) of the engine that multiplies the
    float dtype `dtype_name` (its compute type's)."""
    compute = next(d.compute for d in DTYPES if d.name == dtype_name)
    return next(row for row in GEMM_BLOCKING if row[0] == compute)


MATMUL_PACKED_HEADER_BYTES = 64        # the header of a MATMUL_PACK_B buffer, before its panels
# MATMUL of at most this many rows streams B once with its sums in registers, from B's rows (unit
# column stride, F32 and F64) or from pre-packed panels (MATMUL_PREPACKED, every float dtype)
# (cpu/matmul_kernels.h.in, FK_MM_FEW_ROWS)
MATMUL_FEW_ROWS = 4

# matmul: MATMUL for every float and integer dtype, [T, T, T] and with a deferred row count
# [T, T, count, T] (cpu/matmul_kernels.h.in, on the GEMM engine of cpu/gemm_core.h.in)
MATMUL_COUNT_DTYPES = ("I32", "I64")     # the dtypes MATMUL's deferred row-count operand may have
# max_rel of a K <= 4096 term dot product accumulated in the dtype's compute type (F32 for F16,
# BF16 and F32; F64 for F64), plus one rounding to F16/BF16: MATMUL and CONV2D claim it
_DOT_MAX_REL = {"F16": 1.5e-3, "BF16": 8.0e-3, "F32": 2.5e-4, "F64": 5.0e-13}
for _name in FLOAT:
    CLAIMS["MATMUL_" + _name] = Claim(0, "|err| <= max_rel * sum_k |a*b| for k <= 4096",
                                      _DOT_MAX_REL[_name])
CLAIMS["MATMUL_WRAP"] = Claim(0, "exact modulo 2^bits (NumPy wrap-around)")


def _matmul_rows(names: tuple[str, ...], kernel: str, claim: Any, cost: str,
                 source: str) -> tuple[KernelRows, ...]:
    """The MATMUL rows of one implementation: [T, T, T] (kernel) and [T, T, count, T]
    (kernel + "_count_<count dtype>") for each dtype name T."""
    caps = "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"
    counted = tuple((name, name, count, name) for name in names for count in MATMUL_COUNT_DTYPES)
    return (KernelRows(("MATMUL",), same(names, 3), kernel, claim, cost, caps, source),
            KernelRows(("MATMUL",), counted, kernel + "_count_{d2}", claim, cost, caps, source))


CPU_KERNELS["matmul"] = _matmul_rows(
    FLOAT + INTEGER, "fk_matmul_{d0}",
    {**{name: "MATMUL_" + name for name in FLOAT}, **{name: "MATMUL_WRAP" for name in INTEGER}},
    "fk_matmul_native_cost", "native")

# pre-packed B: MATMUL_PACK_B [B (k, n), packed U8] packs a constant B's panels once (a plan does it
# when compiled); MATMUL_PREPACKED [A, packed B view, C] runs MATMUL's engine on them: MATMUL's bits
CLAIMS["MATMUL_PACK_B"] = Claim(0, "exact: the panels hold B's values (F16 widened to F32 exactly, BF16 kept)")
CPU_KERNELS["matmul"] += (
    KernelRows(("MATMUL_PACK_B",), tuple((name, "U8") for name in FLOAT), "fk_matmul_pack_b_{d0}",
               "MATMUL_PACK_B", "fk_matmul_pack_b_cost", "FK_CAP_STRIDED_INPUT"),
    KernelRows(("MATMUL_PREPACKED",), tuple((name, "U8", name) for name in FLOAT), "fk_matmul_prepacked_{d0}",
               {name: "MATMUL_" + name for name in FLOAT}, "fk_matmul_prepacked_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"),
)

# ---- FP8: MATMUL [A, B, C] and [A, B, count, C] for A and B of any FP8 dtype (E4M3 x E5M2 too) and
# C F32 or BF16, C = scale_a * scale_b * (A @ B) with the scales of params.matmul: A and B decode
# to F32 exactly while packing, their products are exact in F32, the sums are the F32 GEMM's, and
# the scale is applied once in F64 before C's one rounding, so the F32 (BF16) dot product bound
# holds relative to |scale_a scale_b| sum_k |a*b|.
MATMUL_FP8_OUTPUTS = ("F32", "BF16")
_FP8_PAIRS = tuple((a, b) for a in FLOAT8 for b in FLOAT8)
_MATMUL_CAPS = "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"
for _name in MATMUL_FP8_OUTPUTS:
    CLAIMS["MATMUL_FP8_" + _name] = Claim(
        0, "|err| <= max_rel * |scale_a*scale_b| * sum_k |a*b| for k <= 4096; exact F32 products",
        _DOT_MAX_REL[_name])
CPU_KERNELS["matmul"] += tuple(
    rows for _out in MATMUL_FP8_OUTPUTS for rows in (
        KernelRows(("MATMUL",), tuple((a, b, _out) for a, b in _FP8_PAIRS), "fk_matmul_{d0}_{d1}_{d2}",
                   "MATMUL_FP8_" + _out, "fk_matmul_native_cost", _MATMUL_CAPS),
        KernelRows(("MATMUL",), tuple((a, b, count, _out) for a, b in _FP8_PAIRS for count in MATMUL_COUNT_DTYPES),
                   "fk_matmul_{d0}_{d1}_{d3}_count_{d2}", "MATMUL_FP8_" + _out, "fk_matmul_native_cost",
                   _MATMUL_CAPS)))

# ---- training: FUSED_LINEAR [x, w, b, y] on every float dtype, the bias added in the GEMM's
# output tile (native) or as ?gemm's beta = 1 output (blas, below)
for _name in FLOAT:
    CLAIMS["FUSED_LINEAR_" + _name] = Claim(0, "|err| <= max_rel * (sum_k |x*w| + |b|) for k <= 4096",
                                            _DOT_MAX_REL[_name])
_LINEAR_CAPS = "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"
CPU_KERNELS["matmul"] += (
    KernelRows(("FUSED_LINEAR",), same(FLOAT, 4), "fk_fused_linear_{d0}",
               {name: "FUSED_LINEAR_" + name for name in FLOAT}, "fk_fused_linear_native_cost", _LINEAR_CAPS),
)

# quant: QMATMUL [A, W, C] for A F32 or BF16, W U8 GGML blocks, C F32 (cpu/quant_kernels.h.in).
# Dequantization reproduces gguf's F32 values bit for bit (products of the f16 scales and the small
# integer codes are exact; Q4_1, Q5_1 and the K-quants round once where the minimum is applied),
# so the only error is the F32 dot product: per block, then the blocks in order (m = 1), or the
# GEMM engine's K blocks (m > 1).
CLAIMS["QMATMUL"] = Claim(0, "|err| <= max_rel * sum_k |a*w| for k <= 4096, w = gguf's dequantized W",
                          _DOT_MAX_REL["F32"])
CPU_KERNELS["quant"] = (
    KernelRows(("QMATMUL",), (("F32", "U8", "F32"), ("BF16", "U8", "F32")), "fk_qmatmul_{d0}",
               "QMATMUL", "fk_qmatmul_cost", "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"),
    # [A, W, count, C]: rows [0, count) computed, the rest of C zeroed (the count is read at run time)
    KernelRows(("QMATMUL",), tuple((a, "U8", count, "F32") for a in ("F32", "BF16") for count in MATMUL_COUNT_DTYPES),
               "fk_qmatmul_{d0}_count_{d2}", "QMATMUL", "fk_qmatmul_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"),
    # NF4_MATMUL [A, codes, absmax, C]: the same two paths; NF4 values are code * absmax in F32,
    # one rounding, as bitsandbytes dequantizes
    KernelRows(("NF4_MATMUL",), (("F32", "U8", "F32", "F32"), ("BF16", "U8", "F32", "F32")),
               "fk_nf4_matmul_{d0}", "QMATMUL", "fk_qmatmul_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"),
    KernelRows(("NF4_MATMUL",), tuple((a, "U8", "F32", count, "F32") for a in ("F32", "BF16")
                                      for count in MATMUL_COUNT_DTYPES),
               "fk_nf4_matmul_{d0}_count_{d3}", "QMATMUL", "fk_qmatmul_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"),
)
# QEMBEDDING [W, ids, out]: ids I32 or I64, out F32 (gguf's dequantized values, bit for bit: the
# same block functions as QMATMUL) or BF16 (each value rounded once to nearest even)
QEMBEDDING_ID_DTYPES = ("I32", "I64")
QEMBEDDING_OUT_DTYPES = ("F32", "BF16")
CLAIMS["QEMBEDDING"] = Claim(0, "exact: gguf's dequantized F32 values, bit for bit")
CLAIMS["QEMBEDDING_BF16"] = Claim(0, "gguf's dequantized F32 value rounded once to BF16: correctly rounded")
CPU_KERNELS["quant"] += tuple(
    KernelRows(("QEMBEDDING",), tuple(("U8", ids, out) for ids in QEMBEDDING_ID_DTYPES), "fk_qembedding_{d1}_{d2}",
               "QEMBEDDING" if out == "F32" else "QEMBEDDING_BF16", "fk_qembedding_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT")
    for out in QEMBEDDING_OUT_DTYPES)

# Sources whose kernels run on a thread pool of their own (the BLAS sibling: OpenBLAS's), not on
# fuel_kernel's.  OpenBLAS's threads spin for a while after each call, on the cores the pool's next
# job needs, so with more than one thread route.pick ranks these after every other alternative.
OWN_THREAD_SOURCES = ("blas",)

# matmul_blas: MATMUL through SciPy's BLAS ?gemm for the float dtypes stored in a C type BLAS
# computes in (cpu/matmul_blas_kernels.h.in); cpu/_matmul_blas.pyx binds the routines from
# scipy.linalg.cython_blas and registers no row when SciPy is absent
MATMUL_BLAS_GEMM = {"float": "sgemm", "double": "dgemm"}     # C type -> its BLAS routine
MATMUL_BLAS_DTYPES = tuple(d.name for d in DTYPES if d.kind == "float" and d.ctype in MATMUL_BLAS_GEMM)
for _name in MATMUL_BLAS_DTYPES:
    CLAIMS["MATMUL_BLAS_" + _name] = Claim(0, "|err| <= max_rel * sum_k |a*b| for k <= 4096 (BLAS ?gemm)",
                                           _DOT_MAX_REL[_name])
CPU_KERNELS["matmul_blas"] = _matmul_rows(
    MATMUL_BLAS_DTYPES, "fk_matmul_blas_{d0}", {name: "MATMUL_BLAS_" + name for name in MATMUL_BLAS_DTYPES},
    "fk_matmul_blas_cost", "blas")

# ---- training: FUSED_LINEAR through ?gemm with beta = 1 on an output holding the broadcast bias
for _name in MATMUL_BLAS_DTYPES:
    CLAIMS["FUSED_LINEAR_BLAS_" + _name] = Claim(
        0, "|err| <= max_rel * (sum_k |x*w| + |b|) for k <= 4096 (BLAS ?gemm)", _DOT_MAX_REL[_name])
CPU_KERNELS["matmul_blas"] += (
    KernelRows(("FUSED_LINEAR",), same(MATMUL_BLAS_DTYPES, 4), "fk_fused_linear_blas_{d0}",
               {name: "FUSED_LINEAR_BLAS_" + name for name in MATMUL_BLAS_DTYPES}, "fk_fused_linear_blas_cost",
               _LINEAR_CAPS, "blas"),
)

# conv: CONV2D for every float dtype, without and with bias, im2col and direct siblings at each
# key, im2col first (cpu/conv_kernels.h.in)
for _name in FLOAT:
    CLAIMS["CONV2D_" + _name] = Claim(0, "|err| <= max_rel * (sum |x*w| + |b|) for K <= 4096",
                                      _DOT_MAX_REL[_name])
CPU_KERNELS["conv"] = tuple(
    KernelRows(("CONV2D",), same(FLOAT, operands), "fk_conv2d_" + algorithm + "_{d0}" + suffix,
               {name: "CONV2D_" + name for name in FLOAT}, f"fk_conv_{algorithm}_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT", algorithm)
    for operands, suffix in ((3, ""), (4, "_bias")) for algorithm in ("im2col", "direct"))

# CONV1D: the CONV2D kernels of each sibling on a height-1 view of x, w and out (no code of its own
# but the view), so CONV2D's claims; it runs on the threads inside the kernel: direct through CONV2D's
# split, im2col through its run's own tasks
CPU_KERNELS["conv"] += tuple(
    KernelRows(("CONV1D",), same(FLOAT, operands), "fk_conv1d_" + algorithm + "_{d0}" + suffix,
               {name: "CONV2D_" + name for name in FLOAT}, f"fk_conv1d_{algorithm}_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT", algorithm)
    for operands, suffix in ((3, ""), (4, "_bias")) for algorithm in ("im2col", "direct"))

# CONV_TRANSPOSE2D: CONV2D_BACKWARD_INPUT's GEMM and col2im (x in dy's place), plus a bias, for every
# float dtype; an output element sums C/groups*KH*KW products at most
for _name in FLOAT:
    CLAIMS["CONV_TRANSPOSE2D_" + _name] = Claim(
        0, "|err| <= max_rel * (sum |x*w| over the taps reaching the element + |b|), C/groups*KH*KW <= 4096",
        _DOT_MAX_REL[_name])
CPU_KERNELS["conv"] += tuple(
    KernelRows(("CONV_TRANSPOSE2D",), same(FLOAT, operands), "fk_conv_transpose2d_{d0}" + suffix,
               {name: "CONV_TRANSPOSE2D_" + name for name in FLOAT}, "fk_conv_transpose2d_cost",
               "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT")
    for operands, suffix in ((3, ""), (4, "_bias")))

# conv2d backward: CONV2D_BACKWARD_INPUT (GEMM w^T dy into columns, then col2im) and
# CONV2D_BACKWARD_WEIGHT (GEMM of x's im2col columns and dy, the batch in the depth) for every
# float dtype (cpu/conv_kernels.h.in)
for _name in FLOAT:
    CLAIMS["CONV2D_BACKWARD_INPUT_" + _name] = Claim(
        0, "|err| <= max_rel * sum |dy*w| over the taps reaching the element, O/groups*KH*KW <= 4096",
        _DOT_MAX_REL[_name])
    CLAIMS["CONV2D_BACKWARD_WEIGHT_" + _name] = Claim(
        0, "|err| <= max_rel * sum |x*dy| (padding zeros included) for N*OH*OW <= 4096",
        _DOT_MAX_REL[_name])
CPU_KERNELS["conv"] += tuple(
    KernelRows((op,), same(FLOAT, 3), "fk_{op}_{d0}", {name: f"{op}_{name}" for name in FLOAT},
               f"fk_{op.lower()}_cost", "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT")
    for op in ("CONV2D_BACKWARD_INPUT", "CONV2D_BACKWARD_WEIGHT"))

# binary: ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, REM on every numeric dtype, and the logical
# ADD, MUL, MAXIMUM, MINIMUM on BOOL; key [T, T, T] (cpu/binary_kernels.h.in)
CLAIMS["BINARY_HALF"] = Claim(0, "computed in F32, rounded once: correctly rounded")
CLAIMS["BINARY_POW"] = Claim(1, "C pow; <= 1 ulp of the correctly rounded result")
CLAIMS["BINARY_POW32"] = Claim(1, "F32 exp2(y log2|x|), two-float log2 and product: <= 0.68 ulp "
                                  "(0.84 subnormal), C pow specials")
CLAIMS["BINARY_POW_HALF"] = Claim(1, "the F32 pow, rounded once")
# POW: F32 computes in vecmath_f32.h, F16/BF16 through it; F64 is C pow; integers are exact
_BINARY_POW = {d.name: ("EXACT" if d.kind != "float" else "BINARY_POW" if d.ctype == "double"
                        else "BINARY_POW32" if d.ctype == "float" else "BINARY_POW_HALF") for d in DTYPES}
CLAIMS["BINARY_REM"] = Claim(0, "bit-exact with np.remainder (fmod then sign fix-up)")
_BINARY_ROUNDED = {d.name: "BINARY_HALF" if d.ctype != d.compute else "EXACT" for d in DTYPES}
CPU_KERNELS["binary"] = (
    KernelRows(("ADD", "SUB", "MUL", "DIV"), same(NUMERIC, 3), "fk_{op}_{d0}", _BINARY_ROUNDED,
               "fk_cost_simple", "FK_ELEMENTWISE_CAPS"),
    KernelRows(("MAXIMUM", "MINIMUM"), same(NUMERIC, 3), "fk_{op}_{d0}", "EXACT", "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    KernelRows(("POW",), same(NUMERIC, 3), "fk_{op}_{d0}", _BINARY_POW, "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    KernelRows(("REM",), same(NUMERIC, 3), "fk_{op}_{d0}", "BINARY_REM", "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    # C-style: fmod is exact in every float format (its result is representable in the inputs'),
    # integer quotients and remainders are exact
    KernelRows(("FMOD",), same(NUMERIC, 3), "fk_{op}_{d0}", "EXACT", "fk_cost_simple", "FK_ELEMENTWISE_CAPS"),
    KernelRows(("TRUNC_DIV",), same(dtype_names("int", "uint"), 3), "fk_{op}_{d0}", "EXACT", "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    KernelRows(("ADD", "MUL", "MAXIMUM", "MINIMUM"), same(dtype_names("bool"), 3), "fk_{op}_{d0}", "EXACT",
               "fk_cost_simple", "FK_ELEMENTWISE_CAPS"),
)

# activation backward: GELU, GELU_ERF, SILU, SIGMOID, TANH, RELU, POWI backward (x, dy) -> dx on
# every float dtype, key [T, T, T], in the binary family (cpu/binary_kernels.h.in, whose opening
# comment defines M(x) per op).  |err| <= max_rel |dy| M(x) + max_abs |dy| + half the output dtype's
# smallest subnormal; F32 maxima measured against a long double reference: 2.9 ulp of |dy| M in f'
# plus the product's rounding; F16/BF16 add their one rounding of the F32 result.
_ACT_BACKWARD_NOTES = "|err| <= max_rel|dy|M(x) + max_abs|dy| + subnormal/2; "
CLAIMS.update({
    "ACT_BACKWARD_F32": Claim(0, _ACT_BACKWARD_NOTES + "F32 vector code", 5e-7, 1e-42),
    "ACT_BACKWARD_F16": Claim(0, _ACT_BACKWARD_NOTES + "F32, rounded once", 5e-4, 1e-42),
    "ACT_BACKWARD_BF16": Claim(0, _ACT_BACKWARD_NOTES + "F32, rounded once", 4e-3, 1e-42),
    "ACT_BACKWARD_F64": Claim(0, _ACT_BACKWARD_NOTES + "F64, C library exp", 1e-15, 1e-318),
    # GELU's inner argument (and GELU_ERF's x / sqrt 2) rounds in F64, which costs up to |w| ulp in
    # the tail, as for the forward ops (UNARY_GELU_F64)
    "ACT_BACKWARD_GELU_F64": Claim(0, _ACT_BACKWARD_NOTES + "F64, tail x^2 ulp", 1e-12,
                                   1e-318),
})
_ACT_BACKWARD = {name: "ACT_BACKWARD_" + name for name in FLOAT}
_ACT_BACKWARD_GELU = {**_ACT_BACKWARD, "F64": "ACT_BACKWARD_GELU_F64"}
CPU_KERNELS["binary"] += (
    KernelRows(("SIGMOID_BACKWARD", "TANH_BACKWARD", "SILU_BACKWARD"), same(FLOAT, 3), "fk_{op}_{d0}",
               _ACT_BACKWARD, "fk_cost_transcendental", "FK_ELEMENTWISE_CAPS"),
    KernelRows(("GELU_BACKWARD", "GELU_ERF_BACKWARD"), same(FLOAT, 3), "fk_{op}_{d0}", _ACT_BACKWARD_GELU,
               "fk_cost_transcendental", "FK_ELEMENTWISE_CAPS"),
    KernelRows(("RELU_BACKWARD",), same(FLOAT, 3), "fk_{op}_{d0}", "EXACT", "fk_cost_simple",
               "FK_ELEMENTWISE_CAPS"),
    KernelRows(("POWI_BACKWARD",), same(FLOAT, 3), "fk_{op}_{d0}", _ACT_BACKWARD, "fk_cost_transcendental",
               "FK_ELEMENTWISE_CAPS"),
)

# compare: EQ, NE, LT, LE, GT, GE on every dtype (key [T, T, BOOL]) and WHERE(cond, a, b) on every
# dtype (key [BOOL, T, T, T]) (cpu/compare_kernels.h.in)
CLAIMS["COMPARE"] = Claim(0, "exact: IEEE comparison")
CLAIMS["WHERE_COPY"] = Claim(0, "exact: bit copy of the chosen operand")
CPU_KERNELS["compare"] = (
    KernelRows(("EQ", "NE", "LT", "LE", "GT", "GE"), tuple((n, n, "BOOL") for n in ARITHMETIC_DTYPES), "fk_{op}_{d0}",
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
# attention training: FLASH_ATTN_BACKWARD [q, k, v, lse (F32), do, dq, dk, dv]; errors relative to
# each gradient element's sum of |terms| (tests/cpu/attention/test_attention_backward.py); the F64
# bound is set by the F32 lse the forward saves (p = exp(s - lse) inherits its rounding)
CLAIMS["FLASH_ATTN_BACKWARD_F32"] = Claim(0, "f32 math, fast exp: abs err <= 1e-6 * sum |terms|", 0.0, 1e-6)
CLAIMS["FLASH_ATTN_BACKWARD_F64"] = Claim(0, "f64 math from an f32 lse: abs err <= 2e-7 * sum |terms|", 0.0, 2e-7)
CLAIMS["FLASH_ATTN_BACKWARD_F16"] = Claim(0, "f32 math, one f16 rounding: abs err <= 1e-3 * sum |terms|", 0.0, 1e-3)
CLAIMS["FLASH_ATTN_BACKWARD_BF16"] = Claim(0, "f32 math, one bf16 rounding: abs err <= 8e-3 * sum |terms|",
                                           0.0, 8e-3)
_ATTN_BACKWARD_CLAIMS = {name: "FLASH_ATTN_BACKWARD_" + name for name in FLOAT}

CPU_KERNELS["attention"] = (
    KernelRows(("ROPE",), same(FLOAT, 4), "fk_rope", "ROPE", "fk_rope_cost", "FK_ATTN_CAPS | FK_CAP_INPLACE"),
    KernelRows(("FLASH_ATTN",), same(FLOAT, 4), "fk_flash_attn", _ATTN_CLAIMS, "fk_flash_attn_cost", "FK_ATTN_CAPS"),
    # FLASH_ATTN with its second output, the lse (F32 for every dtype)
    KernelRows(("FLASH_ATTN",), tuple((n, n, n, n, "F32") for n in FLOAT), "fk_flash_attn", _ATTN_CLAIMS,
               "fk_flash_attn_cost", "FK_ATTN_CAPS"),
    KernelRows(("PAGED_ATTN",), tuple((n, n, n, "I32", "I32", "F32", n) for n in FLOAT), "fk_paged_attn",
               _ATTN_CLAIMS, "fk_paged_attn_cost", "FK_ATTN_CAPS"),
    # [q, k, v, mask (T), alibi_slopes (F32), key_lens (I32 or I64), out] and with the lse (F32)
    KernelRows(("FLASH_ATTN_MASKED",), tuple((n, n, n, n, "F32", lens, n) + lse for n in FLOAT
                                             for lens in ("I32", "I64") for lse in ((), ("F32",))),
               "fk_flash_attn_masked", _ATTN_CLAIMS, "fk_flash_attn_masked_cost", "FK_ATTN_CAPS"),
    # the same with a BOOL mask (ONNX Attention's and torch SDPA's boolean mask: False excludes the key)
    KernelRows(("FLASH_ATTN_MASKED",), tuple((n, n, n, "BOOL", "F32", lens, n) + lse for n in FLOAT
                                             for lens in ("I32", "I64") for lse in ((), ("F32",))),
               "fk_flash_attn_masked", _ATTN_CLAIMS, "fk_flash_attn_masked_cost", "FK_ATTN_CAPS"),
    # attention training
    KernelRows(("FLASH_ATTN_BACKWARD",), tuple((n, n, n, "F32", n, n, n, n) for n in FLOAT),
               "fk_flash_attn_backward", _ATTN_BACKWARD_CLAIMS, "fk_flash_attn_backward_cost", "FK_ATTN_CAPS"),
)

# unary: the unary elementwise ops and the params ops AFFINE, CLAMP, POWI (key [T, T]) on every
# float dtype; NEG, ABS, SQR, SIGN, RELU on the signed integers; CLAMP and POWI on every integer
# dtype (cpu/unary_kernels.h.in).  A float op claims per dtype: its F32 claim for the dtype stored
# as float, its F64 claim for the one stored as double, and for the dtypes stored narrower than
# their F32 compute type (F16, BF16) the F32 code rounded once.
CLAIMS.update({
    "UNARY_EXACT_HALF": Claim(0, "exact (correctly rounded); F16/BF16 via F32, rounded once"),
    "UNARY_ONE_ULP": Claim(1, "<= 1 ulp: evaluated in F64 (or the C library), rounded once"),
    "UNARY_HALF_ULP": Claim(1, "<= 1 ulp: computed in F32, rounded once"),
    # F32 maxima measured against the F64 C library over sampled inputs in every binade (see
    # vecmath_f32.h), checked by tests/cpu/elementwise/test_vecmath_f32.py
    "UNARY_EXP_F32": Claim(1, "<= 1 ulp: vectorized Cody-Waite + degree-6 polynomial"),
    "UNARY_TANH_F32": Claim(2, "vectorized: -expm1(-2|x|) / (2 + expm1(-2|x|)), one exp reduction"),
    "UNARY_SIGMOID_F32": Claim(2, "vectorized: fast exp of -|x|, one division"),
    "UNARY_RSQRT_F32": Claim(1, "vectorized 1/sqrtf: two correctly rounded operations"),
    "UNARY_LOG_F32": Claim(1, "vectorized: 2^e m split, Cephes logf polynomial"),
    "UNARY_TRIG_F32": Claim(2, "vectorized: 3-part Cody-Waite pi/2 and Cephes polynomials; |x| > 65536 "
                               "via F64 C library"),
    "UNARY_SILU_F32": Claim(3, "vectorized: x exp(-|x|) / (1 + exp(-|x|)), scaled past the subnormals"),
    # GELU: at most 4 ulp over every F32 input (28 inputs reach 4, about x = -1.82: the exp, its
    # low-part fma, the product by x and the division each round)
    "UNARY_GELU_F32": Claim(4, "vectorized: x sigmoid(w), w as a two-float sum"),
    "UNARY_GELU_ERF_F32": Claim(4, "vectorized: x Phi(x), Phi(-|x|) = exp(-x^2/2) R(|x|), x^2 exact in "
                                   "exp's reduction, R piecewise"),
    "UNARY_ERF_F32": Claim(1, "vectorized: piecewise polynomial, x + x p below 1, 1 - erfc above"),
    "UNARY_POWI_F32": Claim(1, "vectorized: exact for exp 1, 2, -1; two-float powers for 3..8; else "
                               "exp2(exp log2|x|) in F64"),
    "UNARY_LIBM_F64": Claim(2, "C library in F64 (glibc documents <= 2 ulp for tanh, erf)"),
    "UNARY_COMPOSED_F64": Claim(4, "composed from C library calls in F64"),
    # The negative tail of GELU is ill-conditioned in its inner argument (relative error grows like
    # x^2 * eps), so an ulp bound would be meaningless there: a relative bound, measured to 3.7e-13
    # over [-40, 40], with an absolute floor for results deep in the subnormals.
    "UNARY_GELU_F64": Claim(0, "rel <= 1e-12 (abs 1e-300): F64 formula, tail conditioned by x^2", 1e-12, 1e-300),
    "UNARY_AFFINE": Claim(0, "exact: x*mul then +add, each rounded in the compute type"),
    # HALF_TABLE_OPS on F16 and BF16: measured 0.5 ulp (correctly rounded) on every input
    "UNARY_TABLE_HALF": Claim(1, "table of every input: F64 value (within 1e-13) rounded once at build"),
})

# Unary ops whose F16 and BF16 kernels read a table of their 65536 results, computed in F64 at build
# time and rounded once (tools/half_tables.py): correctly rounded, and a load per element where the
# F32 evaluation of GELU_ERF's few-ulp claim costs about 40 vector operations per 16 lanes.
HALF_TABLE_OPS = ("GELU_ERF",)


def _unary_claims(f32: str, f64: str, half: str = "UNARY_HALF_ULP") -> dict[str, str]:
    """A float unary op's claim per float dtype name: f32 for the dtype stored as float, f64 for
    the one stored as double, half for those stored narrower than their compute type."""
    return {d.name: f32 if d.ctype == "float" else f64 if d.ctype == "double" else half
            for d in DTYPES if d.kind == "float"}


def _unary_rows(ops: tuple[str, ...], names: tuple[str, ...], claim: Any,
                cost: str = "fk_cost_simple") -> KernelRows:
    """The rows of ops on each dtype name T: key [T, T], kernel fk_<op>_<T>, elementwise caps."""
    return KernelRows(ops, same(names, 2), "fk_{op}_{d0}", claim, cost, "FK_ELEMENTWISE_CAPS")


_UNARY_EXACT = _unary_claims("EXACT", "EXACT", "UNARY_EXACT_HALF")
CPU_KERNELS["unary"] = (
    _unary_rows(("NEG", "ABS", "SQR", "SQRT", "RECIP", "RELU", "STEP", "FLOOR", "CEIL", "ROUND", "SIGN"),
                FLOAT, _UNARY_EXACT),
    _unary_rows(("RSQRT",), FLOAT, _unary_claims("UNARY_RSQRT_F32", "UNARY_ONE_ULP")),
    *(_unary_rows((op,), FLOAT, _unary_claims(f32, f64, "UNARY_TABLE_HALF" if op in HALF_TABLE_OPS
                                              else "UNARY_HALF_ULP"), "fk_cost_transcendental")
      for op, f32, f64 in (("EXP", "UNARY_EXP_F32", "UNARY_LIBM_F64"),
                           ("LOG", "UNARY_LOG_F32", "UNARY_LIBM_F64"),
                           ("SIN", "UNARY_TRIG_F32", "UNARY_LIBM_F64"),
                           ("COS", "UNARY_TRIG_F32", "UNARY_LIBM_F64"),
                           ("TANH", "UNARY_TANH_F32", "UNARY_LIBM_F64"),
                           ("SIGMOID", "UNARY_SIGMOID_F32", "UNARY_COMPOSED_F64"),
                           ("SILU", "UNARY_SILU_F32", "UNARY_COMPOSED_F64"),
                           ("GELU", "UNARY_GELU_F32", "UNARY_GELU_F64"),
                           ("GELU_ERF", "UNARY_GELU_ERF_F32", "UNARY_GELU_F64"),
                           ("ERF", "UNARY_ERF_F32", "UNARY_LIBM_F64"))),
    _unary_rows(("NEG", "ABS", "SQR", "SIGN", "RELU"), SIGNED, "EXACT"),
    _unary_rows(("AFFINE",), FLOAT, "UNARY_AFFINE"),
    _unary_rows(("CLAMP",), FLOAT, _UNARY_EXACT),
    _unary_rows(("CLAMP",), INTEGER, "EXACT"),
    _unary_rows(("POWI",), FLOAT, _unary_claims("UNARY_POWI_F32", "UNARY_ONE_ULP"), "fk_cost_transcendental"),
    _unary_rows(("POWI",), INTEGER, "EXACT"),
)

# norm: SOFTMAX_LAST_DIM, LOG_SOFTMAX_LAST_DIM, RMS_NORM, LAYER_NORM on every float dtype, all
# operands one dtype (cpu/norm_kernels.h.in).  Source "native" computes in the dtype's compute type;
# a dtype that computes in F32 (F16, BF16, F32) also gets a "native-f64" sibling that computes in
# F64 and rounds once, registered after "native" so that plain lookup returns the F32 code.
# Claims: |err| <= max_rel * scale + max_abs against a long double reference of the same formula
# (tests/cpu/norm/test_norm.py checks them; the derivations are in the template's opening
# comment).  max_ulp bounds the same error in ulps of the output dtype at the scale (|y| for
# softmax and RMS_NORM, |y| + 1 for LOG_SOFTMAX_LAST_DIM, the layer-norm scale S), so that
# pick(max_ulp=1) selects the F64-compute siblings.  F16/BF16 results are one rounding of an F32
# value whose error is far below half an ulp of the output: 1 ulp either way.  The F64 keys keep
# max_ulp 0 (no ulp bound stated), as the other relative-error claims of the CPU table.
# the norm family: the forward ops and the softmax backwards (RMS_NORM_BACKWARD and LAYER_NORM_BACKWARD
# are the norm_backward family)
NORM_OPS = ("SOFTMAX_LAST_DIM", "LOG_SOFTMAX_LAST_DIM", "RMS_NORM", "LAYER_NORM", "SOFTMAX_LAST_DIM_BACKWARD",
            "LOG_SOFTMAX_LAST_DIM_BACKWARD")
_Y = "|err| <= max_rel*|y| + max_abs"
_S = "|err| <= max_rel*S + max_abs"
_S32 = "S = |w|(|x|+|mean|+std)rstd+|b|"
_S64 = "S = |w|(|x|+|mean|)rstd+|b|"
CLAIMS.update({
    # F32 compute ("native" F16, BF16, F32)
    "SOFTMAX_F32": Claim(128, _Y + " for D <= 131072; F32 compute", 1.3e-6, 3e-8),
    "SOFTMAX_F16": Claim(1, _Y + "; F32 compute", 5e-4, 1e-7),
    "SOFTMAX_BF16": Claim(1, _Y + "; F32 compute", 4e-3, 1e-7),
    "LOG_SOFTMAX_F32": Claim(17, _Y + " for D <= 131072; F32 compute", 1.3e-7, 1.1e-6),
    "LOG_SOFTMAX_F16": Claim(1, _Y + "; F32 compute", 5e-4, 1.5e-6),
    "LOG_SOFTMAX_BF16": Claim(1, _Y + "; F32 compute", 4e-3, 1.5e-6),
    "RMS_NORM_F32": Claim(6, _Y + "; F32 compute", 3.3e-7, 3e-45),
    "RMS_NORM_F16": Claim(1, _Y + "; F32 compute", 5e-4, 6e-8),
    "RMS_NORM_BF16": Claim(1, _Y + "; F32 compute", 4e-3, 1e-38),
    "LAYER_NORM_F32": Claim(11, _S + " for D <= 131072, " + _S32 + "; F32 compute", 6.5e-7, 3e-45),
    "LAYER_NORM_F16": Claim(1, _S + ", " + _S32 + "; F32 compute", 5e-4, 6e-8),
    "LAYER_NORM_BF16": Claim(1, _S + ", " + _S32 + "; F32 compute", 4e-3, 1e-38),
    # F64 compute: the "native-f64" siblings (one rounding of an F64 result) and the F64 keys
    "SOFTMAX_F32_IN_F64": Claim(1, _Y + "; F64 compute", 6e-8, 1e-45),
    "SOFTMAX_F16_IN_F64": Claim(1, _Y + "; F64 compute", 5e-4, 6e-8),
    "SOFTMAX_BF16_IN_F64": Claim(1, _Y + "; F64 compute", 4e-3, 1e-38),
    "SOFTMAX_F64": Claim(0, _Y + " for D <= 4096", 3e-14, 1e-16),
    "LOG_SOFTMAX_F32_IN_F64": Claim(1, _Y + " for D <= 131072; F64 compute", 6e-8, 1e-12),
    "LOG_SOFTMAX_F16_IN_F64": Claim(1, _Y + "; F64 compute", 5e-4, 6e-8),
    "LOG_SOFTMAX_BF16_IN_F64": Claim(1, _Y + "; F64 compute", 4e-3, 1e-38),
    "LOG_SOFTMAX_F64": Claim(0, _Y + " for D <= 4096", 1e-15, 4e-14),
    "RMS_NORM_F32_IN_F64": Claim(1, "|err| <= max_rel*|y|; F64 compute", 1.2e-7, 0.0),
    "RMS_NORM_F16_IN_F64": Claim(1, _Y + "; F64 compute", 5e-4, 6e-8),
    "RMS_NORM_BF16_IN_F64": Claim(1, _Y + "; F64 compute", 4e-3, 1e-38),
    "RMS_NORM_F64": Claim(0, "|err| <= max_rel*|y|", 1e-14, 0.0),
    "LAYER_NORM_F32_IN_F64": Claim(1, "|err| <= max_rel*S, " + _S64 + "; F64 compute", 1.2e-7, 0.0),
    "LAYER_NORM_F16_IN_F64": Claim(1, _S + ", " + _S64 + "; F64 compute", 5e-4, 6e-8),
    "LAYER_NORM_BF16_IN_F64": Claim(1, _S + ", " + _S64 + "; F64 compute", 4e-3, 1e-38),
    "LAYER_NORM_F64": Claim(0, "|err| <= max_rel*S, " + _S64, 1e-14, 0.0),
})
# softmax backward: SOFTMAX_LAST_DIM_BACKWARD, LOG_SOFTMAX_LAST_DIM_BACKWARD (y, dy) -> dx in the
# norm family (rows and siblings as the forward ops).  Scales: S = |y|(|dy| + sum|dy y|) for softmax,
# S = |dy| + exp(y) sum|dy| for log-softmax (derivations in cpu/norm_kernels.h.in).
_SB = "|err| <= max_rel*S + max_abs, S = |y|(|dy|+sum|dy y|)"
_LSB = "|err| <= max_rel*S + max_abs, S = |dy|+exp(y)sum|dy|"
CLAIMS.update({
    "SOFTMAX_BACKWARD_F32": Claim(0, _SB + " for D <= 2^20, |y| <= 1; F32 compute", 5e-7, 1e-39),
    "SOFTMAX_BACKWARD_F16": Claim(0, _SB + "; F32 compute", 5e-4, 6e-8),
    "SOFTMAX_BACKWARD_BF16": Claim(0, _SB + " for |y| <= 1; F32 compute", 4e-3, 1e-38),
    "SOFTMAX_BACKWARD_F32_IN_F64": Claim(0, _SB + " for D <= 131072; F64 compute", 6e-8, 1e-45),
    "SOFTMAX_BACKWARD_F16_IN_F64": Claim(0, _SB + "; F64 compute", 5e-4, 6e-8),
    "SOFTMAX_BACKWARD_BF16_IN_F64": Claim(0, _SB + "; F64 compute", 4e-3, 1e-40),
    "SOFTMAX_BACKWARD_F64": Claim(0, _SB + " for D <= 4096", 3e-14, 1e-300),
    "LOG_SOFTMAX_BACKWARD_F32": Claim(0, _LSB + "; F32 compute", 6e-7, 1e-44),
    "LOG_SOFTMAX_BACKWARD_F16": Claim(0, _LSB + "; F32 compute", 5e-4, 6e-8),
    "LOG_SOFTMAX_BACKWARD_BF16": Claim(0, _LSB + "; F32 compute", 4e-3, 1e-40),
    "LOG_SOFTMAX_BACKWARD_F32_IN_F64": Claim(0, _LSB + " for D <= 131072; F64 compute", 6e-8, 1e-45),
    "LOG_SOFTMAX_BACKWARD_F16_IN_F64": Claim(0, _LSB + "; F64 compute", 5e-4, 6e-8),
    "LOG_SOFTMAX_BACKWARD_BF16_IN_F64": Claim(0, _LSB + "; F64 compute", 4e-3, 1e-40),
    "LOG_SOFTMAX_BACKWARD_F64": Claim(0, _LSB + " for D <= 4096", 3e-14, 1e-300),
})
NORM_IN_F32 = tuple(d.name for d in DTYPES if d.kind == "float" and d.compute == "float")


def _norm_rows(op: str) -> tuple[KernelRows, KernelRows]:
    """An op's "native" rows on every float dtype, then its "native-f64" siblings."""
    operands = next(o.inputs + o.outputs for o in OPS if o.name == op)
    claim = op.replace("_LAST_DIM", "")
    caps = "FK_CAP_STRIDED_INPUT"
    return (KernelRows((op,), same(FLOAT, operands), "fk_{op}_{d0}", {n: f"{claim}_{n}" for n in FLOAT},
                       "fk_norm_cost", caps),
            KernelRows((op,), same(NORM_IN_F32, operands), "fk_{op}_in_f64_{d0}",
                       {n: f"{claim}_{n}_IN_F64" for n in NORM_IN_F32}, "fk_norm_cost_f64", caps,
                       "native-f64"))


CPU_KERNELS["norm"] = tuple(rows for op in NORM_OPS for rows in _norm_rows(op))

# norm_backward: RMS_NORM_BACKWARD [x, w, dy -> dx, dw] and LAYER_NORM_BACKWARD [x, w, b, dy -> dx,
# dw, db] for every float dtype (cpu/norm_backward_kernels.h.in).  Rows compute in F64 and dw, db
# accumulate over rows in F64; every output rounds once.  Each output element's error is relative
# to the sum of the magnitudes of the terms it is made of (S, defined in the kernel header), since
# dx cancels by design (it is orthogonal to x's mean and scale directions).
_NB = "|err| <= max_rel*S + max_abs per output (S: kernel header); F64 compute; rows <= 2^24"
CLAIMS.update({
    "NORM_BACKWARD_F16": Claim(1, _NB, 4.9e-4, 6e-8),
    "NORM_BACKWARD_BF16": Claim(1, _NB, 3.92e-3, 1e-38),
    "NORM_BACKWARD_F32": Claim(1, _NB, 6.1e-8, 1.4e-45),
    "NORM_BACKWARD_F64": Claim(0, _NB, 4e-9, 0.0),
})
# loss: FUSED_SOFTMAX_CROSS_ENTROPY [logits, targets -> loss, lse] and its backward [logits, targets,
# lse, dloss -> dlogits] for every float dtype and I32/I64 targets (cpu/loss_kernels.h.in).  The
# log-sum-exp is F32 (F64 for F64 logits) whatever the logits, so the backward gets it unrounded.
# F16/BF16/F32 compute in F32 (exp in F32 SIMD, sums in F64 lanes), F64 in F64; with C classes
# and u the compute unit (2^-24, 2^-53) the forward is within u (3 + ln C) of the exact value
# plus the output's one rounding, the backward within 4u |dloss| plus its rounding.
LOSS_LSE = {d.name: "F64" if d.name == "F64" else "F32" for d in DTYPES if d.kind == "float"}
_CE = "|err| <= max_rel*S + max_abs*(3+ln C) + subnormal/2; S=|lse|, +|x_t|+e*mean|x| for the loss"
_CEB = "|err| <= max_rel*|dlogits| + max_abs*|dloss| + half a subnormal, per element"
CLAIMS.update({
    "CROSS_ENTROPY_F16": Claim(1, _CE, 4.9e-4, 6e-8),
    "CROSS_ENTROPY_BF16": Claim(1, _CE, 3.92e-3, 6e-8),
    "CROSS_ENTROPY_F32": Claim(1, _CE, 6.0e-8, 6e-8),
    "CROSS_ENTROPY_F64": Claim(1, _CE, 6.7e-16, 2.3e-16),
    "CROSS_ENTROPY_BACKWARD_F16": Claim(1, _CEB, 4.9e-4, 3e-7),
    "CROSS_ENTROPY_BACKWARD_BF16": Claim(1, _CEB, 3.92e-3, 2.4e-7),
    "CROSS_ENTROPY_BACKWARD_F32": Claim(1, _CEB, 6.0e-8, 2.4e-7),
    "CROSS_ENTROPY_BACKWARD_F64": Claim(1, _CEB, 1.2e-16, 4.5e-16),
})
CPU_KERNELS["loss"] = (
    KernelRows(("FUSED_SOFTMAX_CROSS_ENTROPY",), tuple((d, i, d, LOSS_LSE[d]) for d in FLOAT for i in INDEX_DTYPES),
               "fk_{op}_{d0}_{d1}", {n: f"CROSS_ENTROPY_{n}" for n in FLOAT}, "fk_loss_cost",
               "FK_CAP_STRIDED_INPUT"),
    KernelRows(("FUSED_SOFTMAX_CROSS_ENTROPY_BACKWARD",),
               tuple((d, i, LOSS_LSE[d], d, d) for d in FLOAT for i in INDEX_DTYPES),
               "fk_{op}_{d0}_{d1}", {n: f"CROSS_ENTROPY_BACKWARD_{n}" for n in FLOAT}, "fk_loss_cost",
               "FK_CAP_STRIDED_INPUT"),
)

CPU_KERNELS["norm_backward"] = (
    KernelRows(("RMS_NORM_BACKWARD",), same(FLOAT, 5), "fk_{op}_{d0}",
               {n: f"NORM_BACKWARD_{n}" for n in FLOAT}, "fk_norm_backward_cost", "FK_CAP_STRIDED_INPUT"),
    KernelRows(("LAYER_NORM_BACKWARD",), same(FLOAT, 7), "fk_{op}_{d0}",
               {n: f"NORM_BACKWARD_{n}" for n in FLOAT}, "fk_norm_backward_cost", "FK_CAP_STRIDED_INPUT"),
)

# ssm: CAUSAL_CONV1D, SELECTIVE_SCAN, SSD_CHUNK_SCAN for every float dtype (cpu/ssm_kernels.h.in).
# F16/BF16/F32 compute in F32, F64 in F64, each output rounded once.  With u the compute unit
# (2^-24, 2^-53) every output element is within max_rel * S + max_abs of the exact value, S the sum
# of the magnitudes of the terms it is made of (the same recurrence run on |terms|: the kernel
# header defines S per op), where max_rel = (the output's half ulp) + u * (the longest chain of
# roundings: W + 8 for the conv, 4 L + N + 8 for the scans, 4 L + 2 N + 2 Q + 8 for SSD) and the claims
# below hold for W <= 64 and L, N, Q (the chunk) with that chain at most 2^12.
_SSM_NOTES = "|err| <= max_rel*S + max_abs, S the recurrence on |terms| (kernel header); chains <= 2^12"
CLAIMS.update({
    "SSM_F16": Claim(1, _SSM_NOTES, 4.9e-4 + 4096 * 2.0 ** -24, 6e-8),
    "SSM_BF16": Claim(1, _SSM_NOTES, 3.92e-3 + 4096 * 2.0 ** -24, 1e-40),
    "SSM_F32": Claim(1, _SSM_NOTES, 6.0e-8 + 4096 * 2.0 ** -24, 1.4e-45),
    "SSM_F64": Claim(1, _SSM_NOTES, 4096 * 2.0 ** -53, 5e-324),
})
CPU_KERNELS["ssm"] = (
    KernelRows(("CAUSAL_CONV1D",), same(FLOAT, 4), "fk_{op}_{d0}", {n: f"SSM_{n}" for n in FLOAT},
               "fk_ssm_cost", "FK_CAP_STRIDED_INPUT"),
    KernelRows(("SELECTIVE_SCAN",), same(FLOAT, 8), "fk_{op}_{d0}", {n: f"SSM_{n}" for n in FLOAT},
               "fk_ssm_cost", "FK_CAP_STRIDED_INPUT"),
    KernelRows(("SSD_CHUNK_SCAN",), same(FLOAT, 6), "fk_{op}_{d0}", {n: f"SSM_{n}" for n in FLOAT},
               "fk_ssm_cost", "FK_CAP_STRIDED_INPUT"),
)

# pool: MAX_POOL2D on every numeric dtype (exact: a maximum is one of its inputs), AVG_POOL2D on
# every float dtype (cpu/pool_kernels.h.in).  AVG sums a window's taps in F64 in a fixed order
# and divides once: for windows of n <= 2^20 taps the sum is within n 2^-53 sum|x| of the exact
# sum, so |err| <= max_rel |y| + max_abs mean|x| with max_rel half an ulp of the output dtype.
_AVG = "|err| <= max_rel*|y| + max_abs*mean|x| (window taps); F64 sum, one division, one rounding"
CLAIMS.update({
    "AVG_POOL_F16": Claim(0, _AVG, 4.9e-4, 1.2e-10),
    "AVG_POOL_BF16": Claim(0, _AVG, 3.92e-3, 1.2e-10),
    "AVG_POOL_F32": Claim(0, _AVG, 6.0e-8, 1.2e-10),
    "AVG_POOL_F64": Claim(0, _AVG, 1.2e-16, 1.2e-10),
})
_POOL_CAPS = "FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT"
CPU_KERNELS["pool"] = (
    KernelRows(("MAX_POOL2D",), same(NUMERIC, 2), "fk_{op}_{d0}", "EXACT", "fk_pool_cost", _POOL_CAPS),
    KernelRows(("AVG_POOL2D",), same(FLOAT, 2), "fk_{op}_{d0}", {n: "AVG_POOL_" + n for n in FLOAT},
               "fk_pool_cost", _POOL_CAPS),
)
# topk: TOPK [x T (..., n) -> values T (..., k), indices I64 (..., k)] on every numeric dtype
# (cpu/topk_kernels.h.in): values are copied, so exact.
CPU_KERNELS["topk"] = (
    KernelRows(("TOPK",), tuple((d, d, "I64") for d in NUMERIC), "fk_{op}_{d0}", "EXACT", "fk_topk_cost",
               _POOL_CAPS),
)


def output_range(op: OpSpec) -> tuple[int, int]:
    """(fewest, most) outputs of op."""
    return op.outputs if isinstance(op.outputs, tuple) else (op.outputs, op.outputs)


def check() -> None:
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
        out_lo, out_hi = output_range(op)
        if not 1 <= lo <= hi or not 1 <= out_lo <= out_hi or hi + out_hi > 8:
            raise ValueError(f"spec: op {op.name} has an impossible operand count {op.inputs}, {op.outputs}")
        if out_lo != out_hi and lo != hi:
            raise ValueError(f"spec: op {op.name} varies both its input and its output count")
    check_kernel_tables()


CLAIM_NOTES_MAX = 95          # fk_precision.notes holds FK_NOTES_LEN (96) bytes with the NUL


def check_kernel_tables() -> None:
    """Raise ValueError if a CPU kernel table names an unknown op, dtype or claim, gives an op a
    signature with the wrong operand count, or uses a claim whose notes the table would cut."""
    ops = {op.name: op for op in OPS}
    dtypes = set(ALL_DTYPES)
    for family, groups in CPU_KERNELS.items():
        for group in groups:
            claims = [group.claim] if isinstance(group.claim, str) else list(group.claim.values())
            for claim in claims:
                if claim not in CLAIMS:
                    raise ValueError(f"spec: CPU_KERNELS[{family!r}] names an unknown claim {claim!r}")
                if len(CLAIMS[claim].notes.encode()) > CLAIM_NOTES_MAX:
                    raise ValueError(f"spec: claim {claim!r} has notes longer than the table's "
                                     f"{CLAIM_NOTES_MAX} bytes (fk_precision.notes would cut them)")
            for name in group.ops:
                op = ops.get(name)
                if op is None:
                    raise ValueError(f"spec: CPU_KERNELS[{family!r}] names an unknown op {name!r}")
                lo, hi = op.inputs if isinstance(op.inputs, tuple) else (op.inputs, op.inputs)
                for signature in group.signatures:
                    if not lo + output_range(op)[0] <= len(signature) <= hi + output_range(op)[1]:
                        raise ValueError(f"spec: {name} cannot take the {len(signature)} operands "
                                         f"of {signature} (CPU_KERNELS[{family!r}])")
                    if not set(signature) <= dtypes:
                        raise ValueError(f"spec: CPU_KERNELS[{family!r}] names unknown dtypes in "
                                         f"{signature}")
                    if isinstance(group.claim, dict) and signature[0] not in group.claim:
                        raise ValueError(f"spec: CPU_KERNELS[{family!r}] has no {name} claim for "
                                         f"{signature[0]}")


check()


# ---- params constructors -------------------------------------------------------------------------
# One row per PARAMS family, in the same order: the Python constructor fuel_kernel.params.<name>
# and how each of its arguments fills (and reads back from) the family's C struct.  The build
# generates from these the constructors (fuel_kernel/_params_constructors.py) and the Cython code
# that validates the arguments and fills fk_params (fuel_kernel/_params_generated.pxi, included by
# _dispatch.pyx).  Every refused argument is a ParamsError.
#
# An argument: name (the Python keyword, the key in OpParams.fields()); kind, one of
#   "int"      an integer (never truncated: 1.5 is refused), stored in `field`
#   "float"    any real number; "real": a real number but not NaN; "finite": neither NaN nor infinite
#   "bool"     stored as 0 / 1
#   "ints"     a sequence of integers, its length in the `count` field, at most `length` (a C
#              expression) values; with `same_as`, exactly as many as that argument; a default of
#              None is `fill` repeated to that length
#   "dims"     a sequence of distinct dims in [-FK_MAX_DIMS, FK_MAX_DIMS), length in `count`
#   "pair"     one integer or a pair of integers, stored in a [2] array
#   "choice"   one of the names in `choices` ((name, C constant) pairs), stored as its constant
#   "matmul_m" a MatmulM or None (all rows), at most the `same_as` argument's rows; stored as the
#              fk_matmul_m `field`
#   "const"    not an argument: `field` is always `default`
# default: REQUIRED or the default value; check: a condition every value (every element of a
# sequence) must meet, as a comparison suffix (">= 0"); field: the C struct field (default: name).
REQUIRED = "required"
ParamsArg = namedtuple("ParamsArg", "name kind default field count length same_as fill check choices",
                       defaults=(REQUIRED, None, None, None, None, None, None, None))
ParamsConstructor = namedtuple("ParamsConstructor", "name doc args")


def _axis_constructor(name: str, doc: str) -> ParamsConstructor:
    return ParamsConstructor(name, doc, (ParamsArg("axis", "int"),))


_MATMUL_EXTENT = dict(kind="int", check=">= 0")
PARAMS_CONSTRUCTORS = (
    ParamsConstructor("none", "No params: what an op without params takes.", ()),
    ParamsConstructor("reduce", "The dims to reduce (negative from the end; empty: every dim), "
                      "whether they stay as extent 1 and, for ARGMAX and ARGMIN only (the other "
                      "reductions refuse it), whether ties give the last index (ONNX's select_last_index).",
                      (ParamsArg("dims", "dims", count="ndims"), ParamsArg("keepdim", "bool", False),
                       ParamsArg("select_last_index", "bool", False, field="select_last"))),
    ParamsConstructor("matmul", "The extents of a batched (m, k) @ (k, n); m is the row capacity and "
                      "m_compute (a MatmulM) says how many rows to compute; scale_a and scale_b (finite) "
                      "scale FP8 inputs: C = scale_a * scale_b * (A @ B) (other dtypes take only 1.0).",
                      (ParamsArg("m", **_MATMUL_EXTENT), ParamsArg("n", **_MATMUL_EXTENT),
                       ParamsArg("k", **_MATMUL_EXTENT),
                       ParamsArg("batch", "ints", (), count="batch_ndim", length="FK_MAX_DIMS - 2",
                                 check=">= 0"),
                       ParamsArg("m_compute", "matmul_m", None, same_as="m"),
                       ParamsArg("scale_a", "finite", 1.0), ParamsArg("scale_b", "finite", 1.0))),
    ParamsConstructor("conv2d", "Stride, padding and dilation (one int or a pair (h, w)) and groups.",
                      (ParamsArg("stride", "pair", 1, check=">= 1"),
                       ParamsArg("padding", "pair", 0, check=">= 0"),
                       ParamsArg("dilation", "pair", 1, check=">= 1"),
                       ParamsArg("groups", "int", 1, check=">= 1"))),
    ParamsConstructor("slice", "Python slice bounds per dim; step defaults to 1 on every dim.",
                      (ParamsArg("start", "ints", count="ndim", length="FK_MAX_DIMS"),
                       ParamsArg("stop", "ints", count="ndim", same_as="start"),
                       ParamsArg("step", "ints", None, count="ndim", same_as="start", fill=1,
                                 check="!= 0"))),
    ParamsConstructor("affine", "x * mul + add.", (ParamsArg("mul", "float"), ParamsArg("add", "float"))),
    ParamsConstructor("clamp", "Bounds (min > max gives max everywhere, as np.clip; NaN refused).",
                      (ParamsArg("min", "real"), ParamsArg("max", "real"))),
    ParamsConstructor("powi", "The integer exponent.", (ParamsArg("exp", "int"),)),
    _axis_constructor("concat", "The axis the inputs are joined along."),
    ParamsConstructor("softmax_last_dim", "No arguments: the axis is the last.",
                      (ParamsArg("axis", "const", -1),)),
    ParamsConstructor("norm_last_dim", "The epsilon added to the variance (non-negative).",
                      (ParamsArg("eps", "float", 1e-5, check=">= 0"),)),
    _axis_constructor("index_select", "The axis the index vector picks along."),
    _axis_constructor("gather", "The axis the index tensor picks along."),
    _axis_constructor("scatter", "The axis src is added along."),
    ParamsConstructor("cumsum", "The axis, and whether the sum excludes the current element and runs "
                      "from the end.",
                      (ParamsArg("axis", "int"), ParamsArg("exclusive", "bool", False),
                       ParamsArg("reverse", "bool", False))),
    ParamsConstructor("flip", "The dims to reverse.", (ParamsArg("dims", "dims", count="ndims"),)),
    ParamsConstructor("roll", "One shift per dim rolled.",
                      (ParamsArg("shifts", "ints", count="ndims", same_as="dims"),
                       ParamsArg("dims", "dims", count="ndims"))),
    ParamsConstructor("triangular", "The diagonal: 0 is the main one, positive above it.",
                      (ParamsArg("diagonal", "int", 0),)),
    ParamsConstructor("pad", "Widths before and after each of the last dims, the mode and the "
                      "constant value.",
                      (ParamsArg("before", "ints", count="ndim", length="FK_MAX_DIMS", check=">= 0"),
                       ParamsArg("after", "ints", count="ndim", same_as="before", check=">= 0"),
                       ParamsArg("mode", "choice", "constant",
                                 choices=(("constant", "FK_PAD_CONSTANT"), ("reflect", "FK_PAD_REFLECT"),
                                          ("replicate", "FK_PAD_REPLICATE"))),
                       ParamsArg("value", "float", 0.0))),
    ParamsConstructor("masked_fill", "The value written where the mask is true.",
                      (ParamsArg("value", "float"),)),
    ParamsConstructor("rope", "Whether rotated pairs are interleaved (else the two halves).",
                      (ParamsArg("interleaved", "bool", False),)),
    ParamsConstructor("flash_attn", "Score scale, causal mask, tanh softcap (0: none), a sliding "
                      "window (-1: unbounded) and where queries sit among the keys: bottom-right (query i "
                      "at key position i + Sk - Sq, FlashAttention's) or top_left (at i, ONNX Attention's).",
                      (ParamsArg("scale", "float"), ParamsArg("causal", "bool", False),
                       ParamsArg("softcap", "float", 0.0), ParamsArg("window_left", "int", -1),
                       ParamsArg("window_right", "int", -1), ParamsArg("top_left", "bool", False))),
    ParamsConstructor("paged_attn", "Score scale, the KV cache's block size, tanh softcap (0: none) "
                      "and a left window (-1: unbounded).",
                      (ParamsArg("scale", "float"), ParamsArg("block_size", "int", check=">= 1"),
                       ParamsArg("softcap", "float", 0.0), ParamsArg("window_left", "int", -1))),
    ParamsConstructor("cross_entropy", "Targets equal to ignore_index give loss and gradient 0 (the "
                      "default, -100 as PyTorch's, is never a class); label_smoothing in [0, 1] mixes the "
                      "target with the uniform distribution.",
                      (ParamsArg("ignore_index", "int", -100), ParamsArg("label_smoothing", "real", 0.0,
                                                                          check=">= 0"))),
    # conv2d backward
    ParamsConstructor("conv2d_backward", "CONV2D's stride, padding, dilation and groups, with the "
                      "forward input's (H, W) and the kernel's (KH, KW): the shapes the gradients "
                      "take (the backward ops check both against their operands).",
                      (ParamsArg("input_size", "pair", check=">= 0"),
                       ParamsArg("kernel_size", "pair", check=">= 1"),
                       ParamsArg("stride", "pair", 1, check=">= 1"),
                       ParamsArg("padding", "pair", 0, check=">= 0"),
                       ParamsArg("dilation", "pair", 1, check=">= 1"),
                       ParamsArg("groups", "int", 1, check=">= 1"))),
    # ---- training
    ParamsConstructor("reduce_to", "The shape to reduce to: it must broadcast to the input's shape "
                      "(leading dims dropped, dims of extent 1 summed with keepdim).",
                      (ParamsArg("shape", "ints", count="ndim", length="FK_MAX_DIMS", check=">= 0"),)),
    # ---- KV-cache writes
    ParamsConstructor("write_slice", "Where the source lands in the destination: its start on every dim "
                      "(WRITE_SLICE_ROTATING takes the ring axis's start modulo its extent), and the axis "
                      "that is the ring (WRITE_SLICE_ROTATING) and that a run-time position operand adds to.",
                      (ParamsArg("start", "ints", count="ndim", length="FK_MAX_DIMS"),
                       ParamsArg("axis", "int", 0))),
    ParamsConstructor("qmatmul", "W's GGML quant type (its GGMLQuantizationType value, one of "
                      "spec.QUANT_TYPES) and the extents of A (m, k) @ dequant(W).T (n rows of W); m = 0 "
                      "takes the row count from A when the kernel runs (any number of rows).",
                      (ParamsArg("quant_type", "int", check=">= 0"), ParamsArg("m", **_MATMUL_EXTENT),
                       ParamsArg("n", **_MATMUL_EXTENT), ParamsArg("k", **_MATMUL_EXTENT))),
    ParamsConstructor("nf4_matmul", "The extents of A (m, k) @ dequant(W).T for W (n, k) in NF4; m = 0 "
                      "takes the row count from A when the kernel runs.",
                      (ParamsArg("m", **_MATMUL_EXTENT), ParamsArg("n", **_MATMUL_EXTENT),
                       ParamsArg("k", **_MATMUL_EXTENT))),
    # state-space models
    ParamsConstructor("causal_conv1d", "The activation applied after the bias: none or silu.",
                      (ParamsArg("activation", "choice", "none",
                                 choices=(("none", "FK_SSM_ACT_NONE"), ("silu", "FK_SSM_ACT_SILU"))),)),
    ParamsConstructor("selective_scan", "Whether delta goes through softplus before the scan.",
                      (ParamsArg("delta_softplus", "bool", False),)),
    ParamsConstructor("ssd_chunk_scan", "The chunk length the scan is evaluated by (any >= 1 gives the "
                      "same values within the claim).",
                      (ParamsArg("chunk_size", "int", 64, check=">= 1"),)),
    # pooling
    ParamsConstructor("pool2d", "ONNX pooling attributes: kernel (KH, KW), stride, the pads before "
                      "(top, left) and after (bottom, right) -- ONNX pads [t, l, b, r] are "
                      "pads_begin=(t, l), pads_end=(b, r) --, dilation, ceil_mode and, for AVG_POOL2D "
                      "only, count_include_pad.  Each pair also takes one int for both axes.",
                      (ParamsArg("kernel", "pair", check=">= 1"),
                       ParamsArg("stride", "pair", 1, check=">= 1"),
                       ParamsArg("pads_begin", "pair", 0, check=">= 0"),
                       ParamsArg("pads_end", "pair", 0, check=">= 0"),
                       ParamsArg("dilation", "pair", 1, check=">= 1"),
                       ParamsArg("ceil_mode", "bool", False),
                       ParamsArg("count_include_pad", "bool", False))),
    # selection
    ParamsConstructor("topk", "How many (k >= 0), whether the largest (else the smallest) and whether "
                      "sorted (the result is always in order: best first, ties by the lower index).",
                      (ParamsArg("k", "int", check=">= 0"), ParamsArg("largest", "bool", True),
                       ParamsArg("sorted", "bool", True))),
    ParamsConstructor("scatter_reduce", "The axis src is scattered along and the reduction at each index: "
                      "none (the last src in index order wins), max, min or mul (SCATTER_ADD adds).",
                      (ParamsArg("axis", "int"),
                       ParamsArg("reduction", "choice", "none",
                                 choices=(("none", "FK_SCATTER_NONE"), ("max", "FK_SCATTER_MAX"),
                                          ("min", "FK_SCATTER_MIN"), ("mul", "FK_SCATTER_MUL"))))),
    # convolutions
    ParamsConstructor("conv1d", "CONV1D's stride, padding, dilation and groups.  padding is the zeros before "
                      "and after the axis, (begin, end) -- ONNX Conv's pads [begin, end] --, or one int for both "
                      "(PyTorch's padding).",
                      (ParamsArg("stride", "int", 1, check=">= 1"),
                       ParamsArg("padding", "pair", 0, check=">= 0"),
                       ParamsArg("dilation", "int", 1, check=">= 1"),
                       ParamsArg("groups", "int", 1, check=">= 1"))),
    ParamsConstructor("conv_transpose2d", "ONNX ConvTranspose's attributes: stride, the pads before (top, left) "
                      "and after (bottom, right) -- ONNX pads [t, l, b, r] are pads_begin=(t, l), pads_end=(b, r); "
                      "PyTorch's padding p is both --, dilation, output_padding (each smaller than the stride or "
                      "the dilation on its axis) and groups.  Each pair also takes one int for both axes.",
                      (ParamsArg("stride", "pair", 1, check=">= 1"),
                       ParamsArg("pads_begin", "pair", 0, check=">= 0"),
                       ParamsArg("pads_end", "pair", 0, check=">= 0"),
                       ParamsArg("dilation", "pair", 1, check=">= 1"),
                       ParamsArg("output_padding", "pair", 0, check=">= 0"),
                       ParamsArg("groups", "int", 1, check=">= 1"))),
    ParamsConstructor("qembedding", "The table's GGML quant type (one of spec.QUANT_TYPES) and extents: "
                      "n rows of k values.",
                      (ParamsArg("quant_type", "int", check=">= 0"), ParamsArg("m", "const", 0),
                       ParamsArg("n", **_MATMUL_EXTENT), ParamsArg("k", **_MATMUL_EXTENT))),
)

# ---- CPU kernel modules --------------------------------------------------------------------------
# The extension modules fuel_kernel/cpu/_<name>.pyx, in registration order (fuel_kernel.cpu's
# KERNEL_MODULES).  header: the C header holding the family's kernels and manifest; manifest: the
# fk_manifest_row array it exports (its length is <manifest>_len); doc: what the module holds;
# generated: the build writes the module from fuel_kernel/cpu/kernel_module.pyx.in (False: the
# module is written by hand, as the BLAS sibling that binds SciPy at import).
KernelModuleSpec = namedtuple("KernelModuleSpec", "name header manifest doc generated")


def _module(name: str, doc: str, generated: bool = True) -> KernelModuleSpec:
    return KernelModuleSpec(name, f"{name}_kernels.h", f"fk_{name}_manifest", doc, generated)


KERNEL_MODULES = (
    _module("cast", "CPU CAST and CONTIGUIZE kernels"),
    _module("binary", "CPU elementwise binary kernels"),
    _module("compare", "CPU elementwise compare and WHERE kernels"),
    _module("unary", "CPU elementwise unary kernels"),
    _module("movement", "CPU data-movement kernels: SLICE, CONCAT, FLIP, ROLL, TRIU, TRIL, PAD, "
            "MASKED_FILL, CUMSUM, WRITE_SLICE, WRITE_SLICE_ROTATING"),
    _module("index", "CPU indexing kernels: INDEX_SELECT, GATHER, SCATTER_ADD, INDEX_ADD, SCATTER, NONZERO"),
    _module("attention", "CPU attention kernels: ROPE, FLASH_ATTN, FLASH_ATTN_MASKED, PAGED_ATTN, FLASH_ATTN_BACKWARD"),
    _module("reduce", "CPU reductions SUM/MAX/MIN/MEAN/PROD/ARGMAX/ARGMIN"),
    _module("matmul", "Native CPU MATMUL kernels (GEMM engine in gemm_core.h)"),
    _module("matmul_blas", "The BLAS MATMUL sibling: registers only when SciPy is importable",
            generated=False),
    _module("norm", "CPU SOFTMAX/LOG_SOFTMAX over the last dim, RMS_NORM and LAYER_NORM"),
    _module("norm_backward", "CPU RMS_NORM_BACKWARD and LAYER_NORM_BACKWARD kernels"),
    _module("loss", "CPU FUSED_SOFTMAX_CROSS_ENTROPY and its backward"),
    _module("conv", "CPU CONV2D kernels, im2col+GEMM and direct siblings, its gradients, CONV1D and CONV_TRANSPOSE2D"),
    _module("quant", "CPU QMATMUL and NF4_MATMUL: A @ dequant(W).T for GGML- or NF4-quantized W; "
            "QEMBEDDING: rows of a GGML-quantized table"),
    _module("ssm", "CPU state-space kernels: CAUSAL_CONV1D, SELECTIVE_SCAN, SSD_CHUNK_SCAN"),
    _module("pool", "CPU MAX_POOL2D and AVG_POOL2D kernels (NCHW, ONNX semantics)"),
    _module("topk", "CPU TOPK kernels: the k best along the last dim and their indices"),
)

PARAMS_ARG_KINDS = ("int", "float", "real", "finite", "bool", "ints", "dims", "pair", "choice", "matmul_m", "const")


def check_generated_tables() -> None:
    """Raise ValueError if the params constructors or kernel modules break their rules: one
    constructor per family in PARAMS order, argument kinds known, fields and `same_as` names
    existing, sequence arguments counted; kernel module names unique."""
    if [c.name for c in PARAMS_CONSTRUCTORS] != [p.name for p in PARAMS]:
        raise ValueError("spec: PARAMS_CONSTRUCTORS must list the PARAMS families in order")
    for family, constructor in zip(PARAMS, PARAMS_CONSTRUCTORS):
        fields = {name.split("[")[0] for _, name in family.fields}
        names = [a.name for a in constructor.args]
        for arg in constructor.args:
            where = f"spec: params.{family.name} argument {arg.name}"
            if arg.kind not in PARAMS_ARG_KINDS:
                raise ValueError(f"{where}: unknown kind {arg.kind!r}")
            if (arg.field or arg.name) not in fields or (arg.count and arg.count not in fields):
                raise ValueError(f"{where}: names a field {family.member} lacks")
            if arg.kind in ("ints", "dims") and not arg.count:
                raise ValueError(f"{where}: a sequence needs a count field")
            if arg.same_as and arg.same_as not in names:
                raise ValueError(f"{where}: same_as names no argument")
    names = [m.name for m in KERNEL_MODULES]
    if len(set(names)) != len(names):
        raise ValueError("spec: duplicate kernel module names")


check_generated_tables()
