# cython: language_level=3
"""The plan executor: precompiled steps run back to back in one nogil C loop.

Graph.compile (fuel_kernel/graph.py) resolves every node to a BindingEntry, fixes every operand's
layout and its place in a buffer (a caller input, a constant, the per-run arena or a caller
output), and appends one fk_plan_step per kernel call here.  run() only patches base pointers into
the prepared storages and calls each entry's kernel; the first failing status stops the loop and
is reported with the step's node.  The program holds the snapshot its entries live in.
"""
cimport cython
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memset

from fuel_kernel.abi cimport *
from fuel_kernel._dispatch cimport BindingTable, Kernel, OpParams

from fuel_kernel.errors import STATUS_ERRORS, FuelKernelError

cnp.import_array()
fk_import_api()


ctypedef struct fk_plan_step:
    fk_kernel_fn kernel
    int32_t n_in
    int32_t n_out
    int32_t node_id
    int32_t base_index[FK_MAX_OPERANDS]
    int64_t byte_offset[FK_MAX_OPERANDS]
    fk_storage storage[FK_MAX_OPERANDS]          # inputs then outputs; data patched per run
    fk_layout layouts[FK_MAX_OPERANDS]
    fk_params params


cdef int run_steps(const fk_plan_step *steps, int n_steps, char **bases, int *failed_step) noexcept nogil:
    # Storages are copied to the stack and patched there, so threads can share one program.
    cdef fk_storage storage[FK_MAX_OPERANDS]
    cdef int s, i, status
    cdef const fk_plan_step *step
    fk_clear_error()                 # the loop stops at the first failure, so once is enough
    for s in range(n_steps):
        step = &steps[s]
        for i in range(step.n_in + step.n_out):
            storage[i] = step.storage[i]
            storage[i].data = bases[step.base_index[i]] + step.byte_offset[i]
        status = step.kernel(storage, step.n_in, &storage[step.n_in], step.n_out, step.layouts, &step.params)
        if status != FK_OK:
            failed_step[0] = s
            if fk_error_status() == FK_OK:
                fk_set_error(status, "kernel failed with status %d and no message", status)
            return status
    return FK_OK


@cython.final
cdef class PlanProgram:
    """The compiled step list of one Plan.  Immutable once built; any number of threads may run it
    at once, each with its own bases (Plan gives each thread its own arena)."""
    cdef fk_plan_step *steps
    cdef int n_steps
    cdef int capacity
    cdef readonly int n_bases
    cdef BindingTable table
    cdef list node_names

    def __cinit__(self, BindingTable table, int n_bases):
        self.steps = NULL
        self.n_steps = 0
        self.capacity = 0
        self.table = table
        self.n_bases = n_bases
        self.node_names = []

    def __dealloc__(self):
        free(self.steps)

    def __len__(self):
        return self.n_steps

    def add_step(self, Kernel kernel, int node_id, str node_name, list operands, object params):
        """operands: (base_index, byte_offset, nbytes, dtype, shape, strides, offset) per operand,
        inputs then the output."""
        cdef fk_plan_step *step
        cdef int i, d
        if self.n_steps == self.capacity:
            new_capacity = max(16, 2 * self.capacity)
            grown = <fk_plan_step *>realloc(self.steps, new_capacity * sizeof(fk_plan_step))
            if grown == NULL:
                raise MemoryError()
            self.steps = grown
            self.capacity = new_capacity
        step = &self.steps[self.n_steps]
        memset(step, 0, sizeof(fk_plan_step))
        step.kernel = kernel.entry.kernel
        step.n_out = 1
        step.n_in = len(operands) - 1
        step.node_id = node_id
        for i, (base, byte_offset, nbytes, dtype, shape, strides, offset) in enumerate(operands):
            if not 0 <= base < self.n_bases:
                raise ValueError(f"base index {base} out of range")
            step.base_index[i] = base
            step.byte_offset[i] = byte_offset
            step.storage[i].nbytes = nbytes
            step.storage[i].backend = kernel.key.backend
            step.storage[i].dtype = dtype
            step.layouts[i].ndim = len(shape)
            step.layouts[i].offset = offset
            for d in range(len(shape)):
                step.layouts[i].shape[d] = shape[d]
                step.layouts[i].strides[d] = strides[d]
        if params is not None:
            step.params = (<OpParams>params).c
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
            ptrs[i] = cnp.PyArray_BYTES(<cnp.ndarray>bases[i])
        with nogil:
            status = run_steps(self.steps, self.n_steps, ptrs, &failed)
        if status != FK_OK:
            message = fk_error_message().decode("utf-8", "replace")
            name = self.node_names[failed]
            raise STATUS_ERRORS.get(status, FuelKernelError)(f"node {self.steps[failed].node_id} ({name}) failed: {message}")
