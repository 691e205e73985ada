"""Tables of a unary op at every 16-bit float input (F16, BF16), for the kernel templates.

An op in spec.HALF_TABLE_OPS reads its F16 and BF16 results from a table of 65536 entries
(cpu/unary_kernels.h.in): each entry is the op evaluated in F64 at that input and rounded once,
to nearest even, straight to the 16-bit format (never through F32, which would round twice).
`c_table(op, dtype)` is the C initializer the template writes; FUNCTIONS[op] the F64 function.
The F64 value is within about 1e-13 of the exact one (below), so an entry is the correctly
rounded result unless the exact value lies that close to a tie; the tests check every entry
against SciPy.
"""
import math
import struct

FORMATS = ("F16", "BF16")


def _gelu_erf(x: float) -> float:
    """x Phi(x) = x erfc(-x / sqrt 2) / 2; -0 at -inf (the limit).  erfc's argument rounds once in
    F64, which moves the result by at most 2 t^2 2^-53 relative at t = |x| / sqrt 2 (under 1e-13
    where the result is a 16-bit normal or subnormal, |x| < 14)."""
    if x == -math.inf:
        return -0.0
    return 0.5 * x * math.erfc(-x * math.sqrt(0.5))


FUNCTIONS = {"GELU_ERF": _gelu_erf}


def decode(bits: int, fmt: str) -> float:
    """The value of a 16-bit pattern of F16 or BF16 (exact in F64)."""
    if fmt == "F16":
        return struct.unpack("<e", bits.to_bytes(2, "little"))[0]
    return struct.unpack("<f", (bits << 16).to_bytes(4, "little"))[0]


def _round_bf16(v: float) -> int:
    """v (F64, not NaN) rounded to nearest even BF16, as bits: 8 significant bits, subnormals
    below 2^-126 in steps of 2^-133, overflow to inf."""
    sign = 0x8000 if math.copysign(1.0, v) < 0 else 0
    a = abs(v)
    if a == math.inf:
        return sign | 0x7F80
    if a == 0.0:
        return sign
    e = max(math.frexp(a)[1], -125)                 # a = m 2^e, 1/2 <= m < 1; normals have e >= -125
    q = round(math.ldexp(a, 8 - e))                 # a in steps of 2^(e - 8), exact; half to even
    r = math.ldexp(q, e - 8)
    if r >= 2.0 ** 128:
        return sign | 0x7F80
    return sign | (struct.unpack("<I", struct.pack("<f", r))[0] >> 16)


def encode(v: float, fmt: str) -> int:
    """v (F64, not NaN) rounded once to nearest even in the format, as bits."""
    if fmt == "F16":
        try:
            return struct.unpack("<H", struct.pack("<e", v))[0]   # CPython rounds F64 to F16 directly
        except OverflowError:
            return (0xFC00 if v < 0 else 0x7C00)
    return _round_bf16(v)


def quiet(bits: int, fmt: str) -> int:
    """A NaN input's result: the same NaN made quiet, as the F32 round trip leaves it."""
    return bits | (0x0200 if fmt == "F16" else 0x0040)


def is_nan(bits: int, fmt: str) -> bool:
    return (bits & 0x7FFF) > (0x7C00 if fmt == "F16" else 0x7F80)


def table(op: str, fmt: str) -> list:
    """The 65536 result patterns of op in the format, indexed by the input's pattern."""
    if fmt not in FORMATS:
        raise ValueError(f"half_tables: no 16-bit format {fmt}")
    f = FUNCTIONS[op]
    return [quiet(b, fmt) if is_nan(b, fmt) else encode(f(decode(b, fmt)), fmt) for b in range(1 << 16)]


def c_table(op: str, fmt: str) -> str:
    """`static const uint16_t fk_<op>_<fmt>_table[65536] = {...};` for a template."""
    values = table(op, fmt)
    lines = [", ".join("0x%04x" % v for v in values[i:i + 16]) for i in range(0, len(values), 16)]
    body = ",\n    ".join(lines)
    return f"static const uint16_t fk_{op.lower()}_{fmt}_table[65536] = {{\n    {body}}};"
