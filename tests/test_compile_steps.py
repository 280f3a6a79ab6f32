"""tg.compile on whole training steps: compiled equals eager bit for bit (losses, parameters
after N steps, module state, and the random stream afterwards)."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


def _values(out):
    if isinstance(out, tg.Tensor):
        return out.numpy().tolist()
    return [_values(o) for o in out]


def _compare(make, n_steps: int = 6, between=None):
    """Run ``make()``'s step eagerly and compiled from the same seed; both must agree exactly.
    ``make() -> (step_fn, modules, batches)``; ``between(k)`` runs after step k (a scheduler)."""

    def run(compiled: bool):
        tg.manual_seed(0)
        step_fn, modules, batches, after = make()
        step = tg.compile(step_fn) if compiled else step_fn
        outs = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback to eager
            for b in batches[:n_steps]:
                outs.append(_values(step(*b)))
                if after is not None:
                    after()
        state = [t.numpy().copy() for m in modules for t in m.state_dict().values()]
        return outs, state, tg.rand(5).tolist(), step

    eager, comp = run(False), run(True)
    assert "def run(inputs):" in comp[3].source  # it compiled
    assert comp[0] == eager[0]
    assert len(comp[1]) == len(eager[1])
    for a, b in zip(comp[1], eager[1], strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert comp[2] == eager[2]  # the random stream afterwards
    return comp[3]


class _VAE(nn.Module):  # pytorch/examples vae, narrower
    def __init__(self, d: int = 20, h: int = 16, z: int = 4):
        super().__init__()
        self.fc1, self.fc21, self.fc22 = nn.Linear(d, h), nn.Linear(h, z), nn.Linear(h, z)
        self.fc3, self.fc4 = nn.Linear(z, h), nn.Linear(h, d)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        mu, logvar = self.fc21(h), self.fc22(h)
        std = tg.exp(0.5 * logvar)
        z = mu + tg.randn_like(std) * std  # reparameterisation noise
        return tg.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar


def test_vae_step():
    def make():
        model = _VAE()
        opt = tg.optim.Adam(model.parameters(), lr=1e-3)

        def step(x):
            with tg.Tape() as tape:
                recon, mu, logvar = model(x)
                bce = F.binary_cross_entropy(recon, x, reduction="sum")
                kld = -0.5 * tg.sum(1 + logvar - mu**2 - tg.exp(logvar))
                loss = bce + kld
            opt.step(tape.gradient(loss, model))
            return loss

        rng = np.random.default_rng(1)
        batches = [(tg.tensor(rng.random((8, 20)).astype(np.float32)),) for _ in range(6)]
        return step, [model], batches, None

    _compare(make)


def _generator(nz: int) -> nn.Module:
    return nn.Sequential(
        nn.ConvTranspose2d(nz, 8, 4, 1, 0, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.ConvTranspose2d(8, 1, 4, 2, 1, bias=False), nn.Tanh(),
    )  # fmt: skip


def _discriminator() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
        nn.Conv2d(8, 16, 4, 2, 1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(0.2),
        nn.Conv2d(16, 1, 2, 1, 0, bias=False), nn.Sigmoid(),
    )  # fmt: skip


def test_dcgan_step_two_tapes_two_optimizers_batch_norm_and_latent_noise():
    nz = 4

    def make():
        G, D = _generator(nz), _discriminator()
        opt_g = tg.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_d = tg.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))

        def step(real):  # pytorch/examples dcgan: D on real and detached fake, then G
            b = real.shape[0]
            noise = tg.randn(b, nz, 1, 1)
            tape_g = tg.Tape(watch_parameters=False)
            tape_g.watch(G)
            with tape_g:
                fake = G(noise)
            with tg.Tape() as tape_d:
                err_real = F.binary_cross_entropy(D(real).reshape(-1), tg.ones(b))
                err_fake = F.binary_cross_entropy(D(fake.detach()).reshape(-1), tg.zeros(b))
                err_d = err_real + err_fake
            opt_d.step(tape_d.gradient(err_d, D))
            with tape_g:  # D after its update, as in the example
                err_g = F.binary_cross_entropy(D(fake).reshape(-1), tg.ones(b))
            opt_g.step(tape_g.gradient(err_g, G))
            return err_d, err_g

        rng = np.random.default_rng(2)
        batches = [
            (tg.tensor(rng.uniform(-1, 1, (6, 1, 8, 8)).astype(np.float32)),) for _ in range(6)
        ]
        return step, [G, D], batches, None

    step = _compare(make)
    assert step.source.count("Adam.update") == 4 + 5  # both optimizers' updates are in it
    assert "nn.running_mean_" in step.source and "nn.increment_" in step.source


class _LM(nn.Module):  # pytorch/examples word_language_model's TransformerModel, smaller
    def __init__(self, vocab: int = 11, d: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, mask):
        return self.head(self.drop(self.enc(self.emb(ids), mask=mask)))


def test_transformer_lm_with_dropout_a_scheduler_and_gradient_clipping():
    vocab, seq = 11, 7

    def make():
        model = _LM(vocab)
        opt = tg.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        sched = tg.optim.LambdaLR(opt, lambda e: 0.8**e)  # a new learning rate every step
        mask = tg.tensor(np.triu(np.full((seq, seq), -np.inf, np.float32), 1))

        def step(ids, targets):
            with tg.Tape() as tape:
                logits = model(ids, mask)
                loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
            grads = tape.gradient(loss, model)
            norm = nn.utils.clip_grad_norm_(grads, 0.25)
            opt.step(grads)
            return loss, norm

        rng = np.random.default_rng(3)
        batches = []
        for _ in range(6):
            tok = rng.integers(0, vocab, (3, seq + 1))
            batches.append((tg.tensor(tok[:, :-1]), tg.tensor(tok[:, 1:])))
        return step, [model], batches, sched.step

    step = _compare(make)
    assert "bernoulli" in step.source or "dropout" in step.source  # the masks are drawn in it
    assert "nn.take" in step.source and "nn.cross_entropy" in step.source


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s) for s in ((3, 4), (5,))]
    ps = [tg.Parameter(tg.tensor(a)) for a in arrays]
    with tg.Tape() as tape:
        loss = (ps[0] ** 3).sum() + (ps[1] ** 3).sum()
    grads = tape.gradient(loss)
    clipped, norm = nn.utils.clip_grad_norm(grads, 0.5)
    tps = [torch.tensor(a, requires_grad=True) for a in arrays]
    ((tps[0] ** 3).sum() + (tps[1] ** 3).sum()).backward()
    tn = torch.nn.utils.clip_grad_norm_(tps, 0.5)
    assert abs(norm.item() - tn.item()) < 1e-12
    for p, t in zip(ps, tps, strict=True):
        np.testing.assert_allclose(clipped[p].numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-14)
    same, _ = nn.utils.clip_grad_norm(grads, 1e6)  # under the threshold: unchanged
    for p in ps:
        assert np.array_equal(same[p].numpy(), grads[p].numpy())
    with pytest.raises(ValueError, match="clip_grad_norm_: max_norm must be > 0"):
        nn.utils.clip_grad_norm_(grads, 0.0)


def test_an_in_place_change_the_capture_cannot_see_falls_back_with_a_warning():
    tg.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = tg.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        with tg.Tape() as tape:
            loss = model(x).sum()
        opt.step(tape.gradient(loss, model))
        with tg.no_grad():
            model.bias.add_(1.0)  # numpy under the hood: not an op the capture sees
        return loss

    compiled = tg.compile(step)
    x = tg.ones((2, 3))
    compiled(x)
    with pytest.warns(RuntimeWarning, match="changed in place") as rec:
        compiled(x)
    assert "Fix:" in str(rec[0].message)
    b = model.bias.item()
    compiled(x)
    assert model.bias.item() != b  # still runs the whole step, eagerly


def test_a_step_returns_its_structure_and_compile_checks_its_arguments():
    tg.manual_seed(0)
    model = nn.Linear(2, 2)
    opt = tg.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        with tg.Tape() as tape:
            y = model(x)
            loss = (y * y).mean()
        opt.step(tape.gradient(loss, model))
        return {"loss": loss, "parts": [y.sum(), None]}

    compiled = tg.compile(step)
    for _ in range(3):
        out = compiled(tg.ones((4, 2)))
    assert compiled.source and set(out) == {"loss", "parts"} and out["parts"][1] is None
    assert isinstance(out["parts"][0], tg.Tensor) and out["loss"].shape == ()
    with pytest.raises(TypeError, match=r"tg.compile\(step_fn\)"):
        tg.compile(step, model)
    with pytest.raises(TypeError, match="returns Tensors"):
        tg.compile(lambda x: 1.0)(tg.ones(2))


def _mlp_step():
    model = nn.Sequential(
        nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)
    )
    opt = tg.optim.SGD(model.parameters(), lr=1e-3)

    def step(x, y):
        with tg.Tape() as tape:
            loss = F.mse_loss(model(x), y)
        opt.step(tape.gradient(loss, model))
        return loss

    return step


def test_capturing_and_building_hold_no_more_array_memory_than_eager_steps():
    # the capture keeps no intermediate alive and there is no extra probe run, so even the
    # first steps (capture, capture + build) peak no higher than eager steps
    x, y = tg.randn(256, 256), tg.randn(256, 1)

    def peak(compiled: bool) -> int:
        tg.manual_seed(0)
        step = _mlp_step()
        run = tg.compile(step) if compiled else step
        tracemalloc.start()
        try:
            for _ in range(3):
                run(x, y)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    warm = tg.compile(_mlp_step())
    for _ in range(3):  # numba compiles the fused loops once per process: not the step's memory
        warm(x, y)
    eager, comp = peak(False), peak(True)
    # the buffers the program keeps between steps are allocated within these steps: allow them
    assert comp <= eager + 256 * 1024, (comp, eager)


@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_operands_while_capturing_equal_the_eager_arrays(weighted):
    # while capturing, class-index cross-entropy computes its indices and coefficients with ops
    # (so a compiled step recomputes them per batch); the numbers are the eager ones exactly
    rng = np.random.default_rng(5)
    x = tg.tensor(rng.standard_normal((9, 4)).astype(np.float32))
    t = tg.tensor(np.array([0, 3, -100, 2, 1, 1, -100, 3, 0]))
    w = tg.tensor(np.array([0.3, 1.7, 0.9, 2.1], np.float32)) if weighted else None
    for reduction in ("mean", "sum", "none"):
        eager = F.cross_entropy(x, t, weight=w, reduction=reduction).numpy()
        tg._autodiff.start_capture([])
        try:
            captured = F.cross_entropy(x, t, weight=w, reduction=reduction).numpy()
        finally:
            tg._autodiff.stop_capture()
        assert captured.dtype == eager.dtype and np.array_equal(captured, eager)
    all_ignored = tg.tensor(np.full(9, -100))
    tg._autodiff.start_capture([])
    try:
        assert np.isnan(F.cross_entropy(x, all_ignored, weight=w).item())
    finally:
        tg._autodiff.stop_capture()


def test_each_update_runs_once_its_gradient_exists_so_the_steady_peak_is_below_eager():
    x, y = tg.randn(8, 256), tg.randn(8, 1)

    def peak(compiled: bool) -> int:
        tg.manual_seed(0)
        step = _mlp_step()
        run = tg.compile(step) if compiled else step
        for _ in range(3):
            run(x, y)
        tracemalloc.start()
        try:
            run(x, y)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    eager, comp = peak(False), peak(True)
    # eager holds every 256 KB weight gradient until opt.step; the program frees each at once
    assert comp < eager - 192 * 1024, (comp, eager)  # most of a 256 KB gradient less
