"""Real programs ported to tapegrad, each timed beside its PyTorch original: same data, same steps.

    python benchmarks/ports.py                                  # every program, small size
    python benchmarks/ports.py --size full --only dcgan,gcn --rounds 7
    python benchmarks/ports.py --list
    python benchmarks/ports.py --size small --only gcn --profile    # the port's costs per primitive

The programs (``PROGRAMS``) are pytorch/examples' mnist, dcgan, siamese_network, mnist_rnn, gcn,
fast_neural_style, super_resolution, vae, word_language_model and regression, and karpathy's
nanoGPT (char-level). The originals are benchmarks/mnist_torch.py, dcgan_torch.py,
word_language_model_torch.py, nanogpt_torch.py and originals.py; the ports are examples/mnist.py,
dcgan.py, vae.py, word_language_model.py and benchmarks/ports_models.py. Each program has three
sizes: ``full`` (the original's model and batch), ``small`` (a reduced model or batch) and
``tiny`` (float64, dropout off: the test suite checks that the port's losses and weights equal
the original's). Both sides start from the same weights (the original's initialisation, copied
into the port) and read the same batches.

Rounds alternate between the two (the order rotates); each round runs the program's steps; the
ratio is the median over rounds of PyTorch's time over tapegrad's in the same round (above 1:
the port is faster). PyTorch gets as many threads as numpy's BLAS; OMP_WAIT_POLICY is passive
(set before torch loads) so that neither library's idle threads spin while the other runs.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
os.environ.setdefault("TAPEGRAD_COMPILE", "wait")  # warm-up compiles; timed rounds never do

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import dcgan_torch  # noqa: E402
import mnist_torch  # noqa: E402
import suite  # noqa: E402 - its SETTLE pause
import workloads as W  # noqa: E402

SIZES = ("tiny", "small", "full")


@dataclass
class Pair:
    """One program on both sides: ``port()`` and ``original()`` each run ``steps`` training steps
    (continuing from where the last call stopped) and return their losses; ``models`` pairs each
    tapegrad module with its torch original, for comparing weights."""

    label: str
    steps: int
    port: Callable[[], list]
    original: Callable[[], list]
    models: list[tuple[Any, Any]] = field(default_factory=list)
    # parameters whose gradient is zero in exact arithmetic (a bias that a normalisation
    # cancels): Adam turns their rounding noise into full steps, so they match in no library
    free: tuple[str, ...] = ()


def copy_weights(src: Any, dst: Any) -> None:
    """A torch module's state_dict into its tapegrad twin (same names)."""
    dst.load_state_dict({k: v.detach().numpy().copy() for k, v in src.state_dict().items()})


def no_dropout(*modules: Any) -> None:
    """Dropout off everywhere (each library draws its own masks): for the equality tests."""
    for m in modules:
        for sub in m.modules():
            if "Dropout" in type(sub).__name__:
                sub.p = 0.0
        if hasattr(m, "dropout") and isinstance(m.dropout, float):  # nanoGPT's attention
            m.dropout = 0.0


def _twins(torch_model: Any, tg_model: Any, dtype: Any) -> tuple[Any, Any]:
    """The torch model in ``dtype``, its weights copied into the tapegrad model."""
    tg = W._tg()
    if dtype == np.float64:
        torch_model, tg_model = torch_model.double(), tg_model.to(tg.float64)
    copy_weights(torch_model, tg_model)
    return torch_model, tg_model


def _steps(fn: Callable[[int], Any], steps: int) -> Callable[[], list]:
    return lambda: [fn(i) for i in range(steps)]


def _pm() -> types.ModuleType:
    import ports_models  # noqa: PLC0415 - imports tapegrad

    return ports_models


def _orig() -> types.ModuleType:
    W._torch()  # the thread count first
    import originals  # noqa: PLC0415

    return originals


# == the programs ==============================================================================
def mnist(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples mnist: each side's own train() over the same batches (Adadelta)."""
    tg, torch = W._tg(), W._torch()
    batch_size, steps = {"tiny": (4, 2), "small": (16, 5), "full": (64, 5)}[size]
    mn = mnist_torch.port("mnist")
    x, y, _, _ = mn.mnist_like()
    reps = -(-steps * batch_size // len(y))
    x = np.concatenate([x] * reps)[: steps * batch_size].astype(dtype)
    y = np.concatenate([y] * reps)[: steps * batch_size]
    torch.manual_seed(1)
    t_model, model = _twins(mnist_torch.Net(), mn.Net(), dtype)
    if size == "tiny":
        no_dropout(t_model, model)
    t_opt = torch.optim.Adadelta(t_model.parameters(), lr=1.0)
    opt = tg.optim.Adadelta(model.parameters(), lr=1.0)
    args = SimpleNamespace(log_interval=10**9, dry_run=False, steps=None)
    loader = tg.data.DataLoader(tg.data.TensorDataset(x, y), batch_size=batch_size)
    t_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
        batch_size=batch_size)

    def port() -> list:
        history = {"seen": 0, "train": [], "test": []}
        mn.train(SimpleNamespace(**{**vars(args), "log_interval": 1}), model, loader, opt, 1,
                 history)
        return [v for _, v in history["train"]]

    def original() -> list:
        mnist_torch.train(args, t_model, "cpu", t_loader, t_opt, 1)
        return []

    return Pair(f"mnist, batch {batch_size}", steps, port, original, [(model, t_model)])


def dcgan(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples dcgan: each side's train_step on the same real batches and noise."""
    tg, torch = W._tg(), W._torch()
    batch_size, width, nz, steps = {"tiny": (4, 4, 8, 2), "small": (16, 16, 100, 3),
                                    "full": (64, 64, 100, 2)}[size]
    dc = mnist_torch.port("dcgan")
    dcgan_torch.nz, dcgan_torch.ngf, dcgan_torch.ndf = nz, width, width
    torch.manual_seed(1)
    t_g, t_d = dcgan_torch.Generator(1), dcgan_torch.Discriminator(1)
    t_g.apply(dcgan_torch.weights_init)
    t_d.apply(dcgan_torch.weights_init)
    t_g, net_g = _twins(t_g, dc.Generator(nz, width, 3), dtype)
    t_d, net_d = _twins(t_d, dc.Discriminator(width, 3), dtype)
    real = dc.generated_images(steps * batch_size, 64).reshape(steps, batch_size, 3, 64, 64)
    noise = np.random.default_rng(0).standard_normal((steps, batch_size, nz, 1, 1))
    real, noise = real.astype(dtype), noise.astype(dtype)

    def adam(params: Any, lib: Any) -> Any:
        return lib.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999))

    t_opts = (adam(t_d.parameters(), torch), adam(t_g.parameters(), torch))
    opts = (adam(net_d.parameters(), tg), adam(net_g.parameters(), tg))
    t_crit, crit = torch.nn.BCELoss(), tg.nn.BCELoss()
    t_batches = [(torch.from_numpy(r), torch.from_numpy(z)) for r, z in zip(real, noise,
                                                                            strict=True)]
    batches = [(tg.tensor(r), tg.tensor(z)) for r, z in zip(real, noise, strict=True)]

    def port() -> list:
        return [dc.train_step(net_d, net_g, *opts, crit, r, z)[:2] for r, z in batches]

    def original() -> list:
        return [dcgan_torch.train_step(t_d, t_g, *t_opts, t_crit, r, z)[:2]
                for r, z in t_batches]

    return Pair(f"dcgan, batch {batch_size}, ngf = ndf = {width}", steps, port, original,
                [(net_g, t_g), (net_d, t_d)])


def siamese_network(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples siamese_network: ResNet-18 twins on digit pairs, BCELoss, Adadelta."""
    tg, torch, pm, og = W._tg(), W._torch(), _pm(), _orig()
    batch_size, side, steps = {"tiny": (8, 8, 1), "small": (16, 8, 3), "full": (64, 28, 2)}[size]
    if side == 28:  # the original reads MNIST's 28x28 pixels, 0-255, unnormalised
        x, y, _, _ = mnist_torch.port("mnist").mnist_like()
        images = (x * 0.3081 + 0.1307) * 255
    else:  # the 8x8 digits as they ship
        images, y = W._tg().data.load_digits(return_arrays=True)
        images = np.asarray(images) * 255
    a, b, t = pm.digit_pairs(images, np.asarray(y), steps * batch_size)
    a, b, t = (v.astype(dtype).reshape(steps, batch_size, *v.shape[1:]) for v in (a, b, t))
    torch.manual_seed(1)
    t_model, model = _twins(og.SiameseNetwork(), pm.SiameseNetwork(), dtype)
    t_opt = torch.optim.Adadelta(t_model.parameters(), lr=1.0)
    opt = tg.optim.Adadelta(model.parameters(), lr=1.0)
    t_crit, crit = torch.nn.BCELoss(), tg.nn.BCELoss()
    tb = [tuple(torch.from_numpy(v[i]) for v in (a, b, t)) for i in range(steps)]
    gb = [tuple(tg.tensor(v[i]) for v in (a, b, t)) for i in range(steps)]
    return Pair(f"siamese_network, batch {batch_size}, {side}x{side}", steps,
                _steps(lambda i: pm.siamese_train_step(model, opt, crit, *gb[i]), steps),
                _steps(lambda i: og.siamese_train_step(t_model, t_opt, t_crit, *tb[i]), steps),
                [(model, t_model)])


def mnist_rnn(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples mnist_rnn: an LSTM over the image rows, BatchNorm1d, Adadelta(0.1)."""
    tg, torch, pm, og = W._tg(), W._torch(), _pm(), _orig()
    batch_size, steps = {"tiny": (4, 2), "small": (16, 5), "full": (64, 5)}[size]
    x, y, _, _ = mnist_torch.port("mnist").mnist_like()
    x = x[: steps * batch_size].astype(dtype).reshape(steps, batch_size, 1, 28, 28)
    y = y[: steps * batch_size].reshape(steps, batch_size)
    torch.manual_seed(1)
    t_model, model = _twins(og.MnistRNN(), pm.MnistRNN(), dtype)
    if size == "tiny":
        no_dropout(t_model, model)
    t_opt = torch.optim.Adadelta(t_model.parameters(), lr=0.1)
    opt = tg.optim.Adadelta(model.parameters(), lr=0.1)
    tb = [(torch.from_numpy(x[i]), torch.from_numpy(y[i])) for i in range(steps)]
    gb = [(tg.tensor(x[i]), tg.tensor(y[i])) for i in range(steps)]
    return Pair(f"mnist_rnn, batch {batch_size}", steps,
                _steps(lambda i: pm.nll_train_step(model, opt, *gb[i]), steps),
                _steps(lambda i: og.nll_train_step(t_model, t_opt, *tb[i]), steps),
                [(model, t_model)])


def gcn(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples gcn: two graph convolutions over a Cora-shaped graph, full-batch Adam;
    each step is train_iter() (the update and its two evaluations)."""
    tg, torch, pm, og = W._tg(), W._torch(), _pm(), _orig()
    nodes, feats, edges, steps = {"tiny": (40, 20, 80, 2), "small": (300, 200, 600, 5),
                                  "full": (2708, 1433, 5429, 5)}[size]
    x, labels, e = pm.random_graph(nodes, feats, edges)
    features, t_labels, adj = og.load_graph(x, labels, e, dtype=getattr(torch, np.dtype(
        dtype).name))
    perm = np.random.default_rng(42).permutation(nodes)
    n_test, n_val = int(nodes * 1000 / 2708), int(nodes * 500 / 2708)
    idx_val, idx_train = perm[n_test:n_test + n_val], perm[n_test + n_val:]
    torch.manual_seed(42)
    t_model, model = _twins(og.GCN(feats, 16, int(labels.max()) + 1, False, 0.5),
                            pm.GCN(feats, 16, int(labels.max()) + 1, False, 0.5), dtype)
    if size == "tiny":
        no_dropout(t_model, model)
    t_opt = torch.optim.Adam(t_model.parameters(), lr=0.01, weight_decay=5e-4)
    opt = tg.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    t_crit, crit = torch.nn.NLLLoss(), tg.nn.NLLLoss()
    # the port's inputs: both sparse matrices as coordinate lists (the original's COO tensors):
    # the row-normalised features and the normalised adjacency
    f_rows, f_cols = np.nonzero(x)  # row-major: the coalesced order
    f_vals = (x / x.sum(axis=1, keepdims=True))[f_rows, f_cols]
    rows, cols, vals = pm.normalized_adjacency(nodes, e)
    g_input = tuple((tg.tensor(r), tg.tensor(c), tg.tensor(v.astype(dtype)), shape)
                    for r, c, v, shape in ((f_rows, f_cols, f_vals, x.shape),
                                           (rows, cols, vals, (nodes, nodes))))
    g_labels = tg.tensor(labels.astype(np.int64))
    t_train, t_val = torch.from_numpy(idx_train), torch.from_numpy(idx_val)
    return Pair(f"gcn, {nodes} nodes, {feats} features, {edges} edges", steps,
                _steps(lambda i: pm.gcn_train_iter(model, opt, crit, g_input, g_labels,
                                                   idx_train, idx_val), steps),
                _steps(lambda i: og.gcn_train_iter(t_model, t_opt, t_crit, (features, adj),
                                                   t_labels, t_train, t_val), steps),
                [(model, t_model)])


def fast_neural_style(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples fast_neural_style: TransformerNet trained through a frozen VGG-16 on a
    content and a style loss (Adam 1e-3, content weight 1e5, style weight 1e10)."""
    tg, torch, pm, og = W._tg(), W._torch(), _pm(), _orig()
    batch_size, side, steps = {"tiny": (2, 16, 2), "small": (2, 64, 2),
                               "full": (4, 256, 1)}[size]
    dc = mnist_torch.port("dcgan")
    images = (dc.generated_images(steps * batch_size + 1, side, seed=5) + 1) * 127.5
    style, content = images[:1].astype(dtype), images[1:].astype(dtype)
    content = content.reshape(steps, batch_size, 3, side, side)
    torch.manual_seed(42)
    t_net, net = _twins(og.TransformerNet(), pm.TransformerNet(), dtype)
    t_vgg, vgg = _twins(og.Vgg16(requires_grad=False), pm.Vgg16(requires_grad=False), dtype)
    t_opt = torch.optim.Adam(t_net.parameters(), 1e-3)
    opt = tg.optim.Adam(net.parameters(), 1e-3)
    t_mse, mse = torch.nn.MSELoss(), tg.nn.MSELoss()
    t_grams = og.style_grams(t_vgg, torch.from_numpy(style), batch_size)
    grams = pm.style_grams(vgg, tg.tensor(style), batch_size)
    tb = [torch.from_numpy(c) for c in content]
    gb = [tg.tensor(c) for c in content]
    w = (1e5, 1e10)
    # instance norm cancels the bias of the convolution before it, and in4 cancels the constant
    # a residual block's in2.bias adds to every pixel of the residual stream
    res = [f"res{i}" for i in range(1, 6)]
    free = (*(f"{m}.conv2d.bias" for m in ("conv1", "conv2", "conv3", "deconv1", "deconv2")),
            *(f"{r}.conv{j}.conv2d.bias" for r in res for j in (1, 2)),
            *(f"{r}.in2.bias" for r in res))
    return Pair(f"fast_neural_style, batch {batch_size}, {side}x{side}", steps,
                _steps(lambda i: pm.style_train_step(net, vgg, opt, mse, grams, gb[i], *w),
                       steps),
                _steps(lambda i: og.style_train_step(t_net, t_vgg, t_opt, t_mse, t_grams,
                                                     tb[i], *w), steps),
                [(net, t_net)], free)


def super_resolution(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples super_resolution: 4 convolutions and PixelShuffle(3), MSE, Adam 0.01."""
    tg, torch, pm, og = W._tg(), W._torch(), _pm(), _orig()
    batch_size, side, steps = {"tiny": (2, 12, 2), "small": (8, 96, 3),
                               "full": (64, 256, 2)}[size]
    images = mnist_torch.port("dcgan").generated_images(steps * batch_size, side, seed=7)
    inp, target = pm.luminance_pairs(images, 3)
    inp = inp.astype(dtype).reshape(steps, batch_size, *inp.shape[1:])
    target = target.astype(dtype).reshape(steps, batch_size, *target.shape[1:])
    torch.manual_seed(123)
    t_model, model = _twins(og.SuperResolutionNet(3), pm.SuperResolutionNet(3), dtype)
    t_opt = torch.optim.Adam(t_model.parameters(), lr=0.01)
    opt = tg.optim.Adam(model.parameters(), lr=0.01)
    t_crit, crit = torch.nn.MSELoss(), tg.nn.MSELoss()
    tb = [(torch.from_numpy(inp[i]), torch.from_numpy(target[i])) for i in range(steps)]
    gb = [(tg.tensor(inp[i]), tg.tensor(target[i])) for i in range(steps)]
    return Pair(f"super_resolution, batch {batch_size}, {inp.shape[-1]}x{inp.shape[-1]} in",
                steps, _steps(lambda i: pm.supres_train_step(model, opt, crit, *gb[i]), steps),
                _steps(lambda i: og.supres_train_step(t_model, t_opt, t_crit, *tb[i]), steps),
                [(model, t_model)])


def nanogpt(size: str, dtype: Any = np.float32) -> Pair:
    """karpathy/nanoGPT, char-level: the full size is config/train_shakespeare_char.py (6 layers,
    384 wide, block 256, batch 64, dropout 0.2), AdamW (weight decay on 2-d parameters), the
    warm-up learning rate, gradient clipping at 1.0."""
    tg, torch, pm, og = W._tg(), W._torch(), _pm(), _orig()
    import nanogpt_torch  # noqa: PLC0415

    cfg = {"tiny": dict(n_layer=2, n_head=2, n_embd=16, block_size=8, batch=4, dropout=0.0,
                        steps=2),
           "small": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch=32, dropout=0.0,
                         steps=3),
           "full": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=64, dropout=0.2,
                        steps=1)}[size]
    steps, batch = cfg.pop("steps"), cfg.pop("batch")
    batches, vocab = pm.char_batches(pm.stdlib_text(200_000), steps, batch, cfg["block_size"])
    args = dict(**cfg, vocab_size=vocab, bias=False)
    torch.manual_seed(1337)
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415

    with contextlib.redirect_stdout(io.StringIO()):  # its parameter count
        t_model = nanogpt_torch.GPT(nanogpt_torch.GPTConfig(**args))
        t_opt_args = (0.1, 1e-3, (0.9, 0.99), "cpu")
    t_model, model = _twins(t_model, pm.GPT(pm.GPTConfig(**args)), dtype)
    if size == "tiny":
        no_dropout(t_model, model)
        for blk in (*t_model.transformer.h, *model.transformer.h):
            blk.attn.dropout = 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        t_opt = t_model.configure_optimizers(*t_opt_args)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))

    def get_lr(it: int) -> float:  # train.py's warm-up (warmup_iters 100)
        return 1e-3 * (it + 1) / (100 + 1)

    tb = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches]
    gb = [(tg.tensor(x), tg.tensor(y)) for x, y in batches]
    it = {"tg": 0, "torch": 0}

    def port_step(i: int) -> Any:
        for group in opt.param_groups:
            group["lr"] = get_lr(it["tg"])
        it["tg"] += 1
        return pm.gpt_train_step(model, opt, *gb[i])

    def torch_step(i: int) -> Any:
        for group in t_opt.param_groups:
            group["lr"] = get_lr(it["torch"])
        it["torch"] += 1
        return og.gpt_train_step(t_model, t_opt, *tb[i])

    label = (f"nanoGPT, {cfg['n_layer']} layers, {cfg['n_embd']} wide, block "
             f"{cfg['block_size']}, batch {batch}")
    return Pair(label, steps, _steps(port_step, steps), _steps(torch_step, steps),
                [(model, t_model)])


def vae(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples vae: 784-400-20 encoder and decoder, BCE + KLD, Adam 1e-3. At the tiny
    size both sides read the same noise (each library otherwise draws its own)."""
    tg, torch, og = W._tg(), W._torch(), _orig()
    batch_size, steps = {"tiny": (8, 2), "small": (32, 5), "full": (128, 5)}[size]
    port = mnist_torch.port("vae")
    images, _ = port.digits_28x28()
    rng = np.random.default_rng(0)
    batches = [images[rng.choice(len(images), batch_size, replace=False)].astype(dtype)
               for _ in range(steps)]
    torch.manual_seed(1)
    t_model, model = _twins(og.VAE(), port.VAE(), dtype)
    t_opt = torch.optim.Adam(t_model.parameters(), lr=1e-3)
    opt = tg.optim.Adam(model.parameters(), lr=1e-3)
    if size == "tiny":
        eps = [rng.standard_normal((batch_size, 20)).astype(dtype) for _ in range(steps)]
        drawn = {"tg": 0, "torch": 0}

        def fixed(lib: str, mu: Any, logvar: Any) -> Any:
            e = eps[drawn[lib] % steps]
            drawn[lib] += 1
            if lib == "tg":
                return mu + tg.tensor(e) * tg.exp(0.5 * logvar)
            return mu + torch.from_numpy(e) * torch.exp(0.5 * logvar)

        model.reparameterize = lambda mu, logvar: fixed("tg", mu, logvar)
        t_model.reparameterize = lambda mu, logvar: fixed("torch", mu, logvar)
    tb = [torch.from_numpy(b) for b in batches]
    gb = [tg.tensor(b) for b in batches]

    def port_step(i: int) -> Any:
        x = gb[i]
        with tg.Tape() as tape:
            recon, mu, logvar = model(x)
            loss = port.loss_function(recon, x, mu, logvar)
        opt.step(tape.gradient(loss, model))
        return loss

    return Pair(f"vae, batch {batch_size}", steps, _steps(port_step, steps),
                _steps(lambda i: og.vae_train_step(t_model, t_opt, tb[i]), steps),
                [(model, t_model)])


def word_language_model(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples word_language_model: a 2-layer LSTM over a generated corpus, truncated
    BPTT (35), SGD at lr 20 with the gradient clipped to 0.25; the hidden state carries over."""
    tg, torch = W._tg(), W._torch()
    import word_language_model_torch as wt  # noqa: PLC0415

    ex = wt.load_example()
    base = ex.Config()
    cfg = {"tiny": replace(base, emsize=8, nhid=8, bptt=5, batch_size=3, dropout=0.0,
                           train_sentences=200, valid_sentences=20),
           "small": replace(base, **ex.SMALL),
           "full": base}[size]
    steps = {"tiny": 2, "small": 5, "full": 3}[size]
    tg.manual_seed(cfg.seed)
    corpus = ex.Corpus(cfg.train_sentences, cfg.valid_sentences, cfg.seed)
    model = ex.RNNModel(cfg, len(corpus))
    torch.manual_seed(cfg.seed)
    t_model = wt.RNNModel(cfg, len(corpus))  # the port's initial weights, copied into torch
    if dtype == np.float64:
        t_model, model = t_model.double(), model.to(tg.float64)
    t_model.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    train_data = ex.batchify(corpus.train, cfg.batch_size)
    batches = [ex.get_batch(train_data, i, cfg.bptt)
               for i in range(0, len(train_data) - 1, cfg.bptt)][:steps]
    opt = tg.optim.SGD(model.parameters(), lr=cfg.lr)
    state = {"tg": model.init_hidden(cfg.batch_size),
             "torch": t_model.init_hidden(cfg.batch_size)}
    if dtype == np.float64:
        state["tg"] = tuple(h.to(tg.float64) for h in state["tg"])

    def port_step(i: int) -> Any:
        data, targets = batches[i]
        hidden = ex.repackage_hidden(state["tg"])
        with tg.Tape() as tape:
            output, hidden = model(tg.tensor(data), hidden)
            loss = tg.nn.functional.nll_loss(output, tg.tensor(targets))
        opt.step(tape.gradient(loss, model).clip_by_global_norm(cfg.clip))
        state["tg"] = hidden
        return loss

    def torch_step(i: int) -> Any:
        data, targets = batches[i]
        t_model.zero_grad()
        hidden = wt.repackage_hidden(state["torch"])
        output, hidden = t_model(torch.from_numpy(data), hidden)
        loss = torch.nn.functional.nll_loss(output, torch.from_numpy(targets))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(t_model.parameters(), cfg.clip)
        with torch.no_grad():
            for p in t_model.parameters():
                p.add_(p.grad, alpha=-cfg.lr)
        state["torch"] = hidden
        return loss

    model.train()
    t_model.train()
    if size == "tiny":
        no_dropout(t_model, model)
    return Pair(f"word_language_model, {cfg.nlayers}x{cfg.nhid} LSTM, batch {cfg.batch_size}",
                steps, _steps(port_step, steps), _steps(torch_step, steps), [(model, t_model)])


def regression(size: str, dtype: Any = np.float32) -> Pair:
    """pytorch/examples regression: a degree-4 polynomial fitted by one Linear, smooth L1 loss,
    a hand-written SGD step (lr 0.1), batch 32. The original loops until the loss is under
    1e-3 (about 800 steps); a round is 200 of them (20 made a round of 2 ms, which measured the
    wake-up after the pause between rounds more than the loop)."""
    tg, torch, pm, og = W._tg(), W._torch(), _pm(), _orig()
    batch_size, steps = {"tiny": (8, 3), "small": (8, 200), "full": (32, 200)}[size]
    rng = np.random.default_rng(0)
    w_target, b_target = rng.standard_normal((4, 1)) * 5, rng.standard_normal(1) * 5
    xs = rng.standard_normal((steps, batch_size)).astype(dtype)
    torch.manual_seed(1)
    t_fc, fc = _twins(torch.nn.Linear(4, 1), tg.nn.Linear(4, 1), dtype)

    def batch(lib: Any, make: Callable, i: int) -> tuple[Any, Any]:
        x = make(lib.tensor(xs[i]))
        return x, x @ lib.tensor(w_target.astype(dtype)) + float(b_target[0])

    tb = [batch(torch, og.make_features, i) for i in range(steps)]
    gb = [batch(tg, pm.make_features, i) for i in range(steps)]
    return Pair(f"regression, batch {batch_size}", steps,
                _steps(lambda i: pm.regression_train_step(fc, *gb[i]), steps),
                _steps(lambda i: og.regression_train_step(t_fc, *tb[i]), steps),
                [(fc, t_fc)])


PROGRAMS: dict[str, Callable[..., Pair]] = {
    f.__name__: f for f in (mnist, dcgan, siamese_network, nanogpt, mnist_rnn, gcn,
                            fast_neural_style, super_resolution, vae, word_language_model,
                            regression)
}


# == timing ====================================================================================
def _lasts(fn: Callable[[], Any], seconds: float) -> bool:
    """Whether one more call of ``fn`` takes at least ``seconds``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0 >= seconds


def time_pair(port: Callable[[], Any], original: Callable[[], Any], rounds: int) -> dict:
    """Seconds per round of each, rounds alternating; the paired ratio (original over port)."""
    t0 = time.perf_counter()
    port()  # warm up: JIT compilation, allocator, oneDNN's kernel choice
    original()
    # the first round after the pause runs slower: one untimed round before each timed one,
    # unless a round lasts long enough (the warm-up's torch round over 2 s) for that not to count
    untimed = time.perf_counter() - t0 < 4.0 or not _lasts(original, 2.0)
    times: dict[str, list[float]] = {"tapegrad": [], "torch": []}
    fns = {"tapegrad": port, "torch": original}
    order = list(fns)
    for r in range(rounds):
        for name in order[r % 2:] + order[:r % 2]:
            time.sleep(suite.SETTLE)  # the other library's worker threads stop spinning first
            if untimed:
                fns[name]()
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    ratio = statistics.median(t / p for t, p in zip(times["torch"], times["tapegrad"],
                                                    strict=True))
    return {"tapegrad_s": statistics.median(times["tapegrad"]),
            "torch_s": statistics.median(times["torch"]), "ratio": ratio, "rounds": rounds}


def geometric_mean(ratios: list[float]) -> float:
    return math.exp(sum(map(math.log, ratios)) / len(ratios))


def profile(name: str, size: str, top: int = 12) -> list[tuple[str, float]]:
    """Where one round of the port's steps spends its time, per primitive (forward and VJPs, as
    benchmarks/profile_step.py measures a workload); prints the largest shares of the round."""
    import collections  # noqa: PLC0415

    import profile_step  # noqa: PLC0415

    acc: dict[str, float] = collections.defaultdict(float)
    profile_step.instrument(acc)
    pair = PROGRAMS[name](size)
    pair.port()  # warm up
    acc.clear()
    t0 = time.perf_counter()
    pair.port()
    total = time.perf_counter() - t0
    rows = sorted(acc.items(), key=lambda kv: -kv[1])
    rows.append(("outside primitives (Python, tape, optimizer)", total - sum(acc.values())))
    print(f"{pair.label}: {1e3 * total / pair.steps:.1f} ms/step in tapegrad")
    for k, t in sorted(rows, key=lambda kv: -kv[1])[:top]:
        print(f"  {k:46s} {1e3 * t / pair.steps:9.2f} ms  {100 * t / total:5.1f}%")
    return rows


def table(paths: list[str]) -> str:
    """A markdown table of ``--json`` results (one file per size): each program's ratio per size,
    the step times, and the geometric mean of every column."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    names = [n for n in PROGRAMS if any(n in r["programs"] for r in runs)]
    head = "| program | " + " | ".join(
        f"{r['size']}: configuration | tapegrad / PyTorch ms per step | speed ratio"
        for r in runs) + " |"
    lines = [head, "|---" * (1 + 3 * len(runs)) + "|"]
    for n in names:
        cells = []
        for r in runs:
            p = r["programs"].get(n)
            if p is None:
                cells += ["", "", ""]
                continue
            cells += [p["label"].split(", ", 1)[-1] if ", " in p["label"] else p["label"],
                      f"{1e3 * p['tapegrad_s'] / p['steps']:.1f} / "
                      f"{1e3 * p['torch_s'] / p['steps']:.1f}", f"{p['ratio']:.2f}x"]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    gms = []
    for r in runs:
        ratios = [p["ratio"] for p in r["programs"].values()]
        gms += ["", "", f"**{geometric_mean(ratios):.2f}x**"]
    lines.append("| geometric mean | " + " | ".join(gms) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="programs, comma-separated (default: all; see --list)")
    ap.add_argument("--size", choices=SIZES, default="small")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--list", action="store_true", help="print the programs and stop")
    ap.add_argument("--table", nargs="+", metavar="JSON",
                    help="print a markdown table of earlier --json results and stop")
    ap.add_argument("--profile", action="store_true",
                    help="time the port's primitives instead of comparing with PyTorch")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return {}
    if args.list:
        for name, f in PROGRAMS.items():
            print(f"{name:20s} {(f.__doc__ or '').splitlines()[0]}")
        return {}
    which = args.only.split(",") if args.only else list(PROGRAMS)
    unknown = [n for n in which if n not in PROGRAMS]
    if unknown:
        raise SystemExit(f"ports.py: unknown program(s) {unknown}; known: {', '.join(PROGRAMS)}")
    if args.profile:
        return {name: {"profile": profile(name, args.size)} for name in which}
    out = {}
    for name in which:
        pair = PROGRAMS[name](args.size)
        out[name] = r = {"label": pair.label, "steps": pair.steps,
                         **time_pair(pair.port, pair.original, args.rounds)}
        print(f"{pair.label}: tapegrad {1e3 * r['tapegrad_s'] / pair.steps:.1f} ms/step, "
              f"PyTorch {1e3 * r['torch_s'] / pair.steps:.1f} ms/step, {r['ratio']:.2f}x "
              f"(median of {args.rounds} rounds of {pair.steps} steps)", flush=True)
        if args.json:  # after each program, so that a long run keeps what it measured
            Path(args.json).write_text(json.dumps({"size": args.size, "programs": out},
                                                  indent=1))
    if len(out) > 1:
        gm = geometric_mean([r["ratio"] for r in out.values()])
        print(f"geometric mean over {len(out)} programs ({args.size}): {gm:.2f}x")
    return out


if __name__ == "__main__":
    main()
