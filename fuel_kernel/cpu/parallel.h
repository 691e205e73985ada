/* Threaded kernel calls: a large call is cut into tasks that each call the serial kernel on a
 * block of the output (and the matching blocks of the inputs), run on the intra-op pool.
 *
 * The wrappers that the manifest registers (tools/generate_kernels.py writes one per kernel whose
 * op spec.SPLIT_RULES names a rule) call fk_split_run with the serial kernel and the rule:
 *   FK_SPLIT_ROWS_n  every output axis but the last n (0: elementwise, 1: softmax, norms, ROPE;
 *                    2: TRIU/TRIL), inputs matched right-aligned as in broadcasting; an input
 *                    axis of extent 1 (broadcast) or missing is not cut
 *   FK_SPLIT_REDUCE  the kept (non-reduced) axes of a reduction with explicit dims
 *   FK_SPLIT_MOVEMENT  CUMSUM, FLIP, ROLL, PAD: every axis their params do not name (the cumsum
 *                    axis, the flipped or rolled dims, the padded dims stay whole)
 *   FK_SPLIT_MATMUL  batch x blocks of rows x blocks of columns of C (m_compute ALL or ROWS); a
 *                    grouped (GQA) batch axis gives each batch index B's index i / group
 *   FK_SPLIT_CONV2D  images x blocks of output channels (groups = 1; images only otherwise); CONV1D's
 *                    kernel runs CONV2D's through this rule on its height-1 view (its params CONV1D's)
 *   FK_SPLIT_CONV2D_IM2COL  none here: CONV2D's (and CONV1D's) im2col sibling cuts its own tasks of
 *                    (image, group, chunk of output pixels) after its checks (conv_kernels.h.in), so
 *                    that no task repeats another's im2col and none runs alone before the others
 *   FK_SPLIT_CONV2D_BACKWARD_INPUT, FK_SPLIT_CONV_TRANSPOSE2D  none here: the input-gradient run
 *                    (CONV_TRANSPOSE2D's kernel is that run) cuts its own tasks of (image, group,
 *                    block of dx's channels) after its checks (conv_kernels.h.in), so that none runs
 *                    alone before the others
 *   FK_SPLIT_CONV2D_BACKWARD_WEIGHT  none here: the weight-gradient run cuts its own tasks of
 *                    (group, block of dw's rows) after its checks, dy^T packed once for them all
 *   FK_SPLIT_ATTN    batch x kv-head groups x (causal only; top-left only when Sq <= Sk) blocks of
 *                    64-row query blocks, each with the keys up to its last query's diagonal
 *                    (bottom-right aligned on them); FLASH_ATTN's second output
 *                    (lse [B, Hq, Sq]) is cut as output 0's first three axes
 *   FK_SPLIT_ATTN_BACKWARD  FLASH_ATTN_BACKWARD: batch x kv heads (each block the query heads of
 *                    one kv head, dq's rows of them, that kv head's whole dk and dv)
 * The blocks are chosen from the shapes alone (a grain of work per task), never from the thread
 * count (but for one thread MATMUL and CONV2D's direct sibling run whole: their element bits do not
 * depend on the blocks, and blocks would repack panels), and
 * each output element is computed by the same serial code whatever thread runs its block, so
 * results are bitwise identical for every thread count.  Blocks never share output
 * memory.  Calls below the grain run the serial kernel directly (no pool, no extra cost beyond
 * counting the output).
 *
 * Errors.  Task 0 runs first, alone, on the calling thread: every check a kernel makes on shapes,
 * dtypes, params and storage gives the same answer on each block as on the whole call, so a bad
 * call fails there with nothing written.  Ops whose kernels check data (an integer division by
 * zero, index bounds, block tables) have no rule and are never split.  A later task's failure
 * (none is expected) is reported with its message after every task has stopped.
 */
#ifndef FUEL_KERNEL_CPU_PARALLEL_H
#define FUEL_KERNEL_CPU_PARALLEL_H

#include <stdatomic.h>
#include <string.h>

#include "fuel_kernel/abi.h"

enum {
    FK_SPLIT_ROWS_0 = 0, FK_SPLIT_ROWS_1 = 1, FK_SPLIT_ROWS_2 = 2,
    FK_SPLIT_REDUCE = 8, FK_SPLIT_MATMUL = 9, FK_SPLIT_CONV2D = 10, FK_SPLIT_ATTN = 11,
    FK_SPLIT_MOVEMENT = 12, FK_SPLIT_CONV2D_BACKWARD_INPUT = 13, FK_SPLIT_CONV2D_BACKWARD_WEIGHT = 14,
    FK_SPLIT_ATTN_BACKWARD = 15, FK_SPLIT_CONV_TRANSPOSE2D = 16, FK_SPLIT_CONV2D_IM2COL = 17
};

#define FK_SPLIT_GRAIN 32768               /* elements (element-visits for reductions) per task */
#define FK_SPLIT_FLOPS (4.0 * 1024 * 1024)  /* flops per task below which compute ops stay whole */
#define FK_SPLIT_TASKS 32                  /* compute ops cut blocks finer until this many tasks */
/* A float MATMUL (and FUSED_LINEAR) of at least this many rows and FK_SPLIT_FLOPS of work runs on
 * the pool itself, A and B packed once into panels its tasks share (gemm_core.h.in,
 * fk_gemm_shared_*), while those panels fit FK_GEMM_SHARED_MAX elements; FK_SPLIT_MATMUL then
 * leaves such a call whole.  Fewer rows stream B (matmul_kernels.h.in, FK_MM_FEW_ROWS) and keep
 * the blocks below. */
#define FK_GEMM_SHARED_MIN_ROWS 8
/* A BF16 product on pre-packed BF16 panels of fewer rows than this streams the panels in passes of
 * 4 rows (matmul_kernels.h.in) instead of taking the shared engine, which would widen the whole
 * panels per call; FK_SPLIT_MATMUL cuts its C into blocks like any call that stays off the pool. */
#define FK_MM_BF16_PASS_ROWS 16
#define FK_GEMM_SHARED_MAX ((int64_t)1 << 26)       /* elements: 256 MB of F32 panels */
static inline int fk_gemm_shared_fits(int64_t rows, int64_t n, int64_t k, int b_prepacked) {
    double a = ((double)rows + 16.0) * (double)k, b = b_prepacked ? 0.0 : (double)k * ((double)n + 32.0);
    return rows >= FK_GEMM_SHARED_MIN_ROWS && 2.0 * (double)rows * (double)n * (double)k >= 2 * FK_SPLIT_FLOPS &&
           a + b <= (double)FK_GEMM_SHARED_MAX;
}

typedef struct {
    fk_kernel_fn kernel;
    const fk_storage *inputs;
    fk_storage *outputs;
    const fk_layout *layouts;
    const fk_params *params;
    int n_in, n_out, rule, ndim;            /* ndim: of output 0, whose axes the blocks cut */
    int64_t chunk[FK_MAX_DIMS];             /* block length per output axis */
    int64_t count[FK_MAX_DIMS];             /* blocks per output axis */
    int8_t axis[FK_MAX_OPERANDS][FK_MAX_DIMS];   /* operand axis cut with output axis d, or -1 */
    int64_t group;                          /* FK_SPLIT_ATTN: query heads per kv head */
    int64_t b_group[FK_MAX_DIMS];           /* FK_SPLIT_MATMUL: > 0 on a grouped (GQA) batch axis of B */
    int8_t b_axis[FK_MAX_DIMS];             /* ... and B's axis there */
    atomic_int status;                      /* the first failure of a later task */
    char message[FK_ERROR_LEN];
} fk_split;

static inline int64_t fk_split_div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Cut the output axes not marked in `whole` so that each block holds about `grain` units, `unit`
 * per output element: the whole axes always, inner cut axes whole while they fit, the next one in
 * chunks, outer ones by one. */
static void fk_split_grid(fk_split *s, const fk_layout *out, const int *whole, int64_t unit, int64_t grain) {
    int64_t inner = unit;
    int d;
    for (d = 0; d < s->ndim; d++)
        if (whole[d]) inner *= out->shape[d];   /* no overflow: at most the element count */
    for (d = s->ndim - 1; d >= 0; d--) {
        int64_t extent = out->shape[d];
        if (whole[d] || extent <= 1) continue;
        if (inner <= grain / extent) { inner *= extent; continue; }
        s->chunk[d] = grain / inner > 1 ? grain / inner : 1;
        for (d = d - 1; d >= 0; d--)
            if (!whole[d]) s->chunk[d] = 1;
        break;
    }
}

/* The same with the last `keep` axes whole. */
static void fk_split_rows_grid(fk_split *s, const fk_layout *out, int keep, int64_t unit, int64_t grain) {
    int whole[FK_MAX_DIMS] = {0};
    for (int d = s->ndim - keep; d < s->ndim; d++) whole[d] = 1;
    fk_split_grid(s, out, whole, unit, grain);
}

/* A dim of a movement op's params, counted from the end when negative; -1 when out of range. */
static inline int fk_split_dim(int dim, int ndim) {
    dim = dim < 0 ? dim + ndim : dim;
    return dim >= 0 && dim < ndim ? dim : -1;
}

/* Mark the `n` dims listed in a FLIP or ROLL params block whole; 0 when one is out of range. */
static inline int fk_split_whole_dims(int *whole, const int8_t *dims, int n, int ndim) {
    if (n > FK_MAX_DIMS) return 0;
    for (int i = 0; i < n; i++) {
        int a = fk_split_dim(dims[i], ndim);
        if (a < 0) return 0;
        whole[a] = 1;
    }
    return 1;
}

/* Match operand k's axes to output axes right-aligned; an axis of another extent is not cut. */
static int fk_split_match_right(fk_split *s, int k, int first, int last) {
    const fk_layout *op = &s->layouts[k], *out = &s->layouts[s->n_in];
    int shift = s->ndim - op->ndim;
    for (int d = first; d < last; d++) {
        int a = d - shift;
        if (a < 0 || op->shape[a] == 1) continue;
        if (op->shape[a] != out->shape[d]) return 0;   /* the kernel reports the mismatch */
        s->axis[k][d] = (int8_t)a;
    }
    return 1;
}

/* Whether no two elements of a layout share memory (axes by |stride|, each stride past the reach
 * of the smaller ones); 0 also when the arithmetic would overflow. */
static int fk_split_self_disjoint(const fk_layout *layout) {
    int64_t stride[FK_MAX_DIMS], extent[FK_MAX_DIMS], reach = 0;
    int n = 0, i, j;
    for (i = 0; i < layout->ndim; i++) {
        if (layout->shape[i] == 1) continue;
        stride[n] = layout->strides[i] < 0 ? -layout->strides[i] : layout->strides[i];
        extent[n++] = layout->shape[i];
    }
    for (i = 1; i < n; i++)                           /* insertion sort by |stride| */
        for (j = i; j > 0 && stride[j] < stride[j - 1]; j--) {
            int64_t t = stride[j]; stride[j] = stride[j - 1]; stride[j - 1] = t;
            t = extent[j]; extent[j] = extent[j - 1]; extent[j - 1] = t;
        }
    for (i = 0; i < n; i++) {
        int64_t span;
        if (stride[i] <= reach || __builtin_mul_overflow(stride[i], extent[i] - 1, &span) ||
            __builtin_add_overflow(reach, span, &reach))
            return 0;
    }
    return 1;
}

/* Whether two layouts of one storage are the same view (an in-place call). */
static int fk_split_same_view(const fk_layout *a, const fk_layout *b) {
    if (a->ndim != b->ndim || a->offset != b->offset) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d]) return 0;
    return 1;
}

/* Blocks may run at once only if no written element is written twice or read by another block:
 * every output is free of self-overlap, and shares no storage bytes with an input unless it is
 * that input's very view.  Anything else runs whole (where the kernel refuses it or not). */
static int fk_split_writes_are_private(const fk_split *s) {
    for (int o = s->n_in; o < s->n_in + s->n_out; o++) {
        const char *out_lo = (const char *)s->outputs[o - s->n_in].data;
        const char *out_hi = out_lo + s->outputs[o - s->n_in].nbytes;
        if (!fk_split_self_disjoint(&s->layouts[o])) return 0;
        for (int k = 0; k < s->n_in; k++) {
            const char *in_lo = (const char *)s->inputs[k].data, *in_hi = in_lo + s->inputs[k].nbytes;
            if (in_lo < out_hi && out_lo < in_hi &&
                !(in_lo == out_lo && fk_split_same_view(&s->layouts[k], &s->layouts[o])))
                return 0;
        }
    }
    return 1;
}

/* Plan the blocks; returns the task count (1: run the call whole). */
static int64_t fk_split_plan(fk_split *s) {
    const fk_layout *out = &s->layouts[s->n_in];
    int64_t numel = 1, tasks = 1;
    int d, k, n = s->n_in + s->n_out;
    if (s->n_out < 1 || n > FK_MAX_OPERANDS || out->ndim < 1 || out->ndim > FK_MAX_DIMS) return 1;
    s->ndim = out->ndim;
    for (d = 0; d < s->ndim; d++) {
        s->chunk[d] = out->shape[d];                  /* whole unless the rule cuts the axis */
        if (out->shape[d] <= 0) return 1;
        if (__builtin_mul_overflow(numel, out->shape[d], &numel)) return 1;
    }
    for (k = 0; k < n; k++) {
        if (s->layouts[k].ndim < 0 || s->layouts[k].ndim > FK_MAX_DIMS) return 1;
        for (d = 0; d < FK_MAX_DIMS; d++) s->axis[k][d] = -1;
    }
    for (d = 0; d < FK_MAX_DIMS; d++) s->b_group[d] = 0;
    if (!fk_split_writes_are_private(s)) return 1;
    for (k = s->n_in; k < n && s->rule != FK_SPLIT_ATTN_BACKWARD; k++) {   /* outputs share output 0's shape */
        if (s->rule == FK_SPLIT_ATTN && k == s->n_in + 1) {
            /* FLASH_ATTN's lse [B, Hq, Sq]: cut as output 0's first three axes */
            if (s->layouts[k].ndim != 3) return 1;
            for (d = 0; d < 3; d++) {
                if (s->layouts[k].shape[d] != out->shape[d]) return 1;
                s->axis[k][d] = (int8_t)d;
            }
            continue;
        }
        if (s->layouts[k].ndim != s->ndim) return 1;
        for (d = 0; d < s->ndim; d++) {
            if (s->layouts[k].shape[d] != out->shape[d]) return 1;
            s->axis[k][d] = (int8_t)d;
        }
    }
    switch (s->rule) {
    case FK_SPLIT_ROWS_0: case FK_SPLIT_ROWS_1: case FK_SPLIT_ROWS_2: {
        int keep = s->rule - FK_SPLIT_ROWS_0;
        if (numel < 2 * FK_SPLIT_GRAIN || s->ndim <= keep) return 1;
        for (k = 0; k < s->n_in; k++)
            if (!fk_split_match_right(s, k, 0, s->ndim - keep)) return 1;
        fk_split_rows_grid(s, out, keep, 1, FK_SPLIT_GRAIN);
        break;
    }
    case FK_SPLIT_REDUCE: {
        const fk_layout *in = &s->layouts[0];
        int reduced[FK_MAX_DIMS] = {0}, keepdim, j = 0;
        int64_t in_numel = 1;
        if (s->n_in != 1 || s->params == NULL || s->params->kind != FK_PARAMS_REDUCE) return 1;
        if (s->params->u.reduce.ndims == 0 || s->params->u.reduce.ndims > in->ndim) return 1;
        keepdim = s->params->u.reduce.keepdim != 0;
        for (d = 0; d < s->params->u.reduce.ndims; d++) {
            int a = s->params->u.reduce.dims[d];
            a = a < 0 ? a + in->ndim : a;
            if (a < 0 || a >= in->ndim) return 1;
            reduced[a] = 1;
        }
        for (d = 0; d < in->ndim; d++) {
            if (__builtin_mul_overflow(in_numel, in->shape[d], &in_numel)) return 1;
            if (reduced[d]) { j += keepdim; continue; }
            if (j >= s->ndim || in->shape[d] != out->shape[j]) return 1;
            s->axis[0][j++] = (int8_t)d;
        }
        if (j != s->ndim || in_numel < 2 * FK_SPLIT_GRAIN) return 1;
        fk_split_rows_grid(s, out, 0, in_numel / numel, FK_SPLIT_GRAIN);
        break;
    }
    case FK_SPLIT_MOVEMENT: {
        const fk_layout *in = &s->layouts[0];
        int whole[FK_MAX_DIMS] = {0}, i, a;   /* the axes the op's params name stay whole */
        if (numel < 2 * FK_SPLIT_GRAIN || s->n_in != 1 || in->ndim != s->ndim || s->params == NULL) return 1;
        switch (s->params->kind) {
        case FK_PARAMS_CUMSUM:
            if ((a = fk_split_dim(s->params->u.cumsum.axis, s->ndim)) < 0) return 1;
            whole[a] = 1;
            break;
        case FK_PARAMS_FLIP:
            if (!fk_split_whole_dims(whole, s->params->u.flip.dims, s->params->u.flip.ndims, s->ndim)) return 1;
            break;
        case FK_PARAMS_ROLL:
            if (!fk_split_whole_dims(whole, s->params->u.roll.dims, s->params->u.roll.ndims, s->ndim)) return 1;
            break;
        case FK_PARAMS_PAD:
            if (s->params->u.pad.ndim < 0 || s->params->u.pad.ndim > s->ndim) return 1;
            for (i = 0; i < s->params->u.pad.ndim; i++)
                if (s->params->u.pad.before[i] || s->params->u.pad.after[i])
                    whole[s->ndim - s->params->u.pad.ndim + i] = 1;
            break;
        default:
            return 1;
        }
        for (d = 0; d < s->ndim; d++) {
            if (whole[d]) continue;
            if (in->shape[d] != out->shape[d]) return 1;   /* the kernel reports the mismatch */
            s->axis[0][d] = (int8_t)d;
        }
        fk_split_grid(s, out, whole, 1, FK_SPLIT_GRAIN);
        break;
    }
    case FK_SPLIT_MATMUL: {
        const fk_layout *A = &s->layouts[0], *B = &s->layouts[1];
        int64_t m, nn, kk, mc, nc;
        if (s->n_in != 2 || s->ndim < 2 || A->ndim < 2 || B->ndim < 2 || s->params == NULL) return 1;
        if (s->params->kind == FK_PARAMS_MATMUL) {
            int kind = s->params->u.matmul.m_compute.kind;
            if ((kind != FK_MATMUL_M_ALL && kind != FK_MATMUL_M_ROWS) ||
                s->params->u.matmul.batch_ndim != s->ndim - 2) return 1;
        } else if (s->params->kind != FK_PARAMS_NONE) {
            return 1;
        }
        m = out->shape[s->ndim - 2];
        nn = out->shape[s->ndim - 1];
        kk = A->shape[A->ndim - 1];
        if (A->shape[A->ndim - 2] != m || B->shape[B->ndim - 1] != nn || B->shape[B->ndim - 2] != kk) return 1;
        if (2.0 * (double)numel * (double)kk < 2 * FK_SPLIT_FLOPS) return 1;
        {
            int dt = s->inputs[0].dtype;
            int64_t rows = m;
            if (s->params->kind == FK_PARAMS_MATMUL && s->params->u.matmul.m_compute.kind == FK_MATMUL_M_ROWS &&
                s->params->u.matmul.m_compute.value < m)
                rows = s->params->u.matmul.m_compute.value;
            /* the float engine runs each product whole on the pool with shared panels */
            int bf16_panels = dt == FK_BF16 && s->inputs[1].dtype == FK_U8;
            if ((dt == FK_F16 || dt == FK_BF16 || dt == FK_F32 || dt == FK_F64 || dt == FK_F8E4M3 ||
                 dt == FK_F8E5M2) && !(bf16_panels && rows < FK_MM_BF16_PASS_ROWS) &&
                fk_gemm_shared_fits(rows, nn, kk, s->inputs[1].dtype == FK_U8 && !bf16_panels))
                return 1;
        }
        /* One thread runs the product whole: each block would pack its own A and B panels again
         * (at 128 x 768 x 768, 24 blocks repacked A 12 times: half the time).  Cutting C changes no
         * element's bits (gemm_core.h.in: fk_gemm_kstep_*), so this is the one rule that may look
         * at the thread count. */
        if (fk_num_threads() <= 1) return 1;
        for (k = 0; k < 2; k++) {                      /* batch axes right-aligned */
            const fk_layout *op = &s->layouts[k];
            int shift = (s->ndim - 2) - (op->ndim - 2);
            for (d = 0; d < s->ndim - 2; d++) {
                int a = d - shift;
                if (a < 0 || op->shape[a] == 1) continue;
                if (op->shape[a] != out->shape[d]) {
                    /* a grouped axis of B (C's extent a multiple of B's): batch block i (one index:
                     * batch axes are cut by 1) reads B's index i / group, set in fk_split_call */
                    if (k != 1 || out->shape[d] % op->shape[a] != 0) return 1;
                    s->b_group[d] = out->shape[d] / op->shape[a];
                    s->b_axis[d] = (int8_t)a;
                    continue;
                }
                s->axis[k][d] = (int8_t)a;
            }
        }
        s->axis[0][s->ndim - 2] = (int8_t)(A->ndim - 2);
        s->axis[1][s->ndim - 1] = (int8_t)(B->ndim - 1);
        for (d = 0; d < s->ndim - 2; d++) { s->chunk[d] = 1; tasks *= out->shape[d]; }
        /* 256 x 256 blocks (packing a block's panels costs ~1/256 of its flops), halved down to
         * 64 while there are fewer than FK_SPLIT_TASKS blocks and a block keeps its flops grain */
        mc = m < 256 ? m : 256;
        nc = nn < 256 ? nn : 256;
        while (tasks * fk_split_div_up(m, mc) * fk_split_div_up(nn, nc) < FK_SPLIT_TASKS) {
            int64_t next_mc = mc, next_nc = nc;
            if (mc >= nc && mc >= 128) next_mc = mc / 2;
            else if (nc >= 128) next_nc = nc / 2;
            else break;
            if (2.0 * (double)next_mc * (double)next_nc * (double)kk < FK_SPLIT_FLOPS) break;
            mc = next_mc;
            nc = next_nc;
        }
        s->chunk[s->ndim - 2] = mc;
        s->chunk[s->ndim - 1] = nc;
        break;
    }
    case FK_SPLIT_CONV2D: {
        const fk_layout *w = &s->layouts[1];
        int64_t oc, images, occ, flops_per_out;
        if (s->ndim != 4 || s->layouts[0].ndim != 4 || w->ndim != 4 || s->params == NULL ||
            (s->params->kind != FK_PARAMS_CONV2D && s->params->kind != FK_PARAMS_CONV1D)) return 1;
        images = out->shape[0];
        oc = out->shape[1];
        if (s->layouts[0].shape[0] != images || w->shape[0] != oc) return 1;
        flops_per_out = 2 * w->shape[1] * w->shape[2] * w->shape[3];
        if ((double)numel * (double)flops_per_out < 2 * FK_SPLIT_FLOPS) return 1;
        /* The direct sibling's rule (im2col cuts its own tasks: FK_SPLIT_CONV2D_IM2COL).  One thread
         * runs the call whole, as MATMUL; no element's bits depend on the blocks */
        if (fk_num_threads() <= 1) return 1;
        s->axis[0][0] = 0;
        s->axis[1][1] = 0;
        if (s->n_in == 3) {
            if (s->layouts[2].ndim != 1 || s->layouts[2].shape[0] != oc) return 1;
            s->axis[2][1] = 0;
        }
        occ = oc;
        if ((s->params->kind == FK_PARAMS_CONV2D ? s->params->u.conv2d.groups : s->params->u.conv1d.groups) == 1)
            /* channel blocks only for fewer than 8 images, of at least 32 channels: each block
             * repeats its image's im2col, which costs more than idle threads at 2 cores */
            while (images * fk_split_div_up(oc, occ) < 8 && occ >= 64 &&
                   (double)(numel / oc) * (double)(occ / 2) * (double)flops_per_out >= FK_SPLIT_FLOPS)
                occ /= 2;
        s->chunk[0] = 1;
        s->chunk[1] = occ;
        break;
    }
    case FK_SPLIT_ATTN: {
        const fk_layout *q = &s->layouts[0], *kl = &s->layouts[1], *v = &s->layouts[2];
        const fk_flash_attn_params *p;
        int64_t b, hq, hk, sq, sk, qc;
        if (s->n_in != 3 || s->ndim != 4 || q->ndim != 4 || kl->ndim != 4 || v->ndim != 4 ||
            s->params == NULL || s->params->kind != FK_PARAMS_FLASH_ATTN) return 1;
        p = &s->params->u.flash_attn;
        b = out->shape[0]; hq = out->shape[1]; sq = out->shape[2];
        hk = kl->shape[1]; sk = kl->shape[2];
        if (hk <= 0 || hq % hk || q->shape[0] != b || kl->shape[0] != b || v->shape[0] != b ||
            v->shape[1] != hk || q->shape[1] != hq || q->shape[2] != sq || v->shape[2] != sk) return 1;
        if (4.0 * (double)numel * (double)q->shape[3] * (double)sk < 2 * FK_SPLIT_FLOPS) return 1;
        s->group = hq / hk;
        for (d = 0; d < 3; d++) s->axis[0][d] = (int8_t)d;
        s->axis[1][0] = s->axis[2][0] = 0;          /* heads and keys: see fk_split_task */
        qc = sq;
        /* top-left queries cut into blocks only while every block's last diagonal is a key (Sq <= Sk):
         * fk_split_call then gives each block its keys up to that diagonal, bottom-right aligned */
        if (p->causal && sq > 64 && !(p->top_left && sq > sk)) {
            qc = 256 < sq ? 256 : sq;
            while (b * (hq / s->group) * fk_split_div_up(sq, qc) < FK_SPLIT_TASKS && qc > 64) qc /= 2;
            qc = (qc + 63) / 64 * 64;
        }
        s->chunk[0] = 1;
        s->chunk[1] = s->group;
        s->chunk[2] = qc;
        s->chunk[3] = out->shape[3];
        break;
    }
    case FK_SPLIT_ATTN_BACKWARD: {
        /* [q, k, v, lse, do] -> [dq, dk, dv]: q, lse, do and dq cut on batch and query heads
         * (a kv head's group), k, v, dk and dv on batch and that kv head (fk_split_call) */
        const fk_layout *kl = &s->layouts[1];
        int64_t b, hq, hk;
        if (s->n_in != 5 || s->n_out != 3 || s->ndim != 4 || kl->ndim != 4 || s->params == NULL ||
            s->params->kind != FK_PARAMS_FLASH_ATTN) return 1;
        b = out->shape[0]; hq = out->shape[1]; hk = kl->shape[1];
        if (hk <= 0 || hq % hk) return 1;
        for (k = 0; k < n; k++) {
            const fk_layout *l = &s->layouts[k];
            int kv = k == 1 || k == 2 || k == s->n_in + 1 || k == s->n_in + 2;
            if (l->ndim != (k == 3 ? 3 : 4) || l->shape[0] != b || l->shape[1] != (kv ? hk : hq)) return 1;
            s->axis[k][0] = 0;
            if (!kv) s->axis[k][1] = 1;
        }
        if (4.0 * (double)numel * (double)kl->shape[2] < 2 * FK_SPLIT_FLOPS) return 1;
        s->group = hq / hk;
        s->chunk[0] = 1;
        s->chunk[1] = s->group;
        s->chunk[2] = out->shape[2];
        s->chunk[3] = out->shape[3];
        break;
    }
    default:
        return 1;
    }
    tasks = 1;
    for (d = 0; d < s->ndim; d++) {
        if (s->chunk[d] < 1) s->chunk[d] = 1;
        s->count[d] = fk_split_div_up(out->shape[d], s->chunk[d]);
        tasks *= s->count[d];
    }
    return tasks;
}

static int fk_split_call(fk_split *s, int64_t task) {
    fk_layout layouts[FK_MAX_OPERANDS];
    fk_params params;
    int64_t lo[FK_MAX_DIMS], len[FK_MAX_DIMS];
    const fk_layout *out = &s->layouts[s->n_in];
    int n = s->n_in + s->n_out, d, k;
    memcpy(layouts, s->layouts, (size_t)n * sizeof(fk_layout));
    for (d = s->ndim - 1; d >= 0; d--) {
        int64_t block = task % s->count[d];
        task /= s->count[d];
        lo[d] = block * s->chunk[d];
        len[d] = out->shape[d] - lo[d] < s->chunk[d] ? out->shape[d] - lo[d] : s->chunk[d];
    }
    for (k = 0; k < n; k++)
        for (d = 0; d < s->ndim; d++) {
            int a = s->axis[k][d];
            if (a < 0) continue;
            layouts[k].offset += lo[d] * layouts[k].strides[a];
            layouts[k].shape[a] = len[d];
        }
    if (s->params == NULL) return s->kernel(s->inputs, s->n_in, s->outputs, s->n_out, layouts, NULL);
    params = *s->params;
    if (s->rule == FK_SPLIT_MATMUL && params.kind == FK_PARAMS_MATMUL) {
        fk_matmul_params *mp = &params.u.matmul;
        for (d = 0; d < s->ndim - 2; d++) mp->batch[d] = len[d];
        mp->m = len[s->ndim - 2];
        mp->n = len[s->ndim - 1];
        if (mp->m_compute.kind == FK_MATMUL_M_ROWS) {
            int64_t rows = mp->m_compute.value - lo[s->ndim - 2];
            mp->m_compute.value = rows < 0 ? 0 : rows > mp->m ? mp->m : rows;
        }
    }
    if (s->rule == FK_SPLIT_MATMUL) {
        for (d = 0; d < s->ndim - 2; d++)
            if (s->b_group[d] > 0) {
                layouts[1].offset += lo[d] / s->b_group[d] * layouts[1].strides[s->b_axis[d]];
                layouts[1].shape[s->b_axis[d]] = 1;
            }
    } else if (s->rule == FK_SPLIT_ATTN_BACKWARD) {
        for (k = 0; k < n; k++)                    /* k, v, dk, dv: the block's kv head */
            if (k == 1 || k == 2 || k == s->n_in + 1 || k == s->n_in + 2) {
                layouts[k].offset += lo[1] / s->group * layouts[k].strides[1];
                layouts[k].shape[1] = len[1] / s->group;
            }
    } else if (s->rule == FK_SPLIT_ATTN) {
        /* the block's kv head; keys up to the diagonal of its last query (those past it are
         * masked for every query of the block), so query i keeps key position i + Sk - Sq.  A causal
         * top-left call (Sq <= Sk, fk_split_plan) keeps position i the same way: its block is
         * bottom-right aligned on keys up to lo + len; a non-causal one keeps every key. */
        int64_t sq = out->shape[2], sk = s->layouts[1].shape[2];
        int64_t keys = lo[2] + len[2] + sk - sq;
        if (params.u.flash_attn.top_left) {
            if (params.u.flash_attn.causal && sq <= sk) {
                keys = lo[2] + len[2];
                params.u.flash_attn.top_left = 0;
            } else {
                keys = sk;
            }
        }
        keys = keys < 0 ? 0 : keys > sk ? sk : keys;
        for (k = 1; k <= 2; k++) {
            layouts[k].offset += lo[1] / s->group * layouts[k].strides[1];
            layouts[k].shape[1] = len[1] / s->group;
            layouts[k].shape[2] = keys;
        }
    }
    return s->kernel(s->inputs, s->n_in, s->outputs, s->n_out, layouts, &params);
}

static void fk_split_task(void *context, int64_t task) {
    fk_split *s = (fk_split *)context;
    int status, expected = FK_OK;
    if (atomic_load_explicit(&s->status, memory_order_relaxed) != FK_OK) return;
    status = fk_split_call(s, task + 1);
    if (status != FK_OK && atomic_compare_exchange_strong(&s->status, &expected, status)) {
        const char *message = fk_error_status() == status ? fk_error_message() : "a threaded block failed";
        strncpy(s->message, message, sizeof(s->message) - 1);
        s->message[sizeof(s->message) - 1] = '\0';
    }
}

/* The threaded path of fk_split_run (kept out of line: small calls never set up a plan). */
__attribute__((noinline)) static int fk_split_large(fk_kernel_fn kernel, int rule, const fk_storage *inputs,
                                                    int n_in, fk_storage *outputs, int n_out,
                                                    const fk_layout *layouts, const fk_params *params) {
    fk_split s;
    int64_t tasks;
    int status;
    s.kernel = kernel;
    s.inputs = inputs;
    s.outputs = outputs;
    s.layouts = layouts;
    s.params = params;
    s.n_in = n_in;
    s.n_out = n_out;
    s.rule = rule;
    tasks = fk_split_plan(&s);
    if (tasks <= 1) return kernel(inputs, n_in, outputs, n_out, layouts, params);
    status = fk_split_call(&s, 0);                 /* validates the call before anything else */
    if (status != FK_OK) return status;
    atomic_init(&s.status, FK_OK);
    s.message[0] = '\0';
    fk_parallel_for(tasks - 1, fk_split_task, &s);
    status = atomic_load(&s.status);
    if (status != FK_OK) fk_set_error(status, "%s", s.message);
    return status;
}

/* Whether a layout holds at least `at_least` elements (1 when the count overflows: let the plan
 * decide; 0 for an ndim out of range: the kernel reports it). */
static inline __attribute__((always_inline)) int fk_split_holds(const fk_layout *layout, int64_t at_least) {
    int64_t n = 1;
    if ((unsigned)layout->ndim > FK_MAX_DIMS) return 0;
    for (int d = 0; d < layout->ndim; d++)
        if (__builtin_mul_overflow(n, layout->shape[d], &n)) return 1;
    return n >= at_least;
}

/* Run `kernel` on the call, cut into blocks by `rule` when it is large enough.  The size test
 * looks at one layout (the output; a reduction's input; also input 0 of the compute ops) and
 * costs a few nanoseconds; only calls past it plan blocks, and the plan may still run them whole. */
static inline __attribute__((always_inline))
int fk_split_run(fk_kernel_fn kernel, int rule, const fk_storage *inputs, int n_in, fk_storage *outputs,
                 int n_out, const fk_layout *layouts, const fk_params *params) {
    int large = 0;
    if (rule == FK_SPLIT_CONV2D_IM2COL || rule == FK_SPLIT_CONV2D_BACKWARD_INPUT ||
        rule == FK_SPLIT_CONV_TRANSPOSE2D || rule == FK_SPLIT_CONV2D_BACKWARD_WEIGHT)
        return kernel(inputs, n_in, outputs, n_out, layouts, params);    /* they cut their own tasks */
    if (n_out >= 1 && n_in >= 1 && n_in + n_out <= FK_MAX_OPERANDS) {
        if (rule <= FK_SPLIT_ROWS_2 || rule == FK_SPLIT_MOVEMENT)
            large = fk_split_holds(&layouts[n_in], 2 * FK_SPLIT_GRAIN);
        else if (rule == FK_SPLIT_REDUCE)
            large = fk_split_holds(&layouts[0], 2 * FK_SPLIT_GRAIN);
        else
            large = fk_split_holds(&layouts[n_in], 4096) || fk_split_holds(&layouts[0], 4096);
    }
    if (__builtin_expect(!large, 1)) return kernel(inputs, n_in, outputs, n_out, layouts, params);
    return fk_split_large(kernel, rule, inputs, n_in, outputs, n_out, layouts, params);
}
#endif
