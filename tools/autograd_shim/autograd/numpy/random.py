"""``autograd.numpy.random`` is numpy's (random inputs need no gradient)."""

from numpy.random import *  # noqa: F403
from numpy.random import seed  # noqa: F401
