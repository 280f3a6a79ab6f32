"""The example programs, run small: each must reach its target metric.

Each example's ``main`` is called at a reduced size, writing into pytest's tmp_path; the
thresholds are well inside what the small runs reach, but fail when training does not work.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` by path (examples/ is not a package)."""
    if EXAMPLES not in sys.path:  # gradient_penalty.py imports the data from gan.py
        sys.path.insert(0, EXAMPLES)
    spec = importlib.util.spec_from_file_location(f"examples_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


def test_two_inputs_raw() -> None:
    r = load("two_inputs_raw").main(steps=100, verbose=False)
    assert r["accuracy"] > 0.9


def test_optim_intro(tmp_path) -> None:
    m = load("optim_intro")
    r = m.main(m.Config(steps=5, out=str(tmp_path)), quiet=True)
    assert r["final_loss"] < 0.5 * r["initial_loss"]
    assert r["losses"][3] < r["losses"][0]
    assert os.path.exists(tmp_path / "checkpoint.safetensors")


def test_multitask(tmp_path) -> None:
    m = load("multitask")
    r = m.main(m.Config(epochs=3, out=str(tmp_path)), quiet=True)
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
    r = m.main(m.Config(steps=600, out=str(tmp_path), eval_samples=1000), quiet=True)
    assert r["modes_covered"] >= 4
    assert r["mean_distance"] < 0.5
    assert os.path.exists(tmp_path / "samples.png")


def test_gradient_penalty(tmp_path) -> None:
    m = load("gradient_penalty")
    r = m.main(m.Config(steps=60, out=str(tmp_path), eval_samples=1000), quiet=True)
    assert r["penalty_end"] < r["penalty_start"]
    assert 0.5 < r["grad_norm_mean"] < 1.5
    assert os.path.exists(tmp_path / "wgan_gp.png")


def test_digits_cnn(tmp_path) -> None:
    m = load("digits_cnn")
    r = m.main(m.Config(epochs=2, out=str(tmp_path)), quiet=True)
    assert r["test_accuracy"] > 0.8
    assert r["final_train_loss"] < r["first_train_loss"]
    assert os.path.exists(tmp_path / "confusion.png")


def test_char_lm(tmp_path) -> None:
    m = load("char_lm")
    cfg = m.Config(steps=60, eval_interval=30, eval_batches=2, n_embd=32, max_chars=50_000,
                   sample_chars=20, out=str(tmp_path))
    r = m.main(cfg, quiet=True)
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
