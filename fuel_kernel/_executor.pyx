# cython: language_level=3
"""The plan executor: precompiled steps run back to back in one nogil C loop.

Graph.compile (fuel_kernel/graph/planner.py) resolves every node to an fk_entry, fixes every operand's
layout and its place in a buffer (a caller input, a constant, the per-run arena or a caller
output), and appends one fk_plan_step per kernel call here.  run() only patches base pointers into
the prepared storages and calls each entry's kernel; the first failing status stops the loop and
is reported with the step's node.  The program holds the snapshot its entries live in.
"""
cimport cython
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memset

from fuel_kernel.abi cimport *
from fuel_kernel._dispatch cimport BindingTable, Kernel, OpParams

from fuel_kernel.errors import STATUS_ERRORS, FuelKernelError, OperandTypeError, ParamsError, ShapeError

cnp.import_array()
fk_import_api()


ctypedef struct fk_plan_step:
    fk_kernel_fn kernel
    int32_t n_in
    int32_t n_out
    int32_t node_id
    int32_t params_index                         # into PlanProgram.params, or -1: no params
    int64_t first                                # its operands and layouts start here


ctypedef struct fk_plan_operand:
    int64_t byte_offset
    int32_t base_index
    fk_storage storage                           # data is patched per run


cdef fk_params NO_PARAMS                         # zero-filled: what a step without params passes


# Steps, their operands, layouts and params live in four packed arrays walked in order, so a run
# streams through exactly the bytes the kernels read (a 1000-node chain touches ~0.6 MB, inside
# L2) instead of one FK_MAX_OPERANDS-sized record per step.
cdef int run_steps(const fk_plan_step *steps, int n_steps, const fk_plan_operand *operands,
                   const fk_layout *layouts, const fk_params *params, char **bases,
                   int *failed_step) noexcept nogil:
    # Storages are copied to the stack and patched there, so threads can share one program.
    cdef fk_storage storage[FK_MAX_OPERANDS]
    cdef int s, i, status
    cdef const fk_plan_step *step
    cdef const fk_plan_operand *ops
    fk_clear_error()                 # the loop stops at the first failure, so once is enough
    for s in range(n_steps):
        step = &steps[s]
        ops = &operands[step.first]
        for i in range(step.n_in + step.n_out):
            storage[i] = ops[i].storage
            storage[i].data = bases[ops[i].base_index] + ops[i].byte_offset
        status = step.kernel(storage, step.n_in, &storage[step.n_in], step.n_out, &layouts[step.first],
                             &params[step.params_index] if step.params_index >= 0 else &NO_PARAMS)
        if status != FK_OK:
            failed_step[0] = s
            if fk_error_status() == FK_OK:
                fk_set_error(status, "kernel failed with status %d and no message", status)
            return status
    return FK_OK


cdef void *grow(void *array, int64_t *capacity, int64_t needed, size_t item) except NULL:
    """realloc `array` to hold at least `needed` items (doubling); raises MemoryError."""
    cdef int64_t new_capacity = capacity[0]
    cdef void *grown
    if needed <= new_capacity:
        return array
    while new_capacity < needed:
        new_capacity = max(16, 2 * new_capacity)
    grown = realloc(array, new_capacity * item)
    if grown == NULL:
        raise MemoryError()
    capacity[0] = new_capacity
    return grown


@cython.final
cdef class PlanProgram:
    """The compiled step list of one Plan.  Immutable once built; any number of threads may run it
    at once, each with its own bases (Plan gives each thread its own arena)."""
    cdef fk_plan_step *steps
    cdef fk_plan_operand *operands
    cdef fk_layout *layouts
    cdef fk_params *params
    cdef int64_t *base_bytes                     # per base: the bytes its steps address
    cdef int n_steps
    cdef int64_t n_operands, n_params
    cdef int64_t step_capacity, operand_capacity, layout_capacity, params_capacity
    cdef readonly int n_bases
    cdef BindingTable table
    cdef list node_names

    def __cinit__(self, BindingTable table not None, int n_bases):
        self.base_bytes = NULL
        if n_bases < 0:
            raise ValueError(f"n_bases must be non-negative, not {n_bases}")
        self.base_bytes = <int64_t *>calloc(n_bases if n_bases else 1, sizeof(int64_t))
        if self.base_bytes == NULL:
            raise MemoryError()
        self.steps = NULL
        self.operands = NULL
        self.layouts = NULL
        self.params = NULL
        self.n_steps = 0
        self.n_operands = self.n_params = 0
        self.step_capacity = self.operand_capacity = self.layout_capacity = self.params_capacity = 0
        self.table = table
        self.n_bases = n_bases
        self.node_names = []

    def __dealloc__(self):
        free(self.steps)
        free(self.operands)
        free(self.layouts)
        free(self.params)
        free(self.base_bytes)

    def __len__(self):
        return self.n_steps

    def add_step(self, Kernel kernel not None, int node_id, str node_name, list operands, object params):
        """operands: (base_index, byte_offset, nbytes, dtype, shape, strides, offset) per operand,
        inputs then the output."""
        cdef fk_plan_step *step
        cdef fk_plan_operand *op
        cdef fk_layout *layout
        cdef int i, d, n = len(operands)
        for base, _, _, _, shape, _, _ in operands:
            if not 0 <= base < self.n_bases:
                raise ValueError(f"base index {base} out of range")
            if len(shape) > FK_MAX_DIMS:
                raise ValueError(f"{len(shape)} dims exceed the limit of {FK_MAX_DIMS}")
        if not 1 <= n <= FK_MAX_OPERANDS:
            raise ValueError(f"{n} operands; a step takes 1 to {FK_MAX_OPERANDS}")
        if params is not None and not isinstance(params, OpParams):
            raise ParamsError(f"params must come from fuel_kernel.params, not {type(params).__name__}")
        self.steps = <fk_plan_step *>grow(self.steps, &self.step_capacity, self.n_steps + 1, sizeof(fk_plan_step))
        self.operands = <fk_plan_operand *>grow(self.operands, &self.operand_capacity, self.n_operands + n,
                                                sizeof(fk_plan_operand))
        self.layouts = <fk_layout *>grow(self.layouts, &self.layout_capacity, self.n_operands + n, sizeof(fk_layout))
        if params is not None:
            self.params = <fk_params *>grow(self.params, &self.params_capacity, self.n_params + 1, sizeof(fk_params))
        step = &self.steps[self.n_steps]
        memset(step, 0, sizeof(fk_plan_step))
        step.kernel = kernel.entry.kernel
        step.n_out = 1
        step.n_in = n - 1
        step.node_id = node_id
        step.first = self.n_operands
        step.params_index = -1
        for i, (base, byte_offset, nbytes, dtype, shape, strides, offset) in enumerate(operands):
            op = &self.operands[self.n_operands + i]
            layout = &self.layouts[self.n_operands + i]
            memset(op, 0, sizeof(fk_plan_operand))
            memset(layout, 0, sizeof(fk_layout))
            op.base_index = base
            op.byte_offset = byte_offset
            if byte_offset < 0 or nbytes < 0:
                raise ValueError(f"operand {i} has a negative byte offset or size")
            if byte_offset + nbytes > self.base_bytes[base]:
                self.base_bytes[base] = byte_offset + nbytes
            op.storage.nbytes = nbytes
            op.storage.backend = kernel.key.backend
            op.storage.dtype = dtype
            layout.ndim = len(shape)
            layout.offset = offset
            for d in range(len(shape)):
                layout.shape[d] = shape[d]
                layout.strides[d] = strides[d]
        if params is not None:
            self.params[self.n_params] = (<OpParams>params).c
            step.params_index = self.n_params
            self.n_params += 1
        self.n_operands += n
        self.node_names.append(node_name)
        self.n_steps += 1

    def run(self, list bases):
        """Run every step with `bases` (one C-contiguous NumPy array per base index)."""
        cdef char *base_ptrs[256]
        cdef char **ptrs = base_ptrs
        cdef int i, status, failed = -1
        cdef object keep = None
        if len(bases) != self.n_bases:
            raise ValueError(f"expected {self.n_bases} base buffers, got {len(bases)}")
        if self.n_bases > 256:
            keep = bytearray(self.n_bases * sizeof(char *))
            ptrs = <char **><char *>keep
        for i in range(self.n_bases):
            # checked, never a blind <ndarray> cast: anything else would be read as an array
            if not cnp.PyArray_Check(bases[i]):
                raise OperandTypeError(f"base buffer {i} is a {type(bases[i]).__name__}, not a NumPy array")
            if cnp.PyArray_NBYTES(<cnp.ndarray>bases[i]) < self.base_bytes[i]:
                raise ShapeError(f"base buffer {i} holds {cnp.PyArray_NBYTES(<cnp.ndarray>bases[i])} "
                                 f"bytes; the plan addresses {self.base_bytes[i]}")
            ptrs[i] = cnp.PyArray_BYTES(<cnp.ndarray>bases[i])
        with nogil:
            status = run_steps(self.steps, self.n_steps, self.operands, self.layouts, self.params, ptrs,
                               &failed)
        if status != FK_OK:
            message = fk_error_message().decode("utf-8", "replace")
            fk_clear_error()             # consumed: the thread's error state is clear between calls
            name = self.node_names[failed]
            raise STATUS_ERRORS.get(status, FuelKernelError)(f"node {self.steps[failed].node_id} ({name}) failed: {message}")
