# cython: language_level=3
# The public cimport API of fuel_kernel: a one-to-one mirror of fuel_kernel/abi.h.
#
# Other extensions `from fuel_kernel.abi cimport *`, add fuel_kernel.get_include() to their include
# dirs, call fk_import_api() once at module import, and from then on register, look up and call
# kernels without the GIL (docs/extending.md; examples/extension is a complete backend).  Names
# here are frozen and checked member by member against abi.h (tests/test_abi.py); this file
# cimports only libc and has no cdef classes, so it never drags Python objects into a nogil caller.

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

# fk_dtype, fk_op, fk_params_kind and fk_status: generated from fuel_kernel/spec.py at build time
# by tools/generate_abi.py (its own `cdef extern from "fuel_kernel/abi.h"` block).
include "abi_enums.pxi"

cdef extern from "fuel_kernel/abi.h" nogil:
    enum:
        FK_ABI_VERSION
        FK_MAX_DIMS
        FK_MAX_OPERANDS
        FK_SOURCE_LEN
        FK_NOTES_LEN
        FK_ERROR_LEN

    ctypedef enum fk_backend:
        FK_BACKEND_CPU, FK_BACKEND_CUDA, FK_BACKEND_VULKAN, FK_BACKEND_METAL
        FK_BACKEND_EXTENSION_FIRST, FK_BACKEND_EXTENSION_LAST

    ctypedef struct fk_dtypes:
        uint8_t n
        uint8_t v[8]

    enum:
        FK_STORAGE_READ_ONLY

    ctypedef struct fk_storage:
        void *data
        size_t nbytes
        int32_t backend
        int32_t dtype
        uint32_t flags
        uint32_t reserved

    ctypedef struct fk_layout:
        int32_t ndim
        int32_t reserved
        int64_t offset
        int64_t shape[8]
        int64_t strides[8]

    ctypedef enum fk_matmul_m_kind:
        FK_MATMUL_M_ALL, FK_MATMUL_M_ROWS, FK_MATMUL_M_DEFERRED

    ctypedef struct fk_matmul_m:
        int32_t kind
        int32_t reserved
        int64_t value

    ctypedef enum fk_pad_mode:
        FK_PAD_CONSTANT, FK_PAD_REFLECT, FK_PAD_REPLICATE

    ctypedef enum fk_ssm_activation:
        FK_SSM_ACT_NONE, FK_SSM_ACT_SILU

    ctypedef enum fk_scatter_reduction:
        FK_SCATTER_NONE, FK_SCATTER_MAX, FK_SCATTER_MIN, FK_SCATTER_MUL

    ctypedef struct fk_reduce_params:
        uint8_t ndims
        uint8_t keepdim
        int8_t dims[8]
        uint8_t select_last

    ctypedef struct fk_matmul_params:
        int32_t batch_ndim
        int32_t reserved
        int64_t batch[8]
        int64_t m
        int64_t n
        int64_t k
        fk_matmul_m m_compute
        double scale_a
        double scale_b

    ctypedef struct fk_conv2d_params:
        int32_t stride[2]
        int32_t padding[2]
        int32_t dilation[2]
        int32_t groups

    ctypedef struct fk_slice_params:
        int32_t ndim
        int32_t reserved
        int64_t start[8]
        int64_t stop[8]
        int64_t step[8]

    ctypedef struct fk_affine_params:
        double mul
        double add

    ctypedef struct fk_clamp_params:
        double min
        double max

    ctypedef struct fk_powi_params:
        int32_t exp

    ctypedef struct fk_axis_params:
        int32_t axis

    ctypedef struct fk_cumsum_params:
        int32_t axis
        uint8_t exclusive
        uint8_t reverse

    ctypedef struct fk_flip_params:
        uint8_t ndims
        int8_t dims[8]

    ctypedef struct fk_roll_params:
        uint8_t ndims
        int8_t dims[8]
        int64_t shifts[8]

    ctypedef struct fk_triangular_params:
        int64_t diagonal

    ctypedef struct fk_pad_params:
        int32_t mode
        int32_t ndim
        int64_t before[8]
        int64_t after[8]
        double value

    ctypedef struct fk_masked_fill_params:
        double value

    ctypedef struct fk_norm_params:
        double eps

    ctypedef struct fk_rope_params:
        uint8_t interleaved

    ctypedef struct fk_flash_attn_params:
        double scale
        double softcap
        uint8_t causal
        uint8_t top_left
        uint8_t reserved[6]
        int64_t window_left
        int64_t window_right

    ctypedef struct fk_paged_attn_params:
        double scale
        double softcap
        int32_t block_size
        int32_t reserved
        int64_t window_left

    ctypedef struct fk_cross_entropy_params:
        int64_t ignore_index
        double label_smoothing
    ctypedef struct fk_conv2d_backward_params:
        int32_t stride[2]
        int32_t padding[2]
        int32_t dilation[2]
        int32_t groups
        int32_t reserved
        int64_t input_size[2]
        int64_t kernel_size[2]
    ctypedef struct fk_reduce_to_params:
        int32_t ndim
        int32_t reserved
        int64_t shape[8]
    ctypedef struct fk_write_slice_params:
        int32_t ndim
        int32_t axis
        int64_t start[8]
    ctypedef struct fk_qmatmul_params:
        int32_t quant_type
        int32_t reserved
        int64_t m
        int64_t n
        int64_t k
    ctypedef struct fk_nf4_matmul_params:
        int64_t m
        int64_t n
        int64_t k
    ctypedef struct fk_ssm_params:
        int32_t activation
        uint8_t delta_softplus
        uint8_t reserved[3]
        int64_t chunk_size
    ctypedef struct fk_pool2d_params:
        int32_t kernel[2]
        int32_t stride[2]
        int32_t pads_begin[2]
        int32_t pads_end[2]
        int32_t dilation[2]
        uint8_t ceil_mode
        uint8_t count_include_pad
    ctypedef struct fk_topk_params:
        int64_t k
        uint8_t largest
        uint8_t sorted
    ctypedef struct fk_scatter_reduce_params:
        int32_t axis
        int32_t reduction
    ctypedef struct fk_conv1d_params:
        int32_t stride
        int32_t padding[2]
        int32_t dilation
        int32_t groups
    ctypedef struct fk_conv_transpose2d_params:
        int32_t stride[2]
        int32_t pads_begin[2]
        int32_t pads_end[2]
        int32_t dilation[2]
        int32_t output_padding[2]
        int32_t groups

    ctypedef union fk_params_union:
        fk_reduce_params reduce
        fk_matmul_params matmul
        fk_conv2d_params conv2d
        fk_slice_params slice
        fk_affine_params affine
        fk_clamp_params clamp
        fk_powi_params powi
        fk_axis_params axis
        fk_cumsum_params cumsum
        fk_flip_params flip
        fk_roll_params roll
        fk_triangular_params triangular
        fk_pad_params pad
        fk_masked_fill_params masked_fill
        fk_norm_params norm
        fk_rope_params rope
        fk_flash_attn_params flash_attn
        fk_paged_attn_params paged_attn
        fk_cross_entropy_params cross_entropy
        fk_conv2d_backward_params conv2d_backward
        fk_reduce_to_params reduce_to
        fk_write_slice_params write_slice
        fk_qmatmul_params qmatmul
        fk_nf4_matmul_params nf4_matmul
        fk_ssm_params ssm
        fk_pool2d_params pool2d
        fk_topk_params topk
        fk_scatter_reduce_params scatter_reduce
        fk_conv1d_params conv1d
        fk_conv_transpose2d_params conv_transpose2d

    ctypedef struct fk_params:
        int32_t kind
        int32_t reserved
        fk_params_union u

    ctypedef int (*fk_kernel_fn)(const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                                 const fk_layout *layouts, const fk_params *params) noexcept nogil

    enum:
        FK_CAP_STRIDED_INPUT
        FK_CAP_REQUIRES_BROADCAST
        FK_CAP_INPLACE
        FK_CAP_STRIDED_OUTPUT

    ctypedef void (*fk_task_fn)(void *context, int64_t task) noexcept nogil

    ctypedef struct fk_cost:
        double flops
        double bytes_moved
        double overhead_ns

    ctypedef fk_cost (*fk_cost_fn)(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                                   const fk_params *params) noexcept nogil

    ctypedef struct fk_precision:
        uint8_t set
        uint8_t bit_stable
        uint8_t reserved[2]
        uint32_t max_ulp
        double max_rel
        double max_abs
        char notes[96]

    ctypedef struct fk_entry:
        fk_kernel_fn kernel
        uint32_t caps
        uint32_t reserved
        fk_precision precision
        fk_cost_fn cost
        char source[16]
        uint64_t revision

    ctypedef enum fk_key_kind:
        FK_KEY_STATIC, FK_KEY_RUNTIME_FUSED

    ctypedef struct fk_key:
        uint32_t id
        uint16_t kind
        uint16_t backend
        uint8_t ndtypes
        uint8_t dtypes[8]
        uint8_t pad[7]

    fk_key fk_key_make(int kind, uint32_t id, const fk_dtypes *dtypes, int backend)

    ctypedef struct fk_manifest_row:
        int32_t op
        fk_dtypes dtypes
        fk_entry entry

    ctypedef struct fk_snapshot:
        pass

    ctypedef struct fk_txn:
        pass

    ctypedef struct fk_lookup_result:
        const fk_snapshot *snapshot
        const fk_entry *entries
        int32_t n_entries

    const char *FK_API_CAPSULE_NAME
    const char *FK_KERNEL_CAPSULE_NAME

    # The C API: macros over the function table that fk_import_api() fills.  All of them are safe
    # to call without the GIL; none of them raises a Python exception (failures return a status
    # or NULL / -1 and leave a message in the thread-local error).
    void fk_set_error(int status, const char *fmt, ...)
    int fk_error_status()
    const char *fk_error_message()
    void fk_clear_error()
    const fk_snapshot *fk_acquire()
    void fk_retain(const fk_snapshot *snapshot)
    void fk_release(const fk_snapshot *snapshot)
    uint64_t fk_snapshot_generation(const fk_snapshot *snapshot)
    fk_lookup_result fk_lookup(const fk_snapshot *snapshot, const fk_key *key)
    const fk_entry *fk_lookup_with_caps(const fk_snapshot *snapshot, const fk_key *key, uint32_t required_caps)
    int fk_call(const fk_entry *entry, const fk_storage *inputs, int n_in, fk_storage *outputs, int n_out,
                const fk_layout *layouts, const fk_params *params)
    fk_txn *fk_txn_begin()
    int fk_txn_register(fk_txn *txn, const fk_key *key, const fk_entry *entry)
    int fk_txn_register_manifest(fk_txn *txn, int backend, const fk_manifest_row *rows, int n_rows)
    int fk_txn_drop_runtime_fused(fk_txn *txn, uint32_t fused_id, int backend)
    int fk_txn_commit(fk_txn *txn)
    void fk_txn_abort(fk_txn *txn)
    uint32_t fk_new_runtime_fused_id()
    int fk_claim_backend(const char *name)
    fk_cost fk_unknown_cost(const fk_layout *layouts, int n_layouts, const fk_dtypes *dtypes,
                            const fk_params *params)
    int fk_parallel_for(int64_t n_tasks, fk_task_fn fn, void *context)
    int fk_num_threads()
    int fk_key_outputs(const fk_key *key)
    void *fk_scratch_alloc(size_t nbytes)
    void fk_scratch_free(void *p)


# fk_import_api needs the GIL (it imports fuel_kernel._dispatch) and raises ImportError when the
# installed fuel_kernel has another ABI version than the header this module was compiled against.
cdef extern from "fuel_kernel/abi.h":
    int fk_import_api() except -1
