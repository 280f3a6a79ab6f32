"""Functional forms of the layers and losses, with PyTorch's names and arguments (``F``).

Every function is differentiable on tapes and numerically equal to ``torch.nn.functional``'s
twin. Most are compositions of tapegrad ops; a few are fused primitives where that is measurably
faster (each says why): ``nn.conv2d`` (im2col + one GEMM), ``nn.linear``,
``nn.cross_entropy`` (log-softmax + NLL), pooling gathers and window sums, and row gathers
(``nn.take``: embedding, interpolation). Their VJPs are written with differentiable ops or with
each other (``nn.conv2d`` and its two gradients), so higher-order gradients work throughout.

>>> import tapegrad as tg
>>> import tapegrad.nn.functional as F
>>> x = tg.randn(8, 3, 16, 16)
>>> w = tg.Parameter(tg.randn(4, 3, 3, 3) * 0.1)
>>> with tg.Tape() as tape:
...     y = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)
...     loss = F.cross_entropy(y.reshape(8, -1)[:, :10], tg.randint(0, 10, (8,)))
>>> tape.gradient(loss, w).shape
(4, 3, 3, 3)
"""

from ._f_activation import (
    celu,
    elu,
    gelu,
    glu,
    hardshrink,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softshrink,
    softsign,
    tanh,
    tanhshrink,
    threshold,
)
from ._f_attention import scaled_dot_product_attention
from ._f_conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d
from ._f_dropout import dropout, dropout1d, dropout2d, dropout3d
from ._f_linear import bilinear, embedding, linear, one_hot
from ._f_loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    kl_div,
    nll_loss,
)
from ._f_loss_regression import (
    cosine_embedding_loss,
    hinge_embedding_loss,
    huber_loss,
    l1_loss,
    margin_ranking_loss,
    mse_loss,
    smooth_l1_loss,
    soft_margin_loss,
    triplet_margin_loss,
)
from ._f_norm import (
    batch_norm,
    cosine_similarity,
    group_norm,
    instance_norm,
    layer_norm,
    normalize,
    pairwise_distance,
    rms_norm,
)
from ._f_pool import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool2d,
)
from ._f_resize import interpolate, pad, upsample, upsample_bilinear, upsample_nearest
from ._f_shuffle import fold, pixel_shuffle, pixel_unshuffle, unfold

__all__ = [
    # activations
    "celu", "elu", "gelu", "glu", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu",
    "log_softmax", "logsigmoid", "mish", "prelu", "relu", "relu6", "selu", "sigmoid", "silu",
    "softmax", "softmin", "softplus", "softsign", "tanh", "tanhshrink",
    # dropout
    "dropout", "dropout1d", "dropout2d", "dropout3d",
    # linear, convolution, pooling
    "bilinear", "linear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d",
    "adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool1d", "avg_pool2d", "max_pool1d",
    "max_pool2d",
    # normalisation and distances
    "batch_norm", "group_norm", "instance_norm", "layer_norm", "rms_norm", "normalize",
    "cosine_similarity", "pairwise_distance",
    # lookups, shapes, attention
    "embedding", "one_hot", "pad", "interpolate", "upsample", "scaled_dot_product_attention",
    # losses
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
    "cross_entropy", "huber_loss", "kl_div", "l1_loss", "margin_ranking_loss", "mse_loss",
    "nll_loss", "smooth_l1_loss",
]  # fmt: skip
__all__ += ["fold", "unfold", "pixel_shuffle", "pixel_unshuffle"]
__all__ += [
    "adaptive_avg_pool1d", "adaptive_max_pool1d", "hardshrink", "hinge_embedding_loss",
    "soft_margin_loss", "softshrink", "threshold", "triplet_margin_loss", "upsample_bilinear",
    "upsample_nearest",
]  # fmt: skip
