"""The layer classes, one family per file, re-exported by ``tapegrad.nn``."""

from .activation import (
    ELU,
    GELU,
    LeakyReLU,
    LogSoftmax,
    PReLU,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)

# layers added for PyTorch coverage (docs/coverage.md)
from .activation_extra import (
    CELU,
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LogSigmoid,
    Mish,
    ReLU6,
    Softmin,
    Softsign,
    Tanhshrink,
)
from .attention import MultiheadAttention
from .container import (
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Residual,
    Sequential,
)
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .distance import CosineSimilarity, PairwiseDistance
from .dropout import Dropout
from .dropout_nd import Dropout1d, Dropout2d, Dropout3d
from .embedding import Embedding
from .extra_pool_upsample import (
    AdaptiveAvgPool1d,
    AdaptiveMaxPool1d,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
from .flatten import Flatten, Unflatten
from .fold import Fold, Unfold
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .linear import Bilinear, Identity, Linear
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MarginRankingLoss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .loss_extra import HingeEmbeddingLoss, SoftMarginLoss, TripletMarginLoss
from .norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, RMSNorm
from .padding import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .pooling import (
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .shrink import Hardshrink, Softmax2d, Softshrink, Threshold
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from .upsampling import Upsample

__all__ = [
    "ELU",
    "GELU",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "RNN",
    "RNNCell",
    "AdaptiveAvgPool2d",
    "AdaptiveMaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Bilinear",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "CosineEmbeddingLoss",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "GroupNorm",
    "HuberLoss",
    "Identity",
    "KLDivLoss",
    "L1Loss",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MarginRankingLoss",
    "MaxPool1d",
    "MaxPool2d",
    "ModuleDict",
    "ModuleList",
    "ParameterDict",
    "ParameterList",
    "MultiheadAttention",
    "NLLLoss",
    "PReLU",
    "RMSNorm",
    "ReLU",
    "Residual",
    "SiLU",
    "Sequential",
    "Sigmoid",
    "SmoothL1Loss",
    "Softmax",
    "Softplus",
    "Tanh",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "Unflatten",
    "Upsample",
]
__all__ += [
    "CELU", "GLU", "SELU", "Hardsigmoid", "Hardswish", "Hardtanh", "LogSigmoid", "Mish", "ReLU6",
    "Softmin", "Softsign", "Tanhshrink", "CosineSimilarity", "PairwiseDistance", "Dropout1d",
    "Dropout2d", "Dropout3d", "Fold", "Unfold", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d",
    "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
    "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d",
    "ZeroPad3d", "PixelShuffle", "PixelUnshuffle",
]  # fmt: skip
__all__ += [
    "Hardshrink", "Softmax2d", "Softshrink", "Threshold", "AdaptiveAvgPool1d",
    "AdaptiveMaxPool1d", "UpsamplingBilinear2d", "UpsamplingNearest2d", "HingeEmbeddingLoss",
    "SoftMarginLoss", "TripletMarginLoss",
]  # fmt: skip
