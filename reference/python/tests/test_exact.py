"""mla_ref.exact: the numbers that define a case do not depend on the installed library."""
import math
from fractions import Fraction

import numpy as np
import torch

from mla_ref import config, exact, generator, numerics


def _exact_dot(a, b):
    return float(sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a, b)))


def test_matmul_is_correctly_rounded_on_bf16_data():
    # bf16 inputs, as every case has: the hi·hi part is exact, the rest far below an ulp
    a = torch.from_numpy(numerics.bf16_bits_to_f64(generator.uniform_bf16_bits(1, 1, (6, 576))))
    b = torch.from_numpy(numerics.bf16_bits_to_f64(generator.uniform_bf16_bits(1, 2, (576, 40))))
    c = exact.matmul(a, b)
    for i in range(6):
        for j in range(40):
            assert c[i, j].item() == _exact_dot(a[i].tolist(), b[:, j].tolist()), (i, j)


def test_matmul_does_not_depend_on_summation_order():
    """Reordering the K axis (what another BLAS does in effect) leaves every bit in place on
    bf16-valued operands (every case's inputs), where a plain float64 matmul moves in the last
    bits; on full float64 operands (softmax weights) the result moves by at most an ulp."""
    rng = np.random.default_rng(0)
    a = torch.from_numpy(numerics.round_bf16_np(rng.standard_normal((16, 4096)) * np.exp(rng.uniform(-3, 3, (16, 4096)))))
    b = torch.from_numpy(numerics.round_bf16_np(rng.standard_normal((4096, 24))))
    perm = torch.from_numpy(rng.permutation(4096))
    ref, moved = exact.matmul(a, b), exact.matmul(a[:, perm], b[perm])
    assert torch.equal(ref, moved)
    for i, j in ((0, 0), (3, 7), (15, 23)):
        assert ref[i, j].item() == _exact_dot(a[i].tolist(), b[:, j].tolist())
    # a pre-split right operand gives the same bits
    assert torch.equal(exact.matmul(a, exact.SplitB(b)), ref)
    # softmax-like float64 weights (all 53 bits used) against bf16 values
    w = torch.from_numpy(np.exp(-rng.uniform(0, 12, (16, 4096))))
    r1, r2 = exact.matmul(w, b), exact.matmul(w[:, perm], b[perm])
    ulp = torch.from_numpy(np.spacing(np.abs(r1.numpy())))
    assert ((r1 - r2).abs() <= ulp).all()
    plain = torch.matmul(w, b) - torch.matmul(w[:, perm], b[perm])
    assert (plain.abs() > ulp).sum().item() > 0  # the plain product does move: the test can fail
    assert (r1 != r2).sum().item() < (plain != 0).sum().item() / 10


def test_cos_sin_are_correctly_rounded():
    # against the platform libm (faithful, within an ulp) and exact identities
    xs = [0.0, 1e-8, 0.5, 1.0, math.pi / 4, 3.0, 100.0, 16383 * 0.1, 16383.0, -2.5]
    c, s = exact.cos_sin_array(np.array(xs))
    for x, ci, si in zip(xs, c, s):
        assert abs(ci - math.cos(x)) <= math.ulp(ci) and abs(si - math.sin(x)) <= math.ulp(si), x
    assert c[0] == 1.0 and s[0] == 0.0
    # sin(1e-8) = 1e-8 - 1.7e-25: the nearest float64 is 1e-8's neighbour below or itself
    assert s[1] == float(Fraction(1e-8) - Fraction(1e-8) ** 3 / 6)
    exact.self_check()


def test_softmax_scales_are_the_nearest_float64():
    # (nope+rope)^-1/2 for 576 = 24^2: exactly the float64 nearest to 1/24
    assert exact.inv_sqrt(576) == float(Fraction(1, 24))
    assert exact.inv_sqrt(192) == float(exact._CTX.divide(1, exact.sqrt(192)))
    v3 = config.preset("v3")
    m = 0.1 * math.log(40.0) + 1.0
    assert abs(v3.softmax_scale - 192 ** -0.5 * m * m) <= 2 * math.ulp(v3.softmax_scale)


def test_fsum_rows():
    x = np.array([[1e16, 1.0, -1e16, 1.0], [0.1] * 4])
    assert exact.fsum_rows(x).tolist() == [2.0, math.fsum([0.1] * 4)]
