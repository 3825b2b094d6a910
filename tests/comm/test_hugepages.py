"""Huge-page advice for window memory (hpcgnn.comm.rma.hugepages)."""
import numpy as np

from hpcgnn.comm.rma import hugepages


def _anon_thp() -> str:
    return hugepages._setting("enabled")


def test_advise_follows_the_kernel_setting_and_the_switch(monkeypatch):
    big = np.empty(8 << 20, dtype=np.uint8)
    got = hugepages.advise(big)
    if _anon_thp() in ("madvise", "always"):
        assert got is True
    assert hugepages.advise(np.empty(1 << 20, dtype=np.uint8)) is False       # below one huge page
    monkeypatch.setenv("HPCGNN_HUGEPAGES", "0")
    assert hugepages.advise(big) is False
    ok, detail, fix = hugepages.status()
    assert ok is False and "HPCGNN_HUGEPAGES=0" in detail and "HPCGNN_HUGEPAGES" in fix


def _huge_kb(a: np.ndarray) -> int:
    addr, huge, inside = a.ctypes.data, 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo < addr + a.nbytes and hi > addr
        elif inside and head == "AnonHugePages:":
            huge += int(line.split()[1])
    return huge


def test_advised_memory_gets_huge_pages_where_the_kernel_allows():
    """The advice is real: touched after madvise, the region is backed by huge pages
    (/proc/self/smaps), and without it (THP in madvise mode) it is not."""
    if _anon_thp() not in ("madvise", "always"):
        return
    core = getattr(np, "_core", None) or np.core
    core.multiarray._set_madvise_hugepage(False)        # numpy would advise big arrays itself
    try:
        plain = np.empty(64 << 20, dtype=np.uint8)
        advised = np.empty(64 << 20, dtype=np.uint8)
    finally:
        core.multiarray._set_madvise_hugepage(True)
    assert hugepages.advise(advised)
    plain[:] = 1
    advised[:] = 1
    assert _huge_kb(advised) > 0, "no huge pages behind the advised region"
    if _anon_thp() == "madvise":
        assert _huge_kb(plain) == 0
