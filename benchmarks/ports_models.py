"""tapegrad ports of the programs benchmarks/ports.py times, and the data both sides read.

Each port is its original (benchmarks/originals.py, benchmarks/nanogpt_torch.py) written as a
user moving to tapegrad would write it: the same classes, parameter names, initialisation, loss,
optimizer and loop body; ``optimizer.zero_grad(); loss.backward(); optimizer.step()`` becomes a
tape and ``optimizer.step(tape.gradient(loss, model))``. Where tapegrad lacks what the original
uses, the port says how it stands in: gcn's sparse matrix products (``torch.mm`` and
``torch.spmm`` with a COO tensor on the left: the features and the adjacency) are a row gather,
a scale and an ``index_add`` over the nonzeros, held as coordinate lists.

The data are generated here or ship with a package (nothing is downloaded): scikit-learn's 8x8
digits (28x28 as MNIST's, through examples/mnist.py), random graphs shaped as Cora, generated
images (examples/dcgan.py), and text from the Python standard library's own source files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn


# == data ======================================================================================
def digit_pairs(images: np.ndarray, labels: np.ndarray, n: int,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """siamese_network's APP_MATCHER: ``n`` pairs (image_1, image_2, target); an even index pairs
    two different images of one class (target 1), an odd one two classes (target 0)."""
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(labels == c) for c in range(10)]
    first, second, target = [], [], []
    for index in range(n):
        c = int(rng.integers(10))
        i1 = int(rng.integers(len(groups[c])))
        if index % 2 == 0:
            i2 = i1
            while i2 == i1:
                i2 = int(rng.integers(len(groups[c])))
            first.append(groups[c][i1])
            second.append(groups[c][i2])
            target.append(1.0)
        else:
            other = c
            while other == c:
                other = int(rng.integers(10))
            first.append(groups[c][i1])
            second.append(groups[other][int(rng.integers(len(groups[other])))])
            target.append(0.0)
    return images[first], images[second], np.asarray(target, np.float32)


def random_graph(nodes: int, features: int, edges: int, classes: int = 7,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A graph shaped as Cora (2708 nodes, 1433 binary word features of about 18 words a node,
    5429 directed citations, 7 classes): (features (V, F) of 0/1, labels (V,), edges (E, 2)).
    Citations link nodes of one class four times in five; no self-loops, no repeated pair."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(classes, size=nodes)
    x = (rng.random((nodes, features)) < 18 / features).astype(np.float32)
    x[np.arange(nodes), rng.integers(features, size=nodes)] = 1.0  # no empty row
    by_class = [np.flatnonzero(labels == c) for c in range(classes)]
    seen, pairs = set(), []
    while len(pairs) < edges:
        a = int(rng.integers(nodes))
        same = by_class[labels[a]]
        b = int(same[rng.integers(len(same))] if rng.random() < 0.8 else rng.integers(nodes))
        if a != b and (a, b) not in seen:
            seen.add((a, b))
            pairs.append((a, b))
    return x, labels, np.asarray(pairs, np.int64)


def normalized_adjacency(nodes: int, edges: np.ndarray) -> tuple[np.ndarray, ...]:
    """D^-1/2 (A + I) D^-1/2 as coordinate lists (rows, cols, values): the matrix gcn's
    load_cora() builds as a sparse tensor (A[e0, e1] = 1 for each citation, degree = row sums)."""
    rows = np.concatenate([edges[:, 0], np.arange(nodes)])
    cols = np.concatenate([edges[:, 1], np.arange(nodes)])
    degree = np.bincount(rows, minlength=nodes).astype(np.float64)
    d = np.sqrt(1 / degree)
    order = np.lexsort((cols, rows))  # the coalesced order of torch's sparse result
    rows, cols = rows[order], cols[order]
    return rows, cols, d[rows] * d[cols]


def stdlib_text(chars: int) -> str:
    """``chars`` characters of the Python standard library's own source (a fixed list of files),
    the char-level corpus nanoGPT's shakespeare_char would read from input.txt."""
    import argparse  # noqa: PLC0415 - its file locates the standard library

    lib = Path(argparse.__file__).parent
    parts = []
    for name in ("argparse.py", "textwrap.py", "dataclasses.py", "fractions.py", "statistics.py",
                 "functools.py", "inspect.py", "typing.py"):
        parts.append((lib / name).read_text(encoding="utf-8"))
        if sum(map(len, parts)) >= chars:
            break
    return "".join(parts)[:chars]


def char_batches(text: str, steps: int, batch_size: int, block_size: int,
                 seed: int = 0) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """nanoGPT's get_batch('train') for ``steps`` steps over ``text`` encoded as in
    data/shakespeare_char/prepare.py (sorted characters); returns the batches and the vocab."""
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        ix = rng.integers(len(data) - block_size, size=batch_size)
        x = np.stack([data[i:i + block_size] for i in ix])
        y = np.stack([data[i + 1:i + 1 + block_size] for i in ix])
        out.append((x, y))
    return out, len(chars)


def luminance_pairs(images: np.ndarray, upscale_factor: int) -> tuple[np.ndarray, np.ndarray]:
    """super_resolution's dataset from RGB images in [-1, 1]: the Y channel of the centre crop
    (a multiple of the factor) as the target, its box-filtered downscale as the input."""
    rgb = (images + 1) / 2
    y = 0.299 * rgb[:, 0] + 0.587 * rgb[:, 1] + 0.114 * rgb[:, 2]  # (N, H, W) in [0, 1]
    crop = y.shape[-1] - y.shape[-1] % upscale_factor
    target = y[:, :crop, :crop]
    n, s = len(target), crop // upscale_factor
    small = target.reshape(n, s, upscale_factor, s, upscale_factor).mean(axis=(2, 4))
    return small[:, None].astype(np.float32), target[:, None].astype(np.float32)


# == siamese_network ===========================================================================
def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision's ResNet (BasicBlock), its layer names and initialisation."""

    def __init__(self, layers: list[int], num_classes: int = 1000) -> None:
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes, stride),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)


class SiameseNetwork(nn.Module):
    """ResNet-18 (one input channel, no fc) on each image, features concatenated, 2 Linears."""

    def __init__(self) -> None:
        super().__init__()
        resnet = ResNet([2, 2, 2, 2])
        resnet.conv1 = nn.Conv2d(1, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3),
                                 bias=False)
        self.fc_in_features = resnet.fc.in_features
        self.resnet = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool,
                                    resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4,
                                    resnet.avgpool)
        self.fc = nn.Sequential(nn.Linear(self.fc_in_features * 2, 256), nn.ReLU(inplace=True),
                                nn.Linear(256, 1))
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.constant_(m.bias, 0.01)

    def forward_once(self, x: tg.Tensor) -> tg.Tensor:
        output = self.resnet(x)
        return output.reshape(output.shape[0], -1)

    def forward(self, input1: tg.Tensor, input2: tg.Tensor) -> tg.Tensor:
        output = tg.cat((self.forward_once(input1), self.forward_once(input2)), 1)
        return self.sigmoid(self.fc(output))


def siamese_train_step(model, optimizer, criterion, images_1, images_2, targets):
    with tg.Tape() as tape:
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, targets)
    optimizer.step(tape.gradient(loss, model))
    return loss


def nll_train_step(model, optimizer, data, target):
    """mnist's and mnist_rnn's loop body."""
    with tg.Tape() as tape:
        loss = F.nll_loss(model(data), target)
    optimizer.step(tape.gradient(loss, model))
    return loss


# == mnist_rnn =================================================================================
class MnistRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input: tg.Tensor) -> tg.Tensor:
        input = input.reshape(-1, 28, 28)  # (B, 28 rows, 28 pixels)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]  # the last row's output
        output = self.dropout1(self.batchnorm(output))
        output = self.dropout2(F.relu(self.fc1(output)))
        return F.log_softmax(self.fc2(output), dim=1)


# == gcn =======================================================================================
def spmm(sparse: tuple, dense: tg.Tensor) -> tg.Tensor:
    """A sparse by dense product, the sparse matrix as ``(rows, cols, values, shape)`` (torch's
    ``sparse_coo_tensor(indices, values, size)``): gather the rows of ``dense`` at the nonzeros'
    columns, scale them by the values, add them into the nonzeros' rows."""
    rows, cols, values, (n, _) = sparse
    out = tg.zeros((n, dense.shape[1]), dtype=dense.dtype)
    return out.index_add(0, rows, dense[cols] * values[:, None])


class GraphConv(nn.Module):
    def __init__(self, input_dim: int, output_dim: int, use_bias: bool = False) -> None:
        super().__init__()
        self.kernel = nn.Parameter(tg.empty(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(tg.zeros(output_dim))

    def forward(self, input_tensor: tg.Tensor | tuple, adj_mat: tuple) -> tg.Tensor:
        if isinstance(input_tensor, tuple):  # sparse (the features), as torch.mm takes it
            support = spmm(input_tensor, self.kernel)
        else:
            support = input_tensor @ self.kernel
        output = spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, use_bias: bool = True,
                 dropout_p: float = 0.1) -> None:
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor: tg.Tensor, adj_mat: tuple) -> tg.Tensor:
        x = self.dropout(F.relu(self.gc1(input_tensor, adj_mat)))
        return F.log_softmax(self.gc2(x, adj_mat), dim=1)


def gcn_test(model, criterion, input, target, mask) -> tuple[float, float]:
    model.eval()
    with tg.no_grad():
        output = model(*input)[mask]
        loss = criterion(output, target[mask])
        acc = float((output.numpy().argmax(axis=1) == target.numpy()[mask]).mean())
    return loss.item(), acc


def gcn_train_iter(model, optimizer, criterion, input, target, mask_train, mask_val):
    model.train()
    with tg.Tape() as tape:
        output = model(*input)
        loss = criterion(output[mask_train], target[mask_train])
    optimizer.step(tape.gradient(loss, model))
    gcn_test(model, criterion, input, target, mask_train)
    gcn_test(model, criterion, input, target, mask_val)
    return loss


# == fast_neural_style =========================================================================
class ConvLayer(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int,
                 stride: int) -> None:
        super().__init__()
        self.reflection_pad = nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = nn.InstanceNorm2d(channels, affine=True)
        self.relu = nn.ReLU()

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        out = self.relu(self.in1(self.conv1(x)))
        return self.in2(self.conv2(out)) + x


class UpsampleConvLayer(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 upsample: int | None = None) -> None:
        super().__init__()
        self.upsample = upsample
        self.reflection_pad = nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        if self.upsample:
            x = F.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv2d(self.reflection_pad(x))


class TransformerNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = ConvLayer(3, 32, kernel_size=9, stride=1)
        self.in1 = nn.InstanceNorm2d(32, affine=True)
        self.conv2 = ConvLayer(32, 64, kernel_size=3, stride=2)
        self.in2 = nn.InstanceNorm2d(64, affine=True)
        self.conv3 = ConvLayer(64, 128, kernel_size=3, stride=2)
        self.in3 = nn.InstanceNorm2d(128, affine=True)
        self.res1 = ResidualBlock(128)
        self.res2 = ResidualBlock(128)
        self.res3 = ResidualBlock(128)
        self.res4 = ResidualBlock(128)
        self.res5 = ResidualBlock(128)
        self.deconv1 = UpsampleConvLayer(128, 64, kernel_size=3, stride=1, upsample=2)
        self.in4 = nn.InstanceNorm2d(64, affine=True)
        self.deconv2 = UpsampleConvLayer(64, 32, kernel_size=3, stride=1, upsample=2)
        self.in5 = nn.InstanceNorm2d(32, affine=True)
        self.deconv3 = ConvLayer(32, 3, kernel_size=9, stride=1)
        self.relu = nn.ReLU()

    def forward(self, X: tg.Tensor) -> tg.Tensor:  # noqa: N803 - the original's name
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res5(self.res4(self.res3(self.res2(self.res1(y)))))
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


VGG16_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512]  # up to relu4_3


@dataclass
class VggOutputs:
    relu1_2: tg.Tensor
    relu2_2: tg.Tensor
    relu3_3: tg.Tensor
    relu4_3: tg.Tensor

    def __iter__(self):
        return iter((self.relu1_2, self.relu2_2, self.relu3_3, self.relu4_3))


class Vgg16(nn.Module):
    """VGG-16's features up to relu4_3 in four slices, frozen (torchvision's layer numbers)."""

    def __init__(self, requires_grad: bool = False) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 3
        for v in VGG16_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                conv = nn.Conv2d(in_channels, int(v), kernel_size=3, padding=1)
                nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(conv.bias, 0)
                layers += [conv, nn.ReLU(inplace=True)]
                in_channels = int(v)
        self.slice1, self.slice2, self.slice3, self.slice4 = (nn.Sequential() for _ in range(4))
        for lo, hi, part in ((0, 4, self.slice1), (4, 9, self.slice2), (9, 16, self.slice3),
                             (16, 23, self.slice4)):
            for x in range(lo, hi):
                part.add_module(str(x), layers[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X: tg.Tensor) -> VggOutputs:  # noqa: N803 - the original's name
        h1 = self.slice1(X)
        h2 = self.slice2(h1)
        h3 = self.slice3(h2)
        return VggOutputs(h1, h2, h3, self.slice4(h3))


def gram_matrix(y: tg.Tensor) -> tg.Tensor:
    b, ch, h, w = y.shape
    features = y.reshape(b, ch, w * h)
    return (features @ features.transpose(1, 2)) / (ch * h * w)


def normalize_batch(batch: tg.Tensor) -> tg.Tensor:
    """ImageNet's mean and std, from [0, 255]."""
    mean = tg.tensor([0.485, 0.456, 0.406], dtype=batch.dtype).reshape(-1, 1, 1)
    std = tg.tensor([0.229, 0.224, 0.225], dtype=batch.dtype).reshape(-1, 1, 1)
    return (batch / 255.0 - mean) / std


def style_grams(vgg: Vgg16, style: tg.Tensor, batch_size: int) -> list[tg.Tensor]:
    style = tg.tile(style, (batch_size, 1, 1, 1))
    return [gram_matrix(y) for y in vgg(normalize_batch(style))]


def style_train_step(transformer, vgg, optimizer, mse_loss, gram_style, x, content_weight,
                     style_weight):
    n_batch = len(x)
    with tg.Tape() as tape:
        y = normalize_batch(transformer(x))
        features_y = vgg(y)
        features_x = vgg(normalize_batch(x))
        content_loss = content_weight * mse_loss(features_y.relu2_2, features_x.relu2_2)
        style_loss = 0.0
        for ft_y, gm_s in zip(features_y, gram_style, strict=True):
            style_loss = style_loss + mse_loss(gram_matrix(ft_y), gm_s[:n_batch])
        total_loss = content_loss + style_loss * style_weight
    optimizer.step(tape.gradient(total_loss, transformer))
    return total_loss


# == super_resolution ==========================================================================
class SuperResolutionNet(nn.Module):
    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor**2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        nn.init.orthogonal_(self.conv1.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv2.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv3.weight, nn.init.calculate_gain("relu"))
        nn.init.orthogonal_(self.conv4.weight)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))


def supres_train_step(model, optimizer, criterion, input, target):
    with tg.Tape() as tape:
        loss = criterion(model(input), target)
    optimizer.step(tape.gradient(loss, model))
    return loss


# == nanoGPT ===================================================================================
@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        B, T, C = x.shape  # noqa: N806 - nanoGPT's names
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training
                                           else 0.0, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)  # the heads side by side
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: tg.Tensor) -> tg.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: tg.Tensor, targets: tg.Tensor | None = None):
        b, t = idx.shape
        pos = tg.arange(0, t, dtype=tg.int64)
        tok_emb = self.transformer.wte(idx)  # (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, -1:, :]), None
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay: float, learning_rate: float,
                             betas: tuple[float, float]) -> tg.optim.AdamW:
        """AdamW; every parameter of two or more dimensions decays, the others do not."""
        params = dict(self.named_parameters())
        optim_groups = [
            {"params": [p for p in params.values() if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params.values() if p.ndim < 2], "weight_decay": 0.0},
        ]
        return tg.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def gpt_train_step(model, optimizer, X, Y, grad_clip=1.0):  # noqa: N803 - nanoGPT's names
    with tg.Tape() as tape:
        logits, loss = model(X, Y)
    grads = tape.gradient(loss, model)
    if grad_clip != 0.0:
        grads = grads.clip_by_global_norm(grad_clip)
    optimizer.step(grads)
    return loss


# == regression ================================================================================
POLY_DEGREE = 4


def make_features(x: tg.Tensor) -> tg.Tensor:
    """A matrix with columns [x, x^2, x^3, x^4]."""
    x = x[:, None]
    return tg.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)


def regression_train_step(fc, batch_x, batch_y):
    """The original's loop body: smooth L1 loss and a hand-written SGD step of lr 0.1."""
    with tg.Tape() as tape:
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
    loss = output.item()
    grads = tape.gradient(output, fc)
    with tg.no_grad():
        for param in fc.parameters():
            param.sub_(0.1 * grads[param])
    return loss
