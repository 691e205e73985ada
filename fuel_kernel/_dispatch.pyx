# cython: language_level=3
"""The dispatch core's Python face: snapshots, lookup, Kernel handles, transactions, fk.dispatch.

The table itself is C (fuel_kernel/_core/table.c: an open-addressing hash over POD keys, published
as reference-counted copy-on-write snapshots; its opening comment explains the scheme).  This
module wraps it for Python callers:

* BindingTable holds one snapshot; its lookups return cached Kernel handles, so a Python-level
  lookup costs one key build and one hash probe.
* Kernel is a pre-resolved (snapshot, entry) pair.  Calling it converts operands to fk_storage /
  fk_layout in C (NumPy arrays directly; buffers and DLPack producers through NumPy views),
  checks count, dtypes, aliasing and writability, runs the kernel (without the GIL when large)
  and turns a failing status into the matching FuelKernelError.  Shapes are checked by the kernel
  itself, before it writes, so C callers of the cimport API get the same protection.
* Transaction batches registrations into one publish; nothing is published if any step fails.
* The C API table for other extensions is exported as the capsule `_C_API`.
"""
cimport cython
cimport numpy as cnp
from cpython.long cimport PyLong_Check, PyLong_AsLong
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, memset, strncpy

from fuel_kernel.abi cimport *

import hashlib
import inspect
import math
import operator
import sys
import threading

import numpy as np

from fuel_kernel import spec
from fuel_kernel.errors import (STATUS_ERRORS, AliasError, ArgumentError, BackendError,
                                DTypeError, FuelKernelError, KernelMemoryError, KeyRangeError,
                                NoKernelError, OperandCountError, OperandTypeError, ParamsError,
                                ReadOnlyError, RegistrationError, ShapeError, UnknownOpError)
from fuel_kernel.records import (Ambiguous, BindingKey, CostEstimate, CoverageBinding, MatmulM,
                                 NotFound, PrecisionGuarantee, Unique, KEY_RUNTIME_FUSED, KEY_STATIC,
                                 FUSED_ID_LIMIT, as_integer)
from fuel_kernel.types import Backend, DType, KernelCaps, OpKind

cnp.import_array()

cdef extern from "table.h" nogil:
    int fk_core_init()
    const void *fk_core_api()
    uint64_t fk_published_generation()
    void fk_core_reclaim()
    int64_t fk_core_allocated_bytes()
    int64_t fk_core_live_snapshots()
    int64_t fk_snapshot_key_count(const fk_snapshot *snapshot)
    int64_t fk_snapshot_entry_count(const fk_snapshot *snapshot)
    const fk_entry *fk_snapshot_entries(const fk_snapshot *snapshot)
    fk_lookup_result fk_snapshot_key_at(const fk_snapshot *snapshot, int64_t index, fk_key *key_out)
    ctypedef void (*fk_entry_editor)(const fk_key *key, fk_entry *entry, void *context) noexcept nogil
    int fk_txn_edit_entries(fk_txn *txn, int backend, fk_entry_editor editor, void *context)
    int64_t fk_txn_size(const fk_txn *txn)
    void fk_txn_poison(fk_txn *txn)
    const char *fk_backend_name(int backend)

cdef extern from "pool.h" nogil:
    int fk_parallel_for(int64_t n_tasks, fk_task_fn fn, void *context)
    int fk_get_num_threads()
    int fk_set_num_threads(int n)
    int fk_affinity_cpus()
    int fk_pool_workers_started()
    int64_t fk_pool_calls()
    enum: FK_POOL_MAX_THREADS

cdef extern from "fuel_kernel/strided.h" nogil:
    const int fk_dtype_itemsize[]
    const int fk_dtype_shift[]
    int64_t fk_layout_numel(const fk_layout *layout)

if fk_core_init() != FK_OK:
    raise MemoryError("fuel_kernel could not allocate its binding table")

_C_API = PyCapsule_New(<void *>fk_core_api(), FK_API_CAPSULE_NAME, NULL)

# Calls whose output has at least this many elements run without the GIL: below it, releasing and
# re-acquiring the GIL costs more than the kernel.
cdef int64_t NOGIL_MIN_ELEMENTS = 16384


cdef inline int key_outputs(const fk_key *key) noexcept:
    """How many of the key's dtypes are outputs (the last ones): the op's count (fuel_kernel.spec),
    1 for a runtime fused op.  Keys reaching here are valid, so the count is never -1."""
    return fk_key_outputs(key)


# ---- errors ---------------------------------------------------------------------------------
cdef int raise_status(int status) except -1:
    """Turn a failing fk_status plus the thread-local message into a FuelKernelError.  The message
    is consumed (cleared), so the thread's error state is clear again between calls."""
    message = fk_error_message().decode("utf-8", "replace") if fk_error_status() == status else ""
    fk_clear_error()
    raise STATUS_ERRORS.get(status, FuelKernelError)(message or f"kernel failed with status {status}")


cdef extern from "operands.h":
    ctypedef struct fk_typenum_map:
        int by_typenum[64]
        int user_typenum[FK_DTYPE_COUNT]
        void *canonical[FK_DTYPE_COUNT]
    int fk_array_dtype(cnp.ndarray arr, const fk_typenum_map *map) noexcept
    int64_t fk_describe_array(cnp.ndarray arr, int dtype, fk_storage *storage, fk_layout *layout) noexcept
    enum: FK_OUTPUT_READ_ONLY, FK_OUTPUT_OVERLAPS, FK_OUTPUTS_OVERLAP, FK_CALL_GENERAL
    int fk_check_outputs(const fk_entry *entry, const fk_storage *storage, const fk_layout *layouts,
                         const int64_t *numels, int n_in, int n_out, int *output, int *input) noexcept
    int fk_run_described(const fk_entry *entry, fk_storage *storage, const fk_layout *layouts,
                         const int64_t *numels, int n_in, int n_out, const fk_params *params,
                         int64_t nogil_min) noexcept
    int fk_call_arrays(const fk_entry *entry, PyObject **operands, int n_in, int n_out,
                       const uint8_t *dtypes, const fk_typenum_map *map, const fk_params *params,
                       int64_t nogil_min) noexcept


# ---- dtype and key parsing -------------------------------------------------------------------
cdef fk_typenum_map DTYPE_MAP
_CANONICAL_DESCRS = [np.dtype(code.numpy) for code in DType]   # keeps DTYPE_MAP.canonical alive


cdef void _init_typenums():
    cdef int i
    for i in range(64):
        DTYPE_MAP.by_typenum[i] = -1
    for code in DType:
        DTYPE_MAP.user_typenum[int(code)] = -1
        DTYPE_MAP.canonical[int(code)] = <void *>_CANONICAL_DESCRS[int(code)]
        num = code.numpy.num
        if num < 64:
            DTYPE_MAP.by_typenum[num] = int(code)
        else:                                   # an ml_dtypes type: a user type number
            DTYPE_MAP.user_typenum[int(code)] = num
    for alias, code in ((np.longlong, DType.I64), (np.intc, DType.I32), (np.uintc, DType.U32)):
        num = np.dtype(alias).num
        if np.dtype(alias).itemsize == code.itemsize and num < 64:
            DTYPE_MAP.by_typenum[num] = int(code)


_init_typenums()


cdef inline int array_dtype(cnp.ndarray arr) noexcept:
    """The fk_dtype of a NumPy array, or -1 if fuel_kernel has no such dtype."""
    return fk_array_dtype(arr, &DTYPE_MAP)


cdef inline long as_long_or(object value, long fallback):
    """A Python int as a C long, or `fallback` when it does not fit (so callers raise their own
    typed error instead of an OverflowError)."""
    try:
        return PyLong_AsLong(value)
    except OverflowError:
        return fallback


cdef inline int parse_backend(object backend) except -1:
    cdef long value
    if PyLong_Check(backend):
        value = as_long_or(backend, -1)
    elif isinstance(backend, str):
        value = backend_from_name(backend)
    else:
        raise BackendError(f"backend must be a Backend, an int or a name, not {type(backend).__name__}")
    if value < 0 or value > FK_BACKEND_EXTENSION_LAST:
        raise BackendError(f"backend id {backend} is out of range [0, {FK_BACKEND_EXTENSION_LAST}]")
    return value


def backend_from_name(str name):
    lowered = name.lower()
    for b in (Backend.CPU, Backend.CUDA, Backend.VULKAN, Backend.METAL):
        if b.short_name == lowered:
            return int(b)
    cdef int backend
    for backend in range(FK_BACKEND_EXTENSION_FIRST, FK_BACKEND_EXTENSION_LAST + 1):
        claimed = fk_backend_name(backend)
        if claimed != NULL and claimed.decode() == name:
            return backend
    raise BackendError(f"unknown backend {name!r}")


def backend_name(backend):
    """The short name of a backend id ("cpu", or the name an extension claimed it under)."""
    cdef long value = as_long_or(backend, -1) if PyLong_Check(backend) else -1
    cdef const char *name = fk_backend_name(value) if 0 <= value <= FK_BACKEND_EXTENSION_LAST else NULL
    return name.decode() if name != NULL else f"backend#{backend}"


def claim_backend(name):
    """Claim a backend id in the extension range for `name` (the same name gets the same id)."""
    if not isinstance(name, str):
        raise RegistrationError(f"a backend name is a str, not {type(name).__name__}")
    cdef bytes encoded = name.encode()
    cdef int backend = fk_claim_backend(encoded)
    if backend < 0:
        raise_status(FK_ERR_INVALID)
    return backend


cdef inline int parse_dtype_code(object item) except -1:
    cdef long value
    if PyLong_Check(item):
        value = as_long_or(item, -1)
        if 0 <= value < FK_DTYPE_COUNT:
            return value
        raise DTypeError(f"dtype code {item} is out of range [0, {FK_DTYPE_COUNT})")
    return int(DType.parse(item))


cdef int parse_dtypes(object dtypes, fk_dtypes *out) except -1:
    cdef Py_ssize_t i, n
    if type(dtypes) is not list and type(dtypes) is not tuple:
        try:
            dtypes = tuple(dtypes)
        except TypeError:
            raise DTypeError(f"dtypes must be a sequence of dtypes, not {type(dtypes).__name__}") from None
    n = len(dtypes)
    if n < 1 or n > FK_MAX_OPERANDS:
        raise OperandCountError(f"a key lists 1 to {FK_MAX_OPERANDS} operand dtypes, not {n}")
    out.n = <uint8_t>n
    for i in range(n):
        out.v[i] = <uint8_t>parse_dtype_code(dtypes[i])
    return 0


cdef int parse_key(object op, object dtypes, object backend, fk_key *key) except -1:
    cdef fk_dtypes codes
    cdef long op_id
    cdef int kind = FK_KEY_STATIC
    parse_dtypes(dtypes, &codes)
    if PyLong_Check(op):
        op_id = as_long_or(op, -1)
        if op_id < 0 or op_id >= FK_OP_COUNT:
            raise UnknownOpError(f"unknown op code {op}")
    elif isinstance(op, BindingKey):
        kind, op_id = check_key_op(op.kind, op.id)
    else:
        op_id = int(OpKind.parse(op))
    key[0] = fk_key_make(kind, <uint32_t>op_id, &codes, parse_backend(backend))
    return 0


cdef tuple check_key_op(object kind, object op_id):
    """(kind, id) of a BindingKey, refused when it does not fit fk_key (never truncated)."""
    if not PyLong_Check(kind) or not PyLong_Check(op_id):
        raise UnknownOpError(f"a BindingKey holds an int kind and id, not {kind!r}, {op_id!r}")
    if kind == FK_KEY_STATIC:
        if not 0 <= op_id < FK_OP_COUNT:
            raise KeyRangeError(f"static op id {op_id} is out of range [0, {FK_OP_COUNT})")
    elif kind == FK_KEY_RUNTIME_FUSED:
        if not 0 < op_id < FUSED_ID_LIMIT:
            raise KeyRangeError(f"runtime fused op ids are in [1, 2**32), not {op_id}")
    else:
        raise KeyRangeError(f"BindingKey kind is {FK_KEY_STATIC} or {FK_KEY_RUNTIME_FUSED}, not {kind}")
    return kind, op_id


cdef long parse_fused_id(object fused_id, type error) except -1:
    """A runtime fused op id in [1, 2**32); anything else is `error`."""
    value = as_integer(fused_id, "a runtime fused op id", error)
    if not 0 < value < FUSED_ID_LIMIT:
        raise error(f"runtime fused op ids are in [1, 2**32), not {fused_id}")
    return value


cdef uint32_t parse_caps(object caps) except? 0xFFFFFFFF:
    """KernelCaps flags as the C field, refused (ArgumentError) when not a non-negative 32-bit int."""
    value = as_integer(caps, "caps", ArgumentError)
    if not 0 <= value <= 0xFFFFFFFF:
        raise ArgumentError(f"caps must be KernelCaps flags, not {caps!r}")
    return <uint32_t>value


cdef object key_op(const fk_key *key):
    if key.kind == FK_KEY_STATIC:
        return OpKind(key.id)
    return BindingKey.runtime_fused(key.id)


cdef tuple key_dtypes(const fk_key *key):
    return tuple([DType(key.dtypes[i]) for i in range(key.ndtypes)])


cdef str describe_key(const fk_key *key):
    name = OpKind(key.id).short_name if key.kind == FK_KEY_STATIC else f"fused#{key.id}"
    dts = ", ".join(DType(key.dtypes[i]).short_name for i in range(key.ndtypes))
    return f"{name}({dts}) on {backend_name(key.backend)}"


# ---- operands ---------------------------------------------------------------------------------
cdef tuple operand_tuple(object operands, str what):
    if type(operands) is tuple:
        return <tuple>operands
    try:
        return tuple(operands)
    except TypeError:
        raise OperandTypeError(f"{what} must be a sequence of arrays, not {type(operands).__name__}") from None


cdef cnp.ndarray coerce_operand(object obj, int index, bint is_output):
    """A NumPy view of a buffer-protocol object or a DLPack producer (never a copy)."""
    role = "output" if is_output else "input"
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except Exception as exc:         # whatever the producer raises when it refuses export
            raise OperandTypeError(f"{role} {index}: DLPack producer could not be viewed on the CPU: "
                                   f"{type(exc).__name__}: {exc}") from None
    try:
        view = memoryview(obj)
    except ValueError as exc:            # a released memoryview, a buffer that refuses export
        raise OperandTypeError(f"{role} {index}: its buffer cannot be read: {exc}") from None
    except BufferError as exc:
        raise OperandTypeError(f"{role} {index}: its buffer cannot be read: {exc}") from None
    except TypeError:
        raise OperandTypeError(f"{role} {index} is a {type(obj).__name__}, not an array: pass a NumPy "
                               f"array, a buffer-protocol object or a DLPack producer") from None
    try:
        return np.asarray(view)
    except (TypeError, ValueError) as exc:
        raise DTypeError(f"{role} {index}: buffer format {view.format!r} is not a supported dtype") from None


cdef int64_t fill_operand(object obj, fk_storage *storage, fk_layout *layout, int expected_dtype,
                          int index, bint is_output) except -1:
    """Describe one operand as fk_storage + fk_layout (in elements); returns its element count."""
    cdef cnp.ndarray arr
    cdef int dtype
    cdef int64_t numel
    if cnp.PyArray_Check(obj):
        arr = <cnp.ndarray>obj
    else:
        arr = coerce_operand(obj, index, is_output)
    dtype = array_dtype(arr)
    if dtype >= 0 and (expected_dtype < 0 or dtype == expected_dtype) and cnp.PyArray_ISNOTSWAPPED(arr):
        numel = fk_describe_array(arr, dtype, storage, layout)
        if numel >= 0:
            return numel
    raise_operand_error(arr, dtype, expected_dtype, index, is_output)


cdef int raise_operand_error(cnp.ndarray arr, int dtype, int expected_dtype, int index,
                             bint is_output) except -1:
    """Raise the typed error for an operand fk_describe_array refused (or of the wrong dtype)."""
    role = "output" if is_output else "input"
    cdef int64_t itemsize
    if dtype < 0 or not cnp.PyArray_ISNOTSWAPPED(arr):
        raise DTypeError(f"{role} {index} has dtype {arr.dtype}, which fuel_kernel does not support")
    if expected_dtype >= 0 and dtype != expected_dtype:
        raise DTypeError(f"{role} {index} has dtype {DType(dtype).short_name} but this kernel takes "
                         f"{DType(expected_dtype).short_name}")
    if cnp.PyArray_NDIM(arr) > FK_MAX_DIMS:
        raise ShapeError(f"{role} {index} has {cnp.PyArray_NDIM(arr)} dims; at most {FK_MAX_DIMS} are supported")
    if not cnp.PyArray_ISALIGNED(arr):
        raise ShapeError(f"{role} {index} is not aligned to its dtype")
    itemsize = fk_dtype_itemsize[dtype]
    for stride in (<object>arr).strides:
        if stride % itemsize:
            raise ShapeError(f"{role} {index} has a stride of {stride} bytes, not a multiple of its "
                             f"item size {itemsize}")
    raise SystemError(f"{role} {index}: fuel_kernel could not describe this array")


cdef int check_outputs(const fk_entry *entry, const fk_storage *storage, const fk_layout *layouts,
                       const int64_t *numels, int n_in, int n_out) except -1:
    """Raise for a read-only output or one that overlaps an input (fk_check_outputs decides)."""
    cdef int output = 0, input = 0
    cdef int refusal = fk_check_outputs(entry, storage, layouts, numels, n_in, n_out, &output, &input)
    if refusal == FK_OUTPUT_READ_ONLY:
        raise ReadOnlyError(f"output {output} is read-only")
    if refusal == FK_OUTPUT_OVERLAPS:
        raise AliasError(f"output {output} overlaps input {input}; this kernel needs disjoint memory"
                         + ("" if entry.caps & FK_CAP_INPLACE else " (it does not run in place)")
                         + " unless the two are the same view")
    if refusal == FK_OUTPUTS_OVERLAP:
        raise AliasError(f"output {output} overlaps output {input}; each output needs its own memory")
    return 0


cdef tuple operand_shape(object obj, int index):
    """An input's shape as the kernel will see it: a NumPy array's own, else that of its NumPy
    view (bytes, memoryviews and DLPack-only producers, for which np.shape says ())."""
    if cnp.PyArray_Check(obj):
        return (<object>obj).shape
    if isinstance(obj, tuple):           # Kernel.cost and pick also take plain shapes
        return obj
    cdef object view = coerce_operand(obj, index, False)
    return view.shape


cdef object infer_output(object op, str what, object infer, list arguments, object params,
                         const fk_snapshot *snapshot, const fk_key *key):
    """Call an fuel_kernel.ops inference function; anything it raises that is not already typed
    (an IndexError for a missing input, NumPy's RuntimeError past 32 dims, ...) becomes the
    FuelKernelError that describes it."""
    try:
        return infer(op, arguments, params)
    except FuelKernelError:
        raise
    except IndexError:
        raise OperandCountError(arity_message(snapshot, key, len(arguments))) from None
    except (TypeError, ValueError, RuntimeError, OverflowError, KeyError, AttributeError) as exc:
        raise ShapeError(f"cannot infer the output {what} of {op!r} from {arguments}: {exc}") from None


cdef tuple allocate_outputs(const fk_snapshot *snapshot, const fk_key *key, tuple inputs, object params):
    """Every output of the key, allocated with the shapes its op's schema infers from the inputs."""
    from fuel_kernel import ops
    cdef int i, n_out = key_outputs(key)
    params_pointer(params)               # a params object of the wrong type is a ParamsError first
    shapes = []
    for i in range(len(inputs)):
        shape = operand_shape(inputs[i], i)
        if len(shape) > FK_MAX_DIMS:
            raise ShapeError(f"input {i} has {len(shape)} dims; at most {FK_MAX_DIMS} are supported")
        shapes.append(shape)
    if key.kind == FK_KEY_STATIC:
        out_shapes = infer_output(key_op(key), "shape", ops.infer_output_shapes, shapes, params, snapshot, key)
    else:
        out_shapes = (infer_output(key_op(key), "shape", ops.infer_output_shape, shapes, params, snapshot, key),)
    outputs = []
    for i in range(n_out):
        shape = out_shapes[i]
        try:
            outputs.append(np.empty(shape, dtype=DType(key.dtypes[key.ndtypes - n_out + i]).numpy))
        except MemoryError:
            raise KernelMemoryError(f"cannot allocate an output of shape {shape}") from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise ShapeError(f"cannot allocate an output of shape {shape}: {exc}") from None
    return tuple(outputs)


cdef fk_params NO_PARAMS             # zero-filled static storage: what a kernel sees for params=None


cdef const fk_params *params_pointer(object params) except NULL:
    if params is None:
        return &NO_PARAMS
    if isinstance(params, OpParams):
        return &(<OpParams>params).c
    raise ParamsError(f"params must come from fuel_kernel.params, not {type(params).__name__}")


cdef inline int call_operands(const fk_entry *entry, const fk_key *key, PyObject **operands, int n_in,
                              int n_out, object params, bint check_dtypes) except -1:
    """Marshal inputs then outputs (borrowed references), validate them against the key, call the
    kernel (without the GIL when large) and raise the matching FuelKernelError on failure."""
    cdef const fk_params *cparams = params_pointer(params)
    cdef const uint8_t *dtypes = NULL
    cdef int status
    if check_dtypes:
        dtypes = &key.dtypes[0]
    status = fk_call_arrays(entry, operands, n_in, n_out, dtypes, &DTYPE_MAP, cparams, NOGIL_MIN_ELEMENTS)
    if status == FK_CALL_GENERAL:
        status = call_operands_general(entry, dtypes, operands, n_in, n_out, cparams)
    if status != FK_OK:
        raise_status(status)
    return 0


cdef int call_operands_general(const fk_entry *entry, const uint8_t *dtypes, PyObject **operands,
                               int n_in, int n_out, const fk_params *cparams) except -1:
    """call_operands for anything fk_call_arrays leaves: other array types, and every refusal,
    which is raised here as its typed error.  Returns the kernel's status."""
    cdef fk_storage storage[FK_MAX_OPERANDS]             # inputs, then outputs
    cdef fk_layout layouts[FK_MAX_OPERANDS]
    cdef int64_t numels[FK_MAX_OPERANDS]
    cdef int i
    for i in range(n_in + n_out):
        numels[i] = fill_operand(<object>operands[i], &storage[i], &layouts[i],
                                 dtypes[i] if dtypes != NULL else -1,
                                 i if i < n_in else i - n_in, i >= n_in)
    check_outputs(entry, storage, layouts, numels, n_in, n_out)
    return fk_run_described(entry, storage, layouts, numels, n_in, n_out, cparams, NOGIL_MIN_ELEMENTS)


cdef object run_entry(const fk_snapshot *snapshot, const fk_entry *entry, const fk_key *key,
                      object inputs, object outputs, object params, bint check_dtypes):
    """Check operand counts, allocate outputs when `outputs` is None, and run; returns the tuple of
    outputs."""
    cdef PyObject *operands[FK_MAX_OPERANDS]
    cdef int n_expected = key_outputs(key)
    cdef int n_in = key.ndtypes - n_expected, n_out, i
    if len(inputs) != n_in:
        hint = "; an output goes in out= (or run()'s outputs list), not among the inputs" \
            if len(inputs) == n_in + 1 else ""
        raise OperandCountError(f"{describe_key(key)} takes {n_in} input{'s' if n_in != 1 else ''}, "
                                f"got {len(inputs)}{hint}")
    if outputs is None:
        outputs = allocate_outputs(snapshot, key, tuple(inputs), params)
    elif type(outputs) is not tuple and type(outputs) is not list:
        outputs = (outputs,)
    n_out = len(outputs)
    if n_out != n_expected:
        raise OperandCountError(f"{describe_key(key)} writes {n_expected} output{'s' if n_expected != 1 else ''}, "
                                f"got {n_out}")
    inputs = tuple(inputs)
    outputs = tuple(outputs)
    for i in range(n_in):
        operands[i] = <PyObject *>inputs[i]
    for i in range(n_out):
        operands[n_in + i] = <PyObject *>outputs[i]
    call_operands(entry, key, operands, n_in, n_out, params, check_dtypes)
    return outputs


# ---- op parameters ----------------------------------------------------------------------------
cdef class OpParams:
    """Op parameters: a Python handle on the fixed-size C union fk_params.  Build with
    fuel_kernel.params.*; read with .kind and .fields()."""

    __signature__ = inspect.Signature()     # OpParams() is the zero-filled "none" family

    def __cinit__(self):
        memset(&self.c, 0, sizeof(fk_params))

    @property
    def kind(self):
        return PARAMS_KIND_NAMES[self.c.kind]

    def fields(self):
        """The meaningful fields of this params family as a dict (the constructor's keywords)."""
        return _params_fields(&self.c)

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.fields().items())
        return f"OpParams.{self.kind}({inner})"

    def __eq__(self, other):
        if not isinstance(other, OpParams):
            return NotImplemented
        return self.kind == other.kind and self.fields() == other.fields()

    def __hash__(self):
        return hash((self.kind, tuple(sorted((k, repr(v)) for k, v in self.fields().items()))))


# OpParams.kind: the family names of fuel_kernel/spec.py (PARAMS), indexed by fk_params_kind
PARAMS_KIND_NAMES = tuple(family.name for family in spec.PARAMS)


cdef object _int(object value, str what):
    """An integer params field: refused (ParamsError) when not integral, never truncated."""
    return as_integer(value, what)


cdef double _float(object value, str what) except? -1.0:
    """A floating params field: any real number (NumPy scalars included); anything else is a
    ParamsError rather than float()'s TypeError / ValueError."""
    if isinstance(value, (str, bytes, bytearray)):
        raise ParamsError(f"{what} must be a real number, not {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ParamsError(f"{what} must be a real number, not {type(value).__name__} {value!r}") from None


cdef tuple _ints(object values, str what):
    if isinstance(values, (str, bytes)):
        raise ParamsError(f"{what} must be a sequence of integers, not {values!r}")
    try:
        values = tuple(values)
    except TypeError:
        raise ParamsError(f"{what} must be a sequence of integers, not {type(values).__name__}") from None
    return tuple([_int(v, what) for v in values])


cdef tuple _pair(object value, str what):
    """A conv2d field: one integer or a pair of integers."""
    if isinstance(value, (list, tuple)):
        pair = _ints(value, what)
    else:
        v = _int(value, what)
        pair = (v, v)
    if len(pair) != 2:
        raise ParamsError(f"{what} is one int or a pair, not {value!r}")
    return pair


cdef tuple _dims(object dims, str what):
    """A params dims field: distinct dims in [-FK_MAX_DIMS, FK_MAX_DIMS), at most FK_MAX_DIMS."""
    dims = _ints(dims, what)
    if len(dims) > FK_MAX_DIMS:
        raise ParamsError(f"{what} lists {len(dims)} dims; at most {FK_MAX_DIMS}")
    if len(set(dims)) != len(dims):
        raise ParamsError(f"{what} lists a dim twice: {dims}")
    for d in dims:
        if not -FK_MAX_DIMS <= d < FK_MAX_DIMS:
            raise ParamsError(f"{what}: dim {d} is out of range")
    return dims


cdef object _choice(object value, str what, dict choices):
    """A params field naming one of `choices` (name -> C constant): the constant."""
    if not isinstance(value, str) or value not in choices:
        raise ParamsError(f"{what} is one of {sorted(choices)}, not {value!r}")
    return choices[value]


cdef tuple _matmul_m(object m_compute, object capacity):
    """MATMUL's m_compute, a MatmulM (None: every row), as (kind, value); MatmulM.rows(n) may not
    exceed the row capacity m."""
    if m_compute is None:
        m_compute = MatmulM.all()
    if not isinstance(m_compute, MatmulM):
        raise ParamsError(f"matmul m_compute is a MatmulM (MatmulM.all(), .rows(n), "
                          f".deferred(i)) or None, not {m_compute!r}")
    kind = _int(m_compute.kind, "MatmulM kind")
    value = _int(m_compute.value, "MatmulM value")
    if kind not in (MatmulM.ALL_KIND, MatmulM.ROWS_KIND, MatmulM.DEFERRED_KIND) or value < 0:
        raise ParamsError(f"{m_compute!r} is not a valid MatmulM")
    if kind == MatmulM.ROWS_KIND and value > capacity:
        raise ParamsError(f"MatmulM.rows({value}) exceeds the row capacity m={capacity}")
    return kind, value


# _fill_<family> per params family, _build_params and _params_fields: written by the build from
# fuel_kernel/spec.py (PARAMS, PARAMS_CONSTRUCTORS) with the converters above.
include "_params_generated.pxi"


def _make_params(str family, **fields):
    """Build an OpParams of one family; used by fuel_kernel.params (the public constructors).

    Every rejected argument is a ParamsError, including values that do not fit the C field
    (OverflowError), are not numbers at all, or are not integral where the field is an integer."""
    try:
        return _build_params(family, fields)
    except FuelKernelError:
        raise
    except (OverflowError, TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise ParamsError(f"invalid {family} params: {exc}") from None


# ---- precision and cost ------------------------------------------------------------------------
cdef object precision_record(const fk_precision *p):
    if not p.set:
        return None
    return PrecisionGuarantee(bool(p.bit_stable), p.max_ulp, p.max_rel, p.max_abs,
                              p.notes.decode("utf-8", "replace"))


cdef int precision_fill(object precision, fk_precision *out) except -1:
    memset(out, 0, sizeof(fk_precision))
    if precision is None:
        return 0
    if not isinstance(precision, PrecisionGuarantee):
        raise TypeError("precision must be a PrecisionGuarantee")
    out.set = 1
    out.bit_stable = precision.bit_stable
    out.max_ulp = precision.max_ulp
    out.max_rel = precision.max_rel
    out.max_abs = precision.max_abs
    notes = precision.notes.encode()[:FK_NOTES_LEN - 1]
    strncpy(out.notes, notes, FK_NOTES_LEN - 1)
    return 0


cdef fk_cost default_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                          const fk_params *params) noexcept nogil:
    """The family default that fill_unset_cost installs: every operand read or written once, one
    flop per output element, and 2*k flops per output element for matmul."""
    cdef fk_cost cost
    cdef int i
    cost.flops = 0
    cost.bytes_moved = 0
    cost.overhead_ns = 50.0
    for i in range(n_layouts):
        cost.bytes_moved += <double>fk_layout_numel(&layouts[i]) * fk_dtype_itemsize[dtypes.v[i]]
    if n_layouts > 0:
        cost.flops = <double>fk_layout_numel(&layouts[n_layouts - 1])
        if params.kind == FK_PARAMS_MATMUL:
            cost.flops *= 2.0 * params.u.matmul.k
    return cost


DEFAULT_COST = PyCapsule_New(<void *>default_cost, b"fuel_kernel.cost", NULL)


cdef void fill_cost_editor(const fk_key *key, fk_entry *entry, void *context) noexcept nogil:
    # a runtime fused entry's cost comes from its decomposition, not an op-family default
    if entry.cost == fk_unknown_cost and key.kind != FK_KEY_RUNTIME_FUSED:
        entry.cost = <fk_cost_fn>context


cdef void fill_precision_editor(const fk_key *key, fk_entry *entry, void *context) noexcept nogil:
    if not entry.precision.set:
        entry.precision = (<fk_precision *>context)[0]


cdef fk_kernel_fn kernel_from_capsule(object kernel) except NULL:
    if not PyCapsule_IsValid(kernel, FK_KERNEL_CAPSULE_NAME):
        raise RegistrationError(f"kernel must be a PyCapsule named {FK_KERNEL_CAPSULE_NAME.decode()!r} "
                                f"holding an fk_kernel_fn, not {kernel!r}")
    return <fk_kernel_fn>PyCapsule_GetPointer(kernel, FK_KERNEL_CAPSULE_NAME)


cdef uint64_t stable_revision(bytes source, const fk_key *key, object revision) except? 0:
    """The revision of a kernel registered from Python: an int revision as given; otherwise
    (None, or a str / bytes tag) 8 bytes of BLAKE2b over the source tag, the key's op, dtypes and
    backend, and the tag.  Unlike hash(), which Python salts per process, it is the same on every
    run, so the route tie-break and the on-disk measured-route cache can rely on it."""
    cdef int i
    if revision is not None and not isinstance(revision, (str, bytes)):
        value = as_integer(revision, "revision", RegistrationError)
        if not 0 <= value <= 0xFFFFFFFFFFFFFFFF:
            raise RegistrationError(f"revision must fit in 64 unsigned bits, not {revision}")
        return value
    tag = revision.encode() if isinstance(revision, str) else (revision or b"")
    dtypes = bytes([key.dtypes[i] for i in range(key.ndtypes)])
    name = backend_name(key.backend).encode()
    payload = b"\0".join([b"fuel_kernel.revision.1", source, str(key.kind).encode(),
                          str(key.id).encode(), dtypes, name, tag])
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little")


def kernel_address(kernel):
    """The fk_kernel_fn address in a 'fuel_kernel.kernel' capsule (compare with Kernel.kernel_address)."""
    return <uintptr_t>kernel_from_capsule(kernel)


cdef fk_cost_fn cost_from_capsule(object cost) except? NULL:
    if cost is None:
        return NULL
    if not PyCapsule_IsValid(cost, b"fuel_kernel.cost"):
        raise RegistrationError(f"cost must be a PyCapsule named 'fuel_kernel.cost' holding an "
                                f"fk_cost_fn, or None, not {cost!r}")
    return <fk_cost_fn>PyCapsule_GetPointer(cost, b"fuel_kernel.cost")


# ---- Kernel handles ----------------------------------------------------------------------------
cdef extern from "Python.h":
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)

cdef extern from "vectorcall.h":
    int fk_enable_vectorcall(object type, Py_ssize_t offset) except -1
    int fk_call_keywords(PyObject *kwnames, PyObject **kwvalues, PyObject *out_name,
                         PyObject *params_name, PyObject **out, PyObject **params) except -1


cdef object OUT_NAME = sys.intern("out")
cdef object PARAMS_NAME = sys.intern("params")


cdef object kernel_vectorcall(object self, PyObject **args, size_t nargsf, PyObject *kwnames):
    """Kernel.__call__ through the vectorcall protocol: no argument tuple or keyword dict is built,
    which is most of the cost of a call on small arrays.  Anything unusual (no out=, a sequence
    of outputs, an op with several, a wrong count) takes the general path, which also words the
    errors."""
    cdef const fk_key *key = &(<Kernel>self).key
    cdef const fk_entry *entry = (<Kernel>self).entry
    cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), i
    cdef PyObject *out = NULL
    cdef PyObject *params = NULL
    cdef PyObject **operands = args          # inputs then out, as laid out when out= comes first
    cdef PyObject *gathered[FK_MAX_OPERANDS]
    if kwnames != NULL:
        fk_call_keywords(kwnames, args + nargs, <PyObject *>OUT_NAME, <PyObject *>PARAMS_NAME, &out, &params)
        if out == <PyObject *>None:      # out=None allocates, as Kernel.__call__ does
            out = NULL
    if out == NULL or nargs != key.ndtypes - 1 or (<Kernel>self).n_out != 1 or type(<object>out) is tuple \
            or type(<object>out) is list:
        inputs = tuple([<object>args[i] for i in range(nargs)])
        return call_result(key, run_entry((<Kernel>self).snapshot, entry, key, inputs,
                                          <object>out if out != NULL else None,
                                          <object>params if params != NULL else None, True))
    if out != args[nargs]:
        for i in range(nargs):
            gathered[i] = args[i]
        gathered[nargs] = out
        operands = gathered
    call_operands(entry, key, operands, <int>nargs, 1, <object>params if params != NULL else None, True)
    return <object>out


cdef inline object call_result(const fk_key *key, tuple outputs):
    """What k(...) and fk.dispatch return: the output of a one-output op, else the tuple."""
    return outputs[0] if key_outputs(key) == 1 else outputs


# Kernel and BindingTable wrap C pointers that only this module can fill in: like NumPy's internal
# types they cannot be created from Python (Kernel(), Kernel.__new__(Kernel), BindingTable() are a
# TypeError), since an empty one would dereference NULL on first use.  Internal creation passes
# this private token to __cinit__.
cdef object _INTERNAL = object()


cdef int _refuse_construction(tuple args, dict kwargs, str name, str how) except -1:
    """TypeError unless __cinit__ got exactly the private token."""
    if len(args) != 1 or kwargs or args[0] is not _INTERNAL:
        raise TypeError(f"cannot create 'fuel_kernel.{name}' instances; {how}")
    return 0


@cython.final
cdef class Kernel:
    """One registered kernel at one key, pre-resolved: call it as k(*inputs, out=...).

    A Kernel keeps the snapshot it came from alive, so it stays valid while the table changes."""

    def __cinit__(self, *args, **kwargs):
        self.snapshot = NULL
        self.entry = NULL
        _refuse_construction(args, kwargs, "Kernel", "get one from fk.bindings().lookup(...)")
        self.vectorcall = <void *>kernel_vectorcall

    def __dealloc__(self):
        fk_release(self.snapshot)

    @staticmethod
    cdef Kernel wrap(const fk_snapshot *snapshot, const fk_entry *entry, const fk_key *key):
        cdef Kernel k = Kernel.__new__(Kernel, _INTERNAL)
        fk_retain(snapshot)
        k.snapshot = snapshot
        k.entry = entry
        k.key = key[0]
        k.n_out = key_outputs(key)
        return k

    def __call__(self, *inputs, out=None, params=None):
        """Run on `inputs`, writing `out` (allocated when omitted); returns the output, or the
        tuple of outputs of an op with several (pass them as out=(a, b))."""
        return call_result(&self.key, run_entry(self.snapshot, self.entry, &self.key, inputs, out, params, True))

    def run(self, inputs, outputs, params=None):
        """The explicit form: k.run([a, b], [c], params).  Returns the tuple of outputs."""
        return run_entry(self.snapshot, self.entry, &self.key, operand_tuple(inputs, "inputs"),
                         operand_tuple(outputs, "outputs") if outputs is not None else None, params, True)

    @property
    def op(self):
        return key_op(&self.key)

    @property
    def dtypes(self):
        return key_dtypes(&self.key)

    @property
    def backend(self):
        return self.key.backend

    @property
    def n_inputs(self):
        return self.key.ndtypes - key_outputs(&self.key)

    @property
    def n_outputs(self):
        return key_outputs(&self.key)

    @property
    def source(self):
        return self.entry.source.decode("utf-8", "replace")

    @property
    def caps(self):
        return KernelCaps(self.entry.caps)

    @property
    def precision(self):
        return precision_record(&self.entry.precision)

    @property
    def revision(self):
        return self.entry.revision

    @property
    def has_cost(self):
        return self.entry.cost != fk_unknown_cost

    @property
    def identity(self):
        """A stable identity for deterministic tie-breaks: (source, revision, key)."""
        return (self.source, self.entry.revision, describe_key(&self.key))

    def cost(self, *operands, params=None):
        """The entry's CostEstimate for these operands (inputs then outputs; arrays or shapes)."""
        cdef fk_layout layouts[FK_MAX_OPERANDS]
        cdef fk_dtypes dts
        cdef const fk_params *cparams = params_pointer(params)
        cdef fk_cost_fn cost_fn = self.entry.cost
        cdef int i, d
        if len(operands) != self.key.ndtypes:
            raise OperandCountError(f"cost() takes {self.key.ndtypes} operands (inputs then outputs)")
        dts.n = self.key.ndtypes
        for i in range(self.key.ndtypes):
            dts.v[i] = self.key.dtypes[i]
            shape = cost_shape(operands[i], i)
            memset(&layouts[i], 0, sizeof(fk_layout))
            layouts[i].ndim = len(shape)
            stride = 1
            for d in reversed(range(len(shape))):
                layouts[i].shape[d] = shape[d]
                layouts[i].strides[d] = stride
                stride *= shape[d]
                if stride > INT64_LIMIT:
                    raise ShapeError(f"operand {i} of shape {shape} has more than 2**63-1 elements")
        if cost_fn == fk_unknown_cost:
            # No claim: priced by the op family's default (what fill_unset_cost installs), never
            # at 0 ns, which would win every route choice.  has_cost stays False so the picker
            # can rank it after priced alternatives.
            cost_fn = default_cost
        c = cost_fn(layouts, self.key.ndtypes, &dts, cparams)
        return CostEstimate(c.flops, c.bytes_moved, c.overhead_ns)

    @property
    def kernel_address(self):
        """The kernel function's address (fk_entry.kernel): equal for two handles of the same function."""
        return <uintptr_t>self.entry.kernel

    def capsule(self):
        """The kernel function as a 'fuel_kernel.kernel' PyCapsule, e.g. to register it elsewhere."""
        return PyCapsule_New(<void *>self.entry.kernel, FK_KERNEL_CAPSULE_NAME, NULL)

    def __repr__(self):
        return f"<Kernel {describe_key(&self.key)} source={self.source!r} caps={self.caps!r}>"


cdef int _enable_kernel_vectorcall() except -1:
    cdef Kernel probe = Kernel.__new__(Kernel, _INTERNAL)
    return fk_enable_vectorcall(Kernel, <Py_ssize_t>(<char *>&probe.vectorcall - <char *><PyObject *>probe))


_enable_kernel_vectorcall()


INT64_LIMIT = 2 ** 63 - 1


cdef tuple cost_shape(object operand, int index):
    """A cost() operand (a shape tuple or an array-like) as a tuple of non-negative int64 extents."""
    if isinstance(operand, tuple):
        shape = operand
    else:
        try:
            shape = operand_shape(operand, index)
        except FuelKernelError:
            shape = np.shape(operand)
    if len(shape) > FK_MAX_DIMS:
        raise ShapeError(f"operand {index} has {len(shape)} dims; at most {FK_MAX_DIMS}")
    extents = tuple([as_integer(e, f"operand {index} extent", ShapeError) for e in shape])
    for e in extents:
        if not 0 <= e <= INT64_LIMIT:
            raise ShapeError(f"operand {index} extent {e} is out of range [0, 2**63)")
    return extents


# ---- snapshots -----------------------------------------------------------------------------------
@cython.final
cdef class BindingTable:
    """An immutable snapshot of the binding table (fk.bindings()).  Thread-safe to read."""

    def __cinit__(self, *args, **kwargs):
        self.snapshot = NULL
        self.kernel_cache = NULL
        _refuse_construction(args, kwargs, "BindingTable", "get the current snapshot from fk.bindings()")

    def __dealloc__(self):
        cdef int64_t i
        if self.kernel_cache != NULL:
            for i in range(self.n_cached):
                Py_XDECREF(self.kernel_cache[i])
            free(self.kernel_cache)
        fk_release(self.snapshot)

    @staticmethod
    cdef BindingTable acquire():
        cdef BindingTable t = BindingTable.__new__(BindingTable, _INTERNAL)
        t.snapshot = fk_acquire()
        t.n_cached = fk_snapshot_entry_count(t.snapshot)
        t.kernel_cache = <PyObject **>calloc(t.n_cached if t.n_cached else 1, sizeof(PyObject *))
        if t.kernel_cache == NULL:
            raise MemoryError()
        return t

    cdef Kernel kernel_for(self, const fk_entry *entry, const fk_key *key):
        cdef int64_t index = entry - fk_snapshot_entries(self.snapshot)
        cdef Kernel k
        if self.kernel_cache[index] == NULL:
            k = Kernel.wrap(self.snapshot, entry, key)
            # allocating k can run the garbage collector, whose finalizers may let another thread
            # fill this slot first: storing over it would leak that Kernel and pin its snapshot
            if self.kernel_cache[index] == NULL:
                Py_INCREF(k)
                self.kernel_cache[index] = <PyObject *>k
        return <Kernel>self.kernel_cache[index]

    @property
    def generation(self):
        return fk_snapshot_generation(self.snapshot)

    def lookup(self, op, dtypes, backend=Backend.CPU):
        """The first usable Kernel at (op, dtypes, backend); NoKernelError on a miss."""
        cdef fk_key key
        cdef const fk_entry *entry
        parse_key(op, dtypes, backend, &key)
        entry = fk_lookup_with_caps(self.snapshot, &key, 0)
        if entry == NULL:
            raise NoKernelError(miss_message(self.snapshot, &key))
        return self.kernel_for(entry, &key)

    def lookup_with_caps(self, op, dtypes, backend, caps):
        """The first Kernel at the key whose caps include `caps` (never a requires_broadcast one)."""
        cdef fk_key key
        cdef const fk_entry *entry
        cdef uint32_t wanted = parse_caps(caps)
        parse_key(op, dtypes, backend, &key)
        entry = fk_lookup_with_caps(self.snapshot, &key, wanted)
        if entry == NULL:
            if fk_lookup(self.snapshot, &key).n_entries:
                raise NoKernelError(f"no kernel with caps {KernelCaps(wanted)!r} at {describe_key(&key)}")
            raise NoKernelError(miss_message(self.snapshot, &key))
        return self.kernel_for(entry, &key)

    def alternatives(self, op, dtypes, backend=Backend.CPU):
        """Every Kernel registered at the key, in registration order (empty list on a miss)."""
        cdef fk_key key
        cdef fk_lookup_result found
        parse_key(op, dtypes, backend, &key)
        found = fk_lookup(self.snapshot, &key)
        return [self.kernel_for(&found.entries[i], &key) for i in range(found.n_entries)]

    def lookup_cost(self, op, dtypes, backend, *operands, params=None):
        """The cost estimate of the kernel lookup() picks, for these operands and params."""
        return self.lookup(op, dtypes, backend).cost(*operands, params=params)

    def lookup_precision(self, op, dtypes, backend=Backend.CPU):
        """The precision claim of the kernel lookup() picks (NoKernelError on a miss)."""
        return self.lookup(op, dtypes, backend).precision

    def supports(self, op, dtypes, backend=Backend.CPU):
        """Whether lookup() would find a kernel at the key (False for a key that cannot be parsed)."""
        cdef fk_key key
        try:
            parse_key(op, dtypes, backend, &key)
        except (ValueError, TypeError):
            return False
        return fk_lookup_with_caps(self.snapshot, &key, 0) != NULL

    def unique_runtime_fused(self, fused_id, backend=Backend.CPU):
        """NotFound, Unique(dtypes, kernel) or Ambiguous(candidates) for a runtime fused op id."""
        cdef fk_key key
        cdef fk_lookup_result found
        cdef int64_t k
        cdef int b = parse_backend(backend)
        cdef long fid = parse_fused_id(fused_id, UnknownOpError)
        candidates = []
        for k in range(fk_snapshot_key_count(self.snapshot)):
            found = fk_snapshot_key_at(self.snapshot, k, &key)
            if key.kind == FK_KEY_RUNTIME_FUSED and key.id == fid and key.backend == b:
                for i in range(found.n_entries):
                    candidates.append((key_dtypes(&key), self.kernel_for(&found.entries[i], &key)))
        if not candidates:
            return NotFound(fid, b)
        if len(candidates) == 1:
            return Unique(*candidates[0])
        return Ambiguous(tuple(candidates))

    def coverage(self):
        """One CoverageBinding(backend, op, dtypes) per key, in registration order."""
        cdef fk_key key
        cdef int64_t k
        rows = []
        for k in range(fk_snapshot_key_count(self.snapshot)):
            fk_snapshot_key_at(self.snapshot, k, &key)
            rows.append(CoverageBinding(key.backend, key_op(&key), key_dtypes(&key)))
        return rows

    def key_count(self):
        """The number of distinct keys (len() counts every alternative)."""
        return fk_snapshot_key_count(self.snapshot)

    def pick(self, op, dtypes, backend, operands, params=None, *, measure=False, max_ulp=None):
        """The Kernel the route picker would choose at this key for these operands (inputs then
        outputs, as arrays or shapes): the same choice Graph.compile makes for a node."""
        from fuel_kernel import route
        alternatives = self.alternatives(op, dtypes, backend)
        if not alternatives:
            self.lookup(op, dtypes, backend)          # raises NoKernelError with the nearest keys
        shapes = [tuple(o) if isinstance(o, tuple) else np.shape(o) for o in operands]
        n_in = len(shapes) - alternatives[0].n_outputs
        broadcast = any(shape != shapes[n_in] for shape in shapes[:n_in]) or any(
            isinstance(o, np.ndarray) and 0 in o.strides and o.size > 1 for o in operands[:n_in])
        return route.pick(alternatives, shapes, params, broadcast_inputs=broadcast, measure=measure,
                          max_ulp=max_ulp, describe=describe_key_dict_from(op, dtypes, backend)).kernel

    def __len__(self):
        return fk_snapshot_entry_count(self.snapshot)

    def __iter__(self):
        """Every registered Kernel, grouped by key in registration order."""
        cdef fk_key key
        cdef fk_lookup_result found
        cdef int64_t k
        for k in range(fk_snapshot_key_count(self.snapshot)):
            found = fk_snapshot_key_at(self.snapshot, k, &key)
            for i in range(found.n_entries):
                yield self.kernel_for(&found.entries[i], &key)

    def __repr__(self):
        return (f"<BindingTable generation={self.generation} keys={self.key_count()} "
                f"entries={len(self)}>")


cdef str miss_message(const fk_snapshot *snapshot, const fk_key *key):
    """A short NoKernelError message: the key, the nearest keys, and a cast that would resolve it.

    Keys are kept as C structs and referred to by index: a Python dict made from an fk_key turns
    its uint8 dtype codes into bytes cut at the first 0 (BOOL), which lost dtypes."""
    cdef fk_key other
    cdef fk_key best
    cdef fk_key cast_key
    cdef fk_dtypes cast_dtypes
    cdef int64_t k
    cdef int i, differ
    same_backend = []
    other_backend = []
    for k in range(fk_snapshot_key_count(snapshot)):
        fk_snapshot_key_at(snapshot, k, &other)
        if other.kind != key.kind or other.id != key.id:
            continue
        if other.backend == key.backend and other.ndtypes == key.ndtypes:
            differ = 0
            for i in range(key.ndtypes):
                differ += other.dtypes[i] != key.dtypes[i]
            same_backend.append((differ, k))
        elif other.backend != key.backend and other.ndtypes == key.ndtypes and \
                memcmp(other.dtypes, key.dtypes, key.ndtypes) == 0:
            other_backend.append(other.backend)
    lines = [f"no kernel for {describe_key(key)}"]
    same_backend.sort()
    if same_backend:
        nearest = []
        for _, k in same_backend[:3]:
            fk_snapshot_key_at(snapshot, k, &other)
            nearest.append(describe_key(&other))
        lines.append("  registered with other dtypes: " + "; ".join(nearest)
                     + (" ..." if len(same_backend) > 3 else ""))
        fk_snapshot_key_at(snapshot, same_backend[0][1], &best)
        casts = []
        for i in range(key.ndtypes - key_outputs(key)):
            if best.dtypes[i] != key.dtypes[i]:
                cast_dtypes.n = 2
                cast_dtypes.v[0] = key.dtypes[i]
                cast_dtypes.v[1] = best.dtypes[i]
                cast_key = fk_key_make(FK_KEY_STATIC, FK_OP_CAST, &cast_dtypes, key.backend)
                available = fk_lookup(snapshot, &cast_key).n_entries > 0
                casts.append(f"cast input {i} {DType(key.dtypes[i]).short_name}->"
                             f"{DType(best.dtypes[i]).short_name}" + ("" if available else " (no CAST kernel for that either)"))
        if casts and all(best.dtypes[i] == key.dtypes[i] for i in range(key.ndtypes - key_outputs(key), key.ndtypes)):
            lines.append("  to resolve: " + ", ".join(casts))
    if other_backend:
        lines.append("  same dtypes on other backends: " + ", ".join(
            backend_name(b) for b in other_backend[:4]))
    if not same_backend and not other_backend:
        counts = registered_input_counts(snapshot, key)
        if counts:
            lines.append(f"  {key_name(key)} is registered with {describe_counts(counts)}, "
                         f"not {key.ndtypes - key_outputs(key)}")
            if key.ndtypes - key_outputs(key) - 1 in counts:
                lines.append("  if the last input is meant as the output, pass it as outputs= "
                             "(dispatch) or out= (a Kernel call), not among the inputs")
        else:
            lines.append("  no kernel for this op is registered on any backend")
    return "\n".join(lines)


cdef list registered_input_counts(const fk_snapshot *snapshot, const fk_key *key):
    """The input counts this op is registered with on any backend, other than the key's own."""
    cdef fk_key other
    cdef int64_t k
    counts = set()
    if snapshot == NULL:
        return []
    for k in range(fk_snapshot_key_count(snapshot)):
        fk_snapshot_key_at(snapshot, k, &other)
        if other.kind == key.kind and other.id == key.id and other.ndtypes != key.ndtypes:
            counts.add(other.ndtypes - key_outputs(&other))
    return sorted(counts)


cdef str describe_counts(list counts):
    words = [str(c) for c in counts]
    text = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
    return text + (" input" if counts == [1] else " inputs")


cdef str key_name(const fk_key *key):
    return OpKind(key.id).short_name if key.kind == FK_KEY_STATIC else f"fused#{key.id}"


cdef str arity_message(const fk_snapshot *snapshot, const fk_key *key, Py_ssize_t n_in):
    """An OperandCountError message for a call with n_in inputs to an op that takes others."""
    counts = registered_input_counts(snapshot, key) if snapshot != NULL else []
    counts = [c for c in counts if c != n_in]
    if counts:
        return f"{key_name(key)} takes {describe_counts(counts)}, got {n_in}"
    return f"{key_name(key)} does not take {n_in} input{'s' if n_in != 1 else ''}"


cdef str describe_key_dict_from(object op, object dtypes, object backend):
    cdef fk_key key
    parse_key(op, dtypes, backend, &key)
    return describe_key(&key)


def call_kernel_capsule(capsule, dtypes, inputs, outputs, params=None):
    """Run a kernel capsule that is not (yet) registered, with the same operand validation as a
    Kernel call.  Graph.register_runtime_fused uses it to check a fused kernel before publishing."""
    cdef fk_entry entry
    cdef fk_key key
    cdef fk_dtypes codes
    memset(&entry, 0, sizeof(fk_entry))
    entry.kernel = kernel_from_capsule(capsule)
    entry.cost = fk_unknown_cost
    parse_dtypes(dtypes, &codes)
    key = fk_key_make(FK_KEY_RUNTIME_FUSED, 0, &codes, FK_BACKEND_CPU)
    return run_entry(NULL, &entry, &key, operand_tuple(inputs, "inputs"),
                     operand_tuple(outputs, "outputs"), params, True)


def bindings():
    """The current binding-table snapshot (immutable; later registrations make a new one)."""
    return BindingTable.acquire()


# ---- transactions ----------------------------------------------------------------------------------
cdef class Transaction:
    """A batch of registrations published as one snapshot (use via fk.edit_bindings())."""

    __signature__ = inspect.Signature()     # Transaction() opens an empty batch

    def __cinit__(self):
        self.txn = fk_txn_begin()
        if self.txn == NULL:
            raise MemoryError()
        self.precision_fills = []

    def __dealloc__(self):
        if self.txn != NULL:
            fk_txn_abort(self.txn)

    cdef int _check_open(self) except -1:
        if self.txn == NULL:
            raise RegistrationError("this transaction is already committed or aborted")
        return 0

    def register(self, op, dtypes, backend, kernel, *, caps=KernelCaps.NONE, precision=None,
                 cost=None, source="python", revision=None):
        """Register `kernel` (a 'fuel_kernel.kernel' capsule) as one more alternative at the key."""
        cdef fk_key key
        cdef fk_entry entry
        self._check_open()
        memset(&entry, 0, sizeof(fk_entry))
        try:
            parse_key(op, dtypes, backend, &key)
            entry.kernel = kernel_from_capsule(kernel)
            entry.caps = int(caps)
            precision_fill(precision, &entry.precision)
            entry.cost = cost_from_capsule(cost)
            encoded = str(source).encode()
            if not 0 < len(encoded) < FK_SOURCE_LEN:
                raise RegistrationError(f"source tag must be 1 to {FK_SOURCE_LEN - 1} bytes, not {source!r}")
            strncpy(entry.source, encoded, FK_SOURCE_LEN - 1)
            entry.revision = stable_revision(encoded, &key, revision)
        except FuelKernelError:
            fk_txn_poison(self.txn)      # "on any error nothing is published"
            raise
        except (OverflowError, TypeError, ValueError) as exc:
            fk_txn_poison(self.txn)
            raise RegistrationError(f"invalid registration of {op!r}: {exc}") from None
        except BaseException:
            fk_txn_poison(self.txn)
            raise
        if fk_txn_register(self.txn, &key, &entry) != FK_OK:
            raise_status(fk_error_status())

    def register_manifest(self, manifest, backend=Backend.CPU):
        """Register every row of a kernel module's manifest capsule ('fuel_kernel.manifest')."""
        cdef ManifestView rows
        self._check_open()
        if not isinstance(manifest, ManifestView):
            fk_txn_poison(self.txn)
            raise RegistrationError("manifest must come from a kernel module's manifest() function")
        rows = <ManifestView>manifest
        if fk_txn_register_manifest(self.txn, parse_backend(backend), rows.rows, rows.n_rows) != FK_OK:
            raise_status(fk_error_status())

    def drop_runtime_fused(self, fused_id, backend=Backend.CPU):
        """Remove every kernel of runtime fused op `fused_id` on `backend` at commit."""
        cdef long fid
        cdef int b
        self._check_open()
        try:
            fid = parse_fused_id(fused_id, RegistrationError)
            b = parse_backend(backend)
        except BaseException:
            fk_txn_poison(self.txn)
            raise
        if fk_txn_drop_runtime_fused(self.txn, fid, b) != FK_OK:
            raise_status(fk_error_status())

    def fill_unset_cost(self, backend=Backend.CPU, cost=None):
        """At commit, give every entry of `backend` without a cost claim the cost function `cost`
        (a 'fuel_kernel.cost' capsule; default: the op-family default estimate)."""
        cdef fk_cost_fn fn
        cdef int b
        self._check_open()
        try:
            fn = cost_from_capsule(cost if cost is not None else DEFAULT_COST)
            b = parse_backend(backend)
        except BaseException:
            fk_txn_poison(self.txn)
            raise
        if fk_txn_edit_entries(self.txn, b, fill_cost_editor, <void *>fn) != FK_OK:
            raise_status(fk_error_status())

    def fill_unset_precision(self, backend, precision):
        """At commit, give every entry of `backend` without a precision claim `precision`."""
        cdef PrecisionHolder holder = PrecisionHolder()
        cdef int b
        self._check_open()
        try:
            precision_fill(precision, &holder.c)
            b = parse_backend(backend)
        except FuelKernelError:
            fk_txn_poison(self.txn)
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            fk_txn_poison(self.txn)
            raise RegistrationError(f"invalid fill_unset_precision claim: {exc}") from None
        self.precision_fills.append(holder)          # lives until the transaction ends
        if fk_txn_edit_entries(self.txn, b, fill_precision_editor, &holder.c) != FK_OK:
            raise_status(fk_error_status())

    def __len__(self):
        return fk_txn_size(self.txn) if self.txn != NULL else 0

    def __repr__(self):
        if self.txn == NULL:
            return "<Transaction closed: committed or aborted>"
        return f"<Transaction open: {len(self)} registrations>"

    def commit(self):
        """Publish everything registered so far as one new snapshot, or nothing on an error."""
        cdef int status
        cdef fk_txn *txn
        self._check_open()
        txn = self.txn
        self.txn = NULL
        with nogil:
            status = fk_txn_commit(txn)
        self.precision_fills = []
        if status != FK_OK:
            raise_status(status)

    def abort(self):
        """Discard everything registered so far; the transaction is closed."""
        if self.txn != NULL:
            fk_txn_abort(self.txn)
            self.txn = NULL
        self.precision_fills = []

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.txn == NULL:             # committed or aborted explicitly inside the block
            return False
        if exc_type is not None:
            self.abort()
            return False
        self.commit()
        return False


cdef class PrecisionHolder:
    """Keeps a fill_unset_precision claim alive until its transaction commits."""
    cdef fk_precision c


cdef class ManifestView:
    """A kernel module's manifest: a static array of fk_manifest_row (see fuel_kernel.cpu)."""

    @staticmethod
    cdef ManifestView wrap(const fk_manifest_row *rows, int n_rows, object owner):
        cdef ManifestView view = ManifestView.__new__(ManifestView)
        view.rows = rows
        view.n_rows = n_rows
        view.owner = owner
        return view

    def __len__(self):
        return self.n_rows


def manifest_from_capsule(capsule, int n_rows, owner=None):
    """Wrap a 'fuel_kernel.manifest' capsule pointing at n_rows fk_manifest_row."""
    if not PyCapsule_IsValid(capsule, b"fuel_kernel.manifest"):
        raise RegistrationError("expected a 'fuel_kernel.manifest' capsule")
    return ManifestView.wrap(<const fk_manifest_row *>PyCapsule_GetPointer(capsule, b"fuel_kernel.manifest"),
                             n_rows, owner if owner is not None else capsule)


def edit_bindings():
    """A Transaction: `with fk.edit_bindings() as tx: tx.register(...)` publishes once on exit."""
    return Transaction()


def new_runtime_fused_id():
    """A fresh id for a runtime fused op (BindingKey.runtime_fused(id))."""
    return fk_new_runtime_fused_id()


# ---- fk.dispatch ----------------------------------------------------------------------------------
# The resolution cache is the snapshot itself: a lookup in it is one hash probe, so dispatch keeps
# the current snapshot and re-acquires only when the published generation changes.
cdef const fk_snapshot *dispatch_snapshot = NULL
cdef uint64_t dispatch_generation = <uint64_t>-1
dispatch_lock = threading.Lock()


cdef int operand_dtype(object obj, int index, bint is_output) except -2:
    """The fk_dtype of a dispatch operand: an array's own, else that of its NumPy view."""
    cdef int code
    cdef cnp.ndarray arr
    if cnp.PyArray_Check(obj):
        arr = <cnp.ndarray>obj
    else:
        arr = coerce_operand(obj, index, is_output)
    code = array_dtype(arr)
    if code < 0 or not cnp.PyArray_ISNOTSWAPPED(arr):
        raise DTypeError(f"{'output' if is_output else 'input'} {index} has dtype {arr.dtype}, "
                         f"which fuel_kernel does not support")
    return code


def dispatch(op, inputs, outputs=None, params=None, backend=Backend.CPU):
    """Run op on inputs, writing `outputs` (or allocating them), with the first usable kernel the
    table holds for the operands' dtypes; returns the output, or the tuple of outputs of an op
    with several.  Without outputs, their dtypes and shapes follow the op's schema
    (fuel_kernel.ops)."""
    global dispatch_snapshot, dispatch_generation
    cdef fk_dtypes dts
    cdef fk_key key
    cdef const fk_entry *entry
    cdef const fk_snapshot *snapshot
    cdef int i, n_out
    cdef long op_id
    inputs = operand_tuple(inputs, "inputs")
    if outputs is not None and type(outputs) is not tuple and type(outputs) is not list:
        outputs = (outputs,)
    parse_key(op, (0,), backend, &key)                     # the op alone: how many outputs it writes
    n_out = dispatch_outputs(&key, outputs)
    n_in = len(inputs)
    if n_in + n_out > FK_MAX_OPERANDS or n_in < 1:
        raise OperandCountError(f"dispatch takes 1 to {FK_MAX_OPERANDS - n_out} inputs, got {n_in}")
    dts.n = n_in + n_out
    for i in range(n_in):
        dts.v[i] = operand_dtype(inputs[i], i, False)
    if outputs is not None:
        for i in range(n_out):
            dts.v[n_in + i] = operand_dtype(outputs[i], i, True)
    if fk_published_generation() != dispatch_generation:
        with dispatch_lock:
            if fk_published_generation() != dispatch_generation:
                snapshot = fk_acquire()
                fk_release(dispatch_snapshot)
                dispatch_snapshot = snapshot
                dispatch_generation = fk_snapshot_generation(snapshot)
    snapshot = dispatch_snapshot
    fk_retain(snapshot)                   # a concurrent re-acquire must not free it under us
    try:
        if outputs is None:
            from fuel_kernel import ops
            for i in range(n_out):
                dts.v[n_in + i] = 0
            parse_key(op, [dts.v[i] for i in range(dts.n)], backend, &key)   # an op the table can key
            rule = ops.infer_output_dtypes if key.kind == FK_KEY_STATIC else ops.infer_output_dtype
            codes = infer_output(key_op(&key), "dtype", rule, [DType(dts.v[i]) for i in range(n_in)],
                                 params, snapshot, &key)
            codes = tuple(codes) if key.kind == FK_KEY_STATIC else (codes,)
            for i in range(n_out):
                dts.v[n_in + i] = int(codes[i])
        parse_key(op, [dts.v[i] for i in range(dts.n)], backend, &key)
        entry = fk_lookup_with_caps(snapshot, &key, 0)
        if entry == NULL:
            raise NoKernelError(miss_message(snapshot, &key))
        return call_result(&key, run_entry(snapshot, entry, &key, inputs, outputs, params, False))
    finally:
        fk_release(snapshot)


cdef int dispatch_outputs(const fk_key *key, object outputs) except -1:
    """How many outputs fk.dispatch runs op with: as many as the caller passes (refused outside the
    op's range), else the op's required ones (an optional output is written when passed)."""
    from fuel_kernel import ops
    cdef int fewest = 1, most = 1
    if key.kind == FK_KEY_STATIC:
        fewest, most = ops.min_outputs(key.id), ops.n_outputs(key.id)
    if outputs is None:
        return fewest
    if not fewest <= len(outputs) <= most:
        counted = f"{fewest}" if fewest == most else f"{fewest} to {most}"
        raise OperandCountError(f"{key_name(key)} writes {counted} output{'s' if most != 1 else ''}, "
                                f"got {len(outputs)}")
    return len(outputs)


# ---- threads (the public face is fuel_kernel/threads.py) ------------------------------------------
MAX_THREADS = FK_POOL_MAX_THREADS


def _get_num_threads():
    return fk_get_num_threads()


def _set_num_threads(int n):
    if fk_set_num_threads(n) != 0:
        raise ValueError(f"the thread count must be in [1, {FK_POOL_MAX_THREADS}], got {n}")


def _affinity_cpus():
    return fk_affinity_cpus()


def _workers_started():
    """Worker threads the pool has started in this process (the caller's thread not counted)."""
    return fk_pool_workers_started()


def _parallel_calls():
    """How many times kernels have cut a call into several tasks, in this process so far."""
    return fk_pool_calls()


cdef extern from *:
    """
    static void fk_pool_probe_task(void *context, int64_t task) {
        __atomic_fetch_add((int64_t *)context + task, 1, __ATOMIC_RELAXED);
    }
    static inline int64_t fk_pool_probe_runs(const int64_t *counts, int64_t task) {
        return __atomic_load_n(counts + task, __ATOMIC_RELAXED);
    }
    """
    void fk_pool_probe_task(void *context, int64_t task) noexcept nogil
    int64_t fk_pool_probe_runs(const int64_t *counts, int64_t task) nogil


def _pool_task_runs(sizes):
    """Run one pool job per entry of `sizes` (its task count), each task counting its own runs;
    returns how many tasks ran other than exactly once, over all the jobs (the pool's tests)."""
    cdef int64_t n, t, wrong = 0
    cdef int64_t *counts
    for n in sizes:
        if n < 1 or n > (1 << 24):
            raise ValueError(f"a job of 1 to 2**24 tasks, got {n}")
        counts = <int64_t *>calloc(n, sizeof(int64_t))
        if counts == NULL:
            raise MemoryError()
        with nogil:
            fk_parallel_for(n, fk_pool_probe_task, counts)
        for t in range(n):
            wrong += fk_pool_probe_runs(counts, t) != 1
        free(counts)
    return wrong


# ---- diagnostics ----------------------------------------------------------------------------------
def allocated_bytes():
    """Bytes the table's C core holds right now (snapshots; also tracked by tracemalloc domain 0x464b)."""
    return fk_core_allocated_bytes()


def live_snapshots():
    """Snapshots not yet freed: the published one plus any still held or awaiting reclamation."""
    return fk_core_live_snapshots()


def reclaim():
    """Free every superseded snapshot nobody holds (also happens at each commit and release)."""
    with nogil:
        fk_core_reclaim()


TRACEMALLOC_DOMAIN = 0x464b
