"""Order-independent multiset digests of rows, for the streaming partition check
(:mod:`.check`).

A row (an edge, a node's feature row, ...) is hashed to 64 bits with splitmix64's
finalizer folded over its words: ``h = mix(salt ^ id)``, then ``h = mix(h ^ w)`` for
each further id or 8-byte word ``w`` of the row's bytes (little-endian, zero-padded
to a multiple of 8).  A multiset of rows is digested as the sum of its hashes mod
2**64 and its size.  Sums split over any slicing, order and number of ranks, so two
sides that read the same rows in different orders, on different ranks, reach the
same digest; two different multisets reach the same one with probability about
2**-64 (the check is probabilistic).  NumPy only, vectorised over the rows.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ..comm.alltoall import allreduce_sum

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_LOW32 = np.uint64(0xFFFFFFFF)


def mix(x: np.ndarray) -> np.ndarray:
    """In place: splitmix64's finalizer of a uint64 array (a bijection); returns it."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def salt(name: str) -> np.uint64:
    """A 64-bit constant per digest name, so that digests of different fields differ."""
    return np.uint64(int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little"))


def _words(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64).view(np.uint64)


def hash_ids(name: str, first, *rest) -> np.ndarray:
    """Hashes of tuples of int64 ids (one column per argument)."""
    h = _words(first) ^ salt(name)
    mix(h)
    for c in rest:
        h ^= _words(c)
        mix(h)
    return h


def row_words(rows: np.ndarray) -> np.ndarray:
    """``[n, W]`` uint64 words of each row's bytes (little-endian values, zero-padded)."""
    a = np.ascontiguousarray(rows)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    n = len(a)
    nb = int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize
    b = a.reshape(-1).view(np.uint8).reshape(n, nb)
    w = -(-nb // 8)
    if nb != 8 * w:
        pad = np.zeros((n, 8 * w), dtype=np.uint8)
        pad[:, :nb] = b
        b = pad
    return b.view(np.uint64).reshape(n, w)


def hash_rows(base: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Hashes of rows continuing the hashes ``base`` (e.g. of their ids)."""
    words = row_words(rows)
    h = base.copy()
    for c in range(words.shape[1]):
        h ^= words[:, c]
        mix(h)
    return h


def sums_by(parts: np.ndarray, h: np.ndarray, nparts: int) -> np.ndarray:
    """Sums mod 2**64 of ``h`` grouped by ``parts`` (values in ``[0, nparts)``)."""
    out = np.zeros(nparts, dtype=np.uint64)
    np.add.at(out, parts, h)              # unsigned: wraps mod 2**64, exact
    return out


class Tally:
    """Digests (sum of hashes mod 2**64, count) per field, partition and side (0: the
    raw graph, 1: the partitions)."""

    RAW, PART = 0, 1

    def __init__(self, fields: list[str], nparts: int) -> None:
        self.fields, self.nparts = list(fields), int(nparts)
        self.index = {f: i for i, f in enumerate(self.fields)}
        self.sums = np.zeros((2, len(self.fields), self.nparts), dtype=np.uint64)
        self.counts = np.zeros((2, len(self.fields), self.nparts), dtype=np.int64)

    def add(self, side: int, field: str, part, h: np.ndarray) -> None:
        """Add hashes ``h`` of rows of partition ``part`` (an int, or one per row)."""
        i = self.index[field]
        if isinstance(part, (int, np.integer)):
            self.sums[side, i, part:part + 1] += h.sum(dtype=np.uint64)
            self.counts[side, i, part] += len(h)
            return
        self.sums[side, i] += sums_by(part, h, self.nparts)
        self.counts[side, i] += np.bincount(part, minlength=self.nparts)[:self.nparts]

    def reduce(self, comm) -> None:
        """Collective: every rank's digests summed (32-bit halves in int64: exact)."""
        lo = allreduce_sum(comm, (self.sums & _LOW32).astype(np.int64))
        hi = allreduce_sum(comm, (self.sums >> np.uint64(32)).astype(np.int64))
        self.sums = lo.astype(np.uint64) + (hi.astype(np.uint64) << np.uint64(32))
        self.counts = allreduce_sum(comm, self.counts)

    def mismatches(self) -> list[tuple[str, int, int, int]]:
        """``(field, partition, raw count, partition count)`` of every digest that differs,
        in field order, then partition order."""
        bad = (self.sums[0] != self.sums[1]) | (self.counts[0] != self.counts[1])
        return [(self.fields[i], int(p), int(self.counts[0, i, p]), int(self.counts[1, i, p]))
                for i, p in zip(*np.nonzero(bad))]
