"""Writing a generator's output chunk by chunk (shared by :mod:`.synthetic` and
:mod:`.synthetic_hetero`): every rank generates and writes its consecutive run of
chunks, at offsets that depend only on the chunk counts, not on the rank count."""
from __future__ import annotations

import numpy as np

from .raw import write_rows


def all_chunk_counts(comm, mine: list) -> np.ndarray:
    """Collective: the per-chunk counts each rank computed for its run of chunks
    (consecutive runs in rank order, as :func:`slice_bounds` hands them out),
    concatenated in chunk order (int64; one row per chunk)."""
    parts = comm.allgather(mine) if comm is not None else [mine]
    return np.array([x for part in parts for x in part], dtype=np.int64)


def write_chunks(dsets: dict, chunks: range, edge_offsets, edges, nodes) -> None:
    """Write a generator's chunks (independent I/O): ``edges(c)`` -> {dataset key:
    rows} from edge row ``edge_offsets[c]`` on (None values skipped); ``nodes(c)`` ->
    (first node row, {dataset key: rows})."""
    for c in chunks:
        eoff = int(edge_offsets[c])
        for key, rows in edges(c).items():
            if rows is not None:
                write_rows(dsets[key], eoff, rows)
        lo, by_key = nodes(c)
        for key, rows in by_key.items():
            write_rows(dsets[key], lo, rows)
