"""Conformance with dfdx's own unit tests.

The numbers are dfdx's hard-coded test cases (coreylowman/dfdx, commit 4722a99d, transcribed in
the project's shared conformance data, ``dfdx_cases.md``), reproduced here in float32 at
tolerance 1e-5. Each section below is self-contained (its data, then its tests) and numbered as
in that file, so further sections append at the end.

Where tapegrad follows PyTorch rather than dfdx, the test is skipped and says why (dfdx gives the
full gradient to every tied maximum; PyTorch, and so tapegrad, does not).
"""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F

TOL = 1e-5


def f32(values) -> tg.Tensor:
    """A float32 tensor from nested lists (dfdx casts its f64 literals to f32)."""
    return tg.tensor(np.asarray(values, dtype=np.float32))


def assert_close(actual, expected, tol: float = TOL) -> None:
    a = actual.numpy() if isinstance(actual, tg.Tensor) else np.asarray(actual)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


def grads_of(loss_fn, *inputs: tg.Tensor):
    """``(loss, [d loss / d input, ...])`` with every input watched."""
    with tg.Tape() as tape:
        tape.watch(*inputs)
        loss = loss_fn(*inputs)
    return loss, tape.gradient(loss, list(inputs))


TIES_SKIP = (
    "dfdx gives the full gradient to every tied maximum; tapegrad follows PyTorch (max pooling "
    "routes it to the first maximum, amax splits it evenly among the ties), so this gradient "
    "case does not apply"
)


# ============================================================================================
# 1. conv2d (+ bias): L = mean(exp(conv2d(x, w) + b)) unless noted; x is (C, H, W), unbatched
# ============================================================================================

CONV_DEFAULT = dict(
    x=[[[-0.86713916, 0.52773184, -0.95238322], [-0.64531374, 0.77809018, -0.49099201]]],
    weight=[
        [[[-0.04958433, -0.43007267], [0.01935136, 0.09778714]]],
        [[[0.44083858, -0.2050724], [-0.30017477, -0.10937047]]],
    ],
    bias=[0.36406237, -0.3098101],
    expected_out=[[[0.24369538, 0.71453357]], [[-0.69169492, -0.06172103]]],
    expected_grad_x=[
        [[0.03936806, -0.08457474, -0.26788417], [-0.03140351, -0.04316529, 0.02424446]]
    ],
    expected_grad_weight=[
        [[[-0.00703794, -0.31814471], [0.19160703, -0.0026007]]],
        [[[0.0154862, -0.15778227], [0.10209797, -0.01799832]]],
    ],
    expected_grad_bias=[0.82979727, 0.36021793],
)


CONV_STRIDE_2 = dict(
    x=[[[0.37100124, -0.59504986, -1.19781005], [-0.31547278, 0.58071911, 0.8661297]]],
    weight=[
        [[[0.44704646, -0.29563826], [0.29228759, -0.1657514]]],
        [[[-0.30488998, 0.25222939], [0.13279295, 0.38153177]]],
    ],
    bias=[-0.44699109, 0.38371694],
    expected_out=[[[-0.29368058]], [[0.30018353]]],
    expected_grad_x=[[[-0.03917716, 0.06006697, 0.0], [0.19859464, 0.19576924, 0.0]]],
    expected_grad_weight=[
        [[[0.13829342, -0.22180916], [-0.11759478, 0.21646728]]],
        [[[0.2504456, -0.40169036], [-0.21296094, 0.39201635]]],
    ],
    expected_grad_bias=[0.37275729, 0.6750533],
)


CONV_PADDING_1 = dict(
    x=[[[-0.32224107, -0.32800716]], [[-1.13570976, 0.937132]]],
    weight=[
        [
            [[0.10215953, 0.06263646], [-0.04124039, -0.09729567]],
            [[-0.32656857, 0.24254093], [-0.27209827, 0.15361503]],
        ],
        [
            [[0.03449896, 0.22931078], [-0.17652659, 0.08222872]],
            [[-0.06016779, 0.29082409], [-0.19154115, 0.13483226]],
        ],
        [
            [[-0.14262493, 0.19654515], [0.15921101, 0.01759464]],
            [[0.16749159, 0.33096817], [0.28376505, -0.05524009]],
        ],
    ],
    bias=[-0.22854491, 0.28763595, 0.20709404],
    expected_out=[
        [[-0.37165433, 0.26964033, -0.47000977], [-0.52418506, 0.3161699, -0.56809187]],
        [[0.10800815, 0.66143924, 0.16603859], [-0.11654915, 0.5421771, 0.21993488]],
        [[0.26416105, -0.22402346, 0.420797], [-0.23212466, 0.3085245, 0.41083777]],
    ],
    expected_grad_x=[[[0.010052743, 0.038219165]], [[0.0013861917, 0.096129306]]],
    expected_grad_weight=[
        [
            [[-0.03488452, -0.035597768], [-0.03483199, -0.036207683]],
            [[-0.05705857, 0.03406856], [-0.05008337, 0.024666183]],
        ],
        [
            [[-0.053492695, -0.04727108], [-0.05620105, -0.055251926]],
            [[-0.04363727, 0.033381317], [-0.0607851, 0.030584559]],
        ],
        [
            [[-0.051853612, -0.03900232], [-0.04206547, -0.037880093]],
            [[-0.0073834136, 0.0208545], [0.02886929, -0.040557314]],
        ],
    ],
    expected_grad_bias=[0.28636602, 0.44933242, 0.40484178],
)


CONV_STRIDE_3_PADDING_4 = dict(
    x=[
        [
            [0.69103152, 0.25624934],
            [-0.3844859, 0.03110456],
            [0.83753252, 0.53786588],
            [1.15540242, -0.54148245],
        ]
    ],
    weight=[
        [
            [
                [-0.10252278, -0.14387409, -0.14627469],
                [0.28396228, -0.14590892, 0.29269591],
                [0.01090384, 0.14785287, 0.29242596],
            ]
        ],
        [
            [
                [-0.31163597, 0.13224581, -0.20954299],
                [0.27902845, -0.14735751, 0.14001134],
                [-0.05224654, 0.16499066, -0.13981307],
            ]
        ],
    ],
    bias=[-0.07123789, -0.17244765],
    expected_out=[
        [
            [-0.07123789, -0.07123789, -0.07123789],
            [-0.07123789, -0.14481398, -0.07123789],
            [-0.07123789, -0.5974865, -0.07123789],
            [-0.07123789, -0.07123789, -0.07123789],
        ],
        [
            [-0.17244765, -0.17244765, -0.17244765],
            [-0.17244765, -0.3061839, -0.17244765],
            [-0.17244765, -0.42046443, -0.17244765],
            [-0.17244765, -0.17244765, -0.17244765],
        ],
    ],
    expected_grad_x=[
        [
            [-0.009780421, 0.01484663],
            [0.010391434, 0.0062526874],
            [0.00032053515, -0.009087289],
            [-0.0073772445, 0.0105412705],
        ]
    ],
    expected_grad_weight=[
        [
            [
                [0.0, 0.019200183, 0.012330416],
                [0.0, 0.051398464, -0.003175714],
                [0.0, -0.013860448, 0.0011212977],
            ]
        ],
        [
            [
                [0.0, 0.02291844, 0.01471829],
                [0.0, 0.05281557, -0.0069562597],
                [0.0, -0.011794927, 0.00095419877],
            ]
        ],
    ],
    expected_grad_bias=[0.44699076, 0.408709],
)


CONV_DILATED = dict(
    x=[
        [
            [0.0, 1.0, 2.0, 4.0, 5.0],
            [6.0, 7.0, 8.0, 9.0, 10.0],
            [11.0, 12.0, 13.0, 14.0, 15.0],
            [16.0, 17.0, 18.0, 19.0, 20.0],
        ]
    ],
    weight=[[[[0.1, 0.5], [1.0, 2.0]]]],
    expected_out=[[[38.0, 42.1, 45.7], [56.6, 60.2, 63.8]]],
    expected_grad_x=[
        [
            [0.016666668, 0.016666668, 0.1, 0.083333336, 0.083333336],
            [0.016666668, 0.016666668, 0.1, 0.083333336, 0.083333336],
            [0.16666667, 0.16666667, 0.5, 0.33333334, 0.33333334],
            [0.16666667, 0.16666667, 0.5, 0.33333334, 0.33333334],
        ]
    ],
    expected_grad_weight=[[[[4.0, 6.3333335], [14.5, 16.5]]]],
)


CONV_GROUPED = dict(
    x=[
        [
            [1.15955114, 0.68945795, 2.22777081, 0.97970307, 0.90339321],
            [-0.98012513, 1.70133829, -1.29199386, 0.21341583, -0.26468879],
            [0.13577828, -1.12634408, -0.03244355, -2.79851842, -0.74048048],
            [0.40849358, 0.29827344, -1.52881527, 0.76061243, 0.19023405],
            [-0.59098929, -0.73987025, 0.50599074, 0.29848158, -1.34820068],
        ],
        [
            [-1.46728218, -2.37748837, -1.17776859, 1.11394322, -1.15377915],
            [-1.12063479, 1.21246791, 0.60054827, 0.45333079, -1.00518465],
            [-0.46830899, -0.16050071, 0.73001051, -0.90739632, 2.07482648],
            [0.20643917, -2.07686543, -0.70319396, -0.21572231, 0.32948348],
            [-0.17758289, 1.68857682, 1.51658368, 0.36873341, -1.28670764],
        ],
    ],
    weight=[
        [
            [
                [0.12595156, 0.31638023, -0.33176154],
                [-0.2527256, -0.09877023, 0.23111811],
                [0.16438398, -0.22974905, -0.30995807],
            ]
        ],
        [
            [
                [0.06859669, -0.17031185, -0.01402727],
                [-0.13474676, -0.13854985, 0.06477568],
                [-0.23829469, -0.08642964, 0.25663486],
            ]
        ],
        [
            [
                [-0.24697559, 0.25657538, -0.29573485],
                [0.24141768, -0.06818637, -0.16537642],
                [0.02836069, 0.24494585, -0.16264121],
            ]
        ],
        [
            [
                [-0.15155213, 0.05579081, 0.04196584],
                [0.12847015, 0.14483747, -0.20391724],
                [-0.09464011, 0.19359276, -0.08733428],
            ]
        ],
    ],
    expected_out=[
        [
            [-0.30270016, 0.90332055, 1.40224683],
            [1.38538218, -0.45968884, -0.37895066],
            [-0.89852279, 0.69733238, 0.14387871],
        ],
        [
            [-0.19980414, -0.82927543, 0.16024134],
            [-0.71867949, 0.56500238, 0.57026976],
            [0.34083101, 0.3975879, 0.1053571],
        ],
        [
            [-0.52317154, 0.45419621, 0.65919733],
            [-0.20108134, -0.41395274, 0.03387201],
            [0.32824901, 0.43692166, -0.89364898],
        ],
        [
            [-0.10102371, 0.72741956, 0.11405103],
            [-0.32978091, 0.21818593, -0.57262653],
            [0.17301394, -0.19611263, -0.22273052],
        ],
    ],
    expected_grad_x=[
        [
            [0.00414525, 0.01208433, 0.02895186, 0.00725342, -0.03791252],
            [0.00665885, 0.01424124, -0.06918646, -0.00789665, 0.02120677],
            [-0.02782234, -0.0153714, 0.01253848, -0.06255514, -0.030123],
            [0.00690058, -0.0616357, -0.06612907, 0.00661747, 0.01612737],
            [-0.00744827, -0.00665466, -0.01195416, -0.01671995, -0.00202148],
        ],
        [
            [-0.00787102, -0.01389305, -0.00736389, 0.00499044, -0.01457474],
            [-0.00143798, 0.01763375, 0.00575301, -0.01384448, -0.02306994],
            [-0.00838966, 0.01256749, 0.01653318, -0.01032873, -0.02182827],
            [0.01230815, 0.02214932, -0.00205885, -0.00525379, -0.01245476],
            [-0.00203156, 0.01489969, 0.00401321, -0.00189943, -0.00379007],
        ],
    ],
    expected_grad_weight=[
        [
            [
                [0.15669884, 0.34341401, -0.11008842],
                [-0.08243199, -0.26589566, -0.07729618],
                [-0.08831018, -0.29109383, -0.44972605],
            ]
        ],
        [
            [
                [0.07151295, -0.08670343, -0.06787194],
                [-0.11750249, -0.15240794, -0.23142532],
                [-0.10467961, -0.14933982, -0.04248949],
            ]
        ],
        [
            [
                [-0.19401677, 0.03564095, -0.02681023],
                [-0.01509627, -0.05853239, 0.00262788],
                [0.05381295, 0.0488031, 0.13299918],
            ]
        ],
        [
            [
                [-0.18418193, -0.04946327, 0.05997707],
                [0.00057301, -0.00255429, 0.00476278],
                [-0.01050586, 0.03911699, 0.04431859],
            ]
        ],
    ],
)


CONV_CASES = {
    "1.1 default": (CONV_DEFAULT, dict(), True),
    "1.2 stride 2": (CONV_STRIDE_2, dict(stride=2), True),
    "1.3 padding 1": (CONV_PADDING_1, dict(padding=1), True),
    "1.4 stride 3 padding 4": (CONV_STRIDE_3_PADDING_4, dict(stride=3, padding=4), True),
    "1.5 dilated": (CONV_DILATED, dict(dilation=2), False),  # loss: plain mean, no bias
    "1.6 grouped": (CONV_GROUPED, dict(groups=2), True),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_1_conv2d(name):
    case, kw, use_exp = CONV_CASES[name]
    inputs = [f32(case["x"]), f32(case["weight"])]
    if "bias" in case:
        inputs.append(f32(case["bias"]))

    def loss_fn(x, w, b=None):
        y = F.conv2d(x, w, b, **kw)
        return (y.exp() if use_exp else y).mean()

    y = F.conv2d(*inputs, **kw)
    assert_close(y, case["expected_out"])
    _, grads = grads_of(loss_fn, *inputs)
    assert_close(grads[0], case["expected_grad_x"])
    assert_close(grads[1], case["expected_grad_weight"])
    if "bias" in case:
        assert_close(grads[2], case["expected_grad_bias"])


# ============================================================================================
# 2. matmul: L = mean(exp(a @ b))
# ============================================================================================

MATMUL = dict(
    a=[
        [0.5086, 0.5234, 0.2684],
        [0.8075, 0.8437, 0.9951],
        [0.0774, 0.7539, 0.8894],
        [0.8119, 0.2693, 0.7249],
    ],
    b=[[0.4651, 0.9106], [0.336, 0.5534], [0.8092, 0.3827]],
    expected_out=[
        [0.62960154, 0.8554974],
        [1.4642863, 1.5830379],
        [1.0090116, 0.82806206],
        [1.0546886, 1.165766],
    ],
    expected_grad_a=[
        [0.37689444, 0.24156547, 0.30238447],
        [0.80570966, 0.5184905, 0.6703743],
        [0.4199963, 0.2735345, 0.38693744],
        [0.5321113, 0.34252504, 0.4438907],
    ],
    expected_grad_b=[[0.8737376, 0.9888564], [0.9339924, 0.991189], [1.1659734, 1.2298465]],
)


def test_2_matmul():
    a, b = f32(MATMUL["a"]), f32(MATMUL["b"])
    assert_close(a @ b, MATMUL["expected_out"])
    _, (ga, gb) = grads_of(lambda a, b: (a @ b).exp().mean(), a, b)
    assert_close(ga, MATMUL["expected_grad_a"])
    assert_close(gb, MATMUL["expected_grad_b"])


# ============================================================================================
# 4. softmax: L = mean(softmax(a, axis) * mask)
# ============================================================================================

SOFTMAX_1D = dict(
    a=[-2.0, -1.0, 0.0, 1.0, 2.0],
    mask=[0.0, 0.0, 1.0, 0.0, 0.0],
    expected_softmax=[0.011656232, 0.031684924, 0.086128555, 0.23412168, 0.6364087],
    expected_softmax_times_mask=[0.0, 0.0, 0.086128555, 0.0, 0.0],
    expected_grad_a=[-0.00020078686, -0.00054579525, 0.015742086, -0.0040329117, -0.010962591],
)


SOFTMAX_2D = dict(
    a=[[-2.0, -1.0, 0.0], [1.0, 4.0, 7.0]],
    mask=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
    expected_softmax=[[0.09003058, 0.24472849, 0.66524094], [0.002355633, 0.047314156, 0.9503302]],
    expected_softmax_times_mask=[[0.09003058, 0.0, 0.0], [0.0, 0.047314156, 0.0]],
    expected_grad_a=[
        [0.01365418, -0.0036721744, -0.009982005],
        [-1.85758e-05, 0.0075125876, -0.0074940124],
    ],
)


SOFTMAX_2D_AXIS0 = dict(
    a=[[-2.0, -1.0, 0.0], [1.0, 4.0, 7.0]],
    mask=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
    expected_softmax=[
        [0.047425874, 0.0066928514, 0.0009110514],
        [0.95257413, 0.9933072, 0.9990892],
    ],
    expected_softmax_times_mask=[[0.047425874, 0.0, 0.0], [0.0, 0.9933072, 0.0]],
    expected_grad_a=[[0.0075294436, -0.0011080095, 0.0], [-0.0075294436, 0.0011080056, 0.0]],
)


@pytest.mark.parametrize(
    "case,dim",
    [(SOFTMAX_1D, -1), (SOFTMAX_2D, 1), (SOFTMAX_2D_AXIS0, 0)],
    ids=["1d", "2d", "2d_axis0"],
)
def test_4_softmax(case, dim):
    a, mask = f32(case["a"]), f32(case["mask"])
    r = F.softmax(a, dim=dim)
    assert_close(r, case["expected_softmax"])
    assert_close(r * mask, case["expected_softmax_times_mask"])
    _, (g,) = grads_of(lambda a: (F.softmax(a, dim=dim) * mask).mean(), a)
    assert_close(g, case["expected_grad_a"])


# ============================================================================================
# 5. log_softmax: L = mean(log_softmax(a, axis))
# ============================================================================================

LOG_SOFTMAX_1D = dict(
    a=[-2.0, -1.0, 0.0, 1.0, 2.0],
    expected_log_softmax=[-4.4519143, -3.4519143, -2.4519143, -1.4519143, -0.4519143],
    expected_grad_a=[0.18834378, 0.16831508, 0.11387146, -0.034121647, -0.43640864],
)


LOG_SOFTMAX_2D = dict(
    a=[[-2.0, -1.0, 0.0], [1.0, 4.0, 7.0]],
    expected_log_softmax=[
        [-2.407606, -1.4076059, -0.40760595],
        [-6.0509458, -3.0509458, -0.05094576],
    ],
    expected_grad_a=[[0.12165138, 0.044302434, -0.1659538], [0.16548885, 0.14300959, -0.30849844]],
)


@pytest.mark.parametrize("case,dim", [(LOG_SOFTMAX_1D, -1), (LOG_SOFTMAX_2D, 1)], ids=["1d", "2d"])
def test_5_log_softmax(case, dim):
    a = f32(case["a"])
    assert_close(F.log_softmax(a, dim=dim), case["expected_log_softmax"])
    _, (g,) = grads_of(lambda a: F.log_softmax(a, dim=dim).mean(), a)
    assert_close(g, case["expected_grad_a"])


# ============================================================================================
# 6. normalize: (a - mean) / sqrt(var + 1e-5) along an axis, L = mean(exp(normalized)).
#    Along the last axis it is layer_norm without affine parameters; along the first axis of a
#    (batch, features) matrix it is batch_norm in training mode.
# ============================================================================================

NORMALIZE_1D_LAST = dict(
    a=[-2.0, 0.0, 5.0],
    expected_normalized=[-1.0190487, -0.3396829, 1.3587316],
    expected_grad_a=[0.033410847, -0.04677555, 0.013364702],
)


NORMALIZE_2D_LAST = dict(
    a=[[-2.0, 0.0, 5.0], [1.0, 2.0, 3.0]],
    expected_normalized=[[-1.0190487, -0.3396829, 1.3587316], [-1.2247356, 0.0, 1.2247356]],
    expected_grad_a=[
        [0.016705424, -0.023387775, 0.006682351],
        [0.05773133, -0.11547226, 0.057740927],
    ],
)


NORMALIZE_2D_FIRST = dict(
    a=[[-2.0, 0.0], [1.0, 2.0], [4.0, 5.0]],
    expected_normalized=[[-1.2247438, -1.1355485], [0.0, -0.16222118], [1.2247438, 1.2977698]],
    expected_grad_a=[
        [0.019245632, 0.025835907],
        [-0.038491584, -0.043060362],
        [0.019245982, 0.01722446],
    ],
)


def _layer_norm(a):
    return F.layer_norm(a, a.shape[-1:], eps=1e-5)


def _batch_norm(a):
    return F.batch_norm(a, None, None, training=True, eps=1e-5)


@pytest.mark.parametrize(
    "case,fn",
    [
        (NORMALIZE_1D_LAST, _layer_norm),
        (NORMALIZE_2D_LAST, _layer_norm),
        (NORMALIZE_2D_FIRST, _batch_norm),
    ],
    ids=["1d_axis_last", "2d_axis_last", "2d_axis_first"],
)
def test_6_normalize(case, fn):
    a = f32(case["a"])
    assert_close(fn(a), case["expected_normalized"])
    _, (g,) = grads_of(lambda a: fn(a).exp().mean(), a)
    assert_close(g, case["expected_grad_a"])


# ============================================================================================
# 7. losses. dfdx's cross_entropy_with_logits_loss takes probability targets, which
#    F.cross_entropy also accepts (mean over the batch of -sum(target * log_softmax(logits))).
# ============================================================================================

SOFT_CROSS_ENTROPY = dict(
    logits=[
        [0.01322946, 0.7367754, -0.8874471, 0.6997109, 0.98312855],
        [-0.19822043, 1.192167, -0.7495395, -1.5733303, -1.4898887],
    ],
    target_probs=[
        [0.3180433, 0.15164024, 0.2352255, 0.08821669, 0.20687431],
        [0.15627657, 0.29779273, 0.10897867, 0.2879545, 0.14899758],
    ],
    expected_loss=1.9889611,
    expected_grad_logits=[
        [-0.0972354, 0.0515665, -0.09250933, 0.07864318, 0.05953507],
        [0.0035581, 0.1792296, -0.0074167, -0.1233234, -0.0520476],
    ],
    expected_grad_target_probs=[
        [1.0454637, 0.6836907, 1.4958019, 0.70222294, 0.56051415],
        [0.9057989, 0.21060522, 1.1814584, 1.5933538, 1.5516331],
    ],
)


HARD_CROSS_ENTROPY = dict(
    x=[0.87248087, -0.24252531, -1.0060949, 1.155084, 1.5545048],
    expected_losses=[1.5655229, 2.680529, 3.444099, 1.2829198, 0.883499],
)


KL_DIV = dict(
    logits=[
        [-0.2354, 0.4408, 0.9688],
        [-0.2187, -0.3451, -1.5473],
        [0.742, 0.7186, 1.0785],
        [-1.2231, 0.2536, 0.3489],
        [-0.9163, -0.2289, 0.2576],
    ],
    target_probs=[
        [0.3178, 0.5344, 0.1479],
        [0.1915, 0.6178, 0.1907],
        [0.4834, 0.1789, 0.3377],
        [0.5809, 0.3623, 0.0568],
        [0.0166, 0.8512, 0.1322],
    ],
    expected_loss=0.40656143,
    expected_grad_logits=[
        [-0.031813223, -0.044453412, 0.07626665],
        [0.05489187, -0.04143352, -0.013458336],
        [-0.037454266, 0.02207594, 0.015378334],
        [-0.09656205, 0.013436668, 0.083125375],
        [0.02881821, -0.10633193, 0.0775137],
    ],
)


BCE = dict(
    logits=[
        [-0.4092005, -0.6706018, 0.9201696],
        [-1.6583557, 1.6978683, -1.4827578],
        [-0.9571696, -1.0971526, 0.8801755],
    ],
    target_probs=[
        [0.365251, 0.8322099, 0.482717],
        [0.168392, 0.7987092, 0.1177533],
        [0.7026833, 0.5563793, 0.6429267],
    ],
    expected_loss=0.7045728,
    expected_grad_logits=[
        [0.003761424, -0.054871976, 0.025817735],
        [-0.0009343492, 0.0051718787, 0.0074731046],
        [-0.047248676, -0.03401173, 0.0071035423],
    ],
    expected_grad_target_probs=[
        [0.04546672, 0.07451131, -0.10224107],
        [0.18426175, -0.18865204, 0.16475087],
        [0.10635218, 0.12190584, -0.097797275],
    ],
)


BCE_WIDE_RANGE = dict(
    logits=[[100.0, 100.0, 100.0], [-100.0, -100.0, -100.0], [-1.0, 0.0, 1.0]],
    target_probs=[[0.0, 0.5, 1.0], [0.0, 0.5, 1.0], [0.0, 0.5, 1.0]],
    expected_loss=33.479964,
    expected_grad_logits=[
        [0.11111111, 0.055555556, 0.0],
        [0.0, -0.055555556, -0.11111111],
        [0.029882379, 0.0, -0.02988238],
    ],
    expected_grad_target_probs=[
        [-11.111112, -11.111112, -11.111112],
        [11.111112, 11.111112, 11.111112],
        [0.11111111, 0.0, -0.11111111],
    ],
)


MSE = dict(
    pred=[0.87248087, -0.24252531, -1.0060949, 1.155084, 1.5545048],
    targ=[-0.90954804, -1.0193185, -0.39221755, 2.2524886, 1.3035554],
    expected_loss=1.0846305,
    expected_grad_pred=[0.7128116, 0.31071725, -0.24555098, -0.43896183, 0.10037976],
)


MAE = dict(
    pred=[0.87248087, -0.24252531, -1.0060949, 1.155084, 1.5545048],
    targ=[-0.90954804, -1.0193186, -0.39221755, 2.2524886, 1.3035554],
    expected_loss=0.9042107,
    expected_grad_pred=[0.2, 0.2, -0.2, -0.2, 0.2],
)


# dfdx's Huber and smooth-L1 tests share one prediction/target pair
_ROBUST_PAIR = dict(
    pred=[
        [1.0095837, -1.0026205, -0.1126093, -0.1539351, -0.3688708],
        [2.6373475, 0.6761999, -1.3586733, 0.486154, -0.6206786],
        [-1.2967702, -0.1273358, 1.3558478, 0.0787393, 1.0921133],
    ],
    targ=[
        [1.2569424, -1.2246597, 0.7995769, 0.0339246, -0.3688708],
        [1.472675, 0.8260061, 0.7839395, -0.0541475, -0.6206786],
        [-2.0449343, 1.8117315, 1.7505344, -1.2522424, 1.0921133],
    ],
)

HUBER = dict(
    **_ROBUST_PAIR,
    expected_loss=0.24506615,
    expected_grad_pred=[
        [-0.016490579, 0.014802615, -0.033333335, -0.012523981, 0.0],
        [0.033333335, -0.0099870805, -0.033333335, 0.033333335, 0.0],
        [0.033333335, -0.033333335, -0.02631244, 0.033333335, 0.0],
    ],
    expected_grad_targ=[
        [0.016490579, -0.014802615, 0.033333335, 0.012523981, 0.0],
        [-0.033333335, 0.0099870805, 0.033333335, -0.033333335, 0.0],
        [-0.033333335, 0.033333335, 0.02631244, -0.033333335, 0.0],
    ],
)


SMOOTH_L1 = dict(
    **_ROBUST_PAIR,
    expected_loss=0.4901323,
    expected_grad_pred=[
        [-0.032981157, 0.02960523, -0.06666667, -0.025047962, 0.0],
        [0.06666667, -0.019974161, -0.06666667, 0.06666667, 0.0],
        [0.06666667, -0.06666667, -0.05262488, 0.06666667, 0.0],
    ],
    expected_grad_targ=[
        [0.032981157, -0.02960523, 0.06666667, 0.025047962, 0.0],
        [-0.06666667, 0.019974161, 0.06666667, -0.06666667, 0.0],
        [-0.06666667, 0.06666667, 0.05262488, -0.06666667, 0.0],
    ],
)


def test_7_1_soft_cross_entropy():
    c = SOFT_CROSS_ENTROPY
    loss, (gx, gt) = grads_of(F.cross_entropy, f32(c["logits"]), f32(c["target_probs"]))
    assert_close(loss, c["expected_loss"])
    assert_close(gx, c["expected_grad_logits"])
    assert_close(gt, c["expected_grad_target_probs"])


@pytest.mark.parametrize("i", range(5))
def test_7_2_hard_cross_entropy(i):
    x = f32(HARD_CROSS_ENTROPY["x"])
    expected = HARD_CROSS_ENTROPY["expected_losses"][i]
    one_hot = F.one_hot(tg.tensor(i), 5).astype(tg.float32)
    assert_close(F.cross_entropy(x, one_hot), expected)  # probability target
    assert_close(F.cross_entropy(x, tg.tensor(i)), expected)  # the same as a class index


def test_7_3_kl_div_with_logits():
    c = KL_DIV
    t = f32(c["target_probs"])
    loss, (g,) = grads_of(
        lambda x: F.kl_div(F.log_softmax(x, dim=-1), t, reduction="batchmean"), f32(c["logits"])
    )
    assert_close(loss, c["expected_loss"])
    assert_close(g, c["expected_grad_logits"])


@pytest.mark.parametrize("c", [BCE, BCE_WIDE_RANGE], ids=["bce", "bce_wide_range"])
def test_7_4_binary_cross_entropy_with_logits(c):
    loss, (gx, gt) = grads_of(
        F.binary_cross_entropy_with_logits, f32(c["logits"]), f32(c["target_probs"])
    )
    assert np.isfinite(loss.item())
    assert_close(loss, c["expected_loss"])
    assert_close(gx, c["expected_grad_logits"])
    assert_close(gt, c["expected_grad_target_probs"])


@pytest.mark.parametrize("c,fn", [(MSE, F.mse_loss), (MAE, F.l1_loss)], ids=["mse", "mae"])
def test_7_6_mse_and_mae(c, fn):
    loss, (gp, _) = grads_of(fn, f32(c["pred"]), f32(c["targ"]))
    assert_close(loss, c["expected_loss"])
    assert_close(gp, c["expected_grad_pred"])


@pytest.mark.parametrize(
    "c,fn",
    [
        (HUBER, lambda p, t: F.huber_loss(p, t, delta=0.5)),
        (SMOOTH_L1, lambda p, t: F.smooth_l1_loss(p, t, beta=0.5)),
    ],
    ids=["huber", "smooth_l1"],
)
def test_7_8_huber_and_smooth_l1(c, fn):
    loss, (gp, gt) = grads_of(fn, f32(c["pred"]), f32(c["targ"]))
    assert_close(loss, c["expected_loss"])
    assert_close(gp, c["expected_grad_pred"])
    assert_close(gt, c["expected_grad_targ"])


# ============================================================================================
# 8. pooling and max reductions on (C, H, W). Min pooling is -max_pool2d(-x).
# ============================================================================================

POOL_MAX_TIES = dict(
    x=[[[1.0, 1.0, 0.5, 0.2], [0.2, 0.2, 0.5, 1.2]]],
    expected_out=[[[1.0, 1.0, 1.2]]],
    expected_grad_x=[[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]],
)


POOL_MIN_TIES = dict(
    x=[[[1.0, 1.0, 0.5, 0.2], [0.2, 0.2, 0.5, 1.2]]],
    expected_out=[[[0.2, 0.2, 0.2]]],
    expected_grad_x=[[[0.0, 0.0, 0.0, 1.0], [1.0, 2.0, 0.0, 0.0]]],
)


POOL_DILATED = dict(
    x=[
        [
            [0.0, 1.0, 2.0, 4.0, 5.0],
            [6.0, 7.0, 8.0, 9.0, 10.0],
            [11.0, 12.0, 13.0, 14.0, 15.0],
            [16.0, 17.0, 18.0, 19.0, 20.0],
        ]
    ],
    expected_max_pool=[[[13.0, 14.0, 15.0], [18.0, 19.0, 20.0]]],
    expected_min_pool=[[[0.0, 1.0, 2.0], [6.0, 7.0, 8.0]]],
    expected_grad_x_of_mean_max_pool=[
        [
            [0.0, 0.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.16666666666666666, 0.16666666666666666, 0.16666666666666666],
            [0.0, 0.0, 0.16666666666666666, 0.16666666666666666, 0.16666666666666666],
        ]
    ],
)


MAX_AXIS_0 = dict(
    t=[[1.0, 2.0, 2.0], [3.0, -2.0, 2.0]],
    expected_max=[3.0, 2.0, 2.0],
    expected_grad_t=[[0.0, 2.463019, 2.463019], [6.695179, 0.0, 2.463019]],
)


MAX_AXIS_1 = dict(
    t=[[1.0, 2.0, 2.0], [3.0, -2.0, 2.0]],
    expected_max=[2.0, 3.0],
    expected_grad_t=[[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]],
)


def _min_pool2d(x, *args, **kw):
    return -F.max_pool2d(-x, *args, **kw)


def test_8_max_pool_with_ties_forward():
    assert_close(F.max_pool2d(f32(POOL_MAX_TIES["x"]), 2, 1), POOL_MAX_TIES["expected_out"])


def test_8_min_pool_with_ties_forward():
    assert_close(_min_pool2d(f32(POOL_MIN_TIES["x"]), 2, 1), POOL_MIN_TIES["expected_out"])


@pytest.mark.skip(reason=TIES_SKIP)
def test_8_max_and_min_pool_with_ties_gradient():
    for case, pool in ((POOL_MAX_TIES, F.max_pool2d), (POOL_MIN_TIES, _min_pool2d)):
        _, (g,) = grads_of(lambda x: pool(x, 2, 1).sum(), f32(case["x"]))
        assert_close(g, case["expected_grad_x"])


def test_8_pool_dilated():
    c = POOL_DILATED
    x = f32(c["x"])
    assert_close(F.max_pool2d(x, 2, 1, dilation=2), c["expected_max_pool"])
    assert_close(_min_pool2d(x, 2, 1, dilation=2), c["expected_min_pool"])
    _, (g,) = grads_of(lambda x: F.max_pool2d(x, 2, 1, dilation=2).mean(), x)
    assert_close(g, c["expected_grad_x_of_mean_max_pool"])


@pytest.mark.parametrize("c,axis", [(MAX_AXIS_0, 0), (MAX_AXIS_1, 1)], ids=["axis0", "axis1"])
def test_8_max_reduction_forward(c, axis):
    assert_close(tg.amax(f32(c["t"]), axis=axis), c["expected_max"])


@pytest.mark.skip(reason=TIES_SKIP)
def test_8_max_reduction_with_ties_gradient():
    _, (g0,) = grads_of(lambda t: tg.amax(t, axis=0).exp().mean(), f32(MAX_AXIS_0["t"]))
    assert_close(g0, MAX_AXIS_0["expected_grad_t"])
    _, (g1,) = grads_of(lambda t: tg.amax(t, axis=1).sum(), f32(MAX_AXIS_1["t"]))
    assert_close(g1, MAX_AXIS_1["expected_grad_t"])
