# cython: language_level=3
# Cython-level declarations of the dispatch core's Python face, for sibling modules such as the
# plan executor.  Third-party extensions use fuel_kernel/abi.pxd instead.
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

from fuel_kernel.abi cimport fk_entry, fk_key, fk_manifest_row, fk_params, fk_snapshot, fk_txn


cdef class OpParams:
    cdef fk_params c


cdef class Kernel:
    cdef void *vectorcall              # vectorcallfunc: see kernel_vectorcall in _dispatch.pyx
    cdef const fk_snapshot *snapshot
    cdef const fk_entry *entry
    cdef fk_key key
    cdef int n_out                     # fk_key_outputs(&key), kept so a call does not ask again

    @staticmethod
    cdef Kernel wrap(const fk_snapshot *snapshot, const fk_entry *entry, const fk_key *key)


cdef class BindingTable:
    cdef const fk_snapshot *snapshot
    cdef PyObject **kernel_cache
    cdef int64_t n_cached

    @staticmethod
    cdef BindingTable acquire()
    cdef Kernel kernel_for(self, const fk_entry *entry, const fk_key *key)


cdef class Transaction:
    cdef fk_txn *txn
    cdef list precision_fills

    cdef int _check_open(self) except -1


cdef class ManifestView:
    cdef const fk_manifest_row *rows
    cdef int n_rows
    cdef object owner

    @staticmethod
    cdef ManifestView wrap(const fk_manifest_row *rows, int n_rows, object owner)
