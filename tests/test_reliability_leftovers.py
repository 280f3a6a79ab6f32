"""Edges found by porting and by crafted files: checkpoint metadata of the wrong shape, the
gradients of std at a tie and of a p-norm at 0, and the fused-kernel source cache."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import _io, _kernels, _source

# -- checkpoint metadata that passes the checksum but is not what tg.save writes -----------------


def _crafted(path, tree: str) -> None:
    head, chunks = _io._layout({}, '{"version": 2, "crc32": {}, "tree": ' + tree + "}")
    with open(path, "wb") as f:
        f.write(head)
        for c in chunks:
            f.write(c)


_BAD_TREES = {
    "a dict pair of length 1": ('{"model": {"__dict__": [[1]]}}', "/model/0", "length 1"),
    "a dict pair of length 3": ('{"__dict__": [[1, 2, 3]]}', "/0", "length 3"),
    "a dict pair that is a number": ('{"a": {"__dict__": [7]}}', "/a/0", "[key, value] pair"),
    "dict pairs in a string": ('{"__dict__": "ab"}', "/", "[key, value] pairs"),
    "a dict key that is a dict": ('{"__dict__": [[{"k": 1}, 2]]}', "/0", "a key"),
    "a tuple of a string": ('{"step": {"__tuple__": "abc"}}', "/step", "a list of the items"),
    "a tensor key that is a number": ('{"w": [{"__tensor__": 3}]}', "/w/0", "a string"),
    "an array key that is a list": ('{"__array__": ["w"]}', "/", "a string"),
    "a missing tensor": ('{"opt": {"__tensor__": "w"}}', "/opt", "does not hold"),
}


@pytest.mark.parametrize("case", sorted(_BAD_TREES))
def test_malformed_metadata_names_the_file_and_the_entry(tmp_path, case):
    tree, where, why = _BAD_TREES[case]
    path = tmp_path / "crafted.safetensors"
    _crafted(path, tree)
    with pytest.raises(ValueError) as info:
        tg.load(path)
    msg = str(info.value)
    assert msg.startswith(f"tg.load: '{path}' is corrupt"), msg
    assert f"'{where}'" in msg and why in msg, msg


def test_well_formed_dict_pairs_still_load(tmp_path):
    path = tmp_path / "ok.safetensors"
    tg.save({"model": {1: "a", (2, 3): [4.0, None], "__x": True}, "t": (1, "b")}, path)
    assert tg.load(path) == {"model": {1: "a", (2, 3): [4.0, None], "__x": True}, "t": (1, "b")}


def test_load_checkpoint_names_the_file_for_an_rng_state_of_the_wrong_shape(tmp_path):
    path = tmp_path / "run.safetensors"
    tg.save({"model": {}, "rng": {"python": [3]}}, path)
    with pytest.raises(ValueError, match=r"run\.safetensors' is corrupt: its 'rng' entry"):
        tg.load_checkpoint(path, restore_rng=True)


# -- std at a tie, as torch.std ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -3.7, 5583.4])
def test_std_of_two_equal_values_has_gradient_zero_as_torch(dtype, correction, value):
    x = tg.tensor(value, dtype=getattr(tg, dtype))
    with tg.Tape() as tape:
        tape.watch(x)
        s = tg.std(tg.stack([x, x]), correction=correction)
    t = torch.tensor(value, dtype=getattr(torch, dtype), requires_grad=True)
    torch.std(torch.stack([t, t]), correction=correction).backward()
    assert s.item() == 0.0
    assert tape.gradient(s, x).item() == t.grad.item() == 0.0


@pytest.mark.parametrize("n", [2, 3, 5, 7])
def test_std_at_any_tie_has_a_subgradient(n):
    """Where the mean rounds away from the tied value the spread is a rounding residue; the
    gradient there must still sum to 0 (std does not change when every value moves together)
    and be no longer than the steepest slope, 1 / sqrt(n - correction)."""
    rng = np.random.default_rng(n)
    for value in rng.standard_normal(50) * 10.0 ** rng.integers(-5, 6, 50):
        a = tg.tensor(np.full(n, value, np.float32))
        with tg.Tape() as tape:
            tape.watch(a)
            s = tg.std(a, correction=1)
        g = tape.gradient(s, a).numpy().astype(np.float64)
        assert np.all(np.isfinite(g)), (value, g)
        assert abs(g.sum()) <= 1e-6 and np.linalg.norm(g) <= 1 / np.sqrt(n - 1) + 1e-6, (value, g)


def test_second_derivative_of_std_at_a_tie_is_finite():
    x = tg.tensor([2.0, 2.0], dtype=tg.float64)
    with tg.Tape() as outer:
        outer.watch(x)
        with tg.Tape() as inner:
            inner.watch(x)
            s = tg.std(x, ddof=1)
        g = inner.gradient(s, x).sum()
    assert outer.gradient(g, x).tolist() == [0.0, 0.0]


# -- a p-norm at 0, as torch.linalg.vector_norm -------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("ord", [2, 3, 1.5, 4])
def test_pnorm_after_logsumexp_at_zero_has_gradient_zero_as_torch(dtype, ord):
    a = np.zeros((1, 1, 1))
    x = tg.tensor(a, dtype=getattr(tg, dtype))
    with tg.Tape() as tape:
        tape.watch(x)
        y = tg.norm(tg.logsumexp(x, axis=1, keepdims=True), ord=ord)
    t = torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True)
    ty = torch.linalg.vector_norm(torch.logsumexp(t, dim=1, keepdim=True), ord=ord)
    ty.backward()
    assert y.item() == ty.item() == 0.0
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), t.grad.numpy())


@pytest.mark.parametrize(
    "values", [[0.0, 0.0], [1e-20, 0.0], [1e-30, -1e-30], [3.0, -4.0]], ids=str
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pnorm_where_the_powers_underflow_matches_torch(values, dtype):
    x = tg.tensor(values, dtype=getattr(tg, dtype))
    with tg.Tape() as tape:
        tape.watch(x)
        y = tg.norm(x, ord=3)
    t = torch.tensor(values, dtype=getattr(torch, dtype), requires_grad=True)
    torch.linalg.vector_norm(t, ord=3).backward()
    g = tape.gradient(y, x).numpy()
    assert np.all(np.isfinite(g)), g
    np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-5, atol=0)


# -- the fused-kernel source cache ---------------------------------------------------------------

_SRC = "def kernel(a):\n    return a * 2.0\n"


def _cached_path(cache_home) -> str:
    """Where the loader keeps ``_SRC``: the kernel runtime's folder under ``cache_home`` (the
    caller sets ``TAPEGRAD_CACHE_DIR`` to it), named by the source's digest."""
    from tapegrad._kernels import runtime  # noqa: PLC0415

    where = runtime.cache_dir()
    assert where.startswith(str(cache_home))
    return os.path.join(where, "tg_fused_" + runtime.text_digest(_SRC) + ".py")


@pytest.mark.skipif(_kernels.numba() is None, reason="fused kernels need numba")
@pytest.mark.parametrize("planted", ["tampered", "torn", "not utf-8"])
def test_a_cached_kernel_file_that_is_not_its_source_is_rewritten_never_run(
    tmp_path, monkeypatch, planted
):
    monkeypatch.setenv("TAPEGRAD_CACHE_DIR", str(tmp_path))
    path = _cached_path(tmp_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    marker = tmp_path / "ran"
    text = {
        "tampered": f"open({str(marker)!r}, 'w').close()\ndef kernel(a):\n    return a + 1.0\n",
        "torn": _SRC[:20],
        "not utf-8": "\udcff" + _SRC,
    }[planted]
    with open(path, "wb") as f:
        f.write(text.encode("utf-8", "surrogateescape"))
    kern = _source.load(_SRC)
    assert not marker.exists()
    assert kern.py_func(3.0) == 6.0  # the source's function (not compiled: no numba build here)
    with open(path, encoding="utf-8") as f:
        assert f.read() == _SRC
    assert [p for p in os.listdir(os.path.dirname(path)) if p.endswith(".tmp")] == []


@pytest.mark.skipif(_kernels.numba() is None, reason="fused kernels need numba")
def test_a_cached_kernel_file_with_its_source_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_CACHE_DIR", str(tmp_path))
    path = _cached_path(tmp_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(_SRC)
    os.utime(path, (1_000_000_000, 1_000_000_000))  # numba's cache stamps the file's time
    kern = _source.load(_SRC)
    assert kern.py_func(3.0) == 6.0
    assert os.stat(path).st_mtime == 1_000_000_000
