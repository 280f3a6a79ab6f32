"""Datasets and loaders: the Dataset protocol, TensorDataset, DataLoader, random_split, and the
bundled digits data.

>>> import numpy as np, tapegrad as tg
>>> ds = tg.data.TensorDataset(np.zeros((10, 3), np.float32), np.arange(10))
>>> loader = tg.data.DataLoader(ds, batch_size=4, shuffle=True, seed=0)
>>> [tuple(x.shape) for x, y in loader]
[(4, 3), (4, 3), (2, 3)]
"""

from ._dataset import Dataset, Subset, TensorDataset, random_split
from ._datasets import load_digits
from ._loader import DataLoader, default_collate
from ._sampler import DistributedSampler

__all__ = [
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "Subset",
    "TensorDataset",
    "default_collate",
    "load_digits",
    "random_split",
]
