"""The accuracy contract of docs/design.md, in one place for Python.

The tolerance table (generated from Go's internal/tolerance), the float64
references of the ops' formulas and the layout helpers they need live here,
once: python_tests/support.py (the pytest suite's helpers), the package's
smoke tests and scripts/golden.py and scripts/demo.py import them. It is a
module of the package rather than a file of python_tests/ because the
scripts and the smoke tests of an installed wheel are not run from the
checkout's tests; nothing else in the package uses it.

An element passes when ``|got - want| <= atol * max|want| + rtol * |want|``,
with ``max|want|`` the largest finite magnitude of the output and (rtol, atol)
the dtype's row of TOLERANCES.
"""

import numpy as np
import tensorflow as tf

from gobn._opdefs_gen import CHANNELS_FIRST  # noqa: F401  (re-exported for the tests and scripts)
from gobn._tolerance_gen import TOLERANCES  # (rtol, atol) per dtype name, from docs/design.md


def tolerance(dtype):
    """(rtol, atol) of dtype: a tf.DType or any name tf.as_dtype takes ("float", "half", ...)."""
    return TOLERANCES[tf.as_dtype(dtype).name]


def as_float64(value):
    """value (a tensor, variable or array-like of any float dtype) as a float64 numpy array."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        value = value.numpy()
    return np.asarray(value).astype(np.float64)


def tolerance_bound(want, dtype):
    """The per-element bound atol*max|want| + rtol*|want| for dtype."""
    rtol, atol = tolerance(dtype)
    want = as_float64(want)
    scale = np.max(np.abs(want[np.isfinite(want)]), initial=0.0)
    return atol * scale + rtol * np.abs(want)


def assert_close(got, want, dtype, what="output"):
    """Asserts got matches want within dtype's tolerance, element-wise.

    Shapes must be equal; NaN must sit where want has NaN.
    """
    got, want = as_float64(got), as_float64(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    if got.size == 0:
        return
    err = np.abs(got - want)
    bound = tolerance_bound(want, dtype)
    both_nan = np.isnan(got) & np.isnan(want)
    bad = ~(err <= bound) & ~both_nan
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf), -1.0)), got.shape)
        raise AssertionError(
            f"{what} ({tf.as_dtype(dtype).name} tolerance): {bad.sum()} of {got.size} elements "
            f"out of tolerance; worst at {tuple(int(k) for k in i)}: got {got[i]!r}, want {want[i]!r}, "
            f"|err| {err[i]:.3g} > bound {bound[i]:.3g}; max |err| {np.nanmax(err):.3g}")


# ---------------------------------------------------------------------------
# Layouts


def channel_axis(data_format, rank):
    return 1 if data_format in CHANNELS_FIRST else rank - 1


def to_channels_last(array, data_format):
    """Moves the channel axis of a data_format-laid-out array to the end."""
    return np.moveaxis(array, 1, -1) if data_format in CHANNELS_FIRST else array


def from_channels_last(array, data_format):
    """Lays out a channels-last array as data_format."""
    return np.moveaxis(array, -1, 1) if data_format in CHANNELS_FIRST else array


def channels_last_format(rank):
    return "NHWC" if rank == 4 else "NDHWC"


# ---------------------------------------------------------------------------
# float64 references (docs/design.md formulas)


def fused_grad_reference(y_backprop, x, scale, mean, variance, epsilon, is_training, data_format):
    """Exact float64 FusedBatchNormGrad*: (x_backprop, scale_backprop, offset_backprop).

    With c = 1/sqrt(variance + epsilon) and sums over all but the channel axis:
      offset_backprop = sum(dy)
      training:  scale_backprop = sum(dy*(x-mean))*c,
                 x_backprop = scale*c*(dy - sum(dy)/R - (x-mean)*c^2*sum(dy*(x-mean))/R)
      inference: scale_backprop = c*sum(dy*(x-mean)), x_backprop = dy*scale*c
    """
    dy = to_channels_last(as_float64(y_backprop), data_format)
    x = to_channels_last(as_float64(x), data_format)
    scale, mean, variance = (as_float64(a) for a in (scale, mean, variance))
    axes = tuple(range(dy.ndim - 1))
    r = int(np.prod(dy.shape[:-1]))
    c = 1.0 / np.sqrt(variance + np.float64(np.float32(epsilon)))
    centered = x - mean
    sum_dy = dy.sum(axis=axes)
    sum_dy_centered = (dy * centered).sum(axis=axes)
    offset_backprop = sum_dy
    scale_backprop = sum_dy_centered * c
    if not is_training:
        x_backprop = dy * scale * c
    elif r == 0:
        x_backprop = np.zeros_like(dy)
    else:
        x_backprop = scale * c * (dy - sum_dy / r - centered * c * c * sum_dy_centered / r)
    return from_channels_last(x_backprop, data_format), scale_backprop, offset_backprop


def global_norm_grad_reference(t, m, v, gamma, backprop, variance_epsilon, scale_after_normalization):
    """Exact float64 BatchNormWithGlobalNormalizationGrad: (dx, dm, dv, db, dg).

    With s = 1/sqrt(v+eps), g = gamma (or 1 without scale_after_normalization):
      db = sum(dy), dx = dy*s*g, dm = -db*s*g, dg = s*sum(dy*(x-m)) (0 without scaling),
      dv = -0.5*s^3*g*sum(dy*(x-m)).
    """
    x, dy = as_float64(t), as_float64(backprop)
    m, v, gamma = (as_float64(a) for a in (m, v, gamma))
    axes = (0, 1, 2)
    s = 1.0 / np.sqrt(v + np.float64(np.float32(variance_epsilon)))
    g = gamma if scale_after_normalization else np.ones_like(gamma)
    db = dy.sum(axis=axes)
    sum_dy_centered = (dy * (x - m)).sum(axis=axes)
    dx = dy * s * g
    dm = -db * s * g
    dv = -0.5 * s**3 * g * sum_dy_centered
    dg = s * sum_dy_centered if scale_after_normalization else np.zeros_like(gamma)
    return dx, dm, dv, db, dg
