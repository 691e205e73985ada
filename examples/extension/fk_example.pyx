# cython: language_level=3
"""fk_example: a third-party backend for fuel_kernel, written against the cimport API alone.

At import the module claims the backend id "fk_example" from the extension range and registers,
in one transaction, an f32 ADD kernel and a runtime fused add+relu kernel for that backend.  Its
storage is host memory tagged with that backend id.  run_add / run_add_relu / run_static then
dispatch from a nogil loop: acquire the current snapshot, look the key up, pick an alternative,
call it on fk_storage / fk_layout operands, release the snapshot.
"""
from cpython.buffer cimport PyBUF_RECORDS_RO, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memset, strncpy

from fuel_kernel.abi cimport *

from fuel_kernel.errors import STATUS_ERRORS, FuelKernelError

# Refuses to load (ImportError naming both versions) if the installed fuel_kernel has another ABI.
fk_import_api()

cdef int backend_id = -1
cdef uint32_t add_relu_id = 0
cdef fk_dtypes f32x3


# ---- kernels: no Python, no GIL, errors as a status plus the thread-local message ----------------
cdef int check_binary_f32(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                          const fk_layout *layouts) noexcept nogil:
    """Validate everything before anything is written: counts, backend, dtype, shapes, bounds."""
    cdef const fk_storage *storage
    cdef const fk_layout *layout
    cdef const fk_layout *out = &layouts[2]
    cdef int k, d
    cdef int64_t lo, hi
    if n_in != 2 or n_out != 1:
        fk_set_error(FK_ERR_OPERANDS, "fk_example kernels take 2 inputs and 1 output, got %d and %d",
                     n_in, n_out)
        return FK_ERR_OPERANDS
    if out.ndim < 0 or out.ndim > FK_MAX_DIMS:
        fk_set_error(FK_ERR_SHAPE, "the output has %d dims; at most %d are supported", <int>out.ndim,
                     <int>FK_MAX_DIMS)
        return FK_ERR_SHAPE
    for k in range(3):
        storage = &inputs[k] if k < 2 else &outputs[0]
        layout = &layouts[k]
        if storage.backend != backend_id:
            fk_set_error(FK_ERR_BACKEND, "operand %d lives on backend %d, not on fk_example (backend %d)",
                         k, <int>storage.backend, backend_id)
            return FK_ERR_BACKEND
        if storage.dtype != FK_F32:
            fk_set_error(FK_ERR_DTYPE, "operand %d has dtype code %d; fk_example kernels take f32 (%d)",
                         k, <int>storage.dtype, <int>FK_F32)
            return FK_ERR_DTYPE
        if layout.ndim != out.ndim:
            fk_set_error(FK_ERR_SHAPE, "operand %d has %d dims but the output has %d", k,
                         <int>layout.ndim, <int>out.ndim)
            return FK_ERR_SHAPE
        lo = hi = layout.offset
        for d in range(layout.ndim):
            if layout.shape[d] != out.shape[d]:
                fk_set_error(FK_ERR_SHAPE, "operand %d has extent %lld on axis %d, the output %lld", k,
                             <long long>layout.shape[d], d, <long long>out.shape[d])
                return FK_ERR_SHAPE
            if layout.shape[d] == 0:
                return FK_OK                     # an empty output: nothing to address or write
            if layout.strides[d] > 0:
                hi += layout.strides[d] * (layout.shape[d] - 1)
            else:
                lo += layout.strides[d] * (layout.shape[d] - 1)
        if lo < 0 or hi >= <int64_t>(storage.nbytes // sizeof(float)):
            fk_set_error(FK_ERR_SHAPE, "operand %d addresses elements [%lld, %lld] outside its storage",
                         k, <long long>lo, <long long>hi)
            return FK_ERR_SHAPE
    if outputs[0].flags & FK_STORAGE_READ_ONLY:
        fk_set_error(FK_ERR_READ_ONLY, "the output storage is read-only")
        return FK_ERR_READ_ONLY
    return FK_OK


cdef int binary_f32(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                    const fk_layout *layouts, bint relu) noexcept nogil:
    """out = a + b (then max(., 0) when relu), walking every operand's strides (an odometer over
    the outer axes, a strided loop over the last one)."""
    cdef int status = check_binary_f32(inputs, n_in, outputs, n_out, layouts)
    cdef const float *a = <const float *>inputs[0].data
    cdef const float *b = <const float *>inputs[1].data
    cdef float *c = <float *>outputs[0].data
    cdef int ndim = layouts[2].ndim, d
    cdef int64_t index[8]
    cdef int64_t ia = layouts[0].offset, ib = layouts[1].offset, ic = layouts[2].offset
    cdef int64_t n = 1, sa = 0, sb = 0, sc = 0, i, rows = 1
    cdef float v
    if status != FK_OK:
        return status
    for d in range(ndim):
        index[d] = 0
        if layouts[2].shape[d] == 0:
            return FK_OK
    if ndim > 0:
        n = layouts[2].shape[ndim - 1]
        sa, sb, sc = layouts[0].strides[ndim - 1], layouts[1].strides[ndim - 1], layouts[2].strides[ndim - 1]
        for d in range(ndim - 1):
            rows *= layouts[2].shape[d]
    while rows > 0:
        for i in range(n):
            v = a[ia + i * sa] + b[ib + i * sb]
            if relu and v < 0:
                v = 0                            # NaN is not < 0, so NaN propagates as in np.maximum
            c[ic + i * sc] = v
        rows -= 1
        d = ndim - 2
        while d >= 0:                            # advance the odometer over the outer axes
            index[d] += 1
            ia += layouts[0].strides[d]
            ib += layouts[1].strides[d]
            ic += layouts[2].strides[d]
            if index[d] < layouts[2].shape[d]:
                break
            ia -= layouts[0].strides[d] * index[d]
            ib -= layouts[1].strides[d] * index[d]
            ic -= layouts[2].strides[d] * index[d]
            index[d] = 0
            d -= 1
    return FK_OK


cdef int add_f32(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                 const fk_layout *layouts, const fk_params *params) noexcept nogil:
    return binary_f32(inputs, n_in, outputs, n_out, layouts, False)


cdef int add_relu_f32(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                      const fk_layout *layouts, const fk_params *params) noexcept nogil:
    return binary_f32(inputs, n_in, outputs, n_out, layouts, True)


cdef fk_cost elementwise_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                              const fk_params *params) noexcept nogil:
    """One flop per output element (two with the relu), every operand read or written once."""
    cdef fk_cost cost
    cdef double numel = 1
    cdef int d
    for d in range(layouts[n_layouts - 1].ndim):
        numel *= layouts[n_layouts - 1].shape[d]
    cost.flops = numel
    cost.bytes_moved = numel * sizeof(float) * n_layouts
    cost.overhead_ns = 20.0
    return cost


# ---- registration ---------------------------------------------------------------------------------
cdef int raise_fk_error(int status) except -1:
    """The one place a fuel_kernel status becomes a typed Python exception."""
    message = fk_error_message().decode("utf-8", "replace")
    raise STATUS_ERRORS.get(status, FuelKernelError)(message or f"fuel_kernel status {status}")


cdef void make_entry(fk_entry *entry, fk_kernel_fn kernel, uint64_t revision, const char *notes) noexcept nogil:
    memset(entry, 0, sizeof(fk_entry))
    entry.kernel = kernel
    entry.caps = FK_CAP_STRIDED_INPUT | FK_CAP_STRIDED_OUTPUT | FK_CAP_INPLACE
    entry.precision.set = 1
    entry.precision.bit_stable = 1
    entry.precision.max_ulp = 0                  # one IEEE f32 add: correctly rounded
    strncpy(entry.precision.notes, notes, FK_NOTES_LEN - 1)
    entry.cost = elementwise_cost
    strncpy(entry.source, b"fk_example", FK_SOURCE_LEN - 1)
    entry.revision = revision


cdef int register_kernels() except -1:
    """Claim the backend, take a fused-op id, and publish both kernels in one transaction."""
    global backend_id, add_relu_id
    cdef fk_txn *txn
    cdef fk_key key
    cdef fk_entry entry
    cdef int status
    backend_id = fk_claim_backend(b"fk_example")
    if backend_id < 0:
        raise_fk_error(fk_error_status())
    add_relu_id = fk_new_runtime_fused_id()
    f32x3.n = 3
    f32x3.v[0] = f32x3.v[1] = f32x3.v[2] = FK_F32
    txn = fk_txn_begin()
    if txn == NULL:
        raise_fk_error(fk_error_status())
    key = fk_key_make(FK_KEY_STATIC, FK_OP_ADD, &f32x3, backend_id)
    make_entry(&entry, add_f32, 0x666b5f6578000001, b"exact")
    status = fk_txn_register(txn, &key, &entry)
    if status == FK_OK:
        key = fk_key_make(FK_KEY_RUNTIME_FUSED, add_relu_id, &f32x3, backend_id)
        make_entry(&entry, add_relu_f32, 0x666b5f6578000002, b"exact: relu(a + b) rounds once")
        status = fk_txn_register(txn, &key, &entry)
    if status != FK_OK:
        fk_txn_abort(txn)                        # nothing was published
        raise_fk_error(status)
    with nogil:
        status = fk_txn_commit(txn)              # publishes and frees txn, or publishes nothing
    if status != FK_OK:
        raise_fk_error(status)
    return 0


register_kernels()
BACKEND_ID = backend_id
ADD_RELU_ID = add_relu_id


# ---- dispatch from a nogil loop ---------------------------------------------------------------------
cdef int describe_operand(object array, Py_buffer *view, fk_storage *storage, fk_layout *layout) except -1:
    """An f32 buffer as a storage on this backend plus a layout in elements (no copy).  A read-only
    buffer is flagged FK_STORAGE_READ_ONLY; the kernel refuses to write to it."""
    cdef int d
    cdef int64_t lo = 0, hi = 0, stride
    PyObject_GetBuffer(array, view, PyBUF_RECORDS_RO)
    try:
        if view.itemsize != sizeof(float) or view.format == NULL or view.format.lstrip(b"=<@") != b"f":
            raise TypeError("fk_example operands are float32 arrays")
        if view.ndim > FK_MAX_DIMS:
            raise ValueError(f"at most {FK_MAX_DIMS} dims")
        layout.ndim = view.ndim
        layout.reserved = 0
        for d in range(view.ndim):
            if view.strides[d] % <Py_ssize_t>sizeof(float):
                raise ValueError("strides must be whole elements")
            stride = view.strides[d] // <Py_ssize_t>sizeof(float)
            layout.shape[d] = view.shape[d]
            layout.strides[d] = stride
            if view.shape[d] > 0:
                if stride > 0:
                    hi += stride * (view.shape[d] - 1)
                else:
                    lo += stride * (view.shape[d] - 1)
        layout.offset = -lo
        storage.data = <char *>view.buf + lo * <int64_t>sizeof(float)
        storage.nbytes = <size_t>((hi - lo + 1) * sizeof(float))
        storage.backend = backend_id
        storage.dtype = FK_F32
        storage.flags = FK_STORAGE_READ_ONLY if view.readonly else 0
        storage.reserved = 0
    except BaseException:
        PyBuffer_Release(view)
        raise
    return 0


cdef int dispatch_loop(const fk_key *key, fk_storage *storages, const fk_layout *layouts,
                       Py_ssize_t repeat) noexcept nogil:
    """`repeat` dispatches of one key: the path a graph executor takes for every step."""
    cdef const fk_snapshot *snapshot = fk_acquire()   # held: later commits cannot free it
    cdef fk_lookup_result found
    cdef const fk_entry *entry
    cdef fk_params no_params
    cdef int status = FK_OK
    cdef Py_ssize_t r
    cdef int32_t a
    memset(&no_params, 0, sizeof(fk_params))
    no_params.kind = FK_PARAMS_NONE
    for r in range(repeat):
        found = fk_lookup(snapshot, key)
        entry = NULL
        for a in range(found.n_entries):             # the alternatives, in registration order
            if not (found.entries[a].caps & FK_CAP_REQUIRES_BROADCAST):
                entry = &found.entries[a]
                break
        if entry == NULL:
            fk_set_error(FK_ERR_NO_KERNEL, "no kernel for %s %u with %d dtypes on backend %d",
                         b"runtime fused op" if key.kind == FK_KEY_RUNTIME_FUSED else b"op",
                         key.id, <int>key.ndtypes, <int>key.backend)
            status = FK_ERR_NO_KERNEL
            break
        status = fk_call(entry, storages, 2, &storages[2], 1, layouts, &no_params)
        if status != FK_OK:
            break
    fk_release(snapshot)
    return status


cdef object dispatch_binary(int kind, uint32_t key_id, a, b, out, Py_ssize_t repeat):
    cdef Py_buffer views[3]
    cdef fk_storage storages[3]
    cdef fk_layout layouts[3]
    cdef fk_key key = fk_key_make(kind, key_id, &f32x3, backend_id)
    cdef int n_views = 0, status
    if repeat < 0:
        raise ValueError("repeat must be >= 0")
    try:
        for operand in (a, b, out):
            describe_operand(operand, &views[n_views], &storages[n_views], &layouts[n_views])
            n_views += 1
        with nogil:
            status = dispatch_loop(&key, storages, layouts, repeat)
    finally:
        for i in range(n_views):
            PyBuffer_Release(&views[i])
    if status != FK_OK:
        raise_fk_error(status)
    return out


def run_static(int op, a, b, out, Py_ssize_t repeat=1):
    """Dispatch the static op `op` (an fk_op code) for f32 on this backend `repeat` times."""
    return dispatch_binary(FK_KEY_STATIC, <uint32_t>op, a, b, out, repeat)


def run_add(a, b, out, Py_ssize_t repeat=1):
    """out = a + b through the table (f32 arrays of one shape; any strides)."""
    return dispatch_binary(FK_KEY_STATIC, FK_OP_ADD, a, b, out, repeat)


def run_add_relu(a, b, out, Py_ssize_t repeat=1):
    """out = max(a + b, 0) through the runtime fused kernel."""
    return dispatch_binary(FK_KEY_RUNTIME_FUSED, add_relu_id, a, b, out, repeat)


def alternative_sources(int op=FK_OP_ADD):
    """The source tag of every alternative at (op, f32 x 3, this backend), read from C."""
    cdef const fk_snapshot *snapshot = fk_acquire()
    cdef fk_key key = fk_key_make(FK_KEY_STATIC, <uint32_t>op, &f32x3, backend_id)
    cdef fk_lookup_result found = fk_lookup(snapshot, &key)
    cdef const char *source
    sources = []
    try:
        for i in range(found.n_entries):
            source = &found.entries[i].source[0]
            sources.append(source.decode())
        return sources
    finally:
        fk_release(snapshot)
