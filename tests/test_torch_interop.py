"""Acceptance: PyTorch models saved with safetensors load 1:1 (strict) into their tapegrad
twins and give the same outputs in eval mode; and the reverse direction."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import tapegrad as tg
from tapegrad import nn

# replaced by a new generator for each test (_fresh_rng): no test sees another's draws
RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _fresh_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets a new generator, seeded alike whatever ran before it (any order, any -k)."""
    monkeypatch.setitem(globals(), "RNG", np.random.default_rng(7))


class TorchCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.AvgPool2d(2),
        )
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.pool(self.features(x)).flatten(1))


class CNN(nn.Module):
    features: nn.Sequential
    pool: nn.AdaptiveAvgPool2d
    head: nn.Linear

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AvgPool2d(2),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.pool(self.features(x)).flatten(1))


def _torch_encoder() -> torch.nn.Module:
    layer = torch.nn.TransformerEncoderLayer(
        16, 4, dim_feedforward=32, dropout=0.1, batch_first=True, activation="gelu"
    )
    return torch.nn.TransformerEncoder(layer, 2, norm=torch.nn.LayerNorm(16))


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(
        16, 4, dim_feedforward=32, dropout=0.1, batch_first=True, activation="gelu"
    )
    return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16))


def _from_torch(ref: torch.nn.Module, ours: nn.Module, path) -> None:
    safetensors.torch.save_file(ref.state_dict(), str(path))
    ours.load_state_dict(safetensors.numpy.load_file(str(path)), strict=True)


def test_cnn_from_pytorch(tmp_path):
    torch.manual_seed(0)
    ref = TorchCNN()
    ref.train()
    with torch.no_grad():  # a few batches so the running statistics are not 0 and 1
        for _ in range(3):
            ref(torch.randn(8, 3, 16, 16) * 2 + 0.5)
    ref.eval()
    ours = CNN()
    assert list(ours.state_dict()) == list(ref.state_dict())
    _from_torch(ref, ours, tmp_path / "cnn.safetensors")
    ours.eval()
    assert int(ours.features[1].num_batches_tracked.item()) == 3
    x = RNG.standard_normal((4, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    got = ours(tg.tensor(x)).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_transformer_encoder_from_pytorch(tmp_path):
    torch.manual_seed(1)
    ref = _torch_encoder().eval()
    ours = _encoder()
    assert list(ours.state_dict()) == list(ref.state_dict())
    _from_torch(ref, ours, tmp_path / "enc.safetensors")
    ours.eval()
    x = RNG.standard_normal((3, 7, 16)).astype(np.float32)
    mask = np.triu(np.full((7, 7), -np.inf, dtype=np.float32), 1)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
        want_causal = ref(torch.from_numpy(x), mask=torch.from_numpy(mask)).numpy()
        kpm = np.zeros((3, 7), dtype=bool)
        kpm[0, 5:] = True
        want_pad = ref(torch.from_numpy(x), src_key_padding_mask=torch.from_numpy(kpm)).numpy()
    np.testing.assert_allclose(ours(tg.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        ours(tg.tensor(x), mask=mask).numpy(), want_causal, rtol=1e-5, atol=1e-5
    )
    got_pad = ours(tg.tensor(x), src_key_padding_mask=kpm).numpy()
    # PyTorch's eval fast path (nested tensors) writes 0 at padded positions; the rest agree
    keep = ~kpm
    np.testing.assert_allclose(got_pad[keep], want_pad[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("ours_fn", "ref_fn", "shape"), [
    (CNN, TorchCNN, (2, 3, 16, 16)),
    (_encoder, _torch_encoder, (2, 5, 16)),
])  # fmt: skip
def test_to_pytorch(tmp_path, ours_fn, ref_fn, shape):
    tg.manual_seed(5)
    ours = ours_fn()
    if isinstance(ours, CNN):  # non-trivial running statistics
        for _ in range(2):
            ours(tg.tensor(RNG.standard_normal((8, 3, 16, 16)).astype(np.float32) + 1))
    ours.eval()
    path = str(tmp_path / "model.safetensors")
    safetensors.numpy.save_file({k: v.numpy() for k, v in ours.state_dict().items()}, path)
    ref = ref_fn()
    ref.load_state_dict(safetensors.torch.load_file(path), strict=True)
    ref.eval()
    x = RNG.standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours(tg.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_strict_load_names_the_mismatch(tmp_path):
    ref = TorchCNN()
    path = str(tmp_path / "cnn.safetensors")
    safetensors.torch.save_file(ref.state_dict(), path)
    state = safetensors.numpy.load_file(path)
    del state["features.1.num_batches_tracked"]
    with pytest.raises(RuntimeError, match=r"missing keys \['features.1.num_batches_tracked'\]"):
        CNN().load_state_dict(state)
