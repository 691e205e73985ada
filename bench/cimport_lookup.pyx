# cython: language_level=3
"""Counted loops for bench_cimport: fuel_kernel's C-level lookup (no GIL) and, for comparison, a
C-level dict lookup with a tuple key.  Each function runs n lookups and returns how many entries
it found, so the compiler cannot drop the work."""
from cpython.dict cimport PyDict_GetItem
from libc.stdint cimport int64_t, uint32_t
from libc.stdlib cimport free, malloc

from fuel_kernel.abi cimport *

fk_import_api()


cdef fk_key key_from(int kind, uint32_t key_id, object dtypes, int backend):
    cdef fk_dtypes codes
    codes.n = len(dtypes)
    for i, d in enumerate(dtypes):
        codes.v[i] = int(d)
    return fk_key_make(kind, key_id, &codes, backend)


def lookup_one_key(int op, dtypes, int backend, Py_ssize_t n):
    """n fk_lookup calls on one prebuilt key, without the GIL."""
    cdef fk_key key = key_from(FK_KEY_STATIC, <uint32_t>op, dtypes, backend)
    cdef const fk_snapshot *snapshot = fk_acquire()
    cdef int64_t found = 0
    cdef Py_ssize_t i
    with nogil:
        for i in range(n):
            found += fk_lookup(snapshot, &key).n_entries
    fk_release(snapshot)
    return found


def lookup_many_keys(keys, Py_ssize_t n):
    """n fk_lookup calls cycling through `keys` ((op, dtypes, backend) rows), without the GIL."""
    cdef Py_ssize_t k = len(keys), i, j = 0
    cdef fk_key *table = <fk_key *>malloc(k * sizeof(fk_key))
    cdef const fk_snapshot *snapshot
    cdef int64_t found = 0
    if table == NULL:
        raise MemoryError()
    for i, (op, dtypes, backend) in enumerate(keys):
        table[i] = key_from(FK_KEY_STATIC, <uint32_t>op, dtypes, backend)
    snapshot = fk_acquire()
    with nogil:
        for i in range(n):
            found += fk_lookup(snapshot, &table[j]).n_entries
            j += 1
            if j == k:                               # not i % k: a division costs more than a lookup
                j = 0
    fk_release(snapshot)
    free(table)
    return found


def build_key_and_lookup(int op, dtypes, int backend, Py_ssize_t n):
    """n times: fk_key_make from an fk_dtypes, then fk_lookup_with_caps (what a dispatcher does)."""
    cdef fk_dtypes codes
    cdef fk_key key
    cdef const fk_snapshot *snapshot = fk_acquire()
    cdef int64_t found = 0
    cdef Py_ssize_t i
    codes.n = len(dtypes)
    for i, d in enumerate(dtypes):
        codes.v[i] = int(d)
    with nogil:
        for i in range(n):
            key = fk_key_make(FK_KEY_STATIC, <uint32_t>op, &codes, backend)
            found += fk_lookup_with_caps(snapshot, &key, 0) != NULL
    fk_release(snapshot)
    return found


def dict_lookup_c(dict table, tuple key, Py_ssize_t n):
    """n PyDict_GetItem calls with one prebuilt tuple key (the tuple's hash is recomputed each time,
    as for any tuple), with the GIL: the cheapest a Python-object table can be from C."""
    cdef int64_t found = 0
    cdef Py_ssize_t i
    for i in range(n):
        found += PyDict_GetItem(table, key) != NULL
    return found
