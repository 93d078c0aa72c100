"""How an archiver process keeps its memory flat as a job grows: Arrow's buffers from the
C library's allocator, that allocator's mmap threshold fixed, and what a chunk freed
handed back to the system. Each is the operator's to override.

Arrow's pool: malloc rather than pyarrow's default (mimalloc), which left a copy job's
worker a fifth larger at the same CPU (docs/performance.md, "Memory", says by how much
and in which run). pyarrow reads the variable once, as it loads (pa.set_memory_pool()
later would leave the Parquet writer's buffers behind). Empty counts as unset (Arrow
would take its default).

glibc's mmap threshold: a block at or above it is its own mapping, unmapped when freed;
below it, heap memory that stays resident. glibc raises the threshold to the largest block
freed (up to 32 MB), so after the first chunk a job's 8 MB batches and the Parquet
writer's buffers come from the heap and each chunk peaks wherever fragmentation leaves
it, higher the more chunks a job has. Fixed at 512 KiB, the peaks stay flat for a little
system time in page faults (docs/performance.md, "Memory", has the figures). Other
C libraries have neither knob: nothing is done there."""

from __future__ import annotations

import ctypes
import os

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
MMAP_THRESHOLD_VARIABLE = "MALLOC_MMAP_THRESHOLD_"  # glibc's own, read as a process starts
MMAP_THRESHOLD = 512 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt()'s parameter number (malloc.h)
_LIBC = ctypes.CDLL(None)
_MALLOPT = getattr(_LIBC, "mallopt", None)
_MALLOC_TRIM = getattr(_LIBC, "malloc_trim", None)
if _MALLOPT is not None:
    _MALLOPT.argtypes, _MALLOPT.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
if _MALLOC_TRIM is not None:
    _MALLOC_TRIM.argtypes, _MALLOC_TRIM.restype = [ctypes.c_size_t], ctypes.c_int


def settle() -> None:
    """Before pyarrow loads: the pool, and the threshold unless the operator set glibc's
    (`MALLOC_MMAP_THRESHOLD_`, or `glibc.malloc.mmap_threshold` in `GLIBC_TUNABLES`)."""
    if not os.environ.get(ARROW_POOL_VARIABLE):
        os.environ[ARROW_POOL_VARIABLE] = "system"
    chosen = MMAP_THRESHOLD_VARIABLE in os.environ or "mmap_threshold" in os.environ.get(
        "GLIBC_TUNABLES", ""
    )
    if _MALLOPT is not None and not chosen:
        _MALLOPT(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def give_back() -> None:
    """Hand the heap's free memory back to the system after a chunk, so the next
    chunk's peak does not land on what this one left (without it, a long job's later
    chunks peak higher)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
