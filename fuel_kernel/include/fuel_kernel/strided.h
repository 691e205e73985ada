/* Layout validation and the n-d loop plan shared by every strided kernel.
 *
 * A kernel receives layouts in elements exactly as the caller described them.  fk_loop_plan
 * checks that every operand's extent lies inside its storage, broadcasts the inputs to the
 * output's shape (NumPy rules, right-aligned), orders the axes so the output is walked in memory
 * order, drops size-1 axes and merges axes whose strides chain (as NumPy's iterator does).  The
 * kernel then walks rows of `inner` elements with fk_loop_next.  Nothing here writes to an
 * operand, so a kernel that plans first can never leave a half-written output on failure.
 *
 * Include after fuel_kernel/abi.h in the module's single translation unit.
 */
#ifndef FUEL_KERNEL_STRIDED_H
#define FUEL_KERNEL_STRIDED_H

#include <string.h>

#include "fuel_kernel/abi.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define FK_TILE_GATHER_AVX2 1             /* transposed tiles are gathered with AVX2 shuffles */
#endif

#include "fuel_kernel/dtype_tables.h"     /* generated from fuel_kernel/spec.py */

static inline int64_t fk_layout_numel(const fk_layout *layout) {
    int64_t n = 1;
    for (int d = 0; d < layout->ndim; d++) n *= layout->shape[d];
    return n;
}

/* Size arithmetic that cannot wrap.  Every extent product, element count, scratch size and index
 * computed from shapes or params goes through these: on overflow (or a negative operand) they set
 * a ShapeError naming `what` and return FK_ERR_SHAPE, so an impossible size is refused before
 * anything is allocated or written. */
/* the ShapeError of fk_size_mul (sign "x") and fk_size_add (sign "+") */
static inline int fk_size_refused(int64_t a, const char *sign, int64_t b, const char *what) {
    fk_set_error(FK_ERR_SHAPE, "%s: size %lld %s %lld is impossible (overflows int64)", what,
                 (long long)a, sign, (long long)b);
    return FK_ERR_SHAPE;
}

static inline int fk_size_mul(int64_t a, int64_t b, int64_t *result, const char *what) {
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, result)) return fk_size_refused(a, "x", b, what);
    return FK_OK;
}

static inline int fk_size_add(int64_t a, int64_t b, int64_t *result, const char *what) {
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, result)) return fk_size_refused(a, "+", b, what);
    return FK_OK;
}

/* Bytes for `count` items of `itemsize` bytes, as a size_t for malloc; the same error on overflow. */
static inline int fk_size_bytes(int64_t count, int64_t itemsize, size_t *result, const char *what) {
    int64_t bytes;
    int status = fk_size_mul(count, itemsize, &bytes, what);
    if (status) return status;
    *result = (size_t)bytes;
    return FK_OK;
}

/* Elements of a layout, overflow-checked (a stride-0 view can claim 2**63 elements). */
static inline int fk_layout_numel_checked(const fk_layout *layout, int64_t *numel, const char *what) {
    int64_t n = 1;
    for (int d = 0; d < layout->ndim; d++) {
        int status = fk_size_mul(n, layout->shape[d], &n, what);
        if (status) return status;
    }
    *numel = n;
    return FK_OK;
}

/* A written view must not overlap itself: stride 0 on an axis of extent > 1 would write one
 * element several times (an empty view writes nothing and passes).  AliasError, before any write. */
static inline int fk_output_self_overlap_check(const fk_layout *out, const char *what) {
    for (int d = 0; d < out->ndim; d++)
        if (out->shape[d] == 0) return FK_OK;
    for (int d = 0; d < out->ndim; d++)
        if (out->strides[d] == 0 && out->shape[d] > 1) {
            fk_set_error(FK_ERR_ALIAS, "%s: the output overlaps itself (stride 0 on axis %d of extent %lld)", what, d,
                         (long long)out->shape[d]);
            return FK_ERR_ALIAS;
        }
    return FK_OK;
}

/* Check rank, non-negative shape and that every addressed element lies inside the storage.
 * Overflow-checked: a crafted layout from a C caller cannot wrap the extent into range. */
static inline int fk_layout_check(const fk_layout *layout, const fk_storage *storage, const char *what,
                                  int index) {
    int64_t lo = layout->offset, hi = layout->offset, span, capacity;
    if (layout->ndim < 0 || layout->ndim > FK_MAX_DIMS) {
        fk_set_error(FK_ERR_SHAPE, "%s %d has %d dims; at most %d are supported", what, index,
                     (int)layout->ndim, FK_MAX_DIMS);
        return FK_ERR_SHAPE;
    }
    if (storage->dtype < 0 || storage->dtype >= FK_DTYPE_COUNT) {
        fk_set_error(FK_ERR_DTYPE, "%s %d has unknown dtype code %d", what, index, (int)storage->dtype);
        return FK_ERR_DTYPE;
    }
    for (int d = 0; d < layout->ndim; d++) {
        if (layout->shape[d] < 0) {
            fk_set_error(FK_ERR_SHAPE, "%s %d has negative extent %lld on axis %d", what, index,
                         (long long)layout->shape[d], d);
            return FK_ERR_SHAPE;
        }
    }
    for (int d = 0; d < layout->ndim; d++) {
        if (layout->shape[d] == 0) return FK_OK;               /* empty: addresses nothing */
        if (__builtin_mul_overflow(layout->strides[d], layout->shape[d] - 1, &span) ||
            (span > 0 ? __builtin_add_overflow(hi, span, &hi) : __builtin_add_overflow(lo, span, &lo))) {
            fk_set_error(FK_ERR_SHAPE, "%s %d: extent overflows on axis %d", what, index, d);
            return FK_ERR_SHAPE;
        }
    }
    capacity = (int64_t)(storage->nbytes >> fk_dtype_shift[storage->dtype]);
    if (lo < 0 || hi >= capacity) {
        fk_set_error(FK_ERR_SHAPE, "%s %d addresses elements [%lld, %lld] outside its storage of %lld elements",
                     what, index, (long long)lo, (long long)hi, (long long)capacity);
        return FK_ERR_SHAPE;
    }
    return FK_OK;
}

typedef struct {
    int ndim;                                        /* >= 1 after planning */
    int nops;                                        /* inputs, then the output last */
    int64_t numel;
    int64_t inner;                                   /* length of the innermost axis */
    int64_t rows;                                    /* numel / inner; 0 for an empty output */
    int64_t shape[FK_MAX_DIMS];
    int64_t strides[FK_MAX_OPERANDS][FK_MAX_DIMS];   /* bytes */
    char *base[FK_MAX_OPERANDS];                     /* address of each operand's first element */
} fk_loop;

/* The fast path, checked first because it is the common case of a planned graph: every operand
 * C-contiguous with the output's shape and inside its storage -> one flat row.  Returns 1 when
 * it planned the loop.  One pass over the axes checks every operand at once, accumulating a
 * mismatch flag rather than branching, so it stays a few instructions per operand and axis when
 * inlined into every kernel; the general planner (which words the errors) is not inlined.
 * `dtypes` (see fk_loop_plan) lets a kernel's constant dtype codes fold the item sizes. */
static inline __attribute__((always_inline))
int fk_loop_plan_flat(fk_loop *loop, const fk_storage *inputs, int n_in, const fk_storage *output,
                      const fk_layout *layouts, const int *dtypes) {
    const fk_layout *out = &layouts[n_in];
    int ndim = out->ndim, k, d, bad = 0;
    int64_t numel = 1;                 /* after axis d: the contiguous stride axis d-1 must have */
    if (ndim < 0 || ndim > FK_MAX_DIMS) return 0;
    for (k = 0; k < n_in; k++) bad |= layouts[k].ndim != ndim;
#pragma GCC unroll 1
    for (d = ndim - 1; d >= 0; d--) {
        int64_t n = out->shape[d];
        int strided = n != 1;          /* an axis of extent 1 may have any stride */
        for (k = 0; k <= n_in; k++)
            bad |= (layouts[k].shape[d] != n) | (strided & (layouts[k].strides[d] != numel));
        bad |= (n < 0) | __builtin_mul_overflow(numel, n, &numel);
    }
    for (k = 0; k <= n_in; k++) {      /* elements offset .. offset + numel - 1 inside the storage */
        const fk_storage *st = k < n_in ? &inputs[k] : output;
        int dtype = dtypes ? dtypes[k] : st->dtype;
        int64_t room;                  /* how far past 0 the first element may start */
        if ((unsigned)dtype >= FK_DTYPE_COUNT) return 0;
        room = (int64_t)(st->nbytes >> fk_dtype_shift[dtype]) - numel;
        /* offset in [0, room]: one unsigned compare (a negative offset or room wraps high) */
        bad |= (numel != 0) & ((room < 0) | ((uint64_t)layouts[k].offset > (uint64_t)room));
    }
    if (bad) return 0;
    loop->numel = numel;
    loop->ndim = 1;
    loop->shape[0] = numel;
    loop->inner = numel;
    loop->rows = numel ? 1 : 0;
    for (k = 0; k <= n_in; k++) {
        const fk_storage *st = k < n_in ? &inputs[k] : output;
        int64_t itemsize = fk_dtype_itemsize[dtypes ? dtypes[k] : st->dtype];
        loop->base[k] = (char *)st->data + layouts[k].offset * itemsize;
        loop->strides[k][0] = itemsize;
    }
    return 1;
}

/* Everything else: bounds, broadcast, axis order and merging (see the top of this file). */
__attribute__((noinline)) static int fk_loop_plan_general(fk_loop *loop, const fk_storage *inputs, int n_in,
                                                          fk_storage *output, const fk_layout *layouts) {
    const fk_layout *out = &layouts[n_in];
    int nops = n_in + 1, ndim = out->ndim, k, d;
    int64_t strides[FK_MAX_OPERANDS][FK_MAX_DIMS];
    int order[FK_MAX_DIMS];
    for (k = 0; k < n_in; k++) {
        int status = fk_layout_check(&layouts[k], &inputs[k], "input", k);
        if (status) return status;
    }
    {
        int status = fk_layout_check(out, output, "output", 0);
        if (status) return status;
    }
    {   /* inside its storage does not bound the count: strides (1, 1) reach 2**64 elements */
        int status = fk_layout_numel_checked(out, &loop->numel, "output 0");
        if (status) return status;
    }
    for (k = 0; k < n_in; k++)
        loop->base[k] = (char *)inputs[k].data + layouts[k].offset * fk_dtype_itemsize[inputs[k].dtype];
    loop->base[n_in] = (char *)output->data + out->offset * fk_dtype_itemsize[output->dtype];

    /* broadcast each input onto the output shape (right-aligned) */
    for (k = 0; k < n_in; k++) {
        const fk_layout *in = &layouts[k];
        int shift = ndim - in->ndim;
        if (shift < 0) {
            fk_set_error(FK_ERR_SHAPE, "input %d has %d dims but the output has only %d", k,
                         (int)in->ndim, ndim);
            return FK_ERR_SHAPE;
        }
        for (d = 0; d < ndim; d++) {
            if (d < shift) { strides[k][d] = 0; continue; }
            if (in->shape[d - shift] == out->shape[d]) strides[k][d] = in->strides[d - shift];
            else if (in->shape[d - shift] == 1) strides[k][d] = 0;
            else {
                fk_set_error(FK_ERR_SHAPE, "input %d extent %lld on axis %d does not broadcast to the output extent %lld",
                             k, (long long)in->shape[d - shift], d - shift, (long long)out->shape[d]);
                return FK_ERR_SHAPE;
            }
        }
    }
    for (d = 0; d < ndim; d++) strides[n_in][d] = out->strides[d];

    /* axis order: output |stride| descending (stable), so the output is written in memory order */
    {
        int n = 0;
        for (d = 0; d < ndim; d++) if (out->shape[d] != 1) order[n++] = d;
        for (int i = 1; i < n; i++) {
            int cur = order[i], j = i - 1;
            int64_t key = out->strides[cur] < 0 ? -out->strides[cur] : out->strides[cur];
            while (j >= 0) {
                int64_t prev = out->strides[order[j]] < 0 ? -out->strides[order[j]] : out->strides[order[j]];
                if (prev >= key) break;
                order[j + 1] = order[j];
                j--;
            }
            order[j + 1] = cur;
        }
        /* merge axes whose strides chain for every operand */
        loop->ndim = 0;
        for (int i = 0; i < n; i++) {
            int a = order[i], m = loop->ndim;
            if (m > 0) {
                int chains = 1;
                for (k = 0; k < nops; k++)
                    if (loop->strides[k][m - 1] != strides[k][a] * out->shape[a] *
                            fk_dtype_itemsize[k < n_in ? inputs[k].dtype : output->dtype]) { chains = 0; break; }
                if (chains) {
                    loop->shape[m - 1] *= out->shape[a];
                    for (k = 0; k < nops; k++)
                        loop->strides[k][m - 1] = strides[k][a] * fk_dtype_itemsize[k < n_in ? inputs[k].dtype : output->dtype];
                    continue;
                }
            }
            loop->shape[m] = out->shape[a];
            for (k = 0; k < nops; k++)
                loop->strides[k][m] = strides[k][a] * fk_dtype_itemsize[k < n_in ? inputs[k].dtype : output->dtype];
            loop->ndim = m + 1;
        }
        if (loop->ndim == 0) {                       /* a scalar or all-ones shape */
            loop->ndim = 1;
            loop->shape[0] = 1;
            for (k = 0; k < nops; k++) loop->strides[k][0] = 0;
        }
    }
    loop->inner = loop->shape[loop->ndim - 1];
    loop->rows = loop->inner ? loop->numel / loop->inner : 0;
    return FK_OK;
}

/* Plan an elementwise loop over n_in inputs broadcast to the single output layouts[n_in].
 * `dtypes`, when not NULL, holds the operands' dtype codes (inputs, then the output) as the caller
 * has already checked them against the storages, typically a kernel's constants. */
static inline __attribute__((always_inline)) int fk_loop_plan(fk_loop *loop, const fk_storage *inputs, int n_in,
                               fk_storage *output, const fk_layout *layouts, const int *dtypes) {
    if (n_in + 1 > FK_MAX_OPERANDS) {
        fk_set_error(FK_ERR_OPERANDS, "%d operands exceed the limit of %d", n_in + 1, FK_MAX_OPERANDS);
        return FK_ERR_OPERANDS;
    }
    if (output->flags & FK_STORAGE_READ_ONLY) {
        fk_set_error(FK_ERR_READ_ONLY, "output 0 is read-only");
        return FK_ERR_READ_ONLY;
    }
    loop->nops = n_in + 1;
    if (fk_loop_plan_flat(loop, inputs, n_in, output, layouts, dtypes)) return FK_OK;
    return fk_loop_plan_general(loop, inputs, n_in, output, layouts);
}

/* Byte stride of operand k along the innermost axis. */
static inline int64_t fk_loop_inner_stride(const fk_loop *loop, int k) {
    return loop->strides[k][loop->ndim - 1];
}

/* Walk the rows: `ptrs` starts as a copy of loop->base and `index` as zeros; after each of
 * loop->rows rows call fk_loop_next to move every operand to the next row. */
static inline void fk_loop_next(const fk_loop *loop, int64_t *index, char **ptrs) {
    for (int d = loop->ndim - 2; d >= 0; d--) {
        if (++index[d] < loop->shape[d]) {
            for (int k = 0; k < loop->nops; k++) ptrs[k] += loop->strides[k][d];
            return;
        }
        index[d] = 0;
        for (int k = 0; k < loop->nops; k++) ptrs[k] -= loop->strides[k][d] * (loop->shape[d] - 1);
    }
}

/* 1 if the layout has no elements.  Tested per axis: the product of a stride-0 view's extents can
 * overflow int64 (and wrap to 0 or a negative count). */
static inline int fk_layout_empty(const fk_layout *layout) {
    for (int d = 0; d < layout->ndim; d++)
        if (layout->shape[d] == 0) return 1;
    return 0;
}

/* What fk_operands_check verifies beyond operand counts, backends and dtypes. */
enum {
    FK_CHECK_LAYOUTS = 1u,         /* every layout lies inside its storage (fk_layout_check) */
    FK_CHECK_WRITABLE = 2u,        /* output 0 is not read-only */
    FK_CHECK_DISJOINT = 4u,        /* output 0 shares no memory with any non-empty input */
    FK_CHECK_SELF_OVERLAP = 8u     /* output 0 does not overlap itself (stride 0, extent > 1) */
};
#define FK_ANY_DTYPE (-1)          /* in a dtypes list: this operand may have any dtype */

/* Word the first count, backend or dtype mismatch fk_operands_check found (kept out of line: the
 * common case never formats anything). */
__attribute__((noinline, cold)) static int fk_operands_error(const fk_storage *inputs, int n_in,
                                                             const fk_storage *outputs, int n_out,
                                                             int want_in, int want_out, const int *dtypes) {
    if (n_in != want_in || n_out != want_out) {
        fk_set_error(FK_ERR_OPERANDS, "expected %d inputs and %d outputs, got %d and %d", want_in,
                     want_out, n_in, n_out);
        return FK_ERR_OPERANDS;
    }
    for (int k = 0; k < n_in + n_out; k++) {
        const fk_storage *st = k < n_in ? &inputs[k] : &outputs[k - n_in];
        const char *role = k < n_in ? "input" : "output";
        int index = k < n_in ? k : k - n_in;
        if (st->backend != FK_BACKEND_CPU) {
            fk_set_error(FK_ERR_BACKEND, "%s %d lives on backend %d, not the CPU", role, index, (int)st->backend);
            return FK_ERR_BACKEND;
        }
        if (dtypes != NULL && dtypes[k] != FK_ANY_DTYPE && st->dtype != dtypes[k]) {
            const char *got = st->dtype >= 0 && st->dtype < FK_DTYPE_COUNT ? fk_dtype_short_name[st->dtype] : "?";
            fk_set_error(FK_ERR_DTYPE, "%s %d has dtype %s but this kernel takes %s", role, index, got,
                         fk_dtype_short_name[dtypes[k]]);
            return FK_ERR_DTYPE;
        }
    }
    return FK_OK;
}

/* The one operand check every CPU kernel runs before it reads or writes anything: want_in inputs
 * and want_out outputs, all on the CPU, with the dtypes listed (inputs then outputs; NULL, or
 * FK_ANY_DTYPE in a slot, leaves a dtype to the kernel), then the FK_CHECK_* checks asked for, on
 * every output (DISJOINT also keeps the outputs apart from each other).  Counts, backends and
 * dtypes are one branch-free pass (want_in, want_out and checks are constants at every call site,
 * so it unrolls and the unasked checks vanish). */
static inline __attribute__((always_inline))
int fk_operands_check_outputs(const fk_storage *inputs, int n_in, const fk_storage *outputs, int n_out,
                              const fk_layout *layouts, int want_in, int want_out, const int *dtypes,
                              unsigned checks) {
    int bad = n_in != want_in || n_out != want_out;
    if (!bad) {
        for (int k = 0; k < want_in + want_out; k++) {
            const fk_storage *st = k < want_in ? &inputs[k] : &outputs[k - want_in];
            bad |= st->backend != FK_BACKEND_CPU;
            if (dtypes != NULL) bad |= (dtypes[k] != FK_ANY_DTYPE) & (st->dtype != dtypes[k]);
        }
    }
    if (__builtin_expect(bad, 0))
        return fk_operands_error(inputs, n_in, outputs, n_out, want_in, want_out, dtypes);
    if (checks & FK_CHECK_LAYOUTS) {
        for (int k = 0; k < want_in + want_out; k++) {
            int status = fk_layout_check(&layouts[k], k < want_in ? &inputs[k] : &outputs[k - want_in],
                                         k < want_in ? "input" : "output", k < want_in ? k : k - want_in);
            if (status) return status;
        }
    }
    for (int o = 0; o < want_out; o++) {
        const fk_layout *out_layout = &layouts[want_in + o];
        if ((checks & FK_CHECK_WRITABLE) && (outputs[o].flags & FK_STORAGE_READ_ONLY)) {
            fk_set_error(FK_ERR_READ_ONLY, "output %d is read-only", o);
            return FK_ERR_READ_ONLY;
        }
        if ((checks & FK_CHECK_DISJOINT) && !fk_layout_empty(out_layout)) {
            const char *out_lo = (const char *)outputs[o].data, *out_hi = out_lo + outputs[o].nbytes;
            for (int k = 0; k < want_in + o; k++) {
                const fk_storage *other = k < want_in ? &inputs[k] : &outputs[k - want_in];
                const char *lo = (const char *)other->data, *hi = lo + other->nbytes;
                if (other->nbytes && outputs[o].nbytes && lo < out_hi && out_lo < hi
                    && !fk_layout_empty(&layouts[k])) {
                    if (k < want_in)
                        fk_set_error(FK_ERR_ALIAS, "output %d overlaps input %d; this kernel needs disjoint memory",
                                     o, k);
                    else
                        fk_set_error(FK_ERR_ALIAS, "output %d overlaps output %d; each output needs its own memory",
                                     o, k - want_in);
                    return FK_ERR_ALIAS;
                }
            }
        }
        if (checks & FK_CHECK_SELF_OVERLAP) {
            int status = fk_output_self_overlap_check(out_layout, o == 0 ? "output 0" : "output 1+");
            if (status) return status;
        }
    }
    return FK_OK;
}

/* fk_operands_check_outputs for the ops with one output. */
static inline __attribute__((always_inline))
int fk_operands_check(const fk_storage *inputs, int n_in, const fk_storage *outputs, int n_out,
                      const fk_layout *layouts, int want_in, const int *dtypes, unsigned checks) {
    return fk_operands_check_outputs(inputs, n_in, outputs, n_out, layouts, want_in, 1, dtypes, checks);
}

/* A row function: n elements from src (byte stride ss) to dst (byte stride ds). */
typedef void (*fk_unary_row_fn)(const char *src, int64_t ss, char *dst, int64_t ds, int64_t n);

/* Run a one-input, one-output elementwise kernel on the CPU: validate, plan (an output that
 * overlaps itself is an AliasError), then walk rows. */
static inline int fk_run_unary_rows(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                                    const fk_layout *layouts, int in_dtype, int out_dtype, fk_unary_row_fn row) {
    int dtypes[2] = {in_dtype, out_dtype};
    fk_loop loop;
    int64_t index[FK_MAX_DIMS] = {0};
    char *ptrs[2];
    int status = fk_operands_check(inputs, n_in, outputs, n_out, layouts, 1, dtypes, 0);
    if (status) return status;
    status = fk_loop_plan(&loop, inputs, 1, outputs, layouts, dtypes);
    if (status) return status;
    for (int d = 0; d < loop.ndim; d++)            /* planned axes: the flat case is one compare */
        if (loop.strides[1][d] == 0 && loop.shape[d] > 1)
            return fk_output_self_overlap_check(&layouts[1], "output 0");
    ptrs[0] = loop.base[0];
    ptrs[1] = loop.base[1];
    for (int64_t r = 0; r < loop.rows; r++) {
        row(ptrs[0], fk_loop_inner_stride(&loop, 0), ptrs[1], fk_loop_inner_stride(&loop, 1), loop.inner);
        fk_loop_next(&loop, index, ptrs);
    }
    return FK_OK;
}

/* ---- n-operand row walker with cache blocking ------------------------------------------------
 * A row function sees every operand of a planned loop: ptrs[k] and strides[k] (bytes) for n
 * elements; ctx is whatever constant data the kernel passes (op params, converted once). */
typedef void (*fk_row_fn)(char *const *ptrs, const int64_t *strides, int64_t n, const void *ctx);

/* A kernel's row function, published beside its manifest (a kernel module's tile_rows()) for the
 * plan executor: a fused group calls `row` on its tiles directly, with the operand layouts planned
 * and `ctx` filled once when the plan is compiled, instead of calling `kernel` (which checks and
 * plans on every call) on every tile.  `row` is exactly what `kernel` runs on each row, so the bits
 * are the same.  setup fills ctx_bytes of ctx from the params (NULL: the row takes no ctx), and
 * fails as the kernel would on bad params. */
typedef struct {
    fk_kernel_fn kernel;             /* the registered kernel (its threaded wrapper, if any) */
    fk_row_fn row;
    int (*setup)(const fk_params *params, void *ctx);
    int32_t ctx_bytes;
} fk_tile_row;

#define FK_TILE_COLS 64
#define FK_TILE_BYTES 16384            /* one staged tile: 64 rows of F32, 32 of F64, 256 of U8 */
#define FK_TILE_BUFFERS 2              /* transposed inputs staged per tile (more are walked as is) */

/* Prefetch the cache lines of n elements starting at p, `stride` bytes apart (a dense run). */
static inline void fk_prefetch_run(const char *p, int64_t stride, int64_t n) {
    int64_t bytes = stride * (n - 1);
    const char *lo = bytes < 0 ? p + bytes : p;
    int64_t span = bytes < 0 ? -bytes : bytes;
    for (int64_t off = 0; off <= span; off += 64) __builtin_prefetch(lo + off);
}

#ifdef FK_TILE_GATHER_AVX2
/* fk_tile_gather for 4-byte elements whose rows are dense (so == 4): 8x8 blocks are read as
 * eight 8-element column runs, transposed in registers and written as eight 8-element rows (a
 * third of the instructions of the element-wise copy).  Integer shuffles: bits are moved as is. */
__attribute__((target("avx2")))
static void fk_tile_gather4_avx2(char *buf, const char *src, int64_t si, int64_t rows, int64_t cols,
                                 const char *next) {
    const int64_t bs = FK_TILE_COLS * 4;       /* bytes per buffer row */
    int64_t c = 0, r;
    for (; c + 8 <= cols; c += 8) {
        if (next)
            for (int j = 0; j < 8; j++) fk_prefetch_run(next + (c + j) * si, 4, rows);
        for (r = 0; r + 8 <= rows; r += 8) {
            const char *p = src + c * si + r * 4;
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(p)), v1 = _mm256_loadu_si256((const __m256i *)(p + si));
            __m256i v2 = _mm256_loadu_si256((const __m256i *)(p + 2 * si)), v3 = _mm256_loadu_si256((const __m256i *)(p + 3 * si));
            __m256i v4 = _mm256_loadu_si256((const __m256i *)(p + 4 * si)), v5 = _mm256_loadu_si256((const __m256i *)(p + 5 * si));
            __m256i v6 = _mm256_loadu_si256((const __m256i *)(p + 6 * si)), v7 = _mm256_loadu_si256((const __m256i *)(p + 7 * si));
            __m256i t0 = _mm256_unpacklo_epi32(v0, v1), t1 = _mm256_unpackhi_epi32(v0, v1);
            __m256i t2 = _mm256_unpacklo_epi32(v2, v3), t3 = _mm256_unpackhi_epi32(v2, v3);
            __m256i t4 = _mm256_unpacklo_epi32(v4, v5), t5 = _mm256_unpackhi_epi32(v4, v5);
            __m256i t6 = _mm256_unpacklo_epi32(v6, v7), t7 = _mm256_unpackhi_epi32(v6, v7);
            __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
            __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
            __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
            __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
            char *d = buf + r * bs + c * 4;
            _mm256_storeu_si256((__m256i *)(d), _mm256_permute2x128_si256(u0, u4, 0x20));
            _mm256_storeu_si256((__m256i *)(d + bs), _mm256_permute2x128_si256(u1, u5, 0x20));
            _mm256_storeu_si256((__m256i *)(d + 2 * bs), _mm256_permute2x128_si256(u2, u6, 0x20));
            _mm256_storeu_si256((__m256i *)(d + 3 * bs), _mm256_permute2x128_si256(u3, u7, 0x20));
            _mm256_storeu_si256((__m256i *)(d + 4 * bs), _mm256_permute2x128_si256(u0, u4, 0x31));
            _mm256_storeu_si256((__m256i *)(d + 5 * bs), _mm256_permute2x128_si256(u1, u5, 0x31));
            _mm256_storeu_si256((__m256i *)(d + 6 * bs), _mm256_permute2x128_si256(u2, u6, 0x31));
            _mm256_storeu_si256((__m256i *)(d + 7 * bs), _mm256_permute2x128_si256(u3, u7, 0x31));
        }
        for (; r < rows; r++)                  /* rows past the last full block */
            for (int j = 0; j < 8; j++)
                memcpy(buf + r * bs + (c + j) * 4, src + (c + j) * si + r * 4, 4);
    }
    for (; c < cols; c++) {                    /* columns past the last full block */
        if (next) fk_prefetch_run(next + c * si, 4, rows);
        for (r = 0; r < rows; r++) memcpy(buf + r * bs + c * 4, src + c * si + r * 4, 4);
    }
}
#endif

/* Copy a rows x cols tile of an operand whose rows step by `so` bytes and columns by `si` bytes
 * into a dense row-major buffer, reading down the rows (the operand's dense direction). */
static inline void fk_tile_gather(char *buf, const char *src, int64_t so, int64_t si, int64_t rows,
                                  int64_t cols, int itemsize, const char *next) {
#ifdef FK_TILE_GATHER_AVX2
    if (itemsize == 4 && so == 4 && __builtin_cpu_supports("avx2")) {
        fk_tile_gather4_avx2(buf, src, si, rows, cols, next);
        return;
    }
#endif
    for (int64_t c = 0; c < cols; c++) {
        const char *col = src + c * si;
        /* the same column of the next tile: its lines are far apart, so ask for them early */
        if (next) fk_prefetch_run(next + c * si, so, rows);
        char *dst = buf + c * itemsize;
        switch (itemsize) {
        case 1:
            for (int64_t r = 0; r < rows; r++) dst[r * FK_TILE_COLS] = col[r * so];
            break;
        case 2:
            for (int64_t r = 0; r < rows; r++)
                ((uint16_t *)dst)[r * FK_TILE_COLS] = *(const uint16_t *)(col + r * so);
            break;
        case 4:
            for (int64_t r = 0; r < rows; r++)
                ((uint32_t *)dst)[r * FK_TILE_COLS] = *(const uint32_t *)(col + r * so);
            break;
        default:
            for (int64_t r = 0; r < rows; r++)
                ((uint64_t *)dst)[r * FK_TILE_COLS] = *(const uint64_t *)(col + r * so);
            break;
        }
    }
}

/* Walk every row of a planned loop.  itemsizes[k] is operand k's element size in bytes.
 *
 * When an input moves by more than a cache line along the innermost axis while its next axis is
 * denser (a transposed view), rows are visited in tiles of the last two axes (FK_TILE_COLS wide,
 * FK_TILE_BYTES / (FK_TILE_COLS * itemsize) tall), and up to FK_TILE_BUFFERS such inputs are
 * first gathered into dense stack tiles, reading down their dense axis.  Reading them row by row
 * instead touches one cache line (and, for power-of-two extents, one cache set) per element,
 * which is what makes the naive walk slow.  The next tile's lines of every operand are prefetched
 * while the current one runs.  Tile shape (rows x columns of F32) measured on ADD f32 2048x2048
 * with a transposed operand (NumPy: 25 ms): 128x64 5.5 ms, 64x128 6.0 ms, 256x32 7.7 ms,
 * 64x64 7.2 ms, 32x64 9.8 ms; without the row prefetches 128x64 ran 6.8 ms, and gathering 4-byte
 * tiles with the AVX2 8x8 transpose instead of element by element took it to 4.3 ms.  With the
 * faster gather the tile no longer needs to be tall, and a 16 KB one leaves half of L1 to the
 * other operands' rows: 64x64 0.177-0.181x NumPy against 0.180-0.192x for 128x64 (paired runs),
 * 32x64 0.21x. */
__attribute__((noinline)) static void fk_loop_run_rows(const fk_loop *loop, fk_row_fn row, const void *ctx,
                                                      const int *itemsizes) {
    int nops = loop->nops, nd = loop->ndim, k, tiled = 0;
    int64_t inner_strides[FK_MAX_OPERANDS], index[FK_MAX_DIMS];
    char *ptrs[FK_MAX_OPERANDS];
    for (k = 0; k < nd; k++) index[k] = 0;
    for (k = 0; k < nops; k++) {
        inner_strides[k] = loop->strides[k][nd - 1];
        ptrs[k] = loop->base[k];
    }
    int staged[FK_MAX_OPERANDS] = {0};
    int64_t tile_rows = FK_TILE_BYTES / (FK_TILE_COLS * 8);
    if (nd >= 2 && loop->inner > FK_TILE_COLS / 2 && loop->shape[nd - 2] > 1) {
        int n_staged = 0;
        for (k = 0; k < nops - 1; k++) {
            int64_t si = inner_strides[k] < 0 ? -inner_strides[k] : inner_strides[k];
            int64_t so = loop->strides[k][nd - 2] < 0 ? -loop->strides[k][nd - 2] : loop->strides[k][nd - 2];
            if (si > 64 && so < si) {
                tiled = 1;
                if (n_staged < FK_TILE_BUFFERS) staged[k] = ++n_staged;
            }
        }
        {
            int widest = 1;
            for (k = 0; k < nops - 1; k++)
                if (staged[k] && itemsizes[k] > widest) widest = itemsizes[k];
            tile_rows = FK_TILE_BYTES / (FK_TILE_COLS * widest);
        }
    }
    if (!tiled) {
        for (int64_t r = 0; r < loop->rows; r++) {
            row(ptrs, inner_strides, loop->inner, ctx);
            fk_loop_next(loop, index, ptrs);
        }
        return;
    }
    {
        /* the outer walk steps over the axes before the last two: a copy of the plan that treats
         * axis nd-2 as its row makes fk_loop_next do exactly that */
        _Alignas(64) char tiles[FK_TILE_BUFFERS][FK_TILE_BYTES];
        char *cur[FK_MAX_OPERANDS];
        int64_t row_strides[FK_MAX_OPERANDS];
        fk_loop outer = *loop;
        int64_t R = loop->shape[nd - 2], C = loop->inner, planes = loop->rows / R;
        outer.ndim = nd - 1;
        for (k = 0; k < nops; k++) row_strides[k] = staged[k] ? itemsizes[k] : inner_strides[k];
        for (int64_t p = 0; p < planes; p++) {
            for (int64_t r0 = 0; r0 < R; r0 += tile_rows) {
                int64_t rr = r0 + tile_rows < R ? tile_rows : R - r0;
                for (int64_t c0 = 0; c0 < C; c0 += FK_TILE_COLS) {
                    int64_t m = c0 + FK_TILE_COLS < C ? FK_TILE_COLS : C - c0;
                    for (k = 0; k < nops; k++)
                        if (staged[k]) {
                            const char *tile = ptrs[k] + r0 * loop->strides[k][nd - 2] + c0 * inner_strides[k];
                            fk_tile_gather(tiles[staged[k] - 1], tile, loop->strides[k][nd - 2],
                                           inner_strides[k], rr, m, itemsizes[k],
                                           c0 + 2 * FK_TILE_COLS <= C ? tile + FK_TILE_COLS * inner_strides[k] : NULL);
                        }
                    for (int64_t r = 0; r < rr; r++) {
                        for (k = 0; k < nops; k++) {
                            if (staged[k]) {
                                cur[k] = tiles[staged[k] - 1] + r * FK_TILE_COLS * itemsizes[k];
                                continue;
                            }
                            cur[k] = ptrs[k] + (r0 + r) * loop->strides[k][nd - 2] + c0 * inner_strides[k];
                            /* rows of the other operands are short runs far apart as well */
                            if (c0 + 2 * FK_TILE_COLS <= C && (inner_strides[k] == itemsizes[k] || inner_strides[k] == -itemsizes[k]))
                                fk_prefetch_run(cur[k] + FK_TILE_COLS * inner_strides[k], inner_strides[k], FK_TILE_COLS);
                        }
                        row(cur, row_strides, m, ctx);
                    }
                }
            }
            fk_loop_next(&outer, index, ptrs);
        }
    }
}

static inline void fk_loop_run(const fk_loop *loop, fk_row_fn row, const void *ctx, const int *itemsizes) {
    if (loop->rows == 0) return;
    if (loop->ndim == 1) {             /* one row (the flat case of a planned graph): no walk */
        int64_t inner_strides[FK_MAX_OPERANDS];
        for (int k = 0; k < loop->nops; k++) inner_strides[k] = loop->strides[k][0];
        row((char *const *)loop->base, inner_strides, loop->inner, ctx);
        return;
    }
    fk_loop_run_rows(loop, row, ctx, itemsizes);
}

#endif /* FUEL_KERNEL_STRIDED_H */
