/* Describe NumPy array operands as fk_storage + fk_layout in C: the per-operand work of every
 * Kernel call.  Anything these cannot take (another type than ndarray, a dtype fuel_kernel lacks or
 * the kernel does not take, foreign byte order, too many dims, misaligned data, a stride that is
 * not a multiple of the item size) is left to the caller's general path, which also words the
 * error, so the common case runs as one small loop with no error paths of its own. */
#ifndef FUEL_KERNEL_CORE_OPERANDS_H
#define FUEL_KERNEL_CORE_OPERANDS_H
#include <Python.h>
#include <numpy/arrayobject.h>

#include "fuel_kernel/strided.h"

/* NumPy type number -> fuel_kernel dtype code (-1: none); bfloat16 is a user type (number >= 256).
 * `canonical` holds each dtype's native-byte-order descriptor singleton (borrowed: the module keeps
 * them alive), which nearly every array shares, so a pointer compare settles its dtype without
 * the chain of dependent loads (descriptor, type number, table) of the general mapping. */
typedef struct {
    int by_typenum[64];
    int bf16_typenum;
    PyArray_Descr *canonical[FK_DTYPE_COUNT];
} fk_typenum_map;

static inline int fk_array_dtype(PyArrayObject *arr, const fk_typenum_map *map) {
    int num = PyArray_TYPE(arr);
    if (num == map->bf16_typenum) return FK_BF16;
    return num >= 0 && num < 64 ? map->by_typenum[num] : -1;
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
#endif
