"""Write docs/coverage.md: every name of ``torch.nn.modules.__all__`` and every public function
of ``torch.nn.functional`` with its status in tapegrad, read from the code.

    python docs/gen_coverage.py          # rewrite docs/coverage.md
    python docs/gen_coverage.py --check  # exit 1 when the committed file is stale

A name is "implemented" when ``tg.nn`` (or ``tg.nn.functional``) has it now; every other name
is "not planned" with the reason from ``REASONS`` below, so the table stays true as layers land.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as TF

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's tapegrad
import tapegrad as tg  # noqa: E402

OUT = Path(__file__).with_name("coverage.md")

# The layers that pytorch/examples and torchvision's ResNet, VGG and MobileNet definitions use
# (tests/test_nn_coverage.py requires each to be implemented).
USED_BY_EXAMPLES = """
Linear Conv1d Conv2d ConvTranspose2d BatchNorm1d BatchNorm2d LayerNorm GroupNorm InstanceNorm2d
ReLU ReLU6 LeakyReLU Tanh Sigmoid Hardswish Hardsigmoid SiLU GELU ELU Softmax LogSoftmax Dropout
Dropout2d MaxPool2d AvgPool2d AdaptiveAvgPool2d Embedding Flatten Identity Sequential ModuleList
ReflectionPad2d ZeroPad2d PixelShuffle Upsample MultiheadAttention Transformer
TransformerEncoder TransformerEncoderLayer TransformerDecoder TransformerDecoderLayer
CrossEntropyLoss NLLLoss MSELoss L1Loss BCELoss BCEWithLogitsLoss RNN LSTM GRU LSTMCell
""".split()

_3D = "3-d convolution and pooling are not offered (no 3-d im2col); the 1-d/2-d forms are"
_LAZY = "lazy shape inference at the first call; give the input size (Linear(in, out), ...)"
_RNN = "recurrent layers: not in tapegrad.nn yet"
_DISPATCH = "torch's dispatch and argument-checking internals, not a layer"
_INPLACE = "in-place functional variant: tapegrad functions return new tensors (use the plain name)"
_RARE = "rarely used; not needed by pytorch/examples or torchvision's classic models"
_INDICES = "the max-pool index outputs (and unpooling by them) are not offered"

# reasons by exact name first, then by pattern (first match wins)
REASONS: dict[str, str] = {
    "ParameterList": "containers: not in tapegrad.nn yet (a plain list of Parameters works)",
    "ParameterDict": "containers: not in tapegrad.nn yet (a plain dict of Parameters works)",
    "Container": "deprecated in PyTorch (use Sequential or Module)",
    "NLLLoss2d": "deprecated in PyTorch (NLLLoss takes (N, C, H, W))",
    "RNNBase": "a base class of the recurrent layers, not a layer (tg.nn.RNN, LSTM, GRU are)",
    "RNNCellBase": "a base class of the recurrent cells, not a layer (tg.nn.RNNCell, ...)",
    "SyncBatchNorm": "multi-process batch statistics; tapegrad's data parallelism averages gradients",
    "CTCLoss": "needs a dynamic-programming primitive (forward-backward over alignments)",
    "ctc_loss": "needs a dynamic-programming primitive (forward-backward over alignments)",
    "AdaptiveLogSoftmaxWithLoss": _RARE,
    "EmbeddingBag": _RARE,
    "embedding_bag": _RARE,
    "CrossMapLRN2d": _RARE,
    "LocalResponseNorm": _RARE,
    "local_response_norm": _RARE,
    "LinearCrossEntropyLoss": _RARE,
    "LinearCrossEntropyOptions": _RARE,
    "linear_cross_entropy": _RARE,
    "grouped_mm": "GPU grouped GEMM kernel",
    "scaled_grouped_mm": "GPU grouped GEMM kernel",
    "scaled_mm": "GPU low-precision GEMM kernel",
    "conv_tbc": "time-batch-channel convolution, a fairseq special case",
    "affine_grid": _RARE,
    "grid_sample": _RARE,
    "gumbel_softmax": _RARE,
    "multi_head_attention_forward": "use nn.MultiheadAttention (the same computation)",
    "pdist": _RARE,
    "Optional": "a typing name, not a function",
}
PATTERNS: list[tuple[str, str]] = [
    (r"^Lazy", _LAZY),
    (r"^(RNN|LSTM|GRU)(Cell)?$", _RNN),
    (r"3d|3D", _3D),
    (r"^(assert_int_or_pair|boolean_dispatch|handle_torch_function|has_torch_function.*)$",
     _DISPATCH),
    (r"^[a-z0-9_]+_$", _INPLACE),
    (r"with_indices$|^(MaxUnpool|max_unpool)", _INDICES),
    (r"(?i)fractional|lp_?pool|alpha_?dropout|channel_?shuffle|rrelu", _RARE),
    (r"1d$", "only the 2-d adaptive pooling is offered (reshape to 2-d with a unit axis)"),
    (r"(?i)loss$", "a loss not yet needed by pytorch/examples or torchvision; compose it from F"),
    (r".", _RARE),
]  # fmt: skip


def torch_functions() -> list[str]:
    return sorted(
        n
        for n in dir(TF)
        if not n.startswith("_")
        and callable(getattr(TF, n))
        and not isinstance(getattr(TF, n), type)
    )


def status(name: str, namespace: object) -> str:
    if hasattr(namespace, name):
        return "implemented"
    if name in REASONS:
        return f"not planned: {REASONS[name]}"
    for pattern, reason in PATTERNS:
        if re.search(pattern, name):
            return f"not planned: {reason}"
    raise AssertionError("unreachable: the last pattern matches every name")


def table(names: list[str], namespace: object, prefix: str) -> list[str]:
    rows = ["| name | status |", "| --- | --- |"]
    rows += [f"| `{prefix}{n}` | {status(n, namespace)} |" for n in names]
    return rows


def render() -> str:
    modules = sorted(torch.nn.modules.__all__)
    functions = torch_functions()
    n_mod = sum(hasattr(tg.nn, n) for n in modules)
    n_fn = sum(hasattr(tg.nn.functional, n) for n in functions)
    lines = [
        "# torch.nn coverage",
        "",
        "Generated by `python docs/gen_coverage.py` from `torch.nn.modules.__all__` and the public",
        f"functions of `torch.nn.functional` (torch {torch.__version__.split('+')[0]}), reading",
        "tapegrad's code: a name is implemented when `tg.nn` or `tg.nn.functional` has it.",
        "`tests/test_nn_coverage.py` regenerates this page and fails when it differs.",
        "",
        f"Modules: {n_mod} of {len(modules)} implemented. Functions: {n_fn} of {len(functions)}.",
        "",
        "## Modules (`tg.nn`)",
        "",
        *table(modules, tg.nn, "nn."),
        "",
        "## Functions (`tg.nn.functional`)",
        "",
        *table(functions, tg.nn.functional, "F."),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if OUT.read_text() != text:
            print(f"{OUT} is stale: run python docs/gen_coverage.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
