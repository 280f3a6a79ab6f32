"""tg.optim.LBFGS against torch.optim.LBFGS on the same small problems (float64)."""

import numpy as np
import pytest
import torch

import tapegrad as tg


def _problem(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((20, 4)), rng.standard_normal((20, 2))


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"lr": 0.8}, {"history_size": 3, "max_iter": 7}, {"lr": 0.5, "max_eval": 4}],
)
def test_lbfgs_equals_torch(kwargs):
    x, y = _problem(0)
    torch.manual_seed(0)
    tnet = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    tnet = tnet.double()
    net = tg.nn.Sequential(tg.nn.Linear(4, 8), tg.nn.Tanh(), tg.nn.Linear(8, 2)).double()
    net.load_state_dict({k: v.detach().numpy() for k, v in tnet.state_dict().items()})
    topt = torch.optim.LBFGS(tnet.parameters(), **kwargs)
    opt = tg.optim.LBFGS(net.parameters(), **kwargs)
    tx, ty, gx, gy = torch.tensor(x), torch.tensor(y), tg.tensor(x), tg.tensor(y)
    calls = [0, 0]

    def tclosure():
        calls[0] += 1
        topt.zero_grad()
        loss = ((tnet(tx) - ty) ** 2).mean()
        loss.backward()
        return loss

    def closure():
        calls[1] += 1
        with tg.Tape() as tape:
            loss = ((net(gx) - gy) ** 2).mean()
        return loss, tape.gradient(loss, net)

    for _ in range(3):
        tl = topt.step(tclosure)
        gl = opt.step(closure)
        np.testing.assert_allclose(float(gl), float(tl.detach()), rtol=1e-10)
    assert calls[0] == calls[1]
    for name, p in tnet.state_dict().items():
        np.testing.assert_allclose(
            net.state_dict()[name].numpy(), p.numpy(), rtol=1e-10, atol=1e-12, err_msg=name
        )


def test_lbfgs_errors():
    w = tg.Parameter(tg.ones(2))
    with pytest.raises(NotImplementedError, match="strong_wolfe"):
        tg.optim.LBFGS([w], line_search_fn="strong_wolfe")
    opt = tg.optim.LBFGS([w])
    with pytest.raises(TypeError, match=r"closure must return \(loss, grads\)"):
        opt.step((w * w).sum)
