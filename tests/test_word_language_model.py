"""examples/word_language_model.py against its PyTorch twin (same corpus, batches and initial
weights, dropout 0), and the example's --small run reaching a loss target."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import word_language_model_torch as twin  # noqa: E402

ex = twin.load_example()


def test_corpus_is_deterministic_and_grammatical() -> None:
    a, b = ex.Corpus(50, 5, seed=3), ex.Corpus(50, 5, seed=3)
    np.testing.assert_array_equal(a.train, b.train)
    words = [a.idx2word[i] for i in a.train]
    assert words.count("<eos>") == 50 and words[-1] == "<eos>"
    assert not np.array_equal(a.train, ex.Corpus(50, 5, seed=4).train)
    batches = ex.batchify(a.train, 4)
    assert batches.shape == (len(a.train) // 4, 4)
    np.testing.assert_array_equal(batches[:, 1], a.train[len(batches) : 2 * len(batches)])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, dict]:
    cfg = replace(ex.Config(**ex.SMALL), dropout=0.0, out=str(tmp_path_factory.mktemp("wlm")))
    return ex.main(cfg, quiet=True), twin.main(cfg, quiet=True)


def test_losses_agree_with_pytorch_at_equal_steps(runs) -> None:
    """Step by step for the first 40 steps, and the validation loss after 200."""
    ours, theirs = runs
    assert ours["steps"] == theirs["steps"] == 200
    assert abs(ours["initial_val_loss"] / theirs["initial_val_loss"] - 1) < 1e-5
    a, b = np.array(ours["train_loss"][:40]), np.array(theirs["train_loss"][:40])
    np.testing.assert_allclose(a, b, rtol=0.02)
    assert a[-1] < a[0] - 0.5  # it trained
    # later steps amplify float32 rounding (lr 20): the order of a sum (threads, vector width)
    # moves a validation loss by up to 10% (1.72 to 1.94 at step 200, 1.88 to 2.07 at step 100
    # across kernels and thread counts); the curves still reach one plateau
    low = [min(r["val_loss"][-2:]) for r in runs]
    assert abs(low[0] / low[1] - 1) < 0.08, low
    assert max(ours["val_loss"][-1], theirs["val_loss"][-1]) < 2.1


def test_small_run_reaches_loss_target(tmp_path) -> None:
    r = ex.main(ex.Config(**ex.SMALL, out=str(tmp_path)), quiet=True)  # dropout 0.2, 200 steps
    assert r["initial_val_loss"] > np.log(r["ntokens"]) - 0.1  # starts near a uniform guess
    assert min(r["val_loss"]) < 2.3
    assert r["test_loss"] < 2.3
    assert (tmp_path / "loss.png").exists() and (tmp_path / "checkpoint.safetensors").exists()


def test_tied_weights_share_one_parameter() -> None:
    cfg = ex.Config(emsize=8, nhid=8, nlayers=1, tied=True)
    model = ex.RNNModel(cfg, 11)
    assert model.decoder.weight is model.encoder.weight
    assert len(list(model.parameters())) == 6  # embedding, 4 LSTM tensors, decoder bias
    with pytest.raises(ValueError, match="nhid must be equal to emsize"):
        ex.RNNModel(ex.Config(emsize=8, nhid=6, tied=True), 11)


def test_parse_args_small() -> None:
    cfg = ex.parse_args(["--small", "--tied"])
    assert cfg.emsize == ex.SMALL["emsize"] and cfg.tied and cfg.lr == 20.0
