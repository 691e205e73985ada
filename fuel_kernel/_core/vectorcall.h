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

/* Find out= and params= among a vectorcall's keyword arguments (their values follow the
 * positional ones).  `out_name` and `params_name` are the interned strings, so the usual call
 * site matches by pointer.  Returns 0, or -1 with TypeError set for any other keyword. */
static int fk_call_keywords(PyObject *kwnames, PyObject *const *kwvalues, PyObject *out_name,
                            PyObject *params_name, PyObject **out, PyObject **params) {
    Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (name == out_name || PyUnicode_Compare(name, out_name) == 0) {
            *out = kwvalues[i];
        } else if (name == params_name || PyUnicode_Compare(name, params_name) == 0) {
            *params = kwvalues[i];
        } else {
            PyErr_Format(PyExc_TypeError, "Kernel() got an unexpected keyword argument %R", name);
            return -1;
        }
    }
    return 0;
}
#endif
