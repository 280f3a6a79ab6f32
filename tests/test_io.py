"""Checkpoints: tg.save / tg.load round trips, PyTorch interop through safetensors, atomic writes
under a killed process, clear errors for bad files, and exact resume of a training run."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

import tapegrad as tg
from tapegrad import optim


def _roundtrip(obj, tmp_path, name="x.safetensors"):
    p = tmp_path / name
    tg.save(obj, p)
    return tg.load(p)


# -- round trips ------------------------------------------------------------------------------


def test_nested_structure_round_trips_with_types(tmp_path):
    obj = {
        "model": {"enc.weight": tg.tensor([[1.0, 2.0]]), "enc.bias": tg.zeros(1, dtype=tg.float64)},
        "arrays": [np.arange(3, dtype=np.int32), np.array(True), np.zeros((0, 2), np.float16)],
        "step": 12,
        "lr": 3e-4,
        "name": "run/1",
        "flags": (True, False, None),
        "nested": {"deep": [{"a": (1, 2.5)}]},
        "int_keys": {0: "zero", 1: {"x": np.float32(1.5)}},
        "dunder": {"__tensor__": "not a tensor"},
        "special": [math.inf, -math.inf],
        "big": 2**100,
    }
    back = _roundtrip(obj, tmp_path)
    assert isinstance(back["model"]["enc.weight"], tg.Tensor)
    assert back["model"]["enc.weight"].tolist() == [[1.0, 2.0]]
    assert back["model"]["enc.bias"].dtype == tg.float64
    a0, a1, a2 = back["arrays"]
    assert isinstance(a0, np.ndarray) and a0.dtype == np.int32 and a0.tolist() == [0, 1, 2]
    assert a1.shape == () and a1.dtype == np.bool_ and bool(a1)
    assert a2.shape == (0, 2) and a2.dtype == np.float16
    assert back["step"] == 12 and isinstance(back["step"], int)
    assert back["lr"] == 3e-4 and back["name"] == "run/1"
    assert back["flags"] == (True, False, None)
    assert back["nested"] == {"deep": [{"a": (1, 2.5)}]}
    assert back["int_keys"] == {0: "zero", 1: {"x": 1.5}}
    assert back["dunder"] == {"__tensor__": "not a tensor"}
    assert back["special"] == [math.inf, -math.inf]
    assert back["big"] == 2**100
    assert math.isnan(_roundtrip({"v": math.nan}, tmp_path, "nan.safetensors")["v"])


def test_single_tensor_and_loaded_arrays_are_writable(tmp_path):
    t = _roundtrip(tg.arange(6).reshape(2, 3), tmp_path)
    assert isinstance(t, tg.Tensor) and t.tolist() == [[0, 1, 2], [3, 4, 5]]
    t._data[0, 0] = 7  # the array is ours, not a read-only view of the file


def test_tensor_keys_are_paths_joined_by_slash(tmp_path):
    p = tmp_path / "ck.safetensors"
    tg.save(
        {
            "model": {"encoder.weight": tg.ones(2)},
            "optimizer": {"state": {0: {"exp_avg": np.zeros(2)}}},
        },
        p,
    )
    keys = set(safetensors.numpy.load_file(p))
    assert keys == {"model/encoder.weight", "optimizer/state/0/exp_avg"}


def test_colliding_paths_keep_both_tensors(tmp_path):
    back = _roundtrip({"a/b": tg.ones(1), "a": {"b": tg.zeros(1)}}, tmp_path)
    assert back["a/b"].tolist() == [1.0] and back["a"]["b"].tolist() == [0.0]


def test_optimizer_state_dict_round_trips_through_a_file(tmp_path):
    ps = [tg.Parameter(tg.ones(3, dtype=tg.float64)), tg.Parameter(tg.ones(2, dtype=tg.float64))]
    opt = optim.Adam([{"params": ps[:1], "lr": 0.1}, {"params": ps[1:]}], amsgrad=True)
    for k in range(3):
        opt.step({p: tg.full(p.shape, float(k + 1), dtype=tg.float64) for p in ps})
    sd = opt.state_dict()
    back = _roundtrip(sd, tmp_path)
    opt2 = optim.Adam([{"params": ps[:1], "lr": 0.5}, {"params": ps[1:]}])
    opt2.load_state_dict(back)
    assert opt2.param_groups[0]["lr"] == 0.1 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    for p in ps:
        for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            np.testing.assert_array_equal(opt2.state[p][k], opt.state[p][k])
        assert opt2.state[p]["step"] == 3


# -- PyTorch interop --------------------------------------------------------------------------


def test_pytorch_safetensors_file_loads_as_a_dict_of_tensors(tmp_path):
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    p = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(lin.state_dict(), p)
    sd = tg.load(p)
    assert set(sd) == {"weight", "bias"}
    assert isinstance(sd["weight"], tg.Tensor)
    np.testing.assert_array_equal(sd["weight"].numpy(), lin.weight.detach().numpy())


def test_pytorch_bfloat16_tensors_load_as_float32(tmp_path):
    w = torch.randn(4, 3).to(torch.bfloat16)
    p = tmp_path / "bf16.safetensors"
    safetensors.torch.save_file({"w": w, "b": torch.ones(2)}, p)
    sd = tg.load(p)
    assert sd["w"].dtype == tg.float32 and sd["w"].shape == (4, 3)
    np.testing.assert_array_equal(sd["w"].numpy(), w.float().numpy())
    assert sd["b"].tolist() == [1.0, 1.0]


def test_tapegrad_state_dict_loads_into_pytorch(tmp_path):
    class Lin(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = tg.Parameter(tg.randn(2, 3))
            self.bias = tg.Parameter(tg.randn(2))

    m = Lin()
    p = tmp_path / "tg.safetensors"
    tg.save(m.state_dict(), p)
    sd = safetensors.torch.load_file(p)
    lin = torch.nn.Linear(3, 2)
    lin.load_state_dict(sd)  # strict: the same keys, shapes and dtypes
    np.testing.assert_array_equal(lin.weight.detach().numpy(), m.weight.numpy())


# -- bad files --------------------------------------------------------------------------------


@pytest.fixture
def good_file(tmp_path):
    p = tmp_path / "good.safetensors"
    tg.save({"w": tg.tensor(np.arange(1000, dtype=np.float32)), "step": 5}, p)
    return p


def test_truncated_file_raises_naming_it(good_file, tmp_path):
    data = good_file.read_bytes()
    for cut in (len(data) // 2, 6, 0):
        bad = tmp_path / f"cut{cut}.safetensors"
        bad.write_bytes(data[:cut])
        with pytest.raises(
            ValueError,
            match=rf"tg\.load: '.*cut{cut}\.safetensors' is not a readable safetensors file",
        ):
            tg.load(bad)


def test_corrupt_header_raises_naming_it(good_file):
    data = bytearray(good_file.read_bytes())
    data[10:20] = b"\x00" * 10  # inside the JSON header
    good_file.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"'.*good\.safetensors'.*(not a readable|corrupt)"):
        tg.load(good_file)


def test_corrupt_tensor_data_fails_its_checksum(good_file):
    data = bytearray(good_file.read_bytes())
    data[-3] ^= 0xFF  # inside the tensor bytes
    good_file.write_bytes(bytes(data))
    with pytest.raises(
        ValueError,
        match=r"'.*good\.safetensors' is corrupt: the data of tensor 'w' fails its checksum",
    ):
        tg.load(good_file)


def test_foreign_files_raise_clear_errors(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a checkpoint at all\n")
    with pytest.raises(ValueError, match=r"'.*notes\.txt' is not a readable safetensors file"):
        tg.load(text)
    pt = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, pt)
    with pytest.raises(ValueError, match=r"model\.pt.*PyTorch torch\.save file.*never unpickles"):
        tg.load(pt)
    pkl = tmp_path / "x.pkl"
    pkl.write_bytes(b"\x80\x04\x95" + b"\x00" * 40)
    with pytest.raises(ValueError, match=r"x\.pkl.*pickle; tapegrad never unpickles"):
        tg.load(pkl)
    with pytest.raises(FileNotFoundError, match=r"no such file: '.*missing\.safetensors'"):
        tg.load(tmp_path / "missing.safetensors")


def test_unsupported_objects_raise_and_leave_the_old_file(tmp_path):
    class M(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = tg.Parameter(tg.ones(1))

    p = tmp_path / "ck.safetensors"
    tg.save({"v": 1}, p)
    with pytest.raises(
        TypeError,
        match=r"cannot store a M at 'model'.*Save its state instead: model\.state_dict\(\)",
    ):
        tg.save({"model": M()}, p)
    with pytest.raises(TypeError, match=r"cannot store a object at 'cfg/x'.*nothing is pickled"):
        tg.save({"cfg": {"x": object()}}, p)
    with pytest.raises(TypeError, match=r"'c' has dtype complex128"):
        tg.save({"c": np.ones(2, np.complex128)}, p)
    with pytest.raises(TypeError, match="keys must be str"):
        tg.save({"d": {object(): 1}}, p)
    assert tg.load(p) == {"v": 1}
    assert os.listdir(tmp_path) == ["ck.safetensors"]  # no temporary files left behind


def test_save_into_a_missing_directory_and_empty_objects(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"the directory '.*nowhere' does not exist"):
        tg.save({"a": 1}, tmp_path / "nowhere" / "x.safetensors")
    assert _roundtrip({}, tmp_path) == {}
    assert _roundtrip([], tmp_path) == []


def test_load_checkpoint_rejects_a_plain_file(good_file):
    with pytest.raises(ValueError, match="not a training checkpoint"):
        tg.load_checkpoint(good_file)


# -- atomic writes ----------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import tapegrad as tg

    path, marker = sys.argv[1], sys.argv[2]

    def slow_fsync(fd):
        open(marker, "w").close()
        time.sleep(120)

    os.fsync = slow_fsync  # the write is done, the rename is not: the parent kills us here
    tg.save({"w": tg.tensor(np.full(2_000_000, 2.0, np.float32)), "version": 2}, path)
    """
)


def test_killed_save_leaves_the_previous_checkpoint_readable(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    marker = tmp_path / "in_fsync"
    tg.save({"w": tg.ones(3), "version": 1}, path)
    old = path.read_bytes()
    root = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, "the child exited before it reached fsync"
            assert time.monotonic() < deadline, "the child never reached fsync"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL
    leftovers = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    assert len(leftovers) == 1  # the half-done write went to a temporary file
    assert (tmp_path / leftovers[0]).stat().st_size > 8_000_000
    assert path.read_bytes() == old
    back = tg.load(path)
    assert back["version"] == 1 and back["w"].tolist() == [1.0, 1.0, 1.0]
    tg.save({"version": 3}, path)  # and the next save still works
    assert tg.load(path) == {"version": 3}


# -- exact resume of a training run -----------------------------------------------------------


class _Lin(tg.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = tg.Parameter(tg.randn(n_out, n_in, dtype=tg.float64) * 0.5)
        self.bias = tg.Parameter(tg.zeros(n_out, dtype=tg.float64))

    def forward(self, x):
        return x @ self.weight.T + self.bias


class _MLP(tg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = _Lin(4, 8)
        self.fc2 = _Lin(8, 1)

    def forward(self, x):
        h = tg.tanh(self.fc1(x))
        keep = (tg.rand(*h.shape, dtype=tg.float64) > 0.2).astype(tg.float64)  # dropout: draws RNG
        return self.fc2(h * keep / 0.8)


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4))
    y = np.sin(x.sum(axis=1, keepdims=True))
    return tg.data.TensorDataset(x, y)


def _setup():
    tg.manual_seed(123)
    np.random.seed(5)
    random.seed(7)
    model = _MLP()
    opt = optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.01)
    sched = optim.WarmupCosine(opt, warmup_steps=3, total_steps=40)
    loader = tg.data.DataLoader(
        _data(), batch_size=6, shuffle=True
    )  # shuffles from the global stream
    ema = optim.ModelEMA(model, decay=0.9)
    return model, opt, sched, loader, ema


def _train(model, opt, sched, loader, ema, n_steps, step=0, save_at=None, path=None):
    losses = []
    while step < n_steps:
        for x, y in loader:
            with tg.Tape() as tape:
                loss = ((model(x) - y) ** 2).mean()
            opt.step(tape.gradient(loss, model))
            sched.step()
            ema.update()
            # numpy's and Python's streams are part of the state too
            losses.append((loss.item(), float(np.random.rand()), random.random()))
            step += 1
            if step == save_at:
                tg.save_checkpoint(
                    path, model, opt, sched, step=step, config={"lr": 0.02}, loader=loader, ema=ema
                )
            if step == n_steps:
                break
    return losses, ema


@pytest.mark.parametrize("save_at", [9, 14])  # mid-epoch (7 batches per epoch) and at its end
def test_resume_reproduces_the_uninterrupted_run_exactly(tmp_path, save_at):
    path = tmp_path / "run.safetensors"
    full, ema_full = _train(*_setup(), n_steps=25, save_at=save_at, path=path)
    # fresh objects (and scrambled global random streams), then resume
    model, opt, sched, loader, ema = _setup()
    tg.manual_seed(999)
    np.random.seed(999)
    random.seed(999)
    ck = tg.load_checkpoint(path, model, opt, sched, loader=loader, ema=ema)
    assert ck["step"] == save_at and ck["config"] == {"lr": 0.02}
    rest, ema_rest = _train(model, opt, sched, loader, ema, n_steps=25, step=ck["step"])
    assert rest == full[save_at:]
    for k, v in ema_full.shadow.items():
        np.testing.assert_array_equal(ema_rest.shadow[k], v)


def test_resume_at_an_epoch_boundary_needs_only_the_rng_state(tmp_path):
    path = tmp_path / "run.safetensors"
    full, _ = _train(*_setup(), n_steps=14, save_at=7, path=path)
    model, opt, sched, loader, ema = _setup()  # a fresh loader, no loader state restored
    ck = tg.load_checkpoint(path, model, opt, sched, ema=ema)
    rest, _ = _train(model, opt, sched, loader, ema, n_steps=14, step=ck["step"])
    assert rest == full[7:]


def test_checkpoint_dict_convention(tmp_path):
    model, opt, sched, _, _ = _setup()
    ck = tg.save_checkpoint(tmp_path / "c.safetensors", model, opt, sched, step=3, config={"a": 1})
    assert set(ck) == {"model", "optimizer", "scheduler", "step", "rng", "config"}
    assert set(ck["rng"]) == {"tapegrad", "numpy", "python"}
    back = tg.load(tmp_path / "c.safetensors")
    assert set(back) == set(ck) and back["step"] == 3
    assert back["model"].keys() == model.state_dict().keys()
    with pytest.raises(KeyError, match="holds no 'loader' state"):
        tg.load_checkpoint(tmp_path / "c.safetensors", model, loader=tg.data.DataLoader(_data()))
