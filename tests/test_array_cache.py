"""tapegrad's array cache (tapegrad/_array_cache/): large freed blocks serve the next array of
their size, never more kept than the program's peak, with numpy's allocator a switch away."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import _array_cache

MIB = 1 << 20
M = _array_cache.MIN  # the smallest block kept by size
_core = getattr(np, "_core", None) or np.core
handler_name = _core.multiarray.get_handler_name

needs_cache = pytest.mark.skipif(_array_cache._state is None,
                                 reason="the array cache is off in this process")


def _run(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("MALLOC_", "TAPEGRAD_")) or k == "TAPEGRAD_CACHE_DIR"}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env},
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0 or env.get("EXPECT_FAIL"), out.stderr
    return (out.stdout + out.stderr).strip()


def _check_bound(stats: dict[str, int]) -> None:
    assert stats["kept_bytes"] + stats["live_bytes"] <= stats["peak_bytes"], stats


def test_on_by_default_and_switches():
    code = ("import numpy as np, tapegrad as tg; core = getattr(np, '_core', None) or np.core; "
            "print(core.multiarray.get_handler_name())")
    assert _run(code) == "tapegrad"
    assert _run(code, TAPEGRAD_ARRAY_CACHE="0") == "default_allocator"
    assert _run(code, TAPEGRAD_TUNE_MALLOC="0") == "default_allocator"
    out = _run("import tapegrad", TAPEGRAD_ARRAY_CACHE="lots", EXPECT_FAIL="1")
    assert "TAPEGRAD_ARRAY_CACHE='lots'" in out and "MiB" in out


def test_cap_in_mib():
    code = (f"import numpy as np, tapegrad as tg; a = np.ones({4 * M}, np.uint8); b = np.ones({M}, "
            "np.uint8); del a, b; print(tg.memory_stats()['kept_bytes'])")
    cap = str(2 * M // MIB)
    assert int(_run(code, TAPEGRAD_ARRAY_CACHE=cap)) == M  # the larger block was not kept
    assert int(_run(code)) == 5 * M


def test_off_stats_are_zero():
    code = "import tapegrad as tg; tg.empty_cache(); print(sorted(tg.memory_stats().values()))"
    assert _run(code, TAPEGRAD_ARRAY_CACHE="0") == "[0, 0, 0, 0, 0, 0]"


@needs_cache
def test_freed_block_serves_the_next_array_of_its_size():
    assert handler_name(np.empty(3 * M)) == "tapegrad"
    a = np.ones(3 * M // 8 + 5)  # not a whole number of pages: rounded up
    where = a.ctypes.data
    del a
    before = tg.memory_stats()
    b = np.zeros(3 * M // 8 + 1)  # the same number of pages, through calloc
    assert b.ctypes.data == where
    assert not b.any()  # a kept block is cleared for np.zeros
    assert tg.memory_stats()["hits"] == before["hits"] + 1
    c = np.empty(3 * M // 8 + 1)
    assert c.ctypes.data != where  # b still holds it
    medium = np.ones(1000)  # under MIN: malloc's
    assert handler_name(medium) == "tapegrad"
    kept = tg.memory_stats()["kept_bytes"]
    del medium
    assert tg.memory_stats()["kept_bytes"] == kept
    tiny = np.ones(37, np.uint8)  # under 1 KiB: kept by its size in bytes, as numpy does
    where = tiny.ctypes.data
    del tiny
    again = np.zeros(37, np.uint8)
    assert again.ctypes.data == where and not again.any()
    _check_bound(tg.memory_stats())


PEAK = """
import numpy as np, tapegrad as tg
M = tg._array_cache.MIN
first = [np.ones(2 * M + i * 4096, np.uint8) for i in range(8)]
del first
s0 = tg.memory_stats()
second = [np.ones(3 * M + i * 4096, np.uint8) for i in range(8)]
s1 = tg.memory_stats()
assert all((x == 1).all() for x in second)
del second
tg.empty_cache()
print(s0, s1, tg.memory_stats(), sep="\\n")
"""


@needs_cache
def test_kept_plus_live_never_exceeds_the_peak():
    """A fresh process (its high-water mark is its own): blocks of new sizes push out kept
    blocks of old ones instead of adding to them."""
    M = _array_cache.MIN
    s0, s1, s2 = (eval(line) for line in _run(PEAK).splitlines())
    assert s0["kept_bytes"] == sum(2 * M + i * 4096 for i in range(8))
    assert s0["peak_bytes"] == s0["kept_bytes"] and s0["live_bytes"] == 0
    _check_bound(s1)
    assert s1["evictions"] >= 6  # 8 blocks of 2 M kept, 8 of 3 M wanted: the first sizes made room
    assert s1["peak_bytes"] == s1["live_bytes"] == sum(3 * M + i * 4096 for i in range(8))
    assert s2["kept_bytes"] == 0
    assert s2["peak_bytes"] == s2["live_bytes"] == 0  # the bound restarts from what is alive


def _counted(a: np.ndarray) -> int:
    """The bytes the cache counts live for ``a``'s block: its whole pages from MIN up."""
    pages = -(-max(a.nbytes, a.itemsize) // 4096) * 4096
    return pages if pages >= M else 0


@needs_cache
def test_random_allocations_keep_their_contents():
    """Arrays made, resized and freed in a random order (sizes around the MIN line and
    sharing pages) each keep their own contents: no block is ever handed out twice; the live
    bytes are the live arrays' blocks at every step, realloc's growing and shrinking counted."""
    rng = np.random.default_rng(0)
    live: dict[int, np.ndarray] = {}
    sizes = [8, 24, 1016, 4096, MIB, M - 4096, M - 4095, M - 8, M, M + 8, 2 * M - 4096, 2 * M,
             3 * M + 100]
    gc.collect()  # no array of an earlier test is freed under the count
    gc.disable()
    try:
        base = tg.memory_stats()["live_bytes"]
        for step in range(300):
            op = rng.integers(4)
            if len(live) > 12:
                op = 2
            if op < 2 or not live:
                n = int(rng.choice(sizes)) + int(rng.integers(0, 3)) * 8
                maker = np.zeros if op == 0 else np.empty
                a = maker(n // 8)
                if maker is np.zeros:
                    assert not a.any()
                a.fill(step)
                live[step] = a
                del a  # the table holds the only reference
            elif op == 2:
                del live[int(rng.choice(list(live)))]
            else:  # grow or shrink in place (realloc), across the MIN line
                k = int(rng.choice(list(live)))
                a = live.pop(k)
                a.resize(int(rng.choice(sizes)) // 8, refcheck=False)
                a.fill(k)
                live[k] = a
                del a
            stats = tg.memory_stats()
            assert stats["live_bytes"] - base == sum(map(_counted, live.values())), (step, op)
            _check_bound(stats)
    finally:
        gc.enable()
    for k, a in live.items():
        assert (a == k).all()


@needs_cache
def test_realloc_is_left_uncounted_where_usable_sizes_say_too_little():
    """With an allocator whose usable sizes run past a page (size classes), a block's old size
    is unknown to realloc: it is not counted, as numpy's free will not be asked about it."""
    state = _array_cache._state
    assert state is not None and state[10] == 1  # glibc: usable sizes are tight
    a = np.ones(100)
    before = tg.memory_stats()["live_bytes"]
    state[10] = 0
    try:
        a.resize(2 * M, refcheck=False)
        assert tg.memory_stats()["live_bytes"] == before
        a.fill(3)
        assert (a == 3).all()
        a.resize(100, refcheck=False)  # back under the line before it is freed
    finally:
        state[10] = 1
    a.resize(2 * M, refcheck=False)
    assert tg.memory_stats()["live_bytes"] == before + 2 * M * 8
    del a
    assert tg.memory_stats()["live_bytes"] == before


@needs_cache
def test_other_threads_keep_numpys_allocator():
    box: list[np.ndarray] = []
    t = threading.Thread(target=lambda: box.append(np.ones(2 * M)))
    t.start()
    t.join()
    assert handler_name(box.pop()) == "default_allocator"
    box.append(np.ones(2 * M))
    assert handler_name(box[0]) == "tapegrad"
    before = tg.memory_stats()["kept_bytes"]
    t = threading.Thread(target=box.clear)  # ours, freed in another thread: kept all the same
    t.start()
    t.join()
    assert tg.memory_stats()["kept_bytes"] == before + 2 * M * 8
    _check_bound(tg.memory_stats())


CODE = ("import numpy as np, tapegrad as tg; from tapegrad import _array_cache as c; "
        "core = getattr(np, '_core', None) or np.core; "
        "a = np.ones(c.MIN); del a; b = np.zeros(c.MIN); "
        "print(c._code, tg.memory_stats()['hits'], core.multiarray.get_handler_name(b))")


def test_machine_code_is_kept_for_the_next_process(tmp_path):
    """The first import compiles the IR and leaves its machine code in the cache folder; the
    next loads it from there (and leaves the file as it was)."""
    assert _run(CODE, TAPEGRAD_CACHE_DIR=str(tmp_path)) == "compiled 1 tapegrad"
    (path,) = tmp_path.glob("array-cache-*.o")
    made = path.stat().st_mtime_ns
    assert _run(CODE, TAPEGRAD_CACHE_DIR=str(tmp_path)) == "loaded 1 tapegrad"
    assert path.stat().st_mtime_ns == made
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


@pytest.mark.parametrize("spoil", ["flip", "truncate", "foreign"])
def test_a_spoilt_machine_code_file_is_compiled_again(tmp_path, spoil):
    assert _run(CODE, TAPEGRAD_CACHE_DIR=str(tmp_path)) == "compiled 1 tapegrad"
    (path,) = tmp_path.glob("array-cache-*.o")
    good = path.read_bytes()
    if spoil == "flip":  # one byte of the code
        bad = good[:-100] + bytes([good[-100] ^ 0xFF]) + good[-99:]
    elif spoil == "truncate":  # a write cut short
        bad = good[: len(good) // 2]
    else:  # another machine's or version's file under this name
        head = len(_array_cache._MAGIC)
        bad = good[:head] + b"0" * 32 + good[head + 32:]
    path.write_bytes(bad)
    assert _run(CODE, TAPEGRAD_CACHE_DIR=str(tmp_path)) == "compiled 1 tapegrad"
    assert path.read_bytes() == good  # written anew
    assert _run(CODE, TAPEGRAD_CACHE_DIR=str(tmp_path)) == "loaded 1 tapegrad"


def test_no_writable_cache_folder_compiles_as_before(tmp_path):
    (tmp_path / "file").write_text("")
    where = str(tmp_path / "file" / "cache")  # under a file: no one can make it, root included
    for _ in range(2):  # nothing said on stderr, nothing kept
        assert _run(CODE, TAPEGRAD_CACHE_DIR=where) == "compiled 1 tapegrad"
