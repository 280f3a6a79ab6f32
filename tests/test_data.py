"""Datasets, the DataLoader (batching, shuffling, collation, resume), random_split, load_digits."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad import data


def _ds(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return data.TensorDataset(x, np.arange(n))


class _PerSample:
    """The same samples as _ds, read one at a time (the generic path)."""

    def __init__(self, n=10):
        self.inner = _ds(n)

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        x, y = self.inner[i]
        return x, y


def _ys(loader):
    return [y.tolist() for _, y in loader]


# -- TensorDataset ----------------------------------------------------------------------------


def test_tensor_dataset_rows_and_batches():
    ds = data.TensorDataset(tg.tensor([[1.0, 2.0], [3.0, 4.0]]), np.array([7, 8]))
    assert len(ds) == 2
    x, y = ds[1]
    assert isinstance(x, tg.Tensor) and x.tolist() == [3.0, 4.0] and y.item() == 8
    xb, yb = ds[np.array([1, 0])]
    assert xb.shape == (2, 2) and yb.tolist() == [8, 7]
    assert [t.shape for t in ds.tensors] == [(2, 2), (2,)]
    assert isinstance(ds, data.Dataset) and isinstance(_PerSample(), data.Dataset)


def test_tensor_dataset_errors():
    with pytest.raises(
        ValueError, match=r"differ in their first dimension \(shapes \(3, 2\), \(4,\)\)"
    ):
        data.TensorDataset(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="0-d"):
        data.TensorDataset(np.float32(1.0))
    with pytest.raises(ValueError, match="at least one"):
        data.TensorDataset()


# -- DataLoader -------------------------------------------------------------------------------


def test_sequential_batches_and_drop_last():
    assert _ys(data.DataLoader(_ds(), batch_size=4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    loader = data.DataLoader(_ds(), batch_size=4, drop_last=True)
    assert len(loader) == 2 and _ys(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(data.DataLoader(_ds(), batch_size=4)) == 3
    x, _ = next(iter(data.DataLoader(_ds(), batch_size=4)))
    assert x.dtype == tg.float32 and x.shape == (4, 3)


def test_shuffle_is_a_permutation_and_seeded():
    a = data.DataLoader(_ds(), batch_size=3, shuffle=True, seed=0)
    b = data.DataLoader(_ds(), batch_size=3, shuffle=True, seed=0)
    e1, e2 = _ys(a), _ys(a)
    assert sorted(sum(e1, [])) == list(range(10))
    assert e1 != e2  # a new order each epoch
    assert [e1, e2] == [_ys(b), _ys(b)]
    c = data.DataLoader(_ds(), batch_size=3, shuffle=True, generator=tg.Generator(0))
    assert _ys(c) == e1
    # without seed or generator: the global stream (tg.manual_seed)
    tg.manual_seed(4)
    d1 = _ys(data.DataLoader(_ds(), batch_size=3, shuffle=True))
    tg.manual_seed(4)
    assert _ys(data.DataLoader(_ds(), batch_size=3, shuffle=True)) == d1
    with pytest.raises(ValueError, match="not both"):
        data.DataLoader(_ds(), seed=0, generator=tg.Generator(0))


def test_fast_path_equals_per_sample_path_and_reads_no_samples(monkeypatch):
    fast = data.DataLoader(_ds(), batch_size=4, shuffle=True, seed=3)
    slow = data.DataLoader(_PerSample(), batch_size=4, shuffle=True, seed=3)
    for (xa, ya), (xb, yb) in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(xa.numpy(), xb.numpy())
        np.testing.assert_array_equal(ya.numpy(), yb.numpy())

    def no_per_sample(self, index):
        raise AssertionError("the TensorDataset fast path read a single sample")

    monkeypatch.setattr(data.TensorDataset, "__getitem__", no_per_sample)
    sub = data.Subset(_ds(), [9, 3, 5, 1])
    assert _ys(data.DataLoader(sub, batch_size=3)) == [[9, 3, 5], [1]]
    assert len(_ys(data.DataLoader(_ds(), batch_size=3, shuffle=True, seed=0))) == 4


def test_default_collate_structures():
    samples = [
        {"x": tg.ones(2), "y": 1, "w": 0.5, "ok": True, "name": "a", "pair": (np.zeros(3), 2)},
        {"x": tg.zeros(2), "y": 0, "w": 1.5, "ok": False, "name": "b", "pair": (np.ones(3), 3)},
    ]
    b = data.default_collate(samples)
    assert b["x"].shape == (2, 2) and b["x"].tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert b["y"].dtype == tg.int64 and b["y"].tolist() == [1, 0]
    assert b["w"].dtype == tg.float32 and b["ok"].dtype == tg.bool_
    assert b["name"] == ["a", "b"]
    assert (
        isinstance(b["pair"], tuple)
        and b["pair"][0].shape == (2, 3)
        and b["pair"][1].tolist() == [2, 3]
    )
    assert data.default_collate([np.float64(1.0), np.float64(2.0)]).dtype == tg.float64
    with pytest.raises(ValueError, match=r"different shapes \[\(2,\), \(3,\)\]"):
        data.default_collate([tg.ones(2), tg.ones(3)])


def test_generic_dataset_and_custom_collate():
    class Squares:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": float(i), "y": i * i}

    batches = list(data.DataLoader(Squares(), batch_size=2))
    assert [b["y"].tolist() for b in batches] == [[0, 1], [4, 9], [16]]
    loader = data.DataLoader(_ds(4), batch_size=2, collate_fn=lambda s: [int(y) for _, y in s])
    assert list(loader) == [[0, 1], [2, 3]]


def test_loader_state_dict_resumes_mid_epoch():
    loader = data.DataLoader(_ds(), batch_size=3, shuffle=True, seed=1)
    first_epoch = _ys(loader)
    it = iter(loader)
    seen = [next(it)[1].tolist(), next(it)[1].tolist()]
    sd = loader.state_dict()
    assert sd["epoch"] == 2 and sd["position"] == 2
    rest = [y.tolist() for _, y in it]
    later = _ys(loader)
    resumed = data.DataLoader(_ds(), batch_size=3, shuffle=True, seed=1)
    resumed.load_state_dict(sd)
    assert _ys(resumed) == rest  # the rest of that epoch
    assert _ys(resumed) == later  # and the same next epoch
    assert seen + rest != first_epoch
    with pytest.raises(KeyError, match="missing keys"):
        resumed.load_state_dict({"epoch": 1})


def test_progress_bar(capsys):
    pytest.importorskip("tqdm")
    assert len(_ys(data.DataLoader(_ds(), batch_size=5, progress=True))) == 2
    assert "2/2" in capsys.readouterr().err


def test_batch_size_validation():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        data.DataLoader(_ds(), batch_size=0)


# -- random_split -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "lengths"), [(10, [0.33, 0.33, 0.34]), (11, [0.5, 0.5]), (7, [0.2, 0.8]), (10, [3, 7])]
)
def test_random_split_sizes_match_torch(n, lengths):
    ds = _ds(n)
    parts = data.random_split(ds, lengths, generator=tg.Generator(0))
    theirs = torch.utils.data.random_split(
        range(n), lengths, generator=torch.Generator().manual_seed(0)
    )
    assert [len(p) for p in parts] == [len(t) for t in theirs]
    all_idx = np.concatenate([p.indices for p in parts])
    assert sorted(all_idx.tolist()) == list(range(n))
    again = data.random_split(ds, lengths, generator=tg.Generator(0))
    assert all(np.array_equal(a.indices, b.indices) for a, b in zip(parts, again))


def test_random_split_errors():
    with pytest.raises(ValueError, match="sum to 9 but the dataset has 10"):
        data.random_split(_ds(), [4, 5])
    with pytest.raises(ValueError, match="non-negative ints"):
        data.random_split(_ds(), [0.5, 0.2])


# -- load_digits ------------------------------------------------------------------------------


def test_load_digits():
    pytest.importorskip("sklearn")
    ds = data.load_digits()
    assert isinstance(ds, data.TensorDataset) and len(ds) == 1797
    images, labels = data.load_digits(return_arrays=True)
    assert images.shape == (1797, 1, 8, 8) and images.dtype == np.float32
    assert images.min() == 0.0 and images.max() == 1.0
    assert labels.dtype == np.int64 and sorted(set(labels.tolist())) == list(range(10))
    x, y = next(iter(data.DataLoader(ds, batch_size=32, shuffle=True, seed=0)))
    assert x.shape == (32, 1, 8, 8) and y.shape == (32,)


def test_load_digits_without_scikit_learn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match=r"pip install tapegrad\[examples\]"):
        data.load_digits()
