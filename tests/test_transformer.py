"""MultiheadAttention and the Transformer layers against PyTorch (eval mode, float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_layers import twin_check

import tapegrad as tg
from tapegrad import nn

# replaced by a new generator for each test (_fresh_rng): no test sees another's draws
RNG = np.random.default_rng(1)


@pytest.fixture(autouse=True)
def _fresh_rng(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets a new generator, seeded alike whatever ran before it (any order, any -k)."""
    monkeypatch.setitem(globals(), "RNG", np.random.default_rng(1))


E, H, FF = 8, 2, 16


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def causal(n: int) -> np.ndarray:
    return np.triu(np.full((n, n), -np.inf), 1)


# -- MultiheadAttention -----------------------------------------------------------------------

MHA_OPTIONS = [
    {},
    {"batch_first": True},
    {"bias": False},
    {"add_bias_kv": True, "add_zero_attn": True},
    {"kdim": 5, "vdim": 3},
    {"kdim": 5, "vdim": 3, "batch_first": True, "add_bias_kv": True},
]


@pytest.mark.parametrize("opts", MHA_OPTIONS)
def test_mha_cross_attention_with_masks(opts):
    bf = opts.get("batch_first", False)
    kd, vd = opts.get("kdim", E), opts.get("vdim", E)
    q, k, v = randn(4, 3, E), randn(6, 3, kd), randn(6, 3, vd)  # (L, N, E), (S, N, kdim)
    if bf:
        q, k, v = (a.transpose(1, 0, 2).copy() for a in (q, k, v))
    attn_mask = RNG.random((4, 6)) < 0.3
    kpm = np.zeros((3, 6), dtype=bool)
    kpm[:, -1] = True
    kw = {"attn_mask": attn_mask, "key_padding_mask": kpm}
    ours, ref = nn.MultiheadAttention(E, H, **opts), torch.nn.MultiheadAttention(E, H, **opts)
    assert list(ours.state_dict()) == list(ref.state_dict())
    t_kw = {k_: torch.tensor(m) for k_, m in kw.items()}
    for pick in (lambda o: o[0], lambda o: o[1]):  # the output and the averaged weights
        out, t_out = _mha_check(ours, ref, [q, k, v], kw, t_kw, pick)


def _mha_check(ours, ref, inputs, kw, t_kw, pick):
    # masks as numpy for tapegrad and torch tensors for PyTorch: run the twin check on a
    # wrapper that hands each side its own kind
    class Ours(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *xs):
            return self.m(*xs, **kw)

    class Ref(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *xs):
            return ref(*xs, **t_kw)

    return twin_check(Ours(ours), Ref(ref), inputs, pick=pick)


def test_mha_self_attention_float_mask_per_head_weights():
    ours, ref = nn.MultiheadAttention(E, H), torch.nn.MultiheadAttention(E, H)
    x = randn(5, 2, E)
    mask = RNG.standard_normal((2 * H, 5, 5))  # (N * num_heads, L, S) float, added to scores
    kw = {"attn_mask": mask, "average_attn_weights": False}
    t_kw = {"attn_mask": torch.tensor(mask), "average_attn_weights": False}

    class Ours(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = ours

        def forward(self, x):
            return self.m(x, x, x, **kw)

    class Ref(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = ref

        def forward(self, x):
            return self.m(x, x, x, **t_kw)

    out, t_out = twin_check(Ours(), Ref(), [x], pick=lambda o: o[1])
    assert out.shape == (2, H, 5, 5)
    twin_check(Ours(), Ref(), [x], pick=lambda o: o[0])


def test_mha_unbatched_and_need_weights_false():
    ours, ref = nn.MultiheadAttention(E, H), torch.nn.MultiheadAttention(E, H)
    ours.load_state_dict(ref.state_dict())
    q, k = randn(4, E).astype(np.float32), randn(6, E).astype(np.float32)
    kpm = np.array([False, False, True, False, False, True])
    out, w = ours(tg.tensor(q), tg.tensor(k), tg.tensor(k), key_padding_mask=kpm)
    t_out, t_w = ref(
        torch.tensor(q), torch.tensor(k), torch.tensor(k), key_padding_mask=torch.tensor(kpm)
    )
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), t_w.detach().numpy(), rtol=1e-5, atol=1e-6)
    out2, none = ours(tg.tensor(q), tg.tensor(k), tg.tensor(k), need_weights=False)
    assert none is None and out2.shape == (4, E)


def test_mha_errors_and_dropout():
    with pytest.raises(ValueError, match="multiple of num_heads"):
        nn.MultiheadAttention(6, 4)
    mha = nn.MultiheadAttention(E, H, dropout=0.5)
    x = tg.tensor(randn(3, 2, E).astype(np.float32))
    with pytest.raises(ValueError, match=r"attn_mask has shape \(2, 2\)"):
        mha(x, x, x, attn_mask=np.zeros((2, 2), bool))
    with pytest.raises(ValueError, match="key_padding_mask has shape"):
        mha(x, x, x, key_padding_mask=np.zeros((3, 3), bool))
    with pytest.raises(TypeError, match="bool"):
        mha(x, x, x, attn_mask=np.zeros((3, 3), np.int64))
    # dropout acts on the weights only while training
    _, w_eval = mha.eval()(x, x, x)
    np.testing.assert_allclose(w_eval.numpy().sum(-1), 1.0, rtol=1e-5)
    tg.manual_seed(0)
    _, w_train = mha.train()(x, x, x)
    assert not np.allclose(w_train.numpy(), w_eval.numpy())


def test_mha_gradient_check():
    mha = nn.MultiheadAttention(4, 2).double()
    mask = np.array([[False, True, False], [False, False, False]])
    tg.testing.check_grads(
        lambda q, kv: mha(q, kv, kv, attn_mask=mask)[0], [tg.tensor(randn(2, 1, 4)), tg.tensor(randn(3, 1, 4))],
        order=1,
    )  # fmt: skip


# -- the transformer layers -------------------------------------------------------------------

LAYER_OPTIONS = [
    {"norm_first": False, "activation": "relu"},
    {"norm_first": True, "activation": "gelu"},
    {"norm_first": True, "activation": "relu", "batch_first": True},
    {"norm_first": False, "activation": "gelu", "batch_first": True, "bias": False},
]


def _layer_kwargs(opts):
    return {"dim_feedforward": FF, "dropout": 0.1, **opts}


class _Call(nn.Module):
    """Calls a tapegrad layer with fixed keyword arguments (masks)."""

    def __init__(self, m, **kw):
        super().__init__()
        self.m = m
        self.kw = kw

    def forward(self, *xs):
        return self.m(*xs, **self.kw)


class _TCall(torch.nn.Module):
    def __init__(self, m, **kw):
        super().__init__()
        self.m = m
        self.kw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}

    def forward(self, *xs):
        return self.m(*xs, **self.kw)


def _seq(opts, n, b):
    x = randn(n, b, E)
    return x.transpose(1, 0, 2).copy() if opts.get("batch_first") else x


@pytest.mark.parametrize("opts", LAYER_OPTIONS)
def test_encoder_layer(opts):
    kw = _layer_kwargs(opts)
    ours, ref = nn.TransformerEncoderLayer(E, H, **kw), torch.nn.TransformerEncoderLayer(E, H, **kw)
    assert list(ours.state_dict()) == list(ref.state_dict())
    kpm = np.zeros((2, 5), dtype=bool)
    kpm[1, 3:] = True
    masks = {"src_mask": causal(5), "src_key_padding_mask": kpm}
    twin_check(_Call(ours, **masks), _TCall(ref, **masks), [_seq(opts, 5, 2)])
    twin_check(ours, ref, [_seq(opts, 5, 2)])


@pytest.mark.parametrize("opts", LAYER_OPTIONS)
def test_decoder_layer(opts):
    kw = _layer_kwargs(opts)
    ours, ref = nn.TransformerDecoderLayer(E, H, **kw), torch.nn.TransformerDecoderLayer(E, H, **kw)
    assert list(ours.state_dict()) == list(ref.state_dict())
    mkpm = np.zeros((2, 6), dtype=bool)
    mkpm[0, -2:] = True
    masks = {"tgt_mask": causal(4), "memory_key_padding_mask": mkpm}
    twin_check(_Call(ours, **masks), _TCall(ref, **masks), [_seq(opts, 4, 2), _seq(opts, 6, 2)])


def test_encoder_and_decoder_stacks():
    kw = _layer_kwargs({"norm_first": True})
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, **kw), 2, nn.LayerNorm(E))
    t_enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(E, H, **kw), 2, torch.nn.LayerNorm(E),
        enable_nested_tensor=False,
    )  # fmt: skip
    assert list(enc.state_dict()) == list(t_enc.state_dict())
    # the copies start equal (deep copies, as PyTorch) but are separate parameters
    l0, l1 = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert l0 is not l1 and np.array_equal(l0.numpy(), l1.numpy())
    assert l1.name == "layers.1.linear1.weight"
    twin_check(_Call(enc, mask=causal(5)), _TCall(t_enc, mask=causal(5)), [randn(5, 2, E)])

    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, **kw), 2)
    t_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(E, H, **kw), 2)
    twin_check(_Call(dec, tgt_mask=causal(3)), _TCall(t_dec, tgt_mask=causal(3)),
               [randn(3, 2, E), randn(5, 2, E)])  # fmt: skip


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer(norm_first):
    kw = {"d_model": E, "nhead": H, "num_encoder_layers": 2, "num_decoder_layers": 1,
          "dim_feedforward": FF, "norm_first": norm_first, "batch_first": True}  # fmt: skip
    ours, ref = nn.Transformer(**kw), torch.nn.Transformer(**kw)
    assert list(ours.state_dict()) == list(ref.state_dict())
    masks = {
        "tgt_mask": nn.Transformer.generate_square_subsequent_mask(4).numpy().astype(np.float64)
    }
    np.testing.assert_array_equal(
        masks["tgt_mask"], torch.nn.Transformer.generate_square_subsequent_mask(4).numpy()
    )
    twin_check(_Call(ours, **masks), _TCall(ref, **masks), [randn(2, 6, E), randn(2, 4, E)])
    with pytest.raises(ValueError, match="same batch size"):
        ours(tg.ones((2, 6, E)), tg.ones((3, 4, E)))


def test_transformer_init_is_xavier():
    model = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                           dim_feedforward=64)  # fmt: skip
    w = model.encoder.layers[0].linear1.weight.numpy()
    bound = np.sqrt(6 / (16 + 64))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert model.encoder.norm.weight.numpy().tolist() == [1.0] * 16  # 1-D parameters untouched


def test_encoder_layer_train_mode_uses_dropout():
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=FF, dropout=0.5)
    x = tg.tensor(randn(4, 2, E).astype(np.float32))
    a, b = layer.eval()(x), layer.eval()(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    tg.manual_seed(1)
    assert not np.allclose(layer.train()(x).numpy(), a.numpy())


def test_custom_activation_and_errors():
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=FF, activation=nn.GELU())
    assert "(activation): GELU" in repr(layer)
    assert layer(tg.ones((3, 1, E))).shape == (3, 1, E)
    with pytest.raises(ValueError, match="activation"):
        nn.TransformerEncoderLayer(E, H, activation="swish")


def test_is_causal_hint_builds_the_causal_mask():
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    x = tg.tensor(randn(2, 5, E))
    mha.double()
    a, wa = mha(x, x, x, is_causal=True)
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=tg.float64)
    b, wb = mha(x, x, x, attn_mask=mask)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert np.all(np.triu(wa.numpy(), 1) == 0)  # no weight on future positions
    c, _ = mha(x, x, x, attn_mask=np.triu(np.ones((5, 5), bool), 1))  # bool: True = masked
    np.testing.assert_allclose(c.numpy(), b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("batch_first", [True, False])
def test_self_attention_takes_one_packed_projection(batch_first):
    """query is key is value: one (3E)-wide projection GEMM and one ``nn.attention_qkv`` op; the
    same outputs and gradients as projecting q, k and v separately (a key that is a copy)."""
    tg.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    x = tg.randn(3, 5, 8)
    kpm = np.zeros((3, 5) if batch_first else (5, 3), dtype=bool)  # (N, S)
    kpm[1, -2:] = True
    runs = []
    for packed in (True, False):
        with tg.Tape() as tape:
            tape.watch(x)
            key = x if packed else x * 1.0
            out, w = mha(x, key, key, key_padding_mask=kpm, need_weights=False)
            loss = (out * out).sum()
        names = [n.prim.name for n in tape.nodes]
        assert ("nn.attention_qkv" in names) == packed and w is None
        assert names.count("nn.linear") == (2 if packed else 4)  # in (and out) projections
        g = tape.gradient(loss, [x, *mha.parameters()])
        runs.append((out.numpy(), [t.numpy() for t in g]))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
