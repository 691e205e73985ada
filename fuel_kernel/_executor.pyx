# cython: language_level=3
"""The plan executor: precompiled steps run back to back in one nogil C loop.

Graph.compile (fuel_kernel/graph/planner.py) resolves every node to an fk_entry, fixes every operand's
layout and its place in a buffer (a caller input, a constant, the per-run arena or a caller
output), and appends one fk_plan_step per kernel call here, or one group step for a fused group
of elementwise nodes (a MATMUL or CONV2D may head it, its epilogue).  run() only patches base pointers into the prepared storages and calls each
entry's kernel; a group runs its members tile by tile (fk_plan_run_group below).  The first failing
status stops the loop and is reported with the step's node.  The program holds the snapshot its
entries live in.
"""
cimport cython
cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport int32_t, int64_t, uint32_t, uintptr_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memset

from fuel_kernel.abi cimport *
from fuel_kernel._dispatch cimport BindingTable, Kernel, OpParams

from fuel_kernel.errors import STATUS_ERRORS, FuelKernelError, OperandTypeError, ParamsError, ShapeError

cnp.import_array()
fk_import_api()


# The step loop and the tile loop are C: the tile loop claims per-thread tile buffers with atomics,
# which Cython does not spell.
cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>

    #define FK_PLAN_TILE_BASE (-1)   /* an operand in the group's tile buffer, not in a base */

    typedef struct {
        fk_kernel_fn kernel;
        int32_t n_in;
        int32_t n_out;
        int32_t node_id;
        int32_t params_index;        /* into the params array, or -1: no params */
        int64_t first;               /* its operands and layouts start here */
        int32_t group;               /* -1: a kernel call; else the group's index; its members follow */
        int32_t n_members;
    } fk_plan_step;

    typedef struct {
        int64_t byte_offset;         /* into its base, or into the tile buffer (FK_PLAN_TILE_BASE) */
        int32_t base_index;
        uint32_t tile_axes;          /* a group member's operand: bit d set when its axis aligned with
                                      * the group's axis d follows the tile there (MATMUL's A does
                                      * not on the column axis: that axis of A is k) */
        fk_storage storage;          /* data is patched per run (per tile in a group) */
    } fk_plan_operand;

    /* A fused group's tiling of its output shape: axes before tile_outer take one index per tile,
     * axes from tile_outer up to k = tile_axis are whole, axis k takes tile_len, the axes after k
     * are whole: [1, .., 1, shape[tile_outer:k], tile_len, shape[k+1:]]; the whole shape when
     * tile_axis is -1.  Elementwise groups use tile_outer = k; a MATMUL's epilogue cuts columns
     * (tile_outer = 0, k = the last axis). */
    typedef struct {
        int32_t ndim;
        int32_t tile_axis;
        int32_t tile_outer;
        int32_t serial;              /* 1: the tiles run in order on the calling thread (each
                                      * member call splits over the threads itself) */
        int64_t shape[FK_MAX_DIMS];
        int64_t tile_len;
        int64_t tiles_along;         /* tiles along tile_axis */
        int64_t n_tiles;
        int64_t tile_bytes;          /* one thread's tile buffer, a multiple of 64 */
        int32_t scratch_base;        /* the calling thread's tile buffer: this base (the arena) */
        int64_t scratch_offset;      /* at this byte; other threads' buffers are allocated per run */
    } fk_plan_group;

    /* One run of one group: shared by the tasks that run its tiles. */
    typedef struct {
        const fk_plan_step *members;
        const fk_plan_group *group;
        const fk_plan_operand *operands;
        const fk_layout *layouts;
        const fk_params *params;
        const fk_params *no_params;
        char **bases;
        char *scratch;               /* slot 0: the calling thread's tile buffer */
        char *extra;                 /* slots 1 .. n_slots - 1, n_slots - 1 tile buffers */
        int *slot_busy;
        int n_slots;
        int status;                  /* the first failure of a later tile */
        int failed_member;
        char message[FK_ERROR_LEN];
    } fk_plan_group_run;

    /* Run every member on tile `tile`, with intermediates in `scratch`; the failing member's
     * index goes to *failed. */
    static int fk_plan_tile(const fk_plan_group_run *r, int64_t tile, char *scratch, int *failed) {
        const fk_plan_group *g = r->group;
        fk_storage storage[FK_MAX_OPERANDS];
        fk_layout tiled[FK_MAX_OPERANDS];
        const fk_layout *layouts;
        int64_t outer[FK_MAX_DIMS], lo = 0, len = 0;
        int k = g->tile_axis, m, i, d, status, n_members = r->members[0].n_members;
        if (k >= 0) {
            int64_t t = tile, block = t % g->tiles_along;
            t /= g->tiles_along;
            lo = block * g->tile_len;
            len = g->shape[k] - lo < g->tile_len ? g->shape[k] - lo : g->tile_len;
            for (d = g->tile_outer - 1; d >= 0; d--) {
                outer[d] = t % g->shape[d];
                t /= g->shape[d];
            }
        }
        for (m = 0; m < n_members; m++) {
            const fk_plan_step *step = &r->members[1 + m];
            const fk_plan_operand *ops = &r->operands[step->first];
            int n = step->n_in + step->n_out;
            for (i = 0; i < n; i++) {
                storage[i] = ops[i].storage;
                storage[i].data = (ops[i].base_index == FK_PLAN_TILE_BASE ? scratch : r->bases[ops[i].base_index])
                                  + ops[i].byte_offset;
            }
            layouts = &r->layouts[step->first];       /* one tile: the whole layouts */
            if (k >= 0) layouts = tiled;
            for (i = 0; k >= 0 && i < n; i++) {
                fk_layout *layout = &tiled[i];
                int in_tile = ops[i].base_index == FK_PLAN_TILE_BASE, shift;
                *layout = r->layouts[step->first + i];
                shift = g->ndim - layout->ndim;          /* operands broadcast right-aligned */
                for (d = 0; d <= k; d++) {
                    int a = d - shift;
                    if (a < 0 || layout->shape[a] == 1) continue;     /* missing or broadcast */
                    if (!(ops[i].tile_axes >> d & 1u)) continue;      /* not tiled along d */
                    if (d < g->tile_outer) {
                        if (!in_tile) layout->offset += outer[d] * layout->strides[a];
                        layout->shape[a] = 1;
                    } else if (d == k) {
                        if (!in_tile) layout->offset += lo * layout->strides[a];
                        layout->shape[a] = len;
                    }
                }
            }
            status = step->kernel(storage, step->n_in, &storage[step->n_in], step->n_out, layouts,
                                  step->params_index >= 0 ? &r->params[step->params_index] : r->no_params);
            if (status != FK_OK) {
                *failed = m;
                if (fk_error_status() == FK_OK)
                    fk_set_error(status, "kernel failed with status %d and no message", status);
                return status;
            }
        }
        return FK_OK;
    }

    /* A pool task: tile task + 1 in a free tile buffer (at most n_slots tasks run at once, so one
     * is free unless the thread setting grew during the call; then the task waits for one). */
    static void fk_plan_tile_task(void *context, int64_t task) {
        fk_plan_group_run *r = (fk_plan_group_run *)context;
        int slot = 0, failed = -1, status;
        if (__atomic_load_n(&r->status, __ATOMIC_ACQUIRE) != FK_OK) return;
        for (;;) {
            int expected = 0;
            if (__atomic_compare_exchange_n(&r->slot_busy[slot], &expected, 1, 0, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED))
                break;
            slot = (slot + 1) % r->n_slots;
        }
        status = fk_plan_tile(r, task + 1, slot == 0 ? r->scratch : r->extra + (int64_t)(slot - 1) * r->group->tile_bytes,
                              &failed);
        __atomic_store_n(&r->slot_busy[slot], 0, __ATOMIC_RELEASE);
        if (status != FK_OK) {
            int expected = FK_OK;
            if (__atomic_compare_exchange_n(&r->status, &expected, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                strncpy(r->message, fk_error_message(), FK_ERROR_LEN - 1);
                r->message[FK_ERROR_LEN - 1] = 0;
                r->failed_member = failed;
                __atomic_store_n(&r->status, status, __ATOMIC_RELEASE);
            }
            fk_clear_error();
        }
    }

    /* Run a group step (members follow it in `steps`): tile 0 alone on this thread, so every check
     * a member makes on dtypes, params and layouts fails there before any other tile is written;
     * then the other tiles, on the pool when the thread setting allows.  Each tile computes its
     * elements with the same serial kernel calls whichever thread runs it, so the bits do not
     * depend on the thread count. */
    static int fk_plan_run_group(const fk_plan_step *steps, const fk_plan_group *g,
                                 const fk_plan_operand *operands, const fk_layout *layouts,
                                 const fk_params *params, const fk_params *no_params, char **bases,
                                 int *failed_member) {
        fk_plan_group_run r;
        int threads = fk_num_threads(), status;
        int64_t t;
        if (threads < 1 || g->serial) threads = 1;
        if ((int64_t)threads > g->n_tiles - 1) threads = g->n_tiles > 1 ? (int)(g->n_tiles - 1) : 1;
        memset(&r, 0, sizeof(r));
        r.members = steps;
        r.group = g;
        r.operands = operands;
        r.layouts = layouts;
        r.params = params;
        r.no_params = no_params;
        r.bases = bases;
        r.n_slots = threads;
        r.scratch = bases[g->scratch_base] + g->scratch_offset;
        status = fk_plan_tile(&r, 0, r.scratch, failed_member);
        if (status == FK_OK && g->n_tiles > 1) {
            if (threads > 1) {
                r.extra = (char *)aligned_alloc(64, (size_t)(threads - 1) * (size_t)g->tile_bytes);
                r.slot_busy = (int *)calloc((size_t)threads, sizeof(int));
                if (r.extra == NULL || r.slot_busy == NULL) {    /* run on this thread alone */
                    free(r.extra);
                    free(r.slot_busy);
                    r.extra = NULL;
                    r.slot_busy = NULL;
                    threads = 1;
                }
            }
            if (threads <= 1) {
                for (t = 1; t < g->n_tiles && status == FK_OK; t++)
                    status = fk_plan_tile(&r, t, r.scratch, failed_member);
            } else {
                fk_parallel_for(g->n_tiles - 1, fk_plan_tile_task, &r);
                status = r.status;
                if (status != FK_OK) {
                    *failed_member = r.failed_member;
                    fk_set_error(status, "%s", r.message);
                }
            }
        }
        free(r.extra);
        free(r.slot_busy);
        return status;
    }
    """
    enum:
        FK_PLAN_TILE_BASE

    ctypedef struct fk_plan_step:
        fk_kernel_fn kernel
        int32_t n_in
        int32_t n_out
        int32_t node_id
        int32_t params_index
        int64_t first
        int32_t group
        int32_t n_members

    ctypedef struct fk_plan_operand:
        int64_t byte_offset
        int32_t base_index
        uint32_t tile_axes
        fk_storage storage

    ctypedef struct fk_plan_group:
        int32_t ndim
        int32_t tile_axis
        int32_t tile_outer
        int32_t serial
        int64_t shape[8]
        int64_t tile_len
        int64_t tiles_along
        int64_t n_tiles
        int64_t tile_bytes
        int32_t scratch_base
        int64_t scratch_offset

    int fk_plan_run_group(const fk_plan_step *steps, const fk_plan_group *g, const fk_plan_operand *operands,
                          const fk_layout *layouts, const fk_params *params, const fk_params *no_params,
                          char **bases, int *failed_member) noexcept nogil


cdef fk_params NO_PARAMS                         # zero-filled: what a step without params passes


# Steps, their operands, layouts and params live in four packed arrays walked in order, so a run
# streams through exactly the bytes the kernels read (a 1000-node chain touches ~0.6 MB, inside
# L2) instead of one FK_MAX_OPERANDS-sized record per step.  A group step is followed by its
# members, which the loop skips: fk_plan_run_group runs them.
cdef int run_steps(const fk_plan_step *steps, int n_steps, const fk_plan_operand *operands,
                   const fk_layout *layouts, const fk_params *params, const fk_plan_group *groups,
                   char **bases, int *failed_step) noexcept nogil:
    # Storages are copied to the stack and patched there, so threads can share one program.
    cdef fk_storage storage[FK_MAX_OPERANDS]
    cdef int s = 0, i, status, member
    cdef const fk_plan_step *step
    cdef const fk_plan_operand *ops
    fk_clear_error()                 # the loop stops at the first failure, so once is enough
    while s < n_steps:
        step = &steps[s]
        if step.group >= 0:
            member = -1
            status = fk_plan_run_group(step, &groups[step.group], operands, layouts, params, &NO_PARAMS,
                                       bases, &member)
            if status != FK_OK:
                failed_step[0] = s + 1 + member if member >= 0 else s
                return status
            s += 1 + step.n_members
            continue
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
        s += 1
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


def manifest_kernels(capsule, int n_rows):
    """(kernel address, op) of every row of a 'fuel_kernel.manifest' capsule (a CPU kernel
    module's manifest()): how the planner knows a chosen entry is a built-in kernel.  One kernel
    function may serve several ops (CAST and CONTIGUIZE share their copies)."""
    cdef const fk_manifest_row *rows
    cdef int i
    if not PyCapsule_IsValid(capsule, b"fuel_kernel.manifest"):
        raise TypeError("expected a 'fuel_kernel.manifest' capsule")
    rows = <const fk_manifest_row *>PyCapsule_GetPointer(capsule, b"fuel_kernel.manifest")
    return [(<uintptr_t>rows[i].entry.kernel, rows[i].op) for i in range(n_rows)]


@cython.final
cdef class PlanProgram:
    """The compiled step list of one Plan.  Immutable once built; any number of threads may run it
    at once, each with its own bases (Plan gives each thread its own arena)."""
    cdef fk_plan_step *steps
    cdef fk_plan_operand *operands
    cdef fk_layout *layouts
    cdef fk_params *params
    cdef fk_plan_group *groups
    cdef int64_t *base_bytes                     # per base: the bytes its steps address
    cdef int n_steps, n_top_steps, n_groups
    cdef int64_t n_operands, n_params
    cdef int64_t step_capacity, operand_capacity, layout_capacity, params_capacity, group_capacity
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
        self.groups = NULL
        self.n_steps = self.n_top_steps = self.n_groups = 0
        self.n_operands = self.n_params = 0
        self.step_capacity = self.operand_capacity = self.layout_capacity = self.params_capacity = 0
        self.group_capacity = 0
        self.table = table
        self.n_bases = n_bases
        self.node_names = []

    def __dealloc__(self):
        free(self.steps)
        free(self.operands)
        free(self.layouts)
        free(self.params)
        free(self.groups)
        free(self.base_bytes)

    def __len__(self):
        """The top-level steps: kernel calls and groups (a group's members are not counted)."""
        return self.n_top_steps

    def add_step(self, Kernel kernel not None, int node_id, str node_name, list operands, object params):
        """operands: (base_index, byte_offset, nbytes, dtype, shape, strides, offset) per operand,
        inputs then the output."""
        self._append(kernel, node_id, node_name, operands, params, False)
        self.n_top_steps += 1

    def add_group(self, int node_id, str name, tuple shape, int tile_axis, int64_t tile_len,
                  int64_t tile_bytes, int scratch_base, int64_t scratch_offset, list members,
                  int tile_outer=-1, bint serial=False):
        """A fused group: `members` are (kernel, node_id, name, operands, params) as add_step takes
        them, in order, where base_index -1 names the tile buffer (byte_offset into it; the layout
        has the whole output shape and the C-contiguous strides of the largest tile).  An operand
        may end with tile_axes, a mask of the group's axes it follows (default: all).  Every
        member's output has `shape`; a tile is [1, .., 1, shape[tile_outer:tile_axis], tile_len,
        shape[tile_axis + 1:]] (tile_outer -1: tile_axis), or the whole shape when tile_axis is
        -1; tile_bytes is one thread's tile buffer; the calling thread's is at byte scratch_offset
        of base scratch_base (64-byte aligned; the plan's arena), other threads' are allocated when
        a run splits the tiles across threads (never when `serial`: the tiles then run in order on
        the calling thread)."""
        cdef fk_plan_step *step
        cdef fk_plan_group *group
        cdef int d, i, n_members = len(members)
        cdef int64_t tiles_along = 1, n_tiles = 1
        if n_members < 1:
            raise ValueError("a group has at least one member")
        if len(shape) > FK_MAX_DIMS:
            raise ValueError(f"{len(shape)} dims exceed the limit of {FK_MAX_DIMS}")
        if not -1 <= tile_axis < len(shape):
            raise ValueError(f"tile axis {tile_axis} out of range for {len(shape)} dims")
        if tile_bytes < 64 or tile_bytes % 64:
            raise ValueError(f"tile_bytes must be a positive multiple of 64, not {tile_bytes}")
        if not 0 <= scratch_base < self.n_bases or scratch_offset < 0 or scratch_offset % 64:
            raise ValueError(f"the tile buffer at base {scratch_base}, byte {scratch_offset}, is out of "
                             f"range or not 64-byte aligned")
        if tile_axis >= 0:
            if not 1 <= tile_len <= shape[tile_axis]:
                raise ValueError(f"tile length {tile_len} out of range for extent {shape[tile_axis]}")
            if tile_outer == -1:
                tile_outer = tile_axis
            if not 0 <= tile_outer <= tile_axis:
                raise ValueError(f"tile_outer {tile_outer} out of range for tile axis {tile_axis}")
            tiles_along = (shape[tile_axis] + tile_len - 1) // tile_len
            n_tiles = tiles_along
            for d in range(tile_outer):
                n_tiles *= shape[d]
        else:
            tile_outer = 0
        for member in members:           # all checked before anything is appended
            if len(member) != 5:
                raise ValueError("a group member is (kernel, node_id, name, operands, params)")
            if not isinstance(member[0], Kernel):
                raise TypeError(f"a group member's kernel is a Kernel, not {type(member[0]).__name__}")
            self._check(member[3], member[4], True)
            for operand in member[3]:
                if operand[0] == FK_PLAN_TILE_BASE and operand[1] + operand[2] > tile_bytes:
                    raise ValueError(f"a tile operand at byte {operand[1]} overruns the {tile_bytes}-byte tile buffer")
        self.groups = <fk_plan_group *>grow(self.groups, &self.group_capacity, self.n_groups + 1,
                                            sizeof(fk_plan_group))
        self.steps = <fk_plan_step *>grow(self.steps, &self.step_capacity, self.n_steps + 1, sizeof(fk_plan_step))
        group = &self.groups[self.n_groups]
        memset(group, 0, sizeof(fk_plan_group))
        group.ndim = len(shape)
        group.tile_axis = tile_axis
        group.tile_outer = tile_outer
        group.serial = serial
        for d in range(len(shape)):
            group.shape[d] = shape[d]
        group.tile_len = tile_len
        group.tiles_along = tiles_along
        group.n_tiles = n_tiles
        group.tile_bytes = tile_bytes
        group.scratch_base = scratch_base
        group.scratch_offset = scratch_offset
        if scratch_offset + tile_bytes > self.base_bytes[scratch_base]:
            self.base_bytes[scratch_base] = scratch_offset + tile_bytes
        step = &self.steps[self.n_steps]
        memset(step, 0, sizeof(fk_plan_step))
        step.node_id = node_id
        step.params_index = -1
        step.group = self.n_groups
        step.n_members = n_members
        step.first = self.n_operands
        self.n_groups += 1
        self.n_steps += 1
        self.node_names.append(name)
        for kernel, member_id, member_name, operands, params in members:
            self._append(kernel, member_id, member_name, operands, params, True)
        self.n_top_steps += 1

    cdef _check(self, list operands, object params, bint member):
        cdef int n = len(operands)
        for operand in operands:
            if len(operand) not in (7, 8):
                raise ValueError("an operand is (base_index, byte_offset, nbytes, dtype, shape, strides, "
                                 "offset[, tile_axes])")
            base, byte_offset, nbytes, _, shape = operand[:5]
            if len(operand) == 8 and not (member and 0 <= operand[7] < 2 ** 32):
                raise ValueError("tile_axes is a 32-bit mask, given for group members only")
            if byte_offset < 0 or nbytes < 0:
                raise ValueError("an operand has a negative byte offset or size")
            if not (0 <= base < self.n_bases or (member and base == FK_PLAN_TILE_BASE)):
                raise ValueError(f"base index {base} out of range")
            if len(shape) > FK_MAX_DIMS:
                raise ValueError(f"{len(shape)} dims exceed the limit of {FK_MAX_DIMS}")
        if not 1 <= n <= FK_MAX_OPERANDS:
            raise ValueError(f"{n} operands; a step takes 1 to {FK_MAX_OPERANDS}")
        if params is not None and not isinstance(params, OpParams):
            raise ParamsError(f"params must come from fuel_kernel.params, not {type(params).__name__}")

    cdef _append(self, Kernel kernel, int node_id, str node_name, list operands, object params, bint member):
        cdef fk_plan_step *step
        cdef fk_plan_operand *op
        cdef fk_layout *layout
        cdef int i, d, n = len(operands)
        self._check(operands, params, member)
        self.steps = <fk_plan_step *>grow(self.steps, &self.step_capacity, self.n_steps + 1, sizeof(fk_plan_step))
        self.operands = <fk_plan_operand *>grow(self.operands, &self.operand_capacity, self.n_operands + n,
                                                sizeof(fk_plan_operand))
        self.layouts = <fk_layout *>grow(self.layouts, &self.layout_capacity, self.n_operands + n, sizeof(fk_layout))
        if params is not None:
            self.params = <fk_params *>grow(self.params, &self.params_capacity, self.n_params + 1, sizeof(fk_params))
        step = &self.steps[self.n_steps]
        memset(step, 0, sizeof(fk_plan_step))
        step.kernel = kernel.entry.kernel
        step.n_out = kernel.n_outputs
        step.n_in = n - step.n_out
        if step.n_in < 1:
            raise ValueError(f"{n} operands for a kernel that writes {step.n_out} outputs")
        step.node_id = node_id
        step.first = self.n_operands
        step.params_index = -1
        step.group = -1
        for i, operand in enumerate(operands):
            base, byte_offset, nbytes, dtype, shape, strides, offset = operand[:7]
            op = &self.operands[self.n_operands + i]
            layout = &self.layouts[self.n_operands + i]
            memset(op, 0, sizeof(fk_plan_operand))
            memset(layout, 0, sizeof(fk_layout))
            op.base_index = base
            op.byte_offset = byte_offset
            op.tile_axes = operand[7] if len(operand) == 8 else 0xFFFFFFFFu
            if base >= 0 and byte_offset + nbytes > self.base_bytes[base]:
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
            status = run_steps(self.steps, self.n_steps, self.operands, self.layouts, self.params, self.groups,
                               ptrs, &failed)
        if status != FK_OK:
            message = fk_error_message().decode("utf-8", "replace")
            fk_clear_error()             # consumed: the thread's error state is clear between calls
            name = self.node_names[failed]
            raise STATUS_ERRORS.get(status, FuelKernelError)(f"node {self.steps[failed].node_id} ({name}) failed: {message}")
