"""The public enums of fuel_kernel: DType, OpKind, Backend and KernelCaps, numbered as in abi.h.

These are the Python names for the C ABI's enums (fuel_kernel/include/fuel_kernel/abi.h); a test
checks that the numbering matches the header.  Lower-case short names ("f32", "add", "cpu") are
what the coverage diagnostic prints and what the constructors below accept.
"""
import enum

import ml_dtypes
import numpy as np


class DType(enum.IntEnum):
    BOOL = 0
    U8 = 1
    I8 = 2
    I16 = 3
    I32 = 4
    I64 = 5
    U32 = 6
    F16 = 7
    BF16 = 8
    F32 = 9
    F64 = 10

    @property
    def short_name(self):
        return self.name.lower()

    @property
    def numpy(self):
        """The NumPy dtype that holds this dtype (ml_dtypes.bfloat16 for BF16)."""
        return _NUMPY_DTYPES[self]

    @property
    def itemsize(self):
        return _NUMPY_DTYPES[self].itemsize

    @property
    def is_float(self):
        return self in (DType.F16, DType.BF16, DType.F32, DType.F64)

    @property
    def is_signed_int(self):
        return self in (DType.I8, DType.I16, DType.I32, DType.I64)

    @property
    def is_unsigned_int(self):
        return self in (DType.U8, DType.U32)

    @classmethod
    def parse(cls, value):
        """A DType from a DType, its code, its short name ("f32") or a NumPy dtype-like."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            if 0 <= int(value) < len(cls):
                return cls(int(value))
        try:
            return _FROM_NUMPY[np.dtype(value)]
        except (TypeError, KeyError):
            pass
        from .errors import DTypeError
        raise DTypeError(f"{value!r} is not a fuel_kernel dtype; expected one of "
                         f"{', '.join(d.short_name for d in cls)}")


_NUMPY_DTYPES = {
    DType.BOOL: np.dtype(np.bool_), DType.U8: np.dtype(np.uint8), DType.I8: np.dtype(np.int8),
    DType.I16: np.dtype(np.int16), DType.I32: np.dtype(np.int32), DType.I64: np.dtype(np.int64),
    DType.U32: np.dtype(np.uint32), DType.F16: np.dtype(np.float16),
    DType.BF16: np.dtype(ml_dtypes.bfloat16), DType.F32: np.dtype(np.float32),
    DType.F64: np.dtype(np.float64),
}
_FROM_NUMPY = {dt: code for code, dt in _NUMPY_DTYPES.items()}


class OpKind(enum.IntEnum):
    CAST = 0
    CONTIGUIZE = 1
    NEG = 2
    ABS = 3
    SQR = 4
    SQRT = 5
    RSQRT = 6
    RECIP = 7
    EXP = 8
    LOG = 9
    SIN = 10
    COS = 11
    TANH = 12
    SIGMOID = 13
    RELU = 14
    SILU = 15
    GELU = 16
    GELU_ERF = 17
    ERF = 18
    STEP = 19
    FLOOR = 20
    CEIL = 21
    ROUND = 22
    SIGN = 23
    ADD = 24
    SUB = 25
    MUL = 26
    DIV = 27
    MAXIMUM = 28
    MINIMUM = 29
    POW = 30
    REM = 31
    EQ = 32
    NE = 33
    LT = 34
    LE = 35
    GT = 36
    GE = 37
    WHERE = 38
    AFFINE = 39
    CLAMP = 40
    POWI = 41
    SUM = 42
    MAX = 43
    MIN = 44
    MEAN = 45
    PROD = 46
    ARGMAX = 47
    ARGMIN = 48
    MATMUL = 49
    CONV2D = 50
    SOFTMAX_LAST_DIM = 51
    LOG_SOFTMAX_LAST_DIM = 52
    RMS_NORM = 53
    LAYER_NORM = 54
    SLICE = 55
    CONCAT = 56
    INDEX_SELECT = 57
    GATHER = 58
    SCATTER_ADD = 59
    INDEX_ADD = 60
    FLIP = 61
    ROLL = 62
    CUMSUM = 63
    TRIU = 64
    TRIL = 65
    PAD = 66
    MASKED_FILL = 67
    ROPE = 68
    FLASH_ATTN = 69
    PAGED_ATTN = 70

    @property
    def short_name(self):
        return self.name.lower()

    @classmethod
    def parse(cls, value):
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= int(value) < len(cls):
            return cls(int(value))
        from .errors import UnknownOpError
        raise UnknownOpError(f"{value!r} is not an op; expected an OpKind or one of its names")


class Backend(enum.IntEnum):
    """Built-in backends.  Extensions claim ids in [EXTENSION_FIRST, EXTENSION_LAST] at run time
    with fuel_kernel.claim_backend(name); those ids are plain ints."""
    CPU = 0
    CUDA = 1
    VULKAN = 2
    METAL = 3

    EXTENSION_FIRST = 64
    EXTENSION_LAST = 255

    @property
    def short_name(self):
        return self.name.lower()


class KernelCaps(enum.IntFlag):
    NONE = 0
    STRIDED_INPUT = 1
    REQUIRES_BROADCAST = 2
    INPLACE = 4
    STRIDED_OUTPUT = 8
