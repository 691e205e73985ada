/* Describe a NumPy array operand as fk_storage + fk_layout in C: the per-operand work of every
 * Kernel call.  Anything it cannot take (foreign byte order, too many dims, misaligned data, a
 * stride that is not a multiple of the item size) returns -1 and the caller words the error, so
 * this stays a small leaf function with no error paths of its own. */
#ifndef FUEL_KERNEL_CORE_OPERANDS_H
#define FUEL_KERNEL_CORE_OPERANDS_H
#include <Python.h>
#include <numpy/arrayobject.h>

#include "fuel_kernel/strided.h"

/* `dtype` is the array's fuel_kernel dtype code (already mapped from its NumPy type).  Returns
 * the element count, or -1 if the general path must decide (and raise). */
static inline int64_t fk_describe_array(PyArrayObject *arr, int dtype, fk_storage *storage,
                                        fk_layout *layout) {
    int ndim = PyArray_NDIM(arr), shift = fk_dtype_shift[dtype];
    int64_t itemsize = fk_dtype_itemsize[dtype], lo = 0, hi = 0, numel = 1;
    const npy_intp *dims = PyArray_DIMS(arr), *strides = PyArray_STRIDES(arr);
    int flags = PyArray_FLAGS(arr);
    if (ndim > FK_MAX_DIMS || !(flags & NPY_ARRAY_ALIGNED) || !PyArray_ISNOTSWAPPED(arr))
        return -1;
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
#endif
