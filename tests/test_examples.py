"""The example programs, run small: each must reach its target metric.

Each example's ``main`` is called at a reduced size, writing into pytest's tmp_path; the
thresholds are well inside what the small runs reach, but fail when training does not work.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` by path (examples/ is not a package)."""
    if EXAMPLES not in sys.path:  # gradient_penalty.py imports the data from gan.py
        sys.path.insert(0, EXAMPLES)
    path = os.path.join(EXAMPLES, f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"examples_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread() -> Iterator[None]:
    """One BLAS thread: these small matrices gain nothing from more, and on a busy 2-core
    machine two threads fighting over a core make the runs several times slower."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a test dependency, but not a hard one here
        yield
        return
    with threadpool_limits(1):
        yield


def test_two_inputs_raw() -> None:
    r = load("two_inputs_raw").main(steps=100, verbose=False)
    assert r["accuracy"] > 0.9


def test_optim_intro(tmp_path) -> None:
    m = load("optim_intro")
    r = m.main(m.Config(**m.SMALL, out=str(tmp_path)), quiet=True)
    assert r["final_loss"] < 0.5 * r["initial_loss"]
    assert r["losses"][3] < r["losses"][0]
    assert os.path.exists(tmp_path / "checkpoint.safetensors")


def test_multitask(tmp_path) -> None:
    m = load("multitask")
    r = m.main(m.Config(**m.SMALL, out=str(tmp_path)), quiet=True)
    for method in ("sum", "pcgrad"):
        assert r[method]["accuracy"] > 0.5, method  # 10 classes: chance is 0.1
        assert r[method]["intensity_mae"] < 0.12, method  # predicting the mean: 0.1875
        assert 0.0 < r[method]["conflict_fraction"] < 1.0, method
    assert os.path.exists(tmp_path / "curves.png")
    assert os.path.exists(tmp_path / "checkpoint_pcgrad.safetensors")


def test_pcgrad_projection() -> None:
    """Conflicting task gradients are projected onto each other's normal plane."""
    import numpy as np

    import tapegrad as tg

    m = load("multitask")
    p = tg.Parameter(tg.zeros(2))
    a = tg.Gradients([(p, tg.tensor([1.0, 0.0]))])
    b = tg.Gradients([(p, tg.tensor([-1.0, 1.0]))])  # a . b = -1 < 0
    out = m.pcgrad(a, b, [p])[p].numpy()
    # a' = a - (a.b/|b|^2) b = (0.5, 0.5); b' = b - (b.a/|a|^2) a = (0, 1)
    np.testing.assert_allclose(out, [0.5, 1.5], rtol=1e-6)
    c = tg.Gradients([(p, tg.tensor([1.0, 1.0]))])  # no conflict: the plain sum
    np.testing.assert_allclose(m.pcgrad(a, c, [p])[p].numpy(), [2.0, 1.0], rtol=1e-6)


def test_gan(tmp_path) -> None:
    m = load("gan")
    # SMALL: wider modes (std 0.1 rather than 0.02) and a smaller model, 1000 steps
    r = m.main(m.Config(**m.SMALL, out=str(tmp_path)), quiet=True)
    assert r["modes_covered"] >= 3  # the untrained generator covers none
    assert r["mean_distance"] < 0.8  # untrained: about 1.9 (its samples sit near the centre)
    assert os.path.exists(tmp_path / "samples.png")


def test_gan_two_tapes_equal_detach_by_hand() -> None:
    """The two-tape step gives the gradients that detach() and a frozen D give by hand."""
    import numpy as np

    import tapegrad as tg
    import tapegrad.nn.functional as F

    m = load("gan")
    G, D = m.mlp(4, 8, 2), m.mlp(2, 8, 1)
    z, real = tg.randn(16, 4), tg.randn(16, 2)
    ones, zeros = tg.ones(16, 1), tg.zeros(16, 1)
    bce = F.binary_cross_entropy_with_logits
    with tg.Tape(watch_parameters=False) as tape_g, tg.Tape(watch_parameters=False) as tape_d:
        tape_g.watch(G)
        tape_d.watch(D)
        fake = G(z)
        d_fake = D(fake)
        loss_d = bce(D(real), ones) + bce(d_fake, zeros)
        loss_g = bce(d_fake, ones)
    g_d, g_g = tape_d.gradient(loss_d, D), tape_g.gradient(loss_g, G)
    assert set(map(id, g_d.keys())) == set(map(id, D.parameters()))
    assert set(map(id, g_g.keys())) == set(map(id, G.parameters()))

    with tg.Tape() as tape:  # by hand: the fake batch detached
        loss = bce(D(real), ones) + bce(D(G(z).detach()), zeros)
    want_d = tape.gradient(loss, D)
    with tg.Tape() as tape:  # by hand: only G's gradients kept
        loss = bce(D(G(z)), ones)
    want_g = tape.gradient(loss, G)
    for got, want, model in ((g_d, want_d, D), (g_g, want_g, G)):
        for p in model.parameters():
            np.testing.assert_allclose(got[p].numpy(), want[p].numpy(), rtol=1e-5, atol=1e-7)


def test_gradient_penalty_nested_tapes_linear_critic() -> None:
    """For a linear critic w.x + b the penalty is (|w| - 1)^2, whose gradient is known."""
    import numpy as np

    import tapegrad as tg

    m = load("gradient_penalty")
    critic = tg.nn.Linear(2, 1).to(dtype=tg.float64)
    x_hat = tg.randn(5, 2, dtype=tg.float64)
    with tg.Tape() as outer:
        norms = m.input_gradient_norms(critic, x_hat)
        penalty = ((norms - 1) ** 2).mean()
    grads = outer.gradient(penalty, critic)
    w = critic.weight.numpy()
    nw = np.linalg.norm(w)
    np.testing.assert_allclose(norms.numpy(), np.full(5, nw), rtol=1e-12)
    np.testing.assert_allclose(grads[critic.weight].numpy(), 2 * (nw - 1) * w / nw, rtol=1e-10)
    # the bias moves the critic's value, not its slope: the penalty does not depend on it
    assert critic.bias not in grads and "bias" in grads.missing(critic)


def test_gradient_penalty(tmp_path) -> None:
    m = load("gradient_penalty")
    r = m.main(m.Config(**m.SMALL, out=str(tmp_path)), quiet=True)  # 60 generator steps
    assert r["penalty_end"] < r["penalty_start"]
    assert 0.5 < r["grad_norm_mean"] < 1.5
    assert os.path.exists(tmp_path / "wgan_gp.png")


def test_digits_cnn(tmp_path) -> None:
    m = load("digits_cnn")
    r = m.main(m.Config(**m.SMALL, out=str(tmp_path)), quiet=True)  # 2 epochs
    assert r["test_accuracy"] > 0.8
    assert r["final_train_loss"] < r["first_train_loss"]
    assert os.path.exists(tmp_path / "confusion.png")


def test_char_lm(tmp_path) -> None:
    m = load("char_lm")
    r = m.main(m.Config(**m.SMALL, out=str(tmp_path)), quiet=True)  # 60 steps
    assert r["final_val_loss"] < r["initial_val_loss"] - 0.8
    assert all(len(s) > 20 for s in r["samples"])
    assert os.path.exists(tmp_path / "loss.png")


def test_char_lm_is_causal() -> None:
    """Changing a later character must not change the logits at earlier positions."""
    import numpy as np

    import tapegrad as tg

    m = load("char_lm")
    cfg = m.Config(n_embd=16, n_head=2, block_size=8)
    model = m.GPT(cfg, vocab_size=5)
    ids = np.array([[0, 1, 2, 3, 4, 0, 1, 2]])
    other = ids.copy()
    other[0, 5:] = 4
    with tg.no_grad():
        a, b = model(tg.tensor(ids)).numpy(), model(tg.tensor(other)).numpy()
    np.testing.assert_allclose(a[0, :5], b[0, :5], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[0, 5:], b[0, 5:])


@pytest.mark.slow
def test_multimodal(tmp_path) -> None:
    m = load("multimodal")
    r = m.main(m.Config(epochs=2, out=str(tmp_path)), quiet=True)
    assert r["image_to_text"] > 0.5
