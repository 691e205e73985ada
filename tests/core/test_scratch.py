"""Kernel scratch memory through the API table (fk_api.scratch_alloc / scratch_free): aligned blocks,
each thread keeping its last freed block for its next call, never another thread's."""
import ctypes
import os
import sys
import threading

import pytest

import fuel_kernel  # noqa: F401  (the API table lives in fuel_kernel._dispatch)

# A sanitizer build keeps nothing (every use after free must still report), nor does a C library
# without malloc_usable_size.
KEEPS = sys.platform.startswith("linux") and os.environ.get("FUEL_KERNEL_SANITIZED", "") in ("", "0")

ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _api():
    """scratch_alloc and scratch_free, the last two slots of fk_api (two int32 fields, then pointers)."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = get(sys.modules["fuel_kernel._dispatch"]._C_API, b"fuel_kernel._dispatch._C_API")
    abi_version, api_size = (ctypes.c_int32 * 2).from_address(table)
    assert abi_version >= 5
    slots = (ctypes.c_void_p * 2).from_address(table + api_size - 2 * ctypes.sizeof(ctypes.c_void_p))
    return ALLOC(slots[0]), FREE(slots[1])


scratch_alloc, scratch_free = _api()


def test_blocks_are_64_byte_aligned_and_writable():
    for size in (0, 1, 63, 64, 1000, 1 << 20):
        p = scratch_alloc(size)
        assert p and p % 64 == 0
        ctypes.memset(p, 0xA5, max(size, 1))
        scratch_free(p)


def test_an_impossible_size_is_refused_not_wrapped():
    assert not scratch_alloc(2**64 - 1)
    assert not scratch_alloc(2**64 - 32)


@pytest.mark.skipif(not KEEPS, reason="this build keeps no blocks")
def test_a_thread_gets_its_last_freed_block_back_when_it_fits():
    p = scratch_alloc(1 << 20)
    scratch_free(p)
    assert scratch_alloc(1000) == p              # kept, and large enough
    q = scratch_alloc(1000)                      # the kept block is taken: a new one
    assert q != p
    scratch_free(q)                              # smaller: the larger one stays kept ...
    scratch_free(p)
    assert scratch_alloc(1 << 20) == p           # ... and comes back
    assert scratch_alloc(4 << 20) != p           # nothing kept now
    scratch_free(p)
    big = scratch_alloc(2 << 20)
    assert big != p
    scratch_free(big)                            # larger than the kept one: replaces it (p freed)
    assert scratch_alloc(2 << 20) == big
    scratch_free(big)


@pytest.mark.skipif(not KEEPS, reason="this build keeps no blocks")
def test_blocks_over_the_limit_are_not_kept():
    p = scratch_alloc(64 << 20)
    scratch_free(p)
    q = scratch_alloc(1 << 10)
    assert q != p
    scratch_free(q)


def test_a_block_kept_by_one_thread_is_never_handed_to_another():
    p = scratch_alloc(1 << 20)
    scratch_free(p)
    seen = []
    t = threading.Thread(target=lambda: seen.append(scratch_alloc(1000)))
    t.start()
    t.join()
    assert seen[0] and seen[0] != p
    scratch_free(seen[0])
    if KEEPS:
        assert scratch_alloc(1000) == p
        scratch_free(p)
