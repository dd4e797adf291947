"""Float -> integer conversion of out-of-range values matches the CPU backend.

PyTorch's CPU backend on x86 converts as the cvtt instructions do: in range,
truncation toward zero; out of range or NaN, the most negative integer.
int64 and uint8 go through int64, int32/int16/int8 through int32 and keep
the low bits (so 3e9 is INT32_MIN as int32 and 0 as int8; -1.0 is 255 as
uint8). Here every float dtype goes to every integer dtype and bool, for
sizes on both sides of the vector width, contiguous and strided, and the
tpu's bytes must equal the CPU's."""
import math

import pytest
import torch

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]
SIZES = [1, 7, 1000]

# Out of range for every integer type, at the int32/int64 edges, and in
# range values that wrap when narrowed (300 -> 44 as int8, -2.5 -> 254 as
# uint8); mixed in one tensor so that vector lanes differ.
VALUES = [
    3e9, -3e9, math.inf, -math.inf, math.nan, 1e20, -1e20, 2.0**31, -(2.0**31), -2147483648.75,
    -2147483649.0, 2147483647.5, 4294967301.0, 2.0**63, -(2.0**63), 1e19, 70000.5, -70000.5,
    300.7, -300.7, 255.9, 256.0, 128.0, -129.0, -2.5, 2.5, -1.0, 0.5, -0.0, 0.0,
]


def _source(dtype, n, shift=0):
    """n values cycling through VALUES (starting at `shift`), as dtype."""
    vals = [VALUES[(i + shift) % len(VALUES)] for i in range(n)]
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def _check(got, want, what):
    assert got.device.type == "tpu", what
    got = got.cpu()
    assert got.dtype == want.dtype, what
    if not torch.equal(got, want):
        bad = (got != want).nonzero().flatten()[:5].tolist()
        raise AssertionError(
            f"{what}: first differing elements {bad}: tpu {got.flatten()[bad].tolist()}, "
            f"cpu {want.flatten()[bad].tolist()}"
        )


@pytest.mark.parametrize("dst", INTS, ids=str)
@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_float_to_int_matches_cpu(src, dst):
    for n in SIZES:
        for shift in (0, 3):
            x = _source(src, n, shift)
            xt = x.to("tpu")
            what = f"{src} -> {dst}, n={n}, shift={shift}"
            _check(xt.to(dst), x.to(dst), f"{what}, contiguous")
            # Strided input: every other element of a longer tensor.
            x2 = _source(src, 2 * n, shift)
            _check(x2.to("tpu")[::2].to(dst), x2[::2].to(dst), f"{what}, strided input")
            # Strided output: copy_ into every other element.
            out = torch.zeros(2 * n, dtype=dst)
            out_t = out.to("tpu")
            out[::2].copy_(x)
            out_t[::2].copy_(xt)
            _check(out_t, out, f"{what}, strided output")
            # Host to device with a conversion on the way.
            _check(x.to("tpu", dtype=dst), x.to(dst), f"{what}, cpu -> tpu")


@pytest.mark.parametrize("dst", INTS, ids=str)
def test_float_to_int_transposed(dst):
    x = _source(torch.float32, 37 * 29).reshape(37, 29)
    _check(x.to("tpu").t().to(dst), x.t().to(dst), "transposed")
    _check(x.to("tpu").t().contiguous().to(dst), x.t().contiguous().to(dst), "transposed copy")


@pytest.mark.parametrize("dst", [torch.int8, torch.int32, torch.int64, torch.uint8, torch.bool],
                         ids=str)
@pytest.mark.parametrize("src", [torch.float32, torch.float64], ids=str)
def test_sum_with_integer_dtype_converts_first(src, dst):
    # CPU converts each element to the requested dtype before adding, so
    # 3e9 contributes INT32_MIN to an int32 sum.
    x = _source(src, 1000).reshape(40, 25)
    for dim in (None, 0, 1):
        want = x.sum(dtype=dst) if dim is None else x.sum(dim, dtype=dst)
        xt = x.to("tpu")
        got = xt.sum(dtype=dst) if dim is None else xt.sum(dim, dtype=dst)
        _check(got, want, f"sum {src} -> {dst}, dim={dim}")
