"""The GlobalNormalizationGrad kind: Gobn>BatchNormWithGlobalNormalizationGrad.

With s = 1/sqrt(v+ε), γ' = γ or 1 (scale_after_normalization):
db = Σdy, dx = dy·s·γ', dm = −db·s·γ', dg = s·Σdy·(t−m), dv = −½·s³·γ'·Σdy·(t−m),
channels last. Its gradient (stock registers none for its twin) is with
respect to all five inputs. Its op is the gradient of stock's
BatchNormWithGlobalNormalization.
"""

import tensorflow as tf

from gobn import _gradients, _opdef, _pfor

# scale_after_normalization of each mode.
MODES = ("scaled", "unscaled")
SCALED = {"scaled": True, "unscaled": False}


def compute(t, m, v, gamma, backprop, variance_epsilon, scale_after_normalization):
    """The outputs dx, dm, dv, db and dg in TF ops (channels last), by name."""
    dtype = t.dtype
    t, m, v, gamma, backprop = _gradients.widen(t, m, v, gamma, backprop)
    axes = [0, 1, 2]
    s = tf.math.rsqrt(v + variance_epsilon)
    g = gamma if scale_after_normalization else tf.ones_like(gamma)
    db = tf.reduce_sum(backprop, axes)
    sum_dy_centered = tf.reduce_sum(backprop * (t - m), axes)
    outputs = {"dx": backprop * s * g, "dm": -db * s * g, "dv": -0.5 * s * s * s * g * sum_dy_centered, "db": db,
               "dg": s * sum_dy_centered if scale_after_normalization else tf.zeros_like(gamma)}
    return {name: tf.cast(value, dtype) for name, value in outputs.items()}


def gradient(op, *grads):
    """The gradient of all five inputs."""
    attrs = dict(variance_epsilon=op.get_attr("variance_epsilon"),
                 scale_after_normalization=op.get_attr("scale_after_normalization"))
    return _gradients.backprop(op, grads, _opdef.inputs_by_name(op), lambda **inputs: compute(**inputs, **attrs))


def convert(pfor_input):
    """t and backprop merged (NHWC), m, v and gamma flattened (gobn._pfor)."""
    pfor_input.stack_inputs()
    stacked = {name: pfor_input.stacked_input(_pfor.index(pfor_input, name)) for name in _pfor.input_names(pfor_input)}
    m = _pfor.ChannelMerge(stacked["t"], "NHWC", 4)
    inputs = {name: m.merge(stacked[name]) for name in ("t", "backprop")}
    inputs.update((name, _pfor.vector(stacked[name])) for name in ("m", "v", "gamma"))
    out = _pfor.run(pfor_input, inputs)
    n = pfor_input.pfor.loop_len_vector
    out = {name: _pfor.wrap(m.split(value) if name == "dx" else m.split_vector(value, n), True)
           for name, value in out.items()}
    return _pfor.outputs(pfor_input, out)


def stock_inputs(op, grads):
    """The op's inputs for stock's BatchNormWithGlobalNormalization op and its
    incoming gradient: the forward's t, m, v and gamma (its inputs but
    beta), and the gradient of its result."""
    given = _opdef.inputs_by_name(op)
    inputs = {name: given[name] for name in ("t", "m", "v", "gamma")}
    inputs["backprop"] = _opdef.by_output_name(op, grads)["result"]
    return inputs


def stock_gradients(outputs):
    """The forward's input gradients by name: the op's five outputs are those
    of t, m, v, beta and gamma."""
    return {"t": outputs["dx"], "m": outputs["dm"], "v": outputs["dv"], "beta": outputs["db"], "gamma": outputs["dg"]}


def sample(case, seed, device):
    """A case: global_norm_inputs and global_norm_grad_reference
    (gobn._testing), every output by T's tolerance. Stock's twin runs only
    in a graph of producer version 8 (global_norm_session), not eagerly nor
    in a tf.function: none to record here."""
    from gobn import _testing

    inputs = _testing.global_norm_inputs(case.dtype, case.shape, seed, device)
    attrs = dict(variance_epsilon=_testing.EPSILON, scale_after_normalization=SCALED[case.mode])
    want = zip(("dx", "dm", "dv", "db", "dg"), _testing.global_norm_grad_reference(**inputs, **attrs), strict=True)
    return _testing.Sample(inputs, attrs, {name: (w, case.dtype) for name, w in want}, None)


def stock_outputs(case, sample):
    """Stock's outputs of a sample on the CPU, its twin run in a graph of
    producer version 8 (gobn._testing.run_stock_global_norm_grad), but none
    in half, in which stock sums."""
    from gobn import _testing

    if case.dtype == tf.float16:
        return None
    return dict(zip(case.op.outputs, _testing.run_stock_global_norm_grad(**sample.inputs, **sample.attrs), strict=True))
