/* Describe NumPy array operands as fk_storage + fk_layout in C, check the outputs and run the
 * kernel: the whole of a Kernel call's common case, with no Python objects built.  Anything these
 * cannot take (another type than ndarray, a dtype fuel_kernel lacks or the kernel does not take,
 * foreign byte order, too many dims, misaligned data, a stride that is not a multiple of the item
 * size, a read-only or overlapping output) is left to the caller's general path, which also words
 * the error, so the common case runs with no error paths of its own. */
#ifndef FUEL_KERNEL_CORE_OPERANDS_H
#define FUEL_KERNEL_CORE_OPERANDS_H
#include <Python.h>
#include <numpy/arrayobject.h>

#include "fuel_kernel/strided.h"
#include "table.h"

/* NumPy type number -> fuel_kernel dtype code (-1: none).  The ml_dtypes types (bfloat16,
 * float8_e4m3fn, float8_e5m2) are user types, numbered >= 256 at their registration: `user_typenum`
 * holds each dtype's number when it is one (-1 otherwise), searched only for such numbers.
 * `canonical` holds each dtype's native-byte-order descriptor singleton (borrowed: the module keeps
 * them alive), which nearly every array shares, so a pointer compare settles its dtype without
 * the chain of dependent loads (descriptor, type number, table) of the general mapping. */
typedef struct {
    int by_typenum[64];
    int user_typenum[FK_DTYPE_COUNT];
    PyArray_Descr *canonical[FK_DTYPE_COUNT];
} fk_typenum_map;

static inline int fk_array_dtype(PyArrayObject *arr, const fk_typenum_map *map) {
    int num = PyArray_TYPE(arr);
    if (num >= 0 && num < 64) return map->by_typenum[num];
    for (int d = 0; d < FK_DTYPE_COUNT; d++)
        if (map->user_typenum[d] == num) return d;
    return -1;
}

/* `dtype` is the array's fuel_kernel dtype code (already mapped from its NumPy type) and its byte
 * order is native.  Returns the element count, or -1 if the general path must decide (and raise). */
static inline int64_t fk_describe_array(PyArrayObject *arr, int dtype, fk_storage *storage,
                                        fk_layout *layout) {
    int ndim = PyArray_NDIM(arr), shift = fk_dtype_shift[dtype];
    int64_t itemsize = fk_dtype_itemsize[dtype], lo = 0, hi = 0, numel = 1;
    const npy_intp *dims = PyArray_DIMS(arr), *strides = PyArray_STRIDES(arr);
    int flags = PyArray_FLAGS(arr);
    if (ndim > FK_MAX_DIMS || !(flags & NPY_ARRAY_ALIGNED)) return -1;
    for (int d = 0; d < ndim; d++) {
        int64_t n = dims[d], stride = strides[d];
        if (stride & (itemsize - 1)) return -1;
        stride >>= shift;                 /* item sizes are powers of two: no division */
        layout->shape[d] = n;
        layout->strides[d] = stride;
        numel *= n;
        if (stride > 0) hi += stride * (n - 1);
        else lo += stride * (n - 1);
    }
    if (numel == 0) lo = hi = 0;
    layout->ndim = ndim;
    layout->reserved = 0;
    layout->offset = -lo;
    storage->data = PyArray_BYTES(arr) + lo * itemsize;
    storage->nbytes = (size_t)((hi - lo + 1) * itemsize);
    storage->backend = FK_BACKEND_CPU;
    storage->dtype = dtype;
    storage->flags = (flags & NPY_ARRAY_WRITEABLE) ? 0 : FK_STORAGE_READ_ONLY;
    storage->reserved = 0;
    return numel;
}

/* Describe operands[0 .. n) (borrowed) while each is an exact ndarray of dtype dtypes[k] (any
 * dtype when `dtypes` is NULL) that fk_describe_array takes; numels[k] gets its element count.
 * Returns how many were described: n when all were, else the index the general path resumes at. */
static inline int fk_describe_arrays(PyObject *const *operands, int n, const uint8_t *dtypes,
                                     const fk_typenum_map *map, fk_storage *storages,
                                     fk_layout *layouts, int64_t *numels) {
    for (int k = 0; k < n; k++) {
        PyArrayObject *arr = (PyArrayObject *)operands[k];
        int dtype;
        if (!PyArray_CheckExact(operands[k])) return k;
        if (dtypes && PyArray_DESCR(arr) == map->canonical[dtypes[k]]) {
            dtype = dtypes[k];
        } else {
            dtype = fk_array_dtype(arr, map);
            if (dtype < 0 || (dtypes && dtype != dtypes[k]) || !PyArray_ISNOTSWAPPED(arr)) return k;
        }
        numels[k] = fk_describe_array(arr, dtype, &storages[k], &layouts[k]);
        if (numels[k] < 0) return k;
    }
    return n;
}

/* Two descriptions of the same elements in the same order (same data, offset, shape, strides and
 * item size): an in-place kernel may read and write them at once. */
static inline int fk_same_view(const fk_storage *a, const fk_layout *la, const fk_storage *b,
                               const fk_layout *lb) {
    if (a->data != b->data || la->offset != lb->offset || la->ndim != lb->ndim ||
        fk_dtype_itemsize[a->dtype] != fk_dtype_itemsize[b->dtype])
        return 0;
    for (int d = 0; d < la->ndim; d++)
        if (la->shape[d] != lb->shape[d] || la->strides[d] != lb->strides[d]) return 0;
    return 1;
}

enum { FK_OUTPUTS_OK = 0, FK_OUTPUT_READ_ONLY = 1, FK_OUTPUT_OVERLAPS = 2, FK_OUTPUTS_OVERLAP = 3 };

/* fk_check_outputs' verdict once its quick pass found a read-only output or an overlap. */
__attribute__((noinline))
static int fk_find_output_conflict(const fk_entry *entry, const fk_storage *storage,
                                   const fk_layout *layouts, const int64_t *numels, int n_in,
                                   int n_out, int *output, int *input) {
    for (int o = n_in; o < n_in + n_out; o++) {
        const char *out_lo = (const char *)storage[o].data, *out_hi = out_lo + storage[o].nbytes;
        *output = o - n_in;
        if (storage[o].flags & FK_STORAGE_READ_ONLY) return FK_OUTPUT_READ_ONLY;
        if (numels[o] == 0) continue;
        for (int i = 0; i < n_in; i++) {
            const char *in_lo = (const char *)storage[i].data, *in_hi = in_lo + storage[i].nbytes;
            if (numels[i] == 0 || in_lo >= out_hi || out_lo >= in_hi) continue;
            if ((entry->caps & FK_CAP_INPLACE) &&
                fk_same_view(&storage[i], &layouts[i], &storage[o], &layouts[o]))
                continue;
            *input = i;
            return FK_OUTPUT_OVERLAPS;
        }
        for (int p = n_in; p < o; p++) {
            const char *lo = (const char *)storage[p].data, *hi = lo + storage[p].nbytes;
            if (numels[p] == 0 || lo >= out_hi || out_lo >= hi) continue;
            *input = p - n_in;            /* the earlier output it overlaps */
            return FK_OUTPUTS_OVERLAP;
        }
    }
    return FK_OUTPUTS_OK;
}

/* May the kernel write its outputs?  Refused: a read-only output, an output whose storage range
 * overlaps an input's (unless the kernel declares FK_CAP_INPLACE and the two are the same view),
 * and two outputs whose ranges overlap (never allowed: the kernel writes both).  Empty operands
 * address nothing.  Returns FK_OUTPUTS_OK or the first refusal, with the output's index in
 * *output and, for an overlap, the input's (FK_OUTPUT_OVERLAPS) or the earlier output's
 * (FK_OUTPUTS_OVERLAP) in *input.  The common case (no conflict) is one branch-free pass; any hit
 * is re-examined out of line. */
static inline int fk_check_outputs(const fk_entry *entry, const fk_storage *storage,
                                   const fk_layout *layouts, const int64_t *numels, int n_in,
                                   int n_out, int *output, int *input) {
    int hit = 0;
    for (int o = n_in; o < n_in + n_out; o++) {
        const char *out_lo = (const char *)storage[o].data, *out_hi = out_lo + storage[o].nbytes;
        hit |= (storage[o].flags & FK_STORAGE_READ_ONLY) != 0;
        for (int i = 0; i < n_in; i++) {
            const char *in_lo = (const char *)storage[i].data, *in_hi = in_lo + storage[i].nbytes;
            hit |= (in_lo < out_hi) & (out_lo < in_hi);
        }
        for (int p = n_in; p < o; p++) {
            const char *lo = (const char *)storage[p].data, *hi = lo + storage[p].nbytes;
            hit |= (lo < out_hi) & (out_lo < hi);
        }
    }
    if (__builtin_expect(!hit, 1)) return FK_OUTPUTS_OK;
    return fk_find_output_conflict(entry, storage, layouts, numels, n_in, n_out, output, input);
}

/* Run the kernel on described operands (inputs, then outputs), without the GIL when an operand
 * has at least `nogil_min` elements (a reduction's output is small, its input is not); returns
 * its status.  Small calls call the kernel
 * directly rather than through fk_call, which clears the thread's error state first (a
 * thread-local write costs as much as the rest of a small call's bookkeeping): the caller keeps
 * that state clear, since every error it raises consumes the message, and it only uses a message
 * whose status matches the kernel's. */
static inline int fk_run_described(const fk_entry *entry, fk_storage *storage, const fk_layout *layouts,
                                   const int64_t *numels, int n_in, int n_out,
                                   const fk_params *params, int64_t nogil_min) {
    int status;
    int64_t largest = 0;
    for (int i = 0; i < n_in + n_out; i++)
        largest = numels[i] > largest ? numels[i] : largest;
    if (largest < nogil_min)
        return entry->kernel(storage, n_in, &storage[n_in], n_out, layouts, params);
    Py_BEGIN_ALLOW_THREADS
    status = fk_call(entry, storage, n_in, &storage[n_in], n_out, layouts, params);
    Py_END_ALLOW_THREADS
    return status;
}

#define FK_CALL_GENERAL (-1)

/* A Kernel call whose operands (borrowed; inputs then outputs) are all exact ndarrays that
 * fk_describe_arrays takes, with writable outputs the kernel may write: describe, check, run, and
 * return the kernel's status.  Anything else returns FK_CALL_GENERAL before any write, for the
 * caller's general path to describe the operands one by one and raise the typed error. */
static inline __attribute__((always_inline))
int fk_call_arrays(const fk_entry *entry, PyObject *const *operands, int n_in, int n_out,
                   const uint8_t *dtypes, const fk_typenum_map *map, const fk_params *params,
                   int64_t nogil_min) {
    fk_storage storage[FK_MAX_OPERANDS];
    fk_layout layouts[FK_MAX_OPERANDS];
    int64_t numels[FK_MAX_OPERANDS];
    int n = n_in + n_out, output, input;
    if (fk_describe_arrays(operands, n, dtypes, map, storage, layouts, numels) != n ||
        fk_check_outputs(entry, storage, layouts, numels, n_in, n_out, &output, &input) != FK_OUTPUTS_OK)
        return FK_CALL_GENERAL;
    return fk_run_described(entry, storage, layouts, numels, n_in, n_out, params, nogil_min);
}
#endif
