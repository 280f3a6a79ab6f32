"""Mixed precision: tg.autocast (bfloat16, float16) and tg.amp.GradScaler, against float32 and
torch.autocast / torch.amp.GradScaler on the CPU."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

import tapegrad as tg
import tapegrad.nn.functional as F

ml_dtypes = pytest.importorskip("ml_dtypes")

BF16 = np.dtype(ml_dtypes.bfloat16)
# one rounding of a result: bfloat16 keeps 8 significant bits, float16 11
RTOL = {"bfloat16": 2.0**-7, "float16": 2.0**-10}
TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16}
LOW = ["bfloat16", "float16"]


def _low(name: str) -> np.dtype:
    return tg.bfloat16 if name == "bfloat16" else tg.float16


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _f32(t: tg.Tensor) -> np.ndarray:
    return t.numpy().astype(np.float32)


def _round(a: np.ndarray, name: str) -> np.ndarray:
    return a.astype(_low(name)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------


def test_import_does_not_load_ml_dtypes() -> None:
    code = "import sys, tapegrad; print('ml_dtypes' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bfloat16_dtype_names() -> None:
    assert tg.bfloat16 == BF16
    assert tg.bfloat16.name == "bfloat16"
    assert tg.float16 == np.float16
    x = tg.ones((2, 3)).astype("bfloat16")
    assert x.dtype == BF16
    assert tg.zeros(3, dtype=tg.bfloat16).dtype == BF16


# --------------------------------------------------------------------------------------------
# which ops run low, which run float32
# --------------------------------------------------------------------------------------------


def _cases(rng: np.random.Generator) -> list[tuple[str, object, object, list[np.ndarray]]]:
    """(name, tapegrad fn, torch fn, float32 inputs) for each op that autocast runs low."""
    r = lambda *s: rng.standard_normal(s).astype(np.float32)
    tF = torch.nn.functional
    return [
        ("matmul", lambda a, b: a @ b, lambda a, b: a @ b, [r(5, 64), r(64, 7)]),
        ("bmm", tg.matmul, torch.matmul, [r(3, 4, 32), r(3, 32, 5)]),
        ("linear", F.linear, tF.linear, [r(6, 48), r(10, 48), r(10)]),
        ("conv1d", F.conv1d, tF.conv1d, [r(2, 3, 16), r(4, 3, 5), r(4)]),
        ("conv2d", F.conv2d, tF.conv2d, [r(2, 3, 8, 8), r(5, 3, 3, 3), r(5)]),
        (
            "conv_transpose2d",
            lambda x, w: F.conv_transpose2d(x, w, stride=2),
            lambda x, w: tF.conv_transpose2d(x, w, stride=2),
            [r(2, 4, 5, 5), r(4, 3, 3, 3)],
        ),
        (
            "sdpa",
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            lambda q, k, v: tF.scaled_dot_product_attention(q, k, v, is_causal=True),
            [r(2, 2, 6, 8), r(2, 2, 6, 8), r(2, 2, 6, 8)],
        ),
        (
            "einsum",
            lambda a, b: tg.einsum("bij,bjk->bik", a, b),
            lambda a, b: torch.einsum("bij,bjk->bik", a, b),
            [r(2, 4, 16), r(2, 16, 3)],
        ),
    ]


@pytest.mark.parametrize("low", LOW)
def test_listed_ops_run_low_within_tolerance_of_float32(low: str) -> None:
    for name, f, _, arrays in _cases(_rng()):
        ref = f(*[tg.tensor(a) for a in arrays])
        assert ref.dtype == tg.float32, name
        with tg.autocast(_low(low)):
            out = f(*[tg.tensor(a) for a in arrays])
        assert out.dtype == _low(low), name
        # float32 accumulation of rounded inputs: the same as float32 on rounded inputs, rounded
        rounded = f(*[tg.tensor(_round(a, low)) for a in arrays]).numpy()
        np.testing.assert_array_equal(_f32(out), _round(rounded, low), err_msg=name)
        scale = np.abs(ref.numpy()).max()
        np.testing.assert_allclose(_f32(out), ref.numpy(), rtol=0, atol=8 * RTOL[low] * scale,
                                   err_msg=name)


def test_listed_ops_match_torch_autocast_cpu_bfloat16() -> None:
    for name, f, tf, arrays in _cases(_rng()):
        with tg.autocast(tg.bfloat16):
            out = f(*[tg.tensor(a) for a in arrays])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            tout = tf(*[torch.tensor(a) for a in arrays])
        assert tout.dtype == torch.bfloat16, name  # torch lowers the same op on the CPU
        t = tout.float().numpy()
        # both round the inputs and the result to bfloat16; accumulation orders differ
        scale = np.abs(t).max()
        np.testing.assert_allclose(_f32(out), t, rtol=0, atol=4 * RTOL["bfloat16"] * scale,
                                   err_msg=name)


@pytest.mark.parametrize("low", LOW)
def test_float32_list_takes_low_inputs_up(low: str) -> None:
    x = tg.tensor(_rng().standard_normal((4, 6)).astype(np.float32)).astype(_low(low))
    t = tg.tensor([0, 1, 2, 5])
    with tg.autocast(_low(low)):
        outs = {
            "softmax": F.softmax(x, dim=-1),
            "log_softmax": F.log_softmax(x, dim=-1),
            "tg.softmax": tg.softmax(x),
            "cross_entropy": F.cross_entropy(x, t),
            "mse_loss": F.mse_loss(x, tg.zeros((4, 6))),
            "layer_norm": F.layer_norm(x, (6,)),
            "group_norm": F.group_norm(x.reshape(2, 4, 3), 2),
        }
    for name, o in outs.items():
        assert o.dtype == tg.float32, name
    x32 = x.astype(tg.float32)
    np.testing.assert_allclose(outs["log_softmax"].numpy(), F.log_softmax(x32, dim=-1).numpy())
    np.testing.assert_allclose(outs["cross_entropy"].item(), F.cross_entropy(x32, t).item())


def test_ops_outside_the_lists_keep_their_dtype() -> None:
    with tg.autocast(tg.bfloat16):
        y = tg.ones((2, 3)) @ tg.ones((3, 4))
        assert F.relu(y).dtype == tg.bfloat16
        assert (y * 2.0).dtype == tg.bfloat16
        assert (y + tg.ones(4)).dtype == tg.float32  # bfloat16 + float32 promotes, as torch
        assert tg.exp(tg.ones(3)).dtype == tg.float32  # float32 in, float32 out


def test_float64_is_not_autocast() -> None:
    a = tg.ones((2, 3), dtype=tg.float64)
    with tg.autocast(tg.bfloat16):
        assert (a @ a.T).dtype == tg.float64
        assert F.linear(a, a).dtype == tg.float64


def test_enabled_false_nesting_and_decorator() -> None:
    a = tg.ones((2, 2))
    assert not tg.amp.is_autocast_enabled()
    with tg.autocast(tg.float16):
        assert tg.amp.get_autocast_dtype() == tg.float16
        with tg.autocast(enabled=False):
            assert (a @ a).dtype == tg.float32
        with tg.autocast(tg.bfloat16):
            assert (a @ a).dtype == tg.bfloat16
        assert (a @ a).dtype == tg.float16
    assert (a @ a).dtype == tg.float32 and tg.amp.get_autocast_dtype() is None

    @tg.autocast(tg.bfloat16)
    def f(x: tg.Tensor) -> tg.Tensor:
        return x @ x

    assert f(a).dtype == tg.bfloat16
    assert (a @ a).dtype == tg.float32


def test_autocast_state_is_per_thread() -> None:
    seen = []
    with tg.autocast(tg.bfloat16):
        th = threading.Thread(target=lambda: seen.append((tg.ones((2, 2)) @ tg.ones((2, 2))).dtype))
        th.start()
        th.join()
    assert seen == [tg.float32]


def test_autocast_rejects_other_dtypes() -> None:
    with pytest.raises(ValueError, match=r"autocast: dtype must be tg.bfloat16 or tg.float16"):
        tg.autocast(tg.float32)


# --------------------------------------------------------------------------------------------
# gradients
# --------------------------------------------------------------------------------------------


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


class _Net(tg.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = tg.nn.Conv2d(1, 4, 3, padding=1)
        self.fc1 = tg.nn.Linear(4 * 8 * 8, 32)
        self.fc2 = tg.nn.Linear(32, 10)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        h = F.relu(self.conv(x)).reshape(x.shape[0], -1)
        return self.fc2(F.relu(self.fc1(h)))


def _torch_net(net: _Net) -> torch.nn.Module:
    tnet = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(256, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10),
    )
    names = {"0": "conv", "3": "fc1", "5": "fc2"}
    sd = {f"{k}.{p}": torch.tensor(net.state_dict()[f"{v}.{p}"].numpy())
          for k, v in names.items() for p in ("weight", "bias")}
    tnet.load_state_dict(sd)
    return tnet


@pytest.mark.parametrize("low", LOW)
def test_model_gradients_under_autocast_are_float32_and_close(low: str) -> None:
    tg.manual_seed(0)
    net = _Net()
    rng = _rng()
    x = tg.tensor(rng.standard_normal((16, 1, 8, 8)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 10, 16))

    def grads(on: bool) -> dict[str, np.ndarray]:
        with tg.Tape() as tape, tg.autocast(_low(low), enabled=on):
            logits = net(x)
            loss = F.cross_entropy(logits, y)
        assert logits.dtype == (_low(low) if on else tg.float32)
        assert loss.dtype == tg.float32
        g = tape.gradient(loss, net)
        assert all(a.dtype == np.float32 for a in g.named(net).values())
        return g.named(net)

    g32, glow = grads(False), grads(True)
    for k in g32:  # a few ReLUs near zero may flip: compare whole tensors, not elements
        assert _rel_err(glow[k], g32[k]) < 0.05, k

    if low == "bfloat16":  # against torch.autocast("cpu") on the same weights
        tnet = _torch_net(net)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            tl = torch.nn.functional.cross_entropy(tnet(torch.tensor(x.numpy())),
                                                   torch.tensor(y.numpy()))
        tl.backward()
        tg_names = {"0": "conv", "3": "fc1", "5": "fc2"}
        for n, p in tnet.named_parameters():
            k = f"{tg_names[n.split('.')[0]]}.{n.split('.')[1]}"
            assert p.grad.dtype == torch.float32
            assert _rel_err(glow[k], p.grad.numpy()) < 0.05, k


def test_gradient_of_the_cast_is_rounded_like_torch() -> None:
    # d(sum(x @ w))/dw under bf16: the gradient of the bf16 copy, rounded, then widened
    w = tg.Parameter(tg.tensor(_rng().standard_normal((8, 3)).astype(np.float32)))
    x = tg.tensor(_rng().standard_normal((4, 8)).astype(np.float32))
    with tg.Tape() as tape, tg.autocast(tg.bfloat16):
        loss = (x @ w).astype(tg.float32).sum()
    g = tape.gradient(loss)[w].numpy()
    tw = torch.tensor(w.numpy(), requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        (torch.tensor(x.numpy()) @ tw).float().sum().backward()
    np.testing.assert_allclose(g, tw.grad.numpy(), rtol=RTOL["bfloat16"], atol=1e-6)
    assert g.dtype == np.float32


def test_mlp_on_digits_converges_under_bfloat16_like_float32() -> None:
    pytest.importorskip("sklearn")
    images, labels = tg.data.load_digits(return_arrays=True)
    x = tg.tensor(np.asarray(images, dtype=np.float32).reshape(len(labels), -1)[:1024])  # in [0, 1]
    y = tg.tensor(np.asarray(labels)[:1024])

    def train(on: bool) -> tuple[float, float]:
        tg.manual_seed(0)
        model = tg.nn.Sequential(tg.nn.Linear(64, 64), tg.nn.ReLU(), tg.nn.Linear(64, 10))
        opt = tg.optim.Adam(model.parameters(), lr=1e-2)
        for step in range(60):
            i = slice((step * 128) % 1024, (step * 128) % 1024 + 128)
            with tg.Tape() as tape, tg.autocast(tg.bfloat16, enabled=on):
                loss = F.cross_entropy(model(x[i]), y[i])
            opt.step(tape.gradient(loss, model))
        with tg.no_grad():
            logits = model(x)
        assert all(p.dtype == tg.float32 for p in model.parameters())  # master weights
        acc = float((logits.numpy().argmax(1) == y.numpy()).mean())
        return F.cross_entropy(logits, y).item(), acc

    loss32, acc32 = train(False)
    losslow, acclow = train(True)
    assert loss32 < 0.3 and losslow < 0.3  # from log(10) = 2.3
    assert acclow > 0.9 and abs(acclow - acc32) < 0.03


# --------------------------------------------------------------------------------------------
# GradScaler
# --------------------------------------------------------------------------------------------


def test_grad_scaler_sequence_matches_torch() -> None:
    # growth after 2 clean steps, backoff and a skipped step on each inf/nan
    pattern = [0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 1, 1, 0]  # 1: inf, 2: nan in the gradient
    kw = dict(init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    w = tg.Parameter(tg.tensor([1.0, -2.0, 3.0]))
    opt = tg.optim.SGD([w], lr=0.1)
    scaler = tg.amp.GradScaler(**kw)
    tw = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1)
    tscaler = torch.amp.GradScaler("cpu", **kw)
    for step, bad in enumerate(pattern):
        c = np.array([0.5, 0.25, -1.0], dtype=np.float32) * (step + 1)
        if bad:
            c[1] = np.inf if bad == 1 else np.nan
        with tg.Tape() as tape:
            loss = scaler.scale((w * tg.tensor(c)).sum())
        grads = tape.gradient(loss)
        before = w.numpy().copy()
        scaler.step(opt, grads)
        scaler.update()
        topt.zero_grad()
        tscaler.scale((tw * torch.tensor(c)).sum()).backward()
        tscaler.step(topt)
        tscaler.update()
        assert np.array_equal(w.numpy(), before) == bool(bad)  # skipped exactly on inf/nan
        assert scaler.get_scale() == tscaler.get_scale(), step
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-6, err_msg=str(step))
    sd, tsd = scaler.state_dict(), tscaler.state_dict()
    assert sd == {k: tsd[k] for k in sd}


def test_grad_scaler_unscale_then_clip_and_misuse_errors() -> None:
    w = tg.Parameter(tg.tensor([3.0, 4.0]))
    opt = tg.optim.SGD([w], lr=1.0)
    scaler = tg.amp.GradScaler(init_scale=256.0)
    with tg.Tape() as tape:
        loss = scaler.scale((w * w).sum() / 2)
    grads = tape.gradient(loss)
    assert grads[w].tolist() == [768.0, 1024.0]
    scaler.unscale_(grads)
    assert grads[w].tolist() == [3.0, 4.0]
    with pytest.raises(RuntimeError, match="already unscaled"):
        scaler.unscale_(grads)
    clipped = grads.clip_by_global_norm(1.0)
    scaler.step(opt, grads)  # not unscaled again
    assert w.tolist() == [0.0, 0.0]
    scaler.update()
    assert clipped[w].tolist() == pytest.approx([0.6, 0.8], rel=1e-5)
    with pytest.raises(RuntimeError, match="no inf checks were recorded"):
        scaler.update()
    with pytest.raises(TypeError, match="expected the tg.Gradients"):
        scaler.unscale_({w: grads[w]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backoff_factor"):
        tg.amp.GradScaler(backoff_factor=2.0)


def test_grad_scaler_state_dict_round_trip_and_torch_state() -> None:
    s = tg.amp.GradScaler(init_scale=8.0, growth_interval=3)
    s.load_state_dict(torch.amp.GradScaler("cpu", init_scale=32.0, growth_interval=5).state_dict())
    assert s.get_scale() == 32.0 and s.state_dict()["growth_interval"] == 5
    s2 = tg.amp.GradScaler()
    s2.load_state_dict(s.state_dict())
    assert s2.state_dict() == s.state_dict()


def test_grad_scaler_disabled_is_a_pass_through() -> None:
    w = tg.Parameter(tg.tensor([1.0]))
    opt = tg.optim.SGD([w], lr=0.5)
    s = tg.amp.GradScaler(enabled=False)
    with tg.Tape() as tape:
        loss = (w * w).sum()
    assert s.scale(loss) is loss
    s.step(opt, tape.gradient(loss))
    s.update()
    assert w.tolist() == [0.0] and s.get_scale() == 1.0 and s.state_dict() == {}


def test_float16_training_with_grad_scaler_recovers_from_overflow() -> None:
    tg.manual_seed(0)
    rng = _rng()
    x = tg.tensor(rng.standard_normal((64, 8)).astype(np.float32))
    y = tg.tensor((rng.standard_normal((64, 8)) @ rng.standard_normal((8, 1))).astype(np.float32))
    model = tg.nn.Sequential(tg.nn.Linear(8, 16), tg.nn.Tanh(), tg.nn.Linear(16, 1))
    opt = tg.optim.Adam(model.parameters(), lr=0.02)
    scaler = tg.amp.GradScaler(init_scale=2.0**24, growth_interval=5)  # overflows float16 at first
    losses, skipped = [], 0
    for _ in range(60):
        with tg.Tape() as tape, tg.autocast(tg.float16):
            loss = F.mse_loss(model(x), y)
            scaled = scaler.scale(loss)
        scale = scaler.get_scale()
        with np.errstate(over="ignore", invalid="ignore"):  # inf * 0 on an overflowing step
            grads = tape.gradient(scaled, model)
        scaler.step(opt, grads)
        scaler.update()
        skipped += scaler.get_scale() < scale
        losses.append(loss.item())
    assert skipped >= 1 and scaler.get_scale() < 2.0**24
    assert all(np.isfinite(p.numpy()).all() for p in model.parameters())
    assert losses[-1] < 0.5 * losses[0]


def test_transformer_layer_under_autocast_matches_float32() -> None:
    # attention's own primitives and GELU get bfloat16 arrays from the lowered projections
    tg.manual_seed(0)
    layer = tg.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                          activation="gelu")
    x = tg.tensor(_rng().standard_normal((3, 7, 32)).astype(np.float32))
    pad = tg.tensor(np.array([[False] * 7, [False] * 5 + [True] * 2, [False] * 6 + [True]]))

    def run(on: bool) -> tuple[tg.Tensor, dict[str, np.ndarray]]:
        with tg.Tape() as tape, tg.autocast(tg.bfloat16, enabled=on):
            y = layer(x, src_key_padding_mask=pad)
            loss = (y.astype(tg.float32) ** 2).mean()
        return y, tape.gradient(loss, layer).named(layer)

    (y32, g32), (ylow, glow) = run(False), run(True)
    assert y32.dtype == tg.float32 and ylow.dtype == tg.float32  # the last op is layer_norm
    assert _rel_err(ylow.numpy(), y32.numpy()) < 0.02
    for k in g32:
        assert glow[k].dtype == np.float32
        assert _rel_err(glow[k], g32[k]) < 0.05, k


def test_compiled_step_with_autocast_inside_equals_eager() -> None:
    x = tg.tensor(_rng().standard_normal((32, 8)).astype(np.float32))
    y = tg.tensor(_rng().integers(0, 3, 32))

    def make() -> tuple[tg.nn.Module, tg.optim.SGD]:
        tg.manual_seed(0)
        m = tg.nn.Sequential(tg.nn.Linear(8, 16), tg.nn.ReLU(), tg.nn.Linear(16, 3))
        return m, tg.optim.SGD(m.parameters(), lr=0.1)

    def body(m: tg.nn.Module, opt: tg.optim.SGD) -> tg.Tensor:
        with tg.Tape() as tape, tg.autocast(tg.bfloat16):
            loss = F.cross_entropy(m(x), y)
        opt.step(tape.gradient(loss, m))
        return loss

    m1, o1 = make()
    eager = [body(m1, o1).item() for _ in range(4)]
    m2, o2 = make()
    step = tg.compile(lambda: body(m2, o2))
    compiled = [step().item() for _ in range(4)]
    assert compiled == eager
    assert eager[-1] < eager[0]
