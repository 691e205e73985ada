/* Give a Cython extension type the vectorcall protocol (PEP 590), which Cython does not generate
 * for __call__: the instance stores its vectorcallfunc at `offset`, and tp_call forwards to it. */
#ifndef FUEL_KERNEL_CORE_VECTORCALL_H
#define FUEL_KERNEL_CORE_VECTORCALL_H
#include <Python.h>

static int fk_enable_vectorcall(PyObject *type_object, Py_ssize_t offset) {
    PyTypeObject *type = (PyTypeObject *)type_object;
    if (offset <= 0 || offset + (Py_ssize_t)sizeof(void *) > type->tp_basicsize) {
        PyErr_SetString(PyExc_SystemError, "fuel_kernel: bad vectorcall offset");
        return -1;
    }
    type->tp_vectorcall_offset = offset;
    type->tp_call = PyVectorcall_Call;
    type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    PyType_Modified(type);
    return 0;
}
#endif
