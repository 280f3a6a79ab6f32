"""Optimizers over ``model.parameters()`` with ``step(grads)``; numerics equal to torch.optim.

Also learning-rate schedules (pure functions in :mod:`tapegrad.optim.schedules`, scheduler
objects in :mod:`tapegrad.optim.lr_scheduler`) and a weight EMA (:class:`ModelEMA`).

>>> import tapegrad as tg
>>> w = tg.Parameter(tg.tensor([2.0]))
>>> opt = tg.optim.SGD([w], lr=0.25)
>>> for _ in range(3):
...     with tg.Tape() as tape:
...         loss = (w * w).sum()
...     opt.step(tape.gradient(loss))
>>> w.item()
0.25
"""

from . import lr_scheduler, schedules
from ._adagrad import Adagrad
from ._adam import Adam, AdamW
from ._adaptive import Adadelta, Adamax, NAdam, RAdam
from ._ema import EMA, ModelEMA
from ._lbfgs import LBFGS
from ._optimizer import Optimizer
from ._rmsprop import RMSprop
from ._sgd import SGD
from .lr_scheduler import (
    CosineAnnealingLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    MultiStepLR,
    OneCycleLR,
    StepLR,
    WarmupCosine,
)

__all__ = [
    "EMA",
    "LBFGS",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "ModelEMA",
    "MultiStepLR",
    "NAdam",
    "OneCycleLR",
    "Optimizer",
    "RAdam",
    "RMSprop",
    "StepLR",
    "WarmupCosine",
    "lr_scheduler",
    "schedules",
]
