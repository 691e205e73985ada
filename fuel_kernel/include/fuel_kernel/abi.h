/* fuel_kernel C ABI: the types every kernel, backend and extension shares, and the C API table.
 *
 * This header is the contract between the dispatch core (fuel_kernel._dispatch), the typed kernel
 * modules (fuel_kernel.cpu.*) and third-party Cython/C extensions.  It is mirrored one-to-one by
 * fuel_kernel/abi.pxd.  Enum numbering is append-only; any change to a struct or to the API table
 * bumps FK_ABI_VERSION, and fk_import_api() refuses a module built against another version.
 * tests/test_abi.py holds the layout to tests/data/abi_signature.json (regenerate it with
 * `python tests/abi_signature.py --write` after a deliberate change).
 *
 * Extensions reach the core through a table of function pointers published in the capsule
 * "fuel_kernel._dispatch._C_API" (the NumPy C-API pattern).  Call fk_import_api() once at module
 * init; afterwards the fk_* functions below are macros over that table.  The API pointer is
 * static, so each extension module must compile its fk_* callers into one translation unit.
 */
#ifndef FUEL_KERNEL_ABI_H
#define FUEL_KERNEL_ABI_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FK_ABI_VERSION 6
#define FK_MAX_DIMS 8
#define FK_MAX_OPERANDS 8
#define FK_SOURCE_LEN 16
#define FK_NOTES_LEN 96
#define FK_ERROR_LEN 512

/* ---- dtypes, ops, params kinds and status codes ------------------------------------------- */
/* fk_dtype, fk_op, fk_params_kind and fk_status are generated from fuel_kernel/spec.py at build
 * time (tools/generate_abi.py, run by setup.py); change the spec, not the generated header.  The
 * rest of this header does not use them, so a copy of abi.h alone (as the ABI version probes in
 * tests/test_abi.py make) still compiles, with a warning, for code that needs only the API table. */
#if defined(__has_include)
#if !__has_include("fuel_kernel/abi_enums.h")
#define FUEL_KERNEL_ABI_WITHOUT_ENUMS
#endif
#endif
#ifndef FUEL_KERNEL_ABI_WITHOUT_ENUMS
#include "fuel_kernel/abi_enums.h"
#else
#warning "fuel_kernel/abi_enums.h not found: build fuel_kernel (setup.py generates it); FK_OP_*, FK_<dtype>, FK_PARAMS_* and FK_ERR_* are undefined"
#endif

/* ---- backends ------------------------------------------------------------------------------ */
typedef enum {
    FK_BACKEND_CPU = 0, FK_BACKEND_CUDA = 1, FK_BACKEND_VULKAN = 2, FK_BACKEND_METAL = 3,
    /* ids in [FK_BACKEND_EXTENSION_FIRST, FK_BACKEND_EXTENSION_LAST] are claimed at run time */
    FK_BACKEND_EXTENSION_FIRST = 64, FK_BACKEND_EXTENSION_LAST = 255
} fk_backend;

/* ---- operands ------------------------------------------------------------------------------ */
typedef struct { uint8_t n; uint8_t v[FK_MAX_OPERANDS]; } fk_dtypes;  /* inputs, then outputs */

enum { FK_STORAGE_READ_ONLY = 1u };

typedef struct {
    void *data;          /* base pointer of the buffer (element 0 of the allocation) */
    size_t nbytes;       /* bytes addressable from data */
    int32_t backend;     /* fk_backend */
    int32_t dtype;       /* fk_dtype */
    uint32_t flags;      /* FK_STORAGE_* */
    uint32_t reserved;
} fk_storage;

typedef struct {
    int32_t ndim;                    /* 0..FK_MAX_DIMS */
    int32_t reserved;
    int64_t offset;                  /* in elements from storage.data */
    int64_t shape[FK_MAX_DIMS];
    int64_t strides[FK_MAX_DIMS];    /* in elements; 0 = broadcast axis; negative allowed */
} fk_layout;

/* ---- op parameters: one tagged union, fixed size, POD ------------------------------------- */
/* fk_params_kind (which member of fk_params_union is meaningful) is in abi_enums.h. */
typedef enum { FK_MATMUL_M_ALL = 0, FK_MATMUL_M_ROWS = 1, FK_MATMUL_M_DEFERRED = 2 } fk_matmul_m_kind;
/* ALL: compute all m rows.  ROWS: compute `value` rows.  DEFERRED: read the row count at run
 * time from the scalar input operand number `value`.  Rows past the count are zeroed. */
typedef struct { int32_t kind; int32_t reserved; int64_t value; } fk_matmul_m;

typedef enum { FK_PAD_CONSTANT = 0, FK_PAD_REFLECT = 1, FK_PAD_REPLICATE = 2 } fk_pad_mode;

/* select_last: ARGMAX / ARGMIN give the last index of the extremum (ONNX's select_last_index); the
 * other reductions refuse it */
typedef struct { uint8_t ndims; uint8_t keepdim; int8_t dims[FK_MAX_DIMS]; uint8_t select_last; } fk_reduce_params;
typedef struct {
    int32_t batch_ndim; int32_t reserved;
    int64_t batch[FK_MAX_DIMS];      /* broadcast batch shape */
    int64_t m, n, k;                 /* m is the row capacity */
    fk_matmul_m m_compute;
    double scale_a, scale_b;         /* FP8 inputs: C = scale_a * scale_b * (A @ B); finite; other
                                        dtypes take only 1.0 */
} fk_matmul_params;
typedef struct { int32_t stride[2]; int32_t padding[2]; int32_t dilation[2]; int32_t groups; } fk_conv2d_params;
typedef struct { int32_t ndim; int32_t reserved; int64_t start[FK_MAX_DIMS]; int64_t stop[FK_MAX_DIMS]; int64_t step[FK_MAX_DIMS]; } fk_slice_params;
typedef struct { double mul; double add; } fk_affine_params;
typedef struct { double min; double max; } fk_clamp_params;
typedef struct { int32_t exp; } fk_powi_params;
typedef struct { int32_t axis; } fk_axis_params;         /* CONCAT, INDEX_SELECT, GATHER, SCATTER */
typedef struct { int32_t axis; uint8_t exclusive; uint8_t reverse; } fk_cumsum_params;
typedef struct { uint8_t ndims; int8_t dims[FK_MAX_DIMS]; } fk_flip_params;
typedef struct { uint8_t ndims; int8_t dims[FK_MAX_DIMS]; int64_t shifts[FK_MAX_DIMS]; } fk_roll_params;
typedef struct { int64_t diagonal; } fk_triangular_params;
typedef struct { int32_t mode; int32_t ndim; int64_t before[FK_MAX_DIMS]; int64_t after[FK_MAX_DIMS]; double value; } fk_pad_params;
typedef struct { double value; } fk_masked_fill_params;
typedef struct { double eps; } fk_norm_params;
typedef struct { uint8_t interleaved; } fk_rope_params;
typedef struct {
    double scale; double softcap;    /* softcap 0 = off */
    uint8_t causal; uint8_t top_left;   /* top_left: query i at key position i, else i + Sk - Sq */
    uint8_t reserved[6];
    int64_t window_left; int64_t window_right;   /* -1 = unbounded */
} fk_flash_attn_params;
typedef struct {
    double scale; double softcap;
    int32_t block_size; int32_t reserved;
    int64_t window_left;
} fk_paged_attn_params;
/* CONV2D_BACKWARD_INPUT, CONV2D_BACKWARD_WEIGHT: CONV2D's fields, the forward input's (H, W) and
 * the kernel's (KH, KW) */
typedef struct {
    int32_t stride[2]; int32_t padding[2]; int32_t dilation[2]; int32_t groups; int32_t reserved;
    int64_t input_size[2]; int64_t kernel_size[2];
} fk_conv2d_backward_params;

typedef struct {
    int64_t ignore_index;            /* a target equal to it: loss and gradient 0 */
    double label_smoothing;          /* in [0, 1] */
} fk_cross_entropy_params;
/* REDUCE_SUM_TO, REDUCE_MAX_TO, REDUCE_MAX_TO_BACKWARD: the target shape (ndim dims) */
typedef struct { int32_t ndim; int32_t reserved; int64_t shape[FK_MAX_DIMS]; } fk_reduce_to_params;
/* WRITE_SLICE, WRITE_SLICE_ROTATING: where src lands in the destination (start per dim, ndim dims);
 * axis: the ring axis of WRITE_SLICE_ROTATING, and the axis a run-time position operand adds to */
typedef struct { int32_t ndim; int32_t axis; int64_t start[FK_MAX_DIMS]; } fk_write_slice_params;
/* QMATMUL: W's GGML quant type (a GGMLQuantizationType value) and the extents of
 * A (m, k) @ dequant(W).T, W holding n rows of k quantized values */
typedef struct { int32_t quant_type; int32_t reserved; int64_t m; int64_t n; int64_t k; } fk_qmatmul_params;
/* NF4_MATMUL: the extents of A (m, k) @ dequant(W).T, W (n, k) in blocks of 64 NF4 codes */
typedef struct { int64_t m; int64_t n; int64_t k; } fk_nf4_matmul_params;
/* CAUSAL_CONV1D (activation), SELECTIVE_SCAN (delta_softplus), SSD_CHUNK_SCAN (chunk_size) */
typedef enum { FK_SSM_ACT_NONE = 0, FK_SSM_ACT_SILU = 1 } fk_ssm_activation;
typedef struct {
    int32_t activation;              /* fk_ssm_activation */
    uint8_t delta_softplus; uint8_t reserved[3];
    int64_t chunk_size;              /* >= 1 */
} fk_ssm_params;
/* MAX_POOL2D, AVG_POOL2D: ONNX pads [t, l, b, r] are pads_begin {t, l}, pads_end {b, r};
 * count_include_pad is read by AVG_POOL2D only */
typedef struct {
    int32_t kernel[2]; int32_t stride[2]; int32_t pads_begin[2]; int32_t pads_end[2];
    int32_t dilation[2]; uint8_t ceil_mode; uint8_t count_include_pad;
} fk_pool2d_params;
/* TOPK: k along the last dim, the largest (else the smallest); sorted is accepted for ONNX's sake:
 * the result is always best first */
typedef struct { int64_t k; uint8_t largest; uint8_t sorted; } fk_topk_params;
/* SCATTER (ONNX ScatterElements): the axis and what happens at each index: NONE writes src (the
 * last in index order wins), MAX / MIN / MUL fold src into the value there */
typedef enum { FK_SCATTER_NONE = 0, FK_SCATTER_MAX = 1, FK_SCATTER_MIN = 2, FK_SCATTER_MUL = 3 } fk_scatter_reduction;
typedef struct { int32_t axis; int32_t reduction; } fk_scatter_reduce_params;
/* CONV1D: CONV2D's stride, dilation and groups on its one spatial axis, and the zeros padded before
 * and after it, padding {begin, end} (ONNX Conv's pads [begin, end]; PyTorch's padding p is {p, p}) */
typedef struct { int32_t stride; int32_t padding[2]; int32_t dilation; int32_t groups; } fk_conv1d_params;
/* CONV_TRANSPOSE2D: ONNX pads [t, l, b, r] are pads_begin {t, l}, pads_end {b, r}; output_padding
 * below the stride or the dilation on each axis */
typedef struct {
    int32_t stride[2]; int32_t pads_begin[2]; int32_t pads_end[2]; int32_t dilation[2];
    int32_t output_padding[2]; int32_t groups;
} fk_conv_transpose2d_params;

typedef union {
    fk_reduce_params reduce;
    fk_matmul_params matmul;
    fk_conv2d_params conv2d;
    fk_slice_params slice;
    fk_affine_params affine;
    fk_clamp_params clamp;
    fk_powi_params powi;
    fk_axis_params axis;
    fk_cumsum_params cumsum;
    fk_flip_params flip;
    fk_roll_params roll;
    fk_triangular_params triangular;
    fk_pad_params pad;
    fk_masked_fill_params masked_fill;
    fk_norm_params norm;
    fk_rope_params rope;
    fk_flash_attn_params flash_attn;
    fk_paged_attn_params paged_attn;
    fk_cross_entropy_params cross_entropy;
    fk_conv2d_backward_params conv2d_backward;
    fk_reduce_to_params reduce_to;
    fk_write_slice_params write_slice;
    fk_qmatmul_params qmatmul;
    fk_nf4_matmul_params nf4_matmul;
    fk_ssm_params ssm;
    fk_pool2d_params pool2d;
    fk_topk_params topk;
    fk_scatter_reduce_params scatter_reduce;
    fk_conv1d_params conv1d;
    fk_conv_transpose2d_params conv_transpose2d;
} fk_params_union;

typedef struct {
    int32_t kind;                    /* fk_params_kind: which member of u is meaningful */
    int32_t reserved;
    fk_params_union u;
} fk_params;

/* ---- kernels ------------------------------------------------------------------------------- */
/* One signature for every kernel of every backend.  `layouts` holds n_in input layouts followed
 * by n_out output layouts.  A kernel validates what it needs before writing anything, returns
 * FK_OK or an fk_status, and sets a message with fk_set_error on failure.  No Python, no globals. */
typedef int (*fk_kernel_fn)(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                            const fk_layout *layouts, const fk_params *params);

enum {
    FK_CAP_STRIDED_INPUT = 1u,       /* walks input strides itself: stride 0, negative, transposed */
    FK_CAP_REQUIRES_BROADCAST = 2u,  /* only valid on broadcast inputs; never picked by plain lookup */
    FK_CAP_INPLACE = 4u,             /* an output may be exactly an input (same data, layout, size) */
    FK_CAP_STRIDED_OUTPUT = 8u       /* writes through output strides itself */
};

/* One task of a parallel kernel (fk_parallel_for): `task` runs in [0, n_tasks). */
typedef void (*fk_task_fn)(void *context, int64_t task);

typedef struct { double flops; double bytes_moved; double overhead_ns; } fk_cost;
typedef fk_cost (*fk_cost_fn)(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                              const fk_params *params);

typedef struct {
    uint8_t set;                     /* 0 = no claim yet (fill_unset_precision replaces it) */
    uint8_t bit_stable;              /* same inputs give the same bits on every run */
    uint8_t reserved[2];
    uint32_t max_ulp;                /* 0 with bit_exact-able math = exactly rounded */
    double max_rel;
    double max_abs;
    char notes[FK_NOTES_LEN];
} fk_precision;

typedef struct {
    fk_kernel_fn kernel;
    uint32_t caps;                   /* FK_CAP_* */
    uint32_t reserved;
    fk_precision precision;
    fk_cost_fn cost;                 /* the API's unknown_cost = no claim */
    char source[FK_SOURCE_LEN];      /* "native", "blas", ... */
    uint64_t revision;               /* stable identity of this implementation across runs */
} fk_entry;

typedef enum { FK_KEY_STATIC = 0, FK_KEY_RUNTIME_FUSED = 1 } fk_key_kind;

/* The hash key.  POD with no padding holes: always build it with fk_key_make. */
typedef struct {
    uint32_t id;                     /* fk_op for STATIC, fused-op id for RUNTIME_FUSED */
    uint16_t kind;                   /* fk_key_kind */
    uint16_t backend;
    uint8_t ndtypes;
    uint8_t dtypes[FK_MAX_OPERANDS];
    uint8_t pad[7];
} fk_key;

static inline fk_key fk_key_make(int kind, uint32_t id, const fk_dtypes *dtypes, int backend) {
    fk_key key;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* Build the key's three 64-bit words in registers and store them whole: the table hashes the
     * key as three word loads, and a word load over byte-wise stores cannot be forwarded from
     * the store buffer (a ~10 ns stall per key, more than the lookup itself). */
    uint64_t words[3], v;
    int n = dtypes->n < FK_MAX_OPERANDS ? dtypes->n : FK_MAX_OPERANDS;
    __builtin_memcpy(&v, dtypes->v, 8);
    v = n >= 8 ? v : (v & ((1ull << (8 * n)) - 1));       /* dtypes past n are zero in a key */
    words[0] = (uint64_t)id | (uint64_t)(uint16_t)kind << 32 | (uint64_t)(uint16_t)backend << 48;
    words[1] = (uint64_t)dtypes->n | v << 8;              /* ndtypes, dtypes[0..6] */
    words[2] = v >> 56;                                   /* dtypes[7], then the zero pad */
    __builtin_memcpy(&key, words, sizeof(key));
#else
    int i;
    for (i = 0; i < (int)sizeof(key.pad); i++) key.pad[i] = 0;
    for (i = 0; i < FK_MAX_OPERANDS; i++) key.dtypes[i] = 0;
    key.id = id;
    key.kind = (uint16_t)kind;
    key.backend = (uint16_t)backend;
    key.ndtypes = dtypes->n;
    for (i = 0; i < dtypes->n && i < FK_MAX_OPERANDS; i++) key.dtypes[i] = dtypes->v[i];
#endif
    return key;
}

/* One manifest row: what a kernel module asks to register. */
typedef struct {
    int32_t op;                      /* fk_op */
    fk_dtypes dtypes;
    fk_entry entry;
} fk_manifest_row;

/* ---- the C API table ------------------------------------------------------------------------ */
typedef struct fk_snapshot fk_snapshot;   /* an immutable, reference-counted table version */
typedef struct fk_txn fk_txn;             /* a pending registration transaction */

typedef struct {
    const fk_snapshot *snapshot;
    const fk_entry *entries;         /* the key's alternatives, in registration order */
    int32_t n_entries;               /* 0 on a miss */
} fk_lookup_result;

typedef struct {
    /* These two members stay first in every ABI version: fk_import_api() reads them before it
     * knows whether the rest of the table has the layout it was compiled against. */
    int32_t abi_version;
    int32_t api_size;                /* sizeof(fk_api), a second guard against skew */
    /* errors: thread-local status + message */
    void (*set_error)(int status, const char *fmt, ...);
    int (*error_status)(void);
    const char *(*error_message)(void);
    void (*clear_error)(void);
    /* snapshots: acquire never locks; a held snapshot stays valid until released */
    const fk_snapshot *(*acquire)(void);
    void (*retain)(const fk_snapshot *snapshot);
    void (*release)(const fk_snapshot *snapshot);
    uint64_t (*snapshot_generation)(const fk_snapshot *snapshot);
    /* lookup */
    fk_lookup_result (*lookup)(const fk_snapshot *snapshot, const fk_key *key);
    const fk_entry *(*lookup_with_caps)(const fk_snapshot *snapshot, const fk_key *key, uint32_t required_caps);
    int (*call)(const fk_entry *entry, const fk_storage *inputs, int n_in, fk_storage *outputs,
                int n_out, const fk_layout *layouts, const fk_params *params);
    /* registration */
    fk_txn *(*txn_begin)(void);
    int (*txn_register)(fk_txn *txn, const fk_key *key, const fk_entry *entry);
    int (*txn_register_manifest)(fk_txn *txn, int backend, const fk_manifest_row *rows, int n_rows);
    int (*txn_drop_runtime_fused)(fk_txn *txn, uint32_t fused_id, int backend);
    int (*txn_commit)(fk_txn *txn);   /* publishes and frees txn; on error publishes nothing */
    void (*txn_abort)(fk_txn *txn);
    uint32_t (*new_runtime_fused_id)(void);
    int (*claim_backend)(const char *name);   /* returns an id in the extension range, or -1 */
    fk_cost (*unknown_cost)(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                            const fk_params *params);
    /* threads (since ABI 2): run fn(context, t) for t in [0, n_tasks) on the process's intra-op
     * pool, the caller included, and return when all are done (returns the threads used).  Task
     * order and placement are unspecified; nested and concurrent calls run serially. */
    int (*parallel_for)(int64_t n_tasks, fk_task_fn fn, void *context);
    int (*num_threads)(void);        /* the current setting (fuel_kernel.set_num_threads) */
    /* operands (since ABI 3): how many of a key's dtypes are outputs (they come last): the op's
     * output count for a static key (for an op with optional outputs, as FLASH_ATTN's log-sum-exp,
     * the key's length minus its fixed input count), 1 for a runtime fused op; -1 (with the error
     * set) for a static id past FK_OP_COUNT.  The rest are inputs. */
    int (*key_outputs)(const fk_key *key);
    /* scratch memory (since ABI 5): a 64-byte aligned block of at least `bytes` (NULL with
     * FK_ERR_NO_MEMORY set on failure), and its return; each thread keeps its last freed block for
     * its next call, so kernels that allocate per block of work do not churn the C allocator.  A
     * block may also go back with plain free(), which skips the keeping. */
    void *(*scratch_alloc)(size_t bytes);
    void (*scratch_free)(void *p);
} fk_api;

#define FK_API_CAPSULE_NAME "fuel_kernel._dispatch._C_API"
#define FK_KERNEL_CAPSULE_NAME "fuel_kernel.kernel"

#ifndef FK_BUILDING_CORE
/* Every module that includes this header gets its own pointer, filled by fk_import_api(). */
static const fk_api *fk_api_table __attribute__((unused)) = NULL;

#define fk_set_error (fk_api_table->set_error)
#define fk_error_status (fk_api_table->error_status)
#define fk_error_message (fk_api_table->error_message)
#define fk_clear_error (fk_api_table->clear_error)
#define fk_acquire (fk_api_table->acquire)
#define fk_retain (fk_api_table->retain)
#define fk_release (fk_api_table->release)
#define fk_snapshot_generation (fk_api_table->snapshot_generation)
#define fk_lookup (fk_api_table->lookup)
#define fk_lookup_with_caps (fk_api_table->lookup_with_caps)
#define fk_call (fk_api_table->call)
#define fk_txn_begin (fk_api_table->txn_begin)
#define fk_txn_register (fk_api_table->txn_register)
#define fk_txn_register_manifest (fk_api_table->txn_register_manifest)
#define fk_txn_drop_runtime_fused (fk_api_table->txn_drop_runtime_fused)
#define fk_txn_commit (fk_api_table->txn_commit)
#define fk_txn_abort (fk_api_table->txn_abort)
#define fk_new_runtime_fused_id (fk_api_table->new_runtime_fused_id)
#define fk_claim_backend (fk_api_table->claim_backend)
#define fk_unknown_cost (fk_api_table->unknown_cost)
#define fk_parallel_for (fk_api_table->parallel_for)
#define fk_num_threads (fk_api_table->num_threads)
#define fk_key_outputs (fk_api_table->key_outputs)
#define fk_scratch_alloc (fk_api_table->scratch_alloc)
#define fk_scratch_free (fk_api_table->scratch_free)

#ifdef Py_PYTHON_H
/* Import the API table; returns 0, or -1 with a Python ImportError set.  Call with the GIL. */
static int fk_import_api(void) {
    PyObject *module = PyImport_ImportModule("fuel_kernel._dispatch");
    PyObject *capsule;
    const fk_api *api;
    if (module == NULL) return -1;
    capsule = PyObject_GetAttrString(module, "_C_API");
    Py_DECREF(module);
    if (capsule == NULL) return -1;
    api = (const fk_api *)PyCapsule_GetPointer(capsule, FK_API_CAPSULE_NAME);
    Py_DECREF(capsule);
    if (api == NULL) return -1;
    if (api->abi_version != FK_ABI_VERSION || api->api_size != (int32_t)sizeof(fk_api)) {
        PyErr_Format(PyExc_ImportError,
                     "fuel_kernel ABI mismatch: this module was built against ABI version %d "
                     "(api size %d) but the installed fuel_kernel provides ABI version %d "
                     "(api size %d); rebuild the module against the installed fuel_kernel",
                     FK_ABI_VERSION, (int)sizeof(fk_api), (int)api->abi_version, (int)api->api_size);
        return -1;
    }
    fk_api_table = api;
    return 0;
}
#endif
#endif /* FK_BUILDING_CORE */

#ifdef __cplusplus
}
#endif
#endif /* FUEL_KERNEL_ABI_H */
