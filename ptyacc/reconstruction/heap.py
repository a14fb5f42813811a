"""The C heap's settings for a run (Linux, glibc): freed tensor memory stays in the process.

torch's CPU tensors come from malloc. glibc serves a block above its mmap threshold (128 KiB at
first, raised as such blocks are freed) with fresh pages from the kernel and hands free memory at
the top of its heap back once it exceeds the trim threshold, so a step that frees and allocates
the batch's waves again can fault in its pages anew every time: the kernel zeroes each page, and
that is system time, not arithmetic. On sim_32x32 with 4 probe modes x 4 slices (64² patterns,
batch 32, waves of 4 MiB), a `ptyacc bench` of 4 iterations (the whole process, start-up
included) spent 2.6-4.1 s of system time beside 12.8-14.1 s of user time, with 1.2-1.7 million
page faults; with the settings below 0.55 s and 0.10 million, and the timed iterations took
1.27-1.55 s instead of 1.73-2.50 s (CPU time), at a peak resident set of 485 against 477 MB.
Blocks under ``MMAP_THRESHOLD_BYTES`` now come from the heap, and up to ``TRIM_THRESHOLD_BYTES``
of free memory stays there for the next step, in this process also after the run (a notebook's kernel keeps
them). Applied on the CPU device only (on a GPU the waves are the device's) and only with the patterns held on it (in
host or disk mode memory is the point: there the peak varied by more than test_hold's bound of 12 MiB), when the
iterations start, not before the
data are read: made at the start of a run, they raised disk mode's peak resident set by 22 MiB
between 2,048 and 8,192 positions of 64² (tests/test_hold.py bounds it at 12 MiB).
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's largest on 64-bit systems
TRIM_THRESHOLD_BYTES = 2**30


def keep_freed_memory() -> bool:
    """Apply the settings above where the C library is glibc; whether they were applied. Once is
    enough per process; again changes nothing."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
                    and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc: macOS, Windows, musl
        return False
