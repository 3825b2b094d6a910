"""Devices named by users, made concrete where they are named."""
from __future__ import annotations

from .errors import InputError

try:
    import torch
except ImportError:  # pragma: no cover - torch is a dependency of the training stack only
    torch = None


def concrete(device) -> torch.device:
    """``torch.device(device)``, with ``"cuda"`` (no index) made ``cuda:<current>`` of the
    calling thread: the current GPU is per thread, so a device handed to a background
    thread (the loaders' prefetch) must carry its index, or the work lands on GPU 0."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        if not torch.cuda.is_available():
            raise InputError(f"device {str(device)!r}: this process sees no CUDA device")
        d = torch.device("cuda", torch.cuda.current_device())
    return d


class Staging:
    """Work a background thread (a loader's) issues for a device, on a stream of its
    own so that it overlaps the training step on the default stream; the consumer
    then waits for it on the device (:func:`wait_on`), never on the host.  On a CPU
    (the CPU twin) it is a no-op and the same code runs."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def __enter__(self):
        if self.stream is not None:
            self._ctx = torch.cuda.stream(self.stream)
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self.stream is not None:
            self._ctx.__exit__(*exc)
        return False

    def done(self):
        """An event after everything issued so far on this stream (None on a CPU)."""
        if self.stream is None:
            return None
        ev = torch.cuda.Event()
        ev.record(self.stream)
        return ev


def wait_on(event, tensors, device=None) -> None:
    """Consumer side of :class:`Staging`: the current stream waits for ``event`` (no
    host sync) and the allocator learns that ``tensors``, made on the side stream, are
    used on this one (so their memory is not reused before this stream is done)."""
    if event is None:
        return
    s = torch.cuda.current_stream(device)
    s.wait_event(event)
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            t.record_stream(s)


def pinned(t):
    """``t`` in page-locked memory where a GPU is there (a copy from it to the GPU then
    runs asynchronously; torch's host allocator caches the pages); else ``t``."""
    return t.pin_memory() if t.device.type == "cpu" and torch.cuda.is_available() and not t.is_pinned() else t


def host_rows_on(array, device, placement: str = "copy"):
    """A tensor over the host rows ``array`` that kernels on ``device`` read:
    ``placement="copy"``, a copy in the device's memory; ``"mapped"``, the host memory
    itself, registered with CUDA (pinned, mapped) and read by the GPU over the bus
    (zero-copy: the rows are never copied, writes show through).  On a CPU: the array
    as a tensor, no copy.  Returns ``(tensor, release)``; ``release()`` undoes the
    registration (call it before the memory goes)."""
    host = torch.from_numpy(array)
    d = torch.device(device)
    if d.type == "cpu":
        return host, _nothing
    if placement == "copy" or host.numel() == 0:
        return host.to(d), _nothing
    if placement != "mapped":
        raise InputError(f"host_rows_on: placement must be 'copy' or 'mapped', got {placement!r}")
    ptr, nbytes = host.data_ptr(), host.numel() * host.element_size()
    rt = torch.cuda.cudart()
    with torch.cuda.device(d):
        err = rt.cudaHostRegister(ptr, nbytes, 3)        # cudaHostRegisterPortable | Mapped
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister of {nbytes} bytes failed (CUDA error {int(err)})")
    view = torch.as_tensor(_DeviceView(ptr, tuple(host.shape), _typestr(host.dtype)), device=d)

    def release():
        rt.cudaHostUnregister(ptr)
    return view, release


def _nothing():
    return None


def _typestr(dtype) -> str:
    return {torch.int64: "<i8", torch.int32: "<i4", torch.float32: "<f4", torch.float16: "<f2",
            torch.float64: "<f8", torch.uint8: "|u1", torch.int8: "|i1", torch.bool: "|b1",
            torch.int16: "<i2", torch.bfloat16: "<V2"}[dtype]


class _DeviceView:
    """Host memory mapped into the GPU's address space, handed to torch as CUDA memory
    (``__cuda_array_interface__``: with unified addressing the mapped pointer is the
    host pointer)."""

    def __init__(self, ptr: int, shape: tuple, typestr: str):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, True),
                                         "version": 2, "strides": None}
