# cython: language_level=3
"""The plan executor: precompiled steps run back to back in one nogil C loop.

Graph.compile (fuel_kernel/graph/planner.py) resolves every node to an fk_entry, fixes every operand's
layout and its place in a buffer (a caller input, a constant, the per-run arena or a caller
output), and appends one fk_plan_step per kernel call here, or one group step for a fused group
of elementwise nodes (a MATMUL or CONV2D may head it, its epilogue).  run() only patches base pointers into the prepared storages and calls each
entry's kernel; a group runs its members tile by tile (fk_plan_run_group below), each member that
has a row function (a kernel module's tile_rows()) calling it directly on every tile after the
first, through a loop planned here once; a group with a vector program (vector_program.h) runs
its tiles after the first through that instead.  The first failing
status stops the loop and is reported with the step's node.  The program holds the snapshot its
entries live in.
"""
cimport cython
cimport numpy as cnp
from cpython.object cimport PyTypeObject
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid, PyCapsule_New
from cpython.pyport cimport PY_SSIZE_T_MAX
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int32_t, int64_t, uint32_t, uintptr_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

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

    #include "fuel_kernel/strided.h"
    #include "vector_program.h"

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
        int32_t rows_index;          /* a group member: into the rows array, or -1: the kernel runs it */
    } fk_plan_step;

    /* A group member that calls its kernel's row function (fk_tile_row) on tiles directly: the loop
     * over one tile, planned by fk_loop_plan when the plan is compiled, for a full tile (loop[0]) and
     * for the shorter last tile along the tile axis (loop[1]), from data at FK_PLAN_PLANNED_BASE:
     * start[j][i] is operand i's byte offset in its base plus the distance from its data to the
     * loop's first element (its base pointer less that address); a tile moves operand i by
     * shift[i][d] bytes per index along group axis d (the axes before tile_outer and the tile axis;
     * 0 in the tile buffer and where the operand is broadcast), as fk_plan_tile_layout moves the
     * layout's offset. */
    typedef struct {
        /* what every tile reads, first and packed (ten members' share a few KB of L1) */
        fk_row_fn row;
        int64_t ctx_offset;          /* into the program's ctx bytes, or -1: the row takes no ctx */
        int32_t nops;
        /* 1: the output row goes to a stack buffer, then to its place with non-temporal stores
         * (a contiguous row no later operand of the group touches: it need not be read into the
         * cache before being written, which a plain store does) */
        uint8_t stream_out;
        /* per operand: 1 (read) or 2 (written) when it is the group's first use of a row that
         * moves from tile to tile, whose next tile's lines this member prefetches; else 0 */
        uint8_t prefetch[FK_MAX_OPERANDS];
        int32_t base_index[FK_MAX_OPERANDS];    /* the operand's base, or FK_PLAN_TILE_BASE */
        int64_t rows[2], inner[2];              /* loop[j].rows and .inner */
        int64_t start[2][FK_MAX_OPERANDS];      /* byte_offset + loop[j]'s first element, in bytes */
        int64_t stride[2][FK_MAX_OPERANDS];     /* loop[j]'s innermost byte strides */
        int64_t tile_shift[FK_MAX_OPERANDS];    /* shift[i][tile_axis] */
        /* the rest: loops of several rows, tiles with outer axes, compile time */
        int64_t shift[FK_MAX_OPERANDS][FK_MAX_DIMS];
        fk_loop loop[2];
    } fk_plan_rows;

    #define FK_PLAN_STREAM_BYTES 16384   /* the stack buffer of a streamed output row */
    #define FK_PLAN_STREAMS 8            /* rows prefetched per tile: at most this many operands */
    #define FK_PLAN_STREAM_ROWS 16       /* of at most this many rows each */

    /* Copy n bytes to dst with non-temporal stores where dst is 16-byte aligned (the same bytes). */
    static void fk_plan_stream_copy(char *dst, const char *src, int64_t n) {
    #if defined(__x86_64__) && defined(__SSE2__)
        int64_t head = (int64_t)((16u - ((uintptr_t)dst & 15u)) & 15u), i;
        if (head > n) head = n;
        memcpy(dst, src, (size_t)head);
        for (i = head; i + 64 <= n; i += 64) {
            _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
            _mm_stream_si128((__m128i *)(dst + i + 16), _mm_loadu_si128((const __m128i *)(src + i + 16)));
            _mm_stream_si128((__m128i *)(dst + i + 32), _mm_loadu_si128((const __m128i *)(src + i + 32)));
            _mm_stream_si128((__m128i *)(dst + i + 48), _mm_loadu_si128((const __m128i *)(src + i + 48)));
        }
        for (; i + 16 <= n; i += 16)
            _mm_stream_si128((__m128i *)(dst + i), _mm_loadu_si128((const __m128i *)(src + i)));
        memcpy(dst + i, src + i, (size_t)(n - i));
    #else
        memcpy(dst, src, (size_t)n);
    #endif
    }

    /* Orders the non-temporal stores of a tile before anything after it (another thread's read). */
    static inline void fk_plan_stream_fence(void) {
    #if defined(__x86_64__) && defined(__SSE2__)
        _mm_sfence();
    #endif
    }

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
        int32_t vm_index;            /* its vector program (tiles after the first), or -1 */
    } fk_plan_group;

    /* One run of one group: shared by the tasks that run its tiles. */
    typedef struct {
        const fk_plan_step *members;
        const fk_plan_group *group;
        const fk_plan_operand *operands;
        const fk_layout *layouts;
        const fk_params *params;
        const fk_params *no_params;
        const fk_plan_rows *rows;
        const char *ctx;             /* the members' row ctx, at fk_plan_rows.ctx_offset */
        const fk_plan_vm *vm;        /* the group's vector program, or NULL */
        int n_streamed;              /* members that stream their output */
        int member_calls;            /* 1: every member calls its kernel on every tile (below) */
        int n_streams;               /* the rows the members mark to prefetch: member, operand */
        const fk_plan_rows *stream_rows[FK_PLAN_STREAMS];
        int stream_op[FK_PLAN_STREAMS];
        char **bases;
        char *scratch;               /* slot 0: the calling thread's tile buffer */
        char *extra;                 /* slots 1 .. n_slots - 1, n_slots - 1 tile buffers */
        int *slot_busy;
        int n_slots;
        int status;                  /* the first failure of a later tile */
        int failed_member;
        char message[FK_ERROR_LEN];
    } fk_plan_group_run;

    /* Cut operand i's whole layout `whole` to one tile: the axes before tile_outer to index outer[d],
     * the tile axis k to [lo, lo + len); an operand in the tile buffer keeps its offset (the buffer
     * holds just the tile). */
    static void fk_plan_tile_layout(const fk_plan_group *g, const fk_plan_operand *op, const fk_layout *whole,
                                    const int64_t *outer, int64_t lo, int64_t len, fk_layout *layout) {
        int k = g->tile_axis, d, in_tile = op->base_index == FK_PLAN_TILE_BASE;
        int shift = g->ndim - whole->ndim;           /* operands broadcast right-aligned */
        *layout = *whole;
        for (d = 0; d <= k; d++) {
            int a = d - shift;
            if (a < 0 || layout->shape[a] == 1) continue;     /* missing or broadcast */
            if (!(op->tile_axes >> d & 1u)) continue;         /* not tiled along d */
            if (d < g->tile_outer) {
                if (!in_tile) layout->offset += outer[d] * layout->strides[a];
                layout->shape[a] = 1;
            } else if (d == k) {
                if (!in_tile) layout->offset += lo * layout->strides[a];
                layout->shape[a] = len;
            }
        }
    }

    /* Member `pr`'s loop `loop` moved to the tile at outer, lo: each operand's first element. */
    static void fk_plan_tile_pointers(const fk_plan_group_run *r, const fk_plan_rows *pr, int last,
                                      const int64_t *outer, int64_t lo, char *scratch, char **ptrs) {
        const fk_plan_group *g = r->group;
        for (int i = 0; i < pr->nops; i++) {
            char *p = (pr->base_index[i] == FK_PLAN_TILE_BASE ? scratch : r->bases[pr->base_index[i]])
                      + pr->start[last][i] + lo * pr->tile_shift[i];
            for (int d = 0; d < g->tile_outer; d++) p += outer[d] * pr->shift[i][d];
            ptrs[i] = p;
        }
    }

    /* The next tile's rows of the streams to prefetch, found once per tile and prefetched into L2
     * a share before each member (so the misses spread over the tile's compute instead of
     * queueing at once): memory traffic overlaps the compute, which touches only L1 and L2. */
    typedef struct {
        const char *row[FK_PLAN_STREAMS][FK_PLAN_STREAM_ROWS];
        int64_t row_bytes[FK_PLAN_STREAMS];
        int rows[FK_PLAN_STREAMS];
        uint8_t write[FK_PLAN_STREAMS];
        int64_t lines;               /* over all streams and rows */
    } fk_plan_prefetch;

    static void fk_plan_prefetch_find(const fk_plan_group_run *r, const int64_t *outer, int64_t lo, int last,
                                      fk_plan_prefetch *pf) {
        pf->lines = 0;
        for (int s = 0; s < r->n_streams; s++) {
            const fk_plan_rows *pr = r->stream_rows[s];
            const fk_loop *loop = &pr->loop[last];
            int op = r->stream_op[s];
            char *ptrs[FK_MAX_OPERANDS];
            int64_t index[FK_MAX_DIMS];
            int rows = pr->rows[last] < FK_PLAN_STREAM_ROWS ? (int)pr->rows[last] : FK_PLAN_STREAM_ROWS;
            fk_plan_tile_pointers(r, pr, last, outer, lo, r->scratch, ptrs);   /* no tile rows among them */
            for (int d = 0; d < loop->ndim; d++) index[d] = 0;
            for (int row = 0; row < rows; row++) {
                pf->row[s][row] = ptrs[op];
                if (row + 1 < rows) fk_loop_next(loop, index, ptrs);
            }
            pf->rows[s] = rows;
            pf->row_bytes[s] = pr->inner[last] * pr->stride[last][op];
            pf->write[s] = pr->prefetch[op] == 2;
            pf->lines += (int64_t)rows * ((pf->row_bytes[s] + 63) / 64);
        }
    }

    /* Share `part` of `parts` of the lines pf found. */
    static void fk_plan_prefetch_part(const fk_plan_group_run *r, const fk_plan_prefetch *pf, int part, int parts) {
        int64_t first = pf->lines * part / parts, end = pf->lines * (part + 1) / parts, at = 0;
        for (int s = 0; s < r->n_streams && at < end; s++) {
            int64_t per_row = (pf->row_bytes[s] + 63) / 64;
            for (int row = 0; row < pf->rows[s] && at < end; row++, at += per_row) {
                int64_t a = first > at ? first - at : 0, b = end - at < per_row ? end - at : per_row;
                for (int64_t line = a; line < b; line++) {
                    if (pf->write[s]) __builtin_prefetch(pf->row[s][row] + line * 64, 1, 2);
                    else __builtin_prefetch(pf->row[s][row] + line * 64, 0, 2);
                }
            }
        }
    }

    /* A streamed output whose stores are spread over the next tile (tiles in order on one thread):
     * the member computes its rows into one of two stack buffers, and the next tile stores them
     * with non-temporal stores a share before each member, so the stores drain while it computes
     * instead of stalling the core in a burst. */
    typedef struct {
        _Alignas(64) char buf[2][FK_PLAN_STREAM_BYTES];
        int next;                    /* the buffer the next streamed row set goes to */
        int rows;                    /* rows pending: from src to dst[row], row_bytes each */
        const char *src;
        char *dst[FK_PLAN_STREAM_ROWS];
        int64_t row_bytes, done, total;   /* bytes stored of the total */
    } fk_plan_drain;

    /* Store the pending bytes up to `upto` of the total. */
    static void fk_plan_drain_to(fk_plan_drain *dr, int64_t upto) {
        while (dr->rows > 0 && dr->done < upto) {
            int64_t row = dr->done / dr->row_bytes, at = dr->done - row * dr->row_bytes;
            int64_t end = upto - row * dr->row_bytes < dr->row_bytes ? upto - row * dr->row_bytes : dr->row_bytes;
            end = end > at ? (end - at + 63) / 64 * 64 + at : at;      /* whole lines */
            if (end > dr->row_bytes) end = dr->row_bytes;
            fk_plan_stream_copy(dr->dst[row] + at, dr->src + row * dr->row_bytes + at, end - at);
            dr->done = row * dr->row_bytes + end;
        }
        if (dr->rows > 0 && dr->done >= dr->total) dr->rows = 0;
    }

    /* One member's row function over one tile: its planned loop, moved to the tile; a streamed
     * output row is computed into a stack buffer and stored from there. */
    static void fk_plan_tile_rows(const fk_plan_group_run *r, const fk_plan_step *step, const int64_t *outer,
                                  int64_t lo, int last, char *scratch, fk_plan_drain *dr) {
        const fk_plan_rows *pr = &r->rows[step->rows_index];
        const void *ctx = pr->ctx_offset >= 0 ? (const void *)(r->ctx + pr->ctx_offset) : NULL;
        const int64_t *inner = pr->stride[last];
        char *ptrs[FK_MAX_OPERANDS], *call[FK_MAX_OPERANDS];
        int64_t index[FK_MAX_DIMS];
        int i, d, n = pr->nops;
        fk_plan_tile_pointers(r, pr, last, outer, lo, scratch, ptrs);
        if (!pr->stream_out && pr->rows[last] == 1) {
            pr->row(ptrs, inner, pr->inner[last], ctx);
            return;
        }
        if (pr->stream_out && dr != NULL && pr->rows[last] <= FK_PLAN_STREAM_ROWS &&
                pr->rows[last] * pr->inner[last] * inner[n - 1] <= FK_PLAN_STREAM_BYTES) {
            const fk_loop *loop = &pr->loop[last];
            int64_t rows = pr->rows[last], length = pr->inner[last], row_bytes = length * inner[n - 1];
            char *buf = dr->buf[dr->next];
            fk_plan_drain_to(dr, dr->total);          /* what is left of the last tile's rows */
            if (rows > 1)
                for (d = 0; d < loop->ndim; d++) index[d] = 0;
            for (int64_t row = 0; row < rows; row++) {
                for (i = 0; i < n - 1; i++) call[i] = ptrs[i];
                call[n - 1] = buf + row * row_bytes;
                pr->row(call, inner, length, ctx);
                dr->dst[row] = ptrs[n - 1];
                if (rows > 1) fk_loop_next(loop, index, ptrs);
            }
            dr->src = buf;
            dr->rows = (int)rows;
            dr->row_bytes = row_bytes;
            dr->done = 0;
            dr->total = rows * row_bytes;
            dr->next ^= 1;
            return;
        }
        {
            const fk_loop *loop = &pr->loop[last];    /* read only for loops of several rows */
            _Alignas(64) char stage[FK_PLAN_STREAM_BYTES];
            int64_t rows = pr->rows[last], length = pr->inner[last];
            if (rows > 1)
                for (d = 0; d < loop->ndim; d++) index[d] = 0;
            for (int64_t row = 0; row < rows; row++) {
                if (pr->stream_out) {
                    for (i = 0; i < n - 1; i++) call[i] = ptrs[i];
                    call[n - 1] = stage;
                    pr->row(call, inner, length, ctx);
                    fk_plan_stream_copy(ptrs[n - 1], stage, length * inner[n - 1]);
                } else {
                    pr->row(ptrs, inner, length, ctx);
                }
                if (rows > 1) fk_loop_next(loop, index, ptrs);
            }
        }
    }

    /* Where tile `tile` starts: outer indices, the start and length along the tile axis, and
     * whether it is the short last tile along that axis. */
    static void fk_plan_tile_where(const fk_plan_group *g, int64_t tile, int64_t *outer, int64_t *lo,
                                   int64_t *len, int *last) {
        int k = g->tile_axis, d;
        int64_t t = tile, block;
        *lo = *len = 0;
        *last = 0;
        if (k < 0) return;
        block = t % g->tiles_along;
        t /= g->tiles_along;
        *lo = block * g->tile_len;
        *len = g->shape[k] - *lo < g->tile_len ? g->shape[k] - *lo : g->tile_len;
        *last = *len != g->tile_len;
        for (d = g->tile_outer - 1; d >= 0; d--) {
            outer[d] = t % g->shape[d];
            t /= g->shape[d];
        }
    }

    /* Tile `tile` (> 0) of a group with a vector program: its flat elements (an elementwise
     * group's tile is one run of them: the axes before the tile axis take one index, the axes
     * after it are whole) through the program.  Its non-temporal stores are left to the caller
     * to fence (a fence per tile drains the write-combining buffers each time: 2048 tiles of a
     * 4M-element group took 0.7 ms longer). */
    static void fk_plan_vm_tile(const fk_plan_group_run *r, int64_t tile) {
        const fk_plan_group *g = r->group;
        _Alignas(64) char blk[FK_VM_SCRATCH_BYTES];
        int k = g->tile_axis;
        int64_t inner = 1, outer = tile / g->tiles_along, lo = tile % g->tiles_along * g->tile_len, len, start;
        for (int d = k + 1; d < g->ndim; d++) inner *= g->shape[d];
        len = g->shape[k] - lo < g->tile_len ? g->shape[k] - lo : g->tile_len;
        start = (outer * g->shape[k] + lo) * inner;
        fk_vm_run_range(r->vm, r->bases, r->ctx, start, start + len * inner, blk);
    }

    /* Run every member on tile `tile`, with intermediates in `scratch`; the failing member's
     * index goes to *failed.  Tile 0 calls every member's kernel, which checks everything it
     * checks on any call; the later tiles call the row functions of the members that have one
     * (same layouts, same bits, no checks). */
    static int fk_plan_tile(const fk_plan_group_run *r, int64_t tile, char *scratch, int *failed, fk_plan_drain *dr) {
        const fk_plan_group *g = r->group;
        fk_storage storage[FK_MAX_OPERANDS];
        fk_layout tiled[FK_MAX_OPERANDS];
        const fk_layout *layouts;
        int64_t outer[FK_MAX_DIMS], lo = 0, len = 0;
        int k = g->tile_axis, m, i, status, n_members = r->members[0].n_members, last = 0;
        fk_plan_prefetch pf;
        if (tile > 0 && r->vm != NULL) {
            fk_plan_vm_tile(r, tile);
            return FK_OK;
        }
        pf.lines = 0;
        int prefetch = tile > 0 && r->n_streams > 0 && tile + 1 < g->n_tiles;
        fk_plan_tile_where(g, tile, outer, &lo, &len, &last);
        if (prefetch) {                  /* the next tile's rows */
            int64_t next_outer[FK_MAX_DIMS], next_lo, next_len;
            int next_last;
            fk_plan_tile_where(g, tile + 1, next_outer, &next_lo, &next_len, &next_last);
            fk_plan_prefetch_find(r, next_outer, next_lo, next_last, &pf);
        }
        for (m = 0; m < n_members; m++) {
            const fk_plan_step *step = &r->members[1 + m];
            const fk_plan_operand *ops = &r->operands[step->first];
            int n = step->n_in + step->n_out;
            if (prefetch) fk_plan_prefetch_part(r, &pf, m, n_members);
            if (dr != NULL && dr->rows > 0) fk_plan_drain_to(dr, dr->total * (m + 1) / n_members);
            if (tile > 0 && step->rows_index >= 0 && !r->member_calls) {
                fk_plan_tile_rows(r, step, outer, lo, last, scratch, dr);
                if (r->rows[step->rows_index].stream_out && dr == NULL) fk_plan_stream_fence();
                continue;
            }
            for (i = 0; i < n; i++) {
                storage[i] = ops[i].storage;
                storage[i].data = (ops[i].base_index == FK_PLAN_TILE_BASE ? scratch : r->bases[ops[i].base_index])
                                  + ops[i].byte_offset;
            }
            layouts = &r->layouts[step->first];       /* one tile: the whole layouts */
            if (k >= 0) {
                for (i = 0; i < n; i++)
                    fk_plan_tile_layout(g, &ops[i], &r->layouts[step->first + i], outer, lo, len, &tiled[i]);
                layouts = tiled;
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

    /* Plan member `step`'s direct rows into *pr (its ctx already filled): the loops of a full
     * and of the last tile, checked inside their storages as the kernel checks (the tile buffer's
     * operands), and every other operand's whole layout inside its storage, so no tile reads or
     * writes outside.  FK_OK, or the status of the first check that fails (the member then
     * calls its kernel on every tile; the error is cleared). */
    static int fk_plan_rows_plan(const fk_plan_group *g, const fk_plan_step *step, const fk_plan_operand *ops,
                                 const fk_layout *layouts, fk_plan_rows *pr);

    /* fk_plan_rows_plan, then mark the operands whose rows move from tile to tile (outside the
     * tile buffer) for prefetching (fk_plan_group_dedupe drops repeats). */
    static int fk_plan_rows_prepare(const fk_plan_group *g, const fk_plan_step *step, const fk_plan_operand *ops,
                                    const fk_layout *layouts, fk_plan_rows *pr) {
        int status = fk_plan_rows_plan(g, step, ops, layouts, pr);
        if (status == FK_OK) {
            int n = step->n_in + step->n_out;
            for (int i = 0; i < n; i++) {
                int moves = 0;
                for (int d = 0; d < FK_MAX_DIMS; d++) moves |= pr->shift[i][d] != 0;
                int contiguous = pr->loop[0].strides[i][pr->loop[0].ndim - 1] == fk_dtype_itemsize[ops[i].storage.dtype]
                                 && pr->loop[1].strides[i][pr->loop[1].ndim - 1] == fk_dtype_itemsize[ops[i].storage.dtype];
                pr->prefetch[i] = ops[i].base_index == FK_PLAN_TILE_BASE || !moves || !contiguous ? 0
                                  : i < step->n_in ? 1 : 2;
            }
        }
        return status;
    }

    /* Drop the prefetch marks of streams an earlier member of the group (steps `members`, after
     * the group step) already prefetches: the same base, start and moves. */
    static void fk_plan_group_dedupe(const fk_plan_step *members, int n_members, const fk_plan_operand *operands,
                                     fk_plan_rows *rows) {
        /* stream a member's output when its rows are contiguous, fit the stack buffer, and no
         * other operand of the group overlaps its bytes (its stores may land a tile late) */
        for (int m = 0; m < n_members; m++) {
            const fk_plan_step *step = &members[m];
            fk_plan_rows *pr = step->rows_index >= 0 ? &rows[step->rows_index] : NULL;
            int o = step->n_in, stream = pr != NULL;
            const fk_plan_operand *out = &operands[step->first + o];
            for (int j = 0; stream && j < 2; j++)
                stream = pr->loop[j].strides[o][pr->loop[j].ndim - 1] == fk_dtype_itemsize[out->storage.dtype] &&
                         pr->loop[j].inner * fk_dtype_itemsize[out->storage.dtype] <= FK_PLAN_STREAM_BYTES;
            stream = stream && out->base_index != FK_PLAN_TILE_BASE;
            for (int e = 0; stream && e < n_members; e++)
                for (int j = 0; stream && j < members[e].n_in + members[e].n_out; j++) {
                    const fk_plan_operand *op = &operands[members[e].first + j];
                    if (op == out) continue;
                    stream = !(op->base_index == out->base_index &&
                               op->byte_offset < out->byte_offset + (int64_t)out->storage.nbytes &&
                               out->byte_offset < op->byte_offset + (int64_t)op->storage.nbytes);
                }
            if (pr != NULL) {
                pr->stream_out = (uint8_t)stream;
                if (stream) pr->prefetch[o] = 0;
            }
        }
        for (int m = 0; m < n_members; m++) {
            const fk_plan_step *step = &members[m];
            fk_plan_rows *pr = step->rows_index >= 0 ? &rows[step->rows_index] : NULL;
            for (int i = 0; pr != NULL && i < step->n_in + step->n_out; i++) {
                const fk_plan_operand *op = &operands[step->first + i];
                for (int e = 0; e < m && pr->prefetch[i]; e++) {
                    const fk_plan_step *before = &members[e];
                    const fk_plan_rows *pe = before->rows_index >= 0 ? &rows[before->rows_index] : NULL;
                    for (int j = 0; pe != NULL && j < before->n_in + before->n_out; j++) {
                        const fk_plan_operand *oe = &operands[before->first + j];
                        if (pe->prefetch[j] && oe->base_index == op->base_index &&
                            pe->start[0][j] == pr->start[0][i] &&
                            memcmp(pe->shift[j], pr->shift[i], sizeof(pr->shift[i])) == 0) {
                            pr->prefetch[i] = 0;
                            break;
                        }
                    }
                }
            }
        }
    }

    /* The address fk_plan_rows_plan gives every operand's data while it plans (never dereferenced:
     * the loop's base pointers, less this, are the distances a run adds to the real data). */
    #define FK_PLAN_PLANNED_BASE ((uintptr_t)1 << 40)

    static int fk_plan_rows_plan(const fk_plan_group *g, const fk_plan_step *step, const fk_plan_operand *ops,
                                 const fk_layout *layouts, fk_plan_rows *pr) {
        fk_storage storage[FK_MAX_OPERANDS];
        fk_layout tiled[FK_MAX_OPERANDS];
        int64_t outer[FK_MAX_DIMS] = {0}, len;
        int n = step->n_in + step->n_out, i, d, j, k = g->tile_axis, status;
        if (step->n_out != 1 || n > FK_MAX_OPERANDS) return FK_ERR_OPERANDS;
        for (i = 0; i < n; i++) {
            storage[i] = ops[i].storage;
            storage[i].data = (void *)FK_PLAN_PLANNED_BASE;
            if (ops[i].base_index != FK_PLAN_TILE_BASE) {
                status = fk_layout_check(&layouts[i], &storage[i], "operand", i);
                if (status) { fk_clear_error(); return status; }
            }
            for (d = 0; d < FK_MAX_DIMS; d++) pr->shift[i][d] = 0;
        }
        for (j = 0; j < 2; j++) {
            len = k < 0 ? 0 : j == 0 ? g->tile_len : g->shape[k] - (g->tiles_along - 1) * g->tile_len;
            for (i = 0; i < n; i++) {
                if (k >= 0) fk_plan_tile_layout(g, &ops[i], &layouts[i], outer, 0, len, &tiled[i]);
                else tiled[i] = layouts[i];
            }
            status = fk_loop_plan(&pr->loop[j], storage, step->n_in, &storage[step->n_in], tiled, NULL);
            if (status) { fk_clear_error(); return status; }
            if (pr->loop[j].rows == 0) return FK_ERR_SHAPE;         /* an empty tile: the kernel's case */
        }
        for (i = 0; k >= 0 && i < n; i++) {
            int shift = g->ndim - layouts[i].ndim;
            if (ops[i].base_index == FK_PLAN_TILE_BASE) continue;
            for (d = 0; d <= k; d++) {
                int a = d - shift;
                if (a < 0 || layouts[i].shape[a] == 1 || !(ops[i].tile_axes >> d & 1u)) continue;
                if (d < g->tile_outer || d == k)
                    pr->shift[i][d] = layouts[i].strides[a] * fk_dtype_itemsize[ops[i].storage.dtype];
            }
        }
        pr->nops = n;
        for (j = 0; j < 2; j++) {
            pr->rows[j] = pr->loop[j].rows;
            pr->inner[j] = pr->loop[j].inner;
        }
        for (i = 0; i < n; i++) {
            pr->base_index[i] = ops[i].base_index;
            pr->tile_shift[i] = k >= 0 ? pr->shift[i][k] : 0;
            for (j = 0; j < 2; j++) {
                pr->start[j][i] = ops[i].byte_offset + (int64_t)((uintptr_t)pr->loop[j].base[i] - FK_PLAN_PLANNED_BASE);
                pr->stride[j][i] = pr->loop[j].strides[i][pr->loop[j].ndim - 1];
            }
        }
        return FK_OK;
    }

    static void fk_plan_rows_set(fk_plan_rows *pr, const fk_tile_row *row, int64_t ctx_offset) {
        pr->row = row->row;
        pr->ctx_offset = ctx_offset;
    }

    /* Instruction c of *vm calls the row function member `pr` calls on tiles. */
    static void fk_plan_vm_bind_row(fk_plan_vm *vm, int c, const fk_plan_rows *pr) {
        vm->row[c] = pr->row;
        vm->ctx_offset[c] = pr->ctx_offset;
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
                              &failed, NULL);
        if (r->vm != NULL) fk_plan_stream_fence();   /* before the pool sees the task done */
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
                                 const fk_params *params, const fk_params *no_params,
                                 const fk_plan_rows *rows, const char *ctx, const fk_plan_vm *vms,
                                 char **bases, int *failed_member) {
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
        r.rows = rows;
        r.ctx = ctx;
        r.vm = g->vm_index >= 0 ? &vms[g->vm_index] : NULL;
        /* The tiles of a GEMM's or convolution's epilogue run in order on this thread; with more
         * threads its members call their kernels, which cut each tile across the pool, instead of
         * running their row functions on this thread alone (at 16 threads a 512 x 3072 bias + GELU
         * epilogue on one thread took longer than the product).  The same elements either way. */
        r.member_calls = g->serial && fk_num_threads() > 1;
        for (t = 0; t < steps[0].n_members; t++) {
            const fk_plan_step *member = &steps[1 + t];
            if (member->rows_index >= 0) r.n_streamed += rows[member->rows_index].stream_out;
            if (member->rows_index >= 0)
                for (int i = 0; i < rows[member->rows_index].nops && r.n_streams < FK_PLAN_STREAMS; i++)
                    if (rows[member->rows_index].prefetch[i]) {
                        r.stream_rows[r.n_streams] = &rows[member->rows_index];
                        r.stream_op[r.n_streams++] = i;
                    }
        }
        r.bases = bases;
        r.n_slots = threads;
        r.scratch = bases[g->scratch_base] + g->scratch_offset;
        status = fk_plan_tile(&r, 0, r.scratch, failed_member, NULL);
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
                fk_plan_drain *dr = r.n_streamed && r.vm == NULL ? (fk_plan_drain *)aligned_alloc(64, sizeof(fk_plan_drain)) : NULL;
                if (dr != NULL) {
                    dr->next = dr->rows = 0;
                    dr->total = dr->done = 0;
                }
                for (t = 1; t < g->n_tiles && status == FK_OK; t++)
                    status = fk_plan_tile(&r, t, r.scratch, failed_member, dr);
                if (r.vm != NULL) fk_plan_stream_fence();
                if (dr != NULL) {
                    fk_plan_drain_to(dr, dr->total);
                    fk_plan_stream_fence();
                    free(dr);
                }
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
        int32_t rows_index

    ctypedef struct fk_plan_rows:
        pass

    ctypedef struct fk_tile_row:
        fk_kernel_fn kernel
        int (*setup)(const fk_params *params, void *ctx) noexcept nogil
        int32_t ctx_bytes

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
        int32_t vm_index

    enum:
        FK_VM_ADD, FK_VM_SUB, FK_VM_MUL, FK_VM_DIV, FK_VM_MAXIMUM, FK_VM_MINIMUM, FK_VM_NEG, FK_VM_ABS
        FK_VM_SQR, FK_VM_RELU, FK_VM_ROW, FK_VM_CHAIN, FK_VM_LOAD, FK_VM_STORE
        FK_VM_ACC_SRC, FK_VM_SRC_ACC, FK_VM_ACC_ACC
        FK_VM_FULL, FK_VM_LASTROW, FK_VM_SCALAR, FK_VM_OUT
        FK_VM_MAX_SLOTS, FK_VM_MAX_REGS, FK_VM_MAX_CODE, FK_VM_MAX_STEPS

    ctypedef struct fk_vm_insn:
        uint8_t op
        uint8_t nargs
        uint16_t first_step, n_steps
        uint8_t arg[8]
        int32_t member

    ctypedef struct fk_vm_step:
        uint8_t code
        uint8_t arg

    ctypedef struct fk_plan_vm:
        int32_t dtype
        int32_t n_slots, n_regs, n_code, n_steps
        uint32_t streamed
        int64_t row_len
        int32_t slot_kind[16]
        int32_t slot_base[16]
        int64_t slot_offset[16]
        fk_vm_insn code[64]
        fk_vm_step step[192]

    int fk_plan_run_group(const fk_plan_step *steps, const fk_plan_group *g, const fk_plan_operand *operands,
                          const fk_layout *layouts, const fk_params *params, const fk_params *no_params,
                          const fk_plan_rows *rows, const char *ctx, const fk_plan_vm *vms, char **bases,
                          int *failed_member) noexcept nogil
    void fk_plan_vm_bind_row(fk_plan_vm *vm, int c, const fk_plan_rows *pr) noexcept nogil
    int fk_plan_rows_prepare(const fk_plan_group *g, const fk_plan_step *step, const fk_plan_operand *ops,
                             const fk_layout *layouts, fk_plan_rows *pr) noexcept nogil
    void fk_plan_rows_set(fk_plan_rows *pr, const fk_tile_row *row, int64_t ctx_offset) noexcept nogil
    void fk_plan_group_dedupe(const fk_plan_step *members, int n_members, const fk_plan_operand *operands,
                              fk_plan_rows *rows) noexcept nogil


cdef fk_params NO_PARAMS                         # zero-filled: what a step without params passes


# Steps, their operands, layouts and params live in four packed arrays walked in order, so a run
# streams through exactly the bytes the kernels read (a 1000-node chain touches ~0.6 MB, inside
# L2) instead of one FK_MAX_OPERANDS-sized record per step.  A group step is followed by its
# members, which the loop skips: fk_plan_run_group runs them.
cdef int run_steps(const fk_plan_step *steps, int n_steps, const fk_plan_operand *operands,
                   const fk_layout *layouts, const fk_params *params, const fk_plan_group *groups,
                   const fk_plan_rows *rows, const char *ctx, const fk_plan_vm *vms, char **bases,
                   int *failed_step) noexcept nogil:
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
                                       rows, ctx, vms, bases, &member)
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


# The vector program's codes by name: the ops with an inline form (chain steps), the
# instructions "ROW" (a member's row function on the block) and "CHAIN" (steps on registers), the
# steps "LOAD" and "STORE"; a binary step's operand forms; its slot kinds: what the planner's
# vector_program writes.
VECTOR_OPCODES = {"ADD": FK_VM_ADD, "SUB": FK_VM_SUB, "MUL": FK_VM_MUL, "DIV": FK_VM_DIV,
                  "MAXIMUM": FK_VM_MAXIMUM, "MINIMUM": FK_VM_MINIMUM, "NEG": FK_VM_NEG, "ABS": FK_VM_ABS,
                  "SQR": FK_VM_SQR, "RELU": FK_VM_RELU, "ROW": FK_VM_ROW, "CHAIN": FK_VM_CHAIN,
                  "LOAD": FK_VM_LOAD, "STORE": FK_VM_STORE}
VECTOR_FORMS = {"acc, src": FK_VM_ACC_SRC, "src, acc": FK_VM_SRC_ACC, "acc, acc": FK_VM_ACC_ACC}
VECTOR_SLOTS = {"full": FK_VM_FULL, "row": FK_VM_LASTROW, "scalar": FK_VM_SCALAR, "out": FK_VM_OUT}
VECTOR_LIMITS = {"slots": FK_VM_MAX_SLOTS, "registers": FK_VM_MAX_REGS, "code": FK_VM_MAX_CODE,
                 "steps": FK_VM_MAX_STEPS}


cdef extern from "numpy/arrayobject.h":
    PyTypeObject PyArray_Type
    # steals a reference to descr
    object PyArray_NewFromDescr(PyTypeObject *subtype, cnp.dtype descr, int nd, cnp.npy_intp *dims,
                                cnp.npy_intp *strides, void *data, int flags, object obj)

cdef enum:
    ALIGNED_EMPTY_MAX_DIMS = 32


def aligned_empty(tuple shape, cnp.dtype dtype, Py_ssize_t alignment):
    """An uninitialized C-contiguous array of `shape` and `dtype` whose data starts on an
    `alignment` (a power of two) boundary: NumPy's own allocations start 16 bytes into a cache
    line, so every full-width AVX-512 store into one splits two lines.  One over-allocated byte
    array holds the data and is the result's base; built in C, as a plan allocates its outputs
    this way on every run (NumPy's slicing and views cost 2-3 us an array there)."""
    cdef cnp.npy_intp dims[ALIGNED_EMPTY_MAX_DIMS]
    cdef cnp.npy_intp total
    cdef Py_ssize_t nbytes = dtype.itemsize, extent
    cdef int nd = len(shape), i
    cdef char *data
    if nd > ALIGNED_EMPTY_MAX_DIMS:
        raise ShapeError(f"aligned_empty: {nd} dims, at most {ALIGNED_EMPTY_MAX_DIMS}")
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"aligned_empty: alignment {alignment} is not a power of two")
    for i in range(nd):
        extent = shape[i]
        if extent < 0 or (extent > 0 and nbytes > (PY_SSIZE_T_MAX - alignment) // extent):
            raise ShapeError(f"aligned_empty: shape {shape} of {dtype} is negative or too large")
        dims[i] = extent
        nbytes *= extent
    total = nbytes + alignment
    raw = cnp.PyArray_EMPTY(1, &total, cnp.NPY_UINT8, 0)
    data = cnp.PyArray_BYTES(<cnp.ndarray>raw)
    data += (-<uintptr_t>data) & <uintptr_t>(alignment - 1)
    Py_INCREF(dtype)
    array = PyArray_NewFromDescr(&PyArray_Type, dtype, nd, dims, NULL, data, cnp.NPY_ARRAY_CARRAY, None)
    cnp.set_array_base(<cnp.ndarray>array, raw)
    return array


def tile_row_entries(capsule, int n_rows):
    """(kernel address, capsule of its fk_tile_row) for every row of a 'fuel_kernel.tile_rows'
    capsule (a CPU kernel module's tile_rows()): what add_group takes to call a member's row
    function directly."""
    cdef const fk_tile_row *rows
    cdef int i
    if not PyCapsule_IsValid(capsule, b"fuel_kernel.tile_rows"):
        raise TypeError("expected a 'fuel_kernel.tile_rows' capsule")
    rows = <const fk_tile_row *>PyCapsule_GetPointer(capsule, b"fuel_kernel.tile_rows")
    return [(<uintptr_t>rows[i].kernel, PyCapsule_New(<void *>&rows[i], b"fuel_kernel.tile_row", NULL))
            for i in range(n_rows)]


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
    cdef fk_plan_rows *rows                      # group members that call their row functions
    cdef fk_plan_vm *vms                         # groups' vector programs
    cdef int64_t n_vms, vms_capacity
    cdef char *ctx                               # and the ctx those take (16-byte aligned slots)
    cdef int64_t n_rows, rows_capacity, ctx_used, ctx_capacity
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
        self.rows = NULL
        self.vms = NULL
        self.n_vms = self.vms_capacity = 0
        self.ctx = NULL
        self.n_rows = self.rows_capacity = self.ctx_used = self.ctx_capacity = 0
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
        free(self.rows)
        free(self.vms)
        free(self.ctx)
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
                  int tile_outer=-1, bint serial=False, object program=None):
        """A fused group: `members` are (kernel, node_id, name, operands, params) as add_step takes
        them, in order, where base_index -1 names the tile buffer (byte_offset into it; the layout
        has the whole output shape and the C-contiguous strides of the largest tile).  An operand
        may end with tile_axes, a mask of the group's axes it follows (default: all).  Every
        member's output has `shape`; a tile is [1, .., 1, shape[tile_outer:tile_axis], tile_len,
        shape[tile_axis + 1:]] (tile_outer -1: tile_axis), or the whole shape when tile_axis is
        -1; tile_bytes is one thread's tile buffer; the calling thread's is at byte scratch_offset
        of base scratch_base (64-byte aligned; the plan's arena), other threads' are allocated when
        a run splits the tiles across threads (never when `serial`: the tiles then run in order on
        the calling thread).  A member's optional sixth item, a 'fuel_kernel.tile_row' capsule of
        its kernel (tile_row_entries), lets it call that row function directly on every tile after
        the first.  `program` (planner.vector_program): (dtype, row_len, slots, code), slots
        (kind, base_index, byte_offset) per VECTOR_SLOTS, code a list of instructions per
        VECTOR_OPCODES: ("ROW", member index, args) with args the member's operands as slots, then
        registers (n_slots + r), or ("CHAIN", first member index, steps), steps (code, form, source)
        with code an inline op (form per VECTOR_FORMS; 0 for a unary op), LOAD or STORE (form 0;
        a STORE into a register or an output slot); the tiles after the first
        run it instead of the members (an elementwise group tiled along an axis only; a ROW
        instruction needs its member's row function).  Returns, per member, whether it calls its
        row function directly; vector_program(group) says whether the group runs its program."""
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
            if len(member) not in (5, 6):
                raise ValueError("a group member is (kernel, node_id, name, operands, params[, tile_row])")
            if len(member) == 6 and member[5] is not None and not PyCapsule_IsValid(member[5], b"fuel_kernel.tile_row"):
                raise TypeError("a group member's tile_row is a 'fuel_kernel.tile_row' capsule (tile_row_entries) or None")
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
        group.vm_index = -1
        if scratch_offset + tile_bytes > self.base_bytes[scratch_base]:
            self.base_bytes[scratch_base] = scratch_offset + tile_bytes
        step = &self.steps[self.n_steps]
        memset(step, 0, sizeof(fk_plan_step))
        step.node_id = node_id
        step.params_index = -1
        step.group = self.n_groups
        step.rows_index = -1
        step.n_members = n_members
        step.first = self.n_operands
        self.n_groups += 1
        self.n_steps += 1
        self.node_names.append(name)
        cdef int first_member = self.n_steps
        direct = []
        for member in members:
            self._append(member[0], member[1], member[2], member[3], member[4], True)
        self.n_top_steps += 1
        for i in range(n_members):
            tile_row = members[i][5] if len(members[i]) == 6 else None
            direct.append(tile_row is not None and
                          self._direct_rows(&self.groups[self.n_groups - 1], &self.steps[first_member + i], tile_row))
        fk_plan_group_dedupe(&self.steps[first_member], n_members, self.operands, self.rows)
        if program is not None and tile_axis >= 0 and tile_outer == tile_axis and not serial:
            self._add_program(&self.groups[self.n_groups - 1], first_member, n_members, shape, program)
        return tuple(direct)

    def vector_program(self, int group):
        """Whether group `group` (in add_group order) runs its tiles after the first as a vector program."""
        if not 0 <= group < self.n_groups:
            raise IndexError(f"group {group} out of range")
        return self.groups[group].vm_index >= 0

    cdef _add_program(self, fk_plan_group *group, int first_member, int n_members, tuple shape, object program):
        """Check `program` (add_group) against the group and record it; a ROW instruction whose
        member has no row function leaves the group without one."""
        cdef fk_plan_vm vm
        cdef fk_plan_step *step
        cdef int c, k, s
        cdef int64_t numel = 1, es, need
        memset(&vm, 0, sizeof(vm))
        dtype, row_len, slots, code = program
        if dtype not in (FK_F32, FK_F64) or row_len != shape[-1]:
            raise ValueError(f"a vector program is over F32 or F64 rows of the group's last axis")
        es = 8 if dtype == FK_F64 else 4
        for extent in shape:
            numel *= extent
        if not 1 <= len(slots) <= FK_VM_MAX_SLOTS or not 1 <= len(code) <= FK_VM_MAX_CODE:
            raise ValueError(f"a vector program has 1 to {FK_VM_MAX_SLOTS} slots and 1 to {FK_VM_MAX_CODE} instructions")
        vm.dtype = dtype
        vm.row_len = row_len
        vm.n_slots = len(slots)
        vm.n_code = len(code)
        vm.n_regs = 0
        for s, (kind, base, byte_offset) in enumerate(slots):
            need = {FK_VM_FULL: numel, FK_VM_OUT: numel, FK_VM_LASTROW: row_len, FK_VM_SCALAR: 1}[kind] * es
            if not 0 <= base < self.n_bases or byte_offset < 0 or byte_offset + need > self.base_bytes[base]:
                raise ValueError(f"vector program slot {s} lies outside base {base}")
            vm.slot_kind[s] = kind
            vm.slot_base[s] = base
            vm.slot_offset[s] = byte_offset
        for c, instruction in enumerate(code):
            op, member, args = instruction
            if op not in (FK_VM_ROW, FK_VM_CHAIN) or not 0 <= member < n_members:
                raise ValueError(f"vector program instruction {c} names op {op} of member {member}")
            vm.code[c].op = op
            vm.code[c].member = member
            if op == FK_VM_CHAIN:
                self._add_chain(&vm, c, args)
                continue
            step = &self.steps[first_member + member]
            if len(args) != step.n_in + step.n_out:
                raise ValueError(f"vector program instruction {c} has {len(args)} arguments")
            vm.code[c].nargs = len(args)
            for k, a in enumerate(args):
                if a < 0 or a >= vm.n_slots + FK_VM_MAX_REGS:
                    raise ValueError(f"vector program instruction {c} names source {a}")
                vm.n_regs = max(vm.n_regs, a - vm.n_slots + 1)
                vm.code[c].arg[k] = a
            if step.rows_index < 0:
                return
            fk_plan_vm_bind_row(&vm, c, &self.rows[step.rows_index])
        vm.streamed = 0               # outputs only chain STOREs write and no instruction reads
        for c in range(vm.n_code):
            if vm.code[c].op == FK_VM_ROW:
                continue
            for k in range(vm.code[c].first_step, vm.code[c].first_step + vm.code[c].n_steps):
                if vm.step[k].code == FK_VM_STORE * 4 and vm.step[k].arg < vm.n_slots:
                    vm.streamed |= (<uint32_t>1) << vm.step[k].arg
        for c in range(vm.n_code):
            if vm.code[c].op == FK_VM_ROW:
                for k in range(vm.code[c].nargs):
                    vm.streamed &= ~((<uint32_t>1) << vm.code[c].arg[k])
                continue
            for k in range(vm.code[c].first_step, vm.code[c].first_step + vm.code[c].n_steps):
                if vm.step[k].code != FK_VM_STORE * 4 and vm.step[k].code % 4 != FK_VM_ACC_ACC and \
                        not FK_VM_NEG * 4 <= vm.step[k].code <= FK_VM_RELU * 4:
                    vm.streamed &= ~((<uint32_t>1) << vm.step[k].arg)
        self.vms = <fk_plan_vm *>grow(self.vms, &self.vms_capacity, self.n_vms + 1, sizeof(fk_plan_vm))
        self.vms[self.n_vms] = vm
        group.vm_index = self.n_vms
        self.n_vms += 1

    cdef _add_chain(self, fk_plan_vm *vm, int c, object steps):
        """Check the steps of chain instruction c (add_group) and append them to vm->step."""
        cdef int form, source
        if not 1 <= len(steps) <= FK_VM_MAX_STEPS - vm.n_steps:
            raise ValueError(f"vector program instruction {c} has {len(steps)} steps "
                             f"(at most {FK_VM_MAX_STEPS} in all)")
        vm.code[c].first_step = vm.n_steps
        vm.code[c].n_steps = len(steps)
        for k, (op, form, source) in enumerate(steps):
            binary = FK_VM_ADD <= op <= FK_VM_MINIMUM
            if not (binary or FK_VM_NEG <= op <= FK_VM_RELU or op in (FK_VM_LOAD, FK_VM_STORE)) or \
                    not 0 <= form <= (FK_VM_ACC_ACC if binary else 0) or (k == 0 and op != FK_VM_LOAD):
                raise ValueError(f"vector program instruction {c} step {k} is op {op} form {form}")
            if not 0 <= source < vm.n_slots + FK_VM_MAX_REGS or \
                    (op == FK_VM_STORE and source < vm.n_slots and vm.slot_kind[source] != FK_VM_OUT):
                raise ValueError(f"vector program instruction {c} step {k} names source {source}")
            if op == FK_VM_LOAD or op == FK_VM_STORE or (binary and form != FK_VM_ACC_ACC):
                vm.n_regs = max(vm.n_regs, source - vm.n_slots + 1)
            vm.step[vm.n_steps].code = op * 4 + form
            vm.step[vm.n_steps].arg = source
            vm.n_steps += 1

    cdef bint _direct_rows(self, fk_plan_group *group, fk_plan_step *step, object capsule) except -1:
        """Let `step` (a member just appended) call its row function on tiles: fill its ctx, plan
        its loops; False (the member calls its kernel on every tile) when a check fails."""
        cdef const fk_tile_row *row = <const fk_tile_row *>PyCapsule_GetPointer(capsule, b"fuel_kernel.tile_row")
        cdef int64_t ctx_offset = -1
        cdef int status
        if row.kernel != step.kernel or row.ctx_bytes < 0 or row.ctx_bytes > 4096:
            return False
        if row.setup != NULL:
            ctx_offset = (self.ctx_used + 15) // 16 * 16
            self.ctx = <char *>grow(self.ctx, &self.ctx_capacity, ctx_offset + row.ctx_bytes + 16, 1)
            memset(self.ctx + ctx_offset, 0, row.ctx_bytes)
            status = row.setup(&self.params[step.params_index] if step.params_index >= 0 else &NO_PARAMS,
                               self.ctx + ctx_offset)
            if status != FK_OK:
                fk_clear_error()         # the kernel reports it on the first tile
                return False
            self.ctx_used = ctx_offset + row.ctx_bytes
        self.rows = <fk_plan_rows *>grow(self.rows, &self.rows_capacity, self.n_rows + 1, sizeof(fk_plan_rows))
        memset(&self.rows[self.n_rows], 0, sizeof(fk_plan_rows))
        if fk_plan_rows_prepare(group, step, &self.operands[step.first], &self.layouts[step.first],
                                &self.rows[self.n_rows]) != FK_OK:
            return False
        fk_plan_rows_set(&self.rows[self.n_rows], row, ctx_offset)
        step.rows_index = self.n_rows
        self.n_rows += 1
        return True

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
        step.rows_index = -1
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

    cdef object _base_pointers(self, list bases, char **stack):
        """Check `bases` (n_bases NumPy arrays, each holding the bytes the steps address) and write
        their data pointers to `stack` (256 slots), or, for more bases, to a bytearray returned to
        the caller, which keeps it alive while the pointers are used (None: they are in `stack`)."""
        cdef int i
        cdef object keep = None
        cdef char **ptrs = stack
        if len(bases) != self.n_bases:
            raise ValueError(f"expected {self.n_bases} base buffers, got {len(bases)}")
        for i in range(self.n_bases):
            # checked, never a blind <ndarray> cast: anything else would be read as an array
            if not cnp.PyArray_Check(bases[i]):
                raise OperandTypeError(f"base buffer {i} is a {type(bases[i]).__name__}, not a NumPy array")
            if cnp.PyArray_NBYTES(<cnp.ndarray>bases[i]) < self.base_bytes[i]:
                raise ShapeError(f"base buffer {i} holds {cnp.PyArray_NBYTES(<cnp.ndarray>bases[i])} "
                                 f"bytes; the plan addresses {self.base_bytes[i]}")
        if self.n_bases > 256:
            keep = bytearray(self.n_bases * sizeof(char *))
            ptrs = <char **><char *>keep
        for i in range(self.n_bases):
            ptrs[i] = cnp.PyArray_BYTES(<cnp.ndarray>bases[i])
        return keep

    cdef void _raise_failure(self, int status, int failed) except *:
        message = fk_error_message().decode("utf-8", "replace")
        fk_clear_error()             # consumed: the thread's error state is clear between calls
        name = self.node_names[failed]
        raise STATUS_ERRORS.get(status, FuelKernelError)(f"node {self.steps[failed].node_id} ({name}) failed: {message}")

    def run(self, list bases):
        """Run every step with `bases` (one C-contiguous NumPy array per base index)."""
        cdef char *base_ptrs[256]
        cdef char **ptrs = base_ptrs
        cdef int status, failed = -1
        cdef object keep
        keep = self._base_pointers(bases, base_ptrs)
        if keep is not None:
            ptrs = <char **><char *>keep
        with nogil:
            status = run_steps(self.steps, self.n_steps, self.operands, self.layouts, self.params, self.groups,
                               self.rows, self.ctx, self.vms, ptrs, &failed)
        if status != FK_OK:
            self._raise_failure(status, failed)

    def time_steps(self, list bases, int repeats):
        """Run each step (a fused group is one step) `repeats` times back to back, in plan order, with
        `bases` as run() takes them; returns the best seconds of each.  The steps read what the steps
        before them wrote, as in a run; a step whose output overwrites its own input (the arena
        reuses a dead input's bytes) computes on its last result when repeated, so the arena and any
        plan state are left as garbage, to be recomputed by the next run."""
        cdef char *base_ptrs[256]
        cdef char **ptrs = base_ptrs
        cdef int r, s = 0, count, status = FK_OK, failed = -1
        cdef object keep
        cdef timespec t0, t1
        cdef double seconds
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        keep = self._base_pointers(bases, base_ptrs)
        if keep is not None:
            ptrs = <char **><char *>keep
        best = []
        while s < self.n_steps:
            count = 1 + self.steps[s].n_members if self.steps[s].group >= 0 else 1
            seconds = 1e300
            with nogil:
                for r in range(repeats):
                    clock_gettime(CLOCK_MONOTONIC, &t0)
                    status = run_steps(&self.steps[s], count, self.operands, self.layouts, self.params,
                                       self.groups, self.rows, self.ctx, self.vms, ptrs, &failed)
                    clock_gettime(CLOCK_MONOTONIC, &t1)
                    if status != FK_OK:
                        break
                    seconds = min(seconds, (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec))
            if status != FK_OK:
                self._raise_failure(status, s + failed)
            best.append(seconds)
            s += count
        return best
