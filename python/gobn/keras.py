"""Keras layers whose backward pass runs on gobn's kernels.

``BatchNormalization`` takes the arguments of ``keras.layers.BatchNormalization``
and computes what it computes: the batch statistics in training (updating the
moving mean and the moving biased variance with ``momentum``), the moving
statistics otherwise. The forward pass is stock ``FusedBatchNormV3``; the
gradient is ``Gobn>FusedBatchNormGradV3`` (``gobn.fused_batch_norm``), in
training and in inference (a frozen layer still passes gradients to x, gamma
and beta).

With ``synchronized=True`` (the default of ``SyncBatchNormalization``) and more
than one replica, the statistics are those of the global batch and the
gradient is ``Gobn>BatchNormGradReduce`` → all-reduce →
``Gobn>BatchNormGradApply`` (``gobn.sync_batch_norm``).

Any axis works: a 4-D or 5-D input with ``axis=-1`` or ``axis=1`` is handed to
the fused ops as NHWC/NDHWC or NCHW/NCDHW; other ranks and axes are reshaped
(without copying) to NHWC ``[R, 1, 1, C]`` or NCHW ``[pre, C, 1, post]``.
The stock layer's code runs instead, unchanged, for what the fused ops do not
cover: a ``mask``, ``renorm=True``, or float64 inputs.

``convert(model)`` gives an existing Keras 3 model gobn's layers in place of
every ``keras.layers.BatchNormalization``, weights, moving statistics and
config kept; ``to_stock(model)`` gives the stock layers back, for ``.keras``
files that Keras loads without gobn. ``gobn.enable()`` instead gives the
stock class itself this layer's call, for the process
(``_enable_stock_layers``): every stock layer then computes what ``convert``
would make it compute, and stays stock in every file it is saved to. ``import gobn`` imports this module, so
the layers are registered with Keras (as ``gobn>BatchNormalization`` and
``gobn>SyncBatchNormalization``) wherever gobn is imported. SavedModels of
the layers hold stock ops only (gobn._saving).
"""

import keras
import tensorflow as tf

import gobn

__all__ = ["BatchNormalization", "SyncBatchNormalization", "convert", "to_stock"]


def _fused_view(x, axis):
    """x as a rank-4/5 tensor for the fused ops: (x', data_format, restore)."""
    rank = x.shape.rank
    axis %= rank
    if rank in (4, 5) and axis in (1, rank - 1):
        formats = {(4, 1): "NCHW", (4, 3): "NHWC", (5, 1): "NCDHW", (5, 4): "NDHWC"}
        return x, formats[(rank, axis)], lambda y: y
    shape = tf.shape(x, out_type=tf.int64)
    channels = x.shape[axis]
    if axis == rank - 1:
        view = tf.reshape(x, tf.stack([tf.reduce_prod(shape[:-1]), 1, 1, channels]))
        data_format = "NHWC"
    else:
        view = tf.reshape(x, tf.stack([tf.reduce_prod(shape[:axis]), channels, 1, tf.reduce_prod(shape[axis + 1:])]))
        data_format = "NCHW"
    return view, data_format, lambda y: tf.reshape(y, shape)


# Keras 3, or Keras 2 (the keras package of TensorFlow 2.14 and 2.15).
_KERAS3 = keras.__version__.startswith("3.")

# The stock layer's own call, kept before gobn.enable() replaces it: where
# gobn's code does not run (_runs_on_gobn), the stock code does.
_STOCK_CALL = keras.layers.BatchNormalization.call


def _channel_axis(layer):
    """The layer's one channel axis, or None (Keras 2 keeps axis as a list, and may hold several)."""
    axis = layer.axis
    if isinstance(axis, (list, tuple)):
        axis = axis[0] if len(axis) == 1 else None
    return axis


def _runs_on_gobn(layer, inputs, mask):
    """Whether gobn's code computes the layer's call on inputs: not for a mask,
    renorm, float64 or several axes, which the stock code keeps."""
    return (mask is None and not layer.renorm and inputs.shape.rank is not None
            and _channel_axis(layer) is not None and inputs.dtype != tf.float64
            and (inputs.dtype.is_floating or inputs.dtype.is_integer))


def _call(layer, inputs, training, mask):
    """keras.layers.BatchNormalization's call for layer, its backward pass on gobn.

    gobn's layers run it, and so do the stock layers after gobn.enable():
    the same code, so the same results either way.
    """
    inputs = tf.convert_to_tensor(inputs)
    if not _runs_on_gobn(layer, inputs, mask):
        return _STOCK_CALL(layer, inputs, training=training, mask=mask)
    x, data_format, restore = _fused_view(tf.cast(inputs, tf.float32), _channel_axis(layer))
    channels = layer.moving_mean.shape[0]
    gamma = tf.cast(layer.gamma, tf.float32) if layer.scale else tf.ones([channels])
    beta = tf.cast(layer.beta, tf.float32) if layer.center else tf.zeros([channels])
    moving_mean = tf.cast(layer.moving_mean, tf.float32)
    moving_variance = tf.cast(layer.moving_variance, tf.float32)
    if training and layer.trainable:
        y, mean, variance = _batch_statistics(layer, x, gamma, beta, data_format)
        layer.moving_mean.assign(moving_mean * layer.momentum + mean * (1.0 - layer.momentum))
        layer.moving_variance.assign(moving_variance * layer.momentum + variance * (1.0 - layer.momentum))
    else:
        y, _, _ = gobn.fused_batch_norm(x, gamma, beta, mean=moving_mean, variance=moving_variance,
                                        epsilon=layer.epsilon, data_format=data_format, is_training=False)
    return tf.cast(restore(y), layer.compute_dtype)


def _batch_statistics(layer, x, gamma, beta, data_format):
    """(y, mean, variance) of the batch, the global batch when synchronized:
    the variance the stock layer averages into its moving variance."""
    ctx = tf.distribute.get_replica_context()
    if layer.synchronized and ctx is not None and ctx.num_replicas_in_sync > 1:
        return gobn.sync_batch_norm(x, gamma, beta, epsilon=layer.epsilon, data_format=data_format,
                                    replica_context=ctx)
    y, mean, variance = gobn.fused_batch_norm(x, gamma, beta, epsilon=layer.epsilon,
                                              data_format=data_format, is_training=True)
    if getattr(layer, "fused", False):
        # Keras 2's layer on its fused path averages FusedBatchNormV3's
        # batch_variance, which is Bessel-corrected (R/(R−1)).
        return y, mean, variance
    # Keras 3's layer (and Keras 2's unfused path) averages the biased
    # variance.
    channels = max(layer.moving_mean.shape[0], 1)
    per_channel = tf.cast(tf.size(x, out_type=tf.int64) // channels, tf.float32)
    variance = variance * tf.maximum(per_channel - 1.0, 0.0) / tf.maximum(per_channel, 1.0)
    return y, mean, variance


@keras.saving.register_keras_serializable(package="gobn")
class BatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose backward pass runs on gobn.

    Same arguments, weights, moving-average updates and results as the stock
    layer (see the module's doc for what falls back to the stock code).
    It supports jit_compile (Keras' default on a GPU) where gobn's kernels
    run inside XLA (TensorFlow 2.17 and later, gobn.xla_status()); elsewhere
    it tells Keras it does not, and model.compile's "auto" leaves XLA off.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._gobn_init()

    def _gobn_init(self):
        """What gobn's layer sets beyond the stock layer's state (convert() calls it too)."""
        self.supports_jit = gobn._xla.available_or_false()

    def call(self, inputs, training=None, mask=None):
        return _call(self, inputs, training, mask)


@keras.saving.register_keras_serializable(package="gobn")
class SyncBatchNormalization(BatchNormalization):
    """BatchNormalization synchronized across the replicas of a tf.distribute strategy.

    In training under a strategy with more than one replica, the batch
    statistics are those of the global batch (all replicas' batches
    together), and the gradient is gobn's BatchNormGradReduce, a cross-replica
    all-reduce and BatchNormGradApply: the layer computes what
    BatchNormalization computes on the concatenated batch. With one replica it
    is BatchNormalization.
    """

    def __init__(self, *args, synchronized=True, **kwargs):
        super().__init__(*args, synchronized=synchronized, **kwargs)


def _enabled_call(self, inputs, training=None, mask=None):
    """keras.layers.BatchNormalization.call once gobn.enable() has run (_enable_stock_layers)."""
    if type(self) is not keras.layers.BatchNormalization:
        # A subclass's code is its own (convert refuses them for that reason).
        return _STOCK_CALL(self, inputs, training=training, mask=mask)
    if gobn._xla.in_xla_context() and not gobn._xla.available():
        # As enable()'s other gradients: XLA compiles stock's where gobn's
        # kernels cannot run inside it.
        gobn._xla.fall_back("keras.layers.BatchNormalization")
        return _STOCK_CALL(self, inputs, training=training, mask=mask)
    return _call(self, inputs, training, mask)


def _enable_stock_layers():
    """Runs every keras.layers.BatchNormalization of the process on gobn's code (gobn.enable()).

    Keras 3's layer computes batch norm from moments and elementwise ops, so
    no kernel enable() registers reaches it; instead this replaces the
    class's ``call`` with gobn's layer's, for the process: the layers keep
    their class, config and variables (``.keras`` files and SavedModels stay
    stock's), and compute what ``convert`` would make them compute, falling
    back to the stock code where gobn's layer does. Layers made before and
    after are covered; subclasses other than gobn's keep their own code.
    Keras 2 (the ``keras`` of TensorFlow 2.14 and 2.15) needs nothing: its
    layer runs stock's fused op, whose gradient enable() covers; nor does
    Keras 3 on another backend than TensorFlow (JAX, PyTorch), whose layers
    gobn's TensorFlow ops cannot run, and which is left alone.
    """
    if _KERAS3 and keras.backend.backend() == "tensorflow":
        keras.layers.BatchNormalization.call = _enabled_call


def _is_keras3(obj):
    return _KERAS3 and isinstance(obj, keras.layers.Layer)


def _gobn_class(layer):
    return SyncBatchNormalization if layer.synchronized else BatchNormalization


def _adopt(layer):
    """Makes a stock keras.layers.BatchNormalization gobn's layer, in place.

    gobn's classes subclass the stock layer and add no state but what
    _gobn_init sets, so the layer keeps its variables (the same objects:
    optimizer slots, checkpoints and every reference to them stay valid),
    its config, build state and name.
    """
    layer.__class__ = _gobn_class(layer)
    layer._gobn_init()


def _convert_in_place(model):
    layers = model._flatten_layers(include_self=True, recursive=True)
    foreign = [layer for layer in layers if isinstance(layer, keras.layers.BatchNormalization)
               and not isinstance(layer, BatchNormalization) and type(layer) is not keras.layers.BatchNormalization]
    if foreign:
        names = ", ".join(f"{layer.name!r} ({type(layer).__module__}.{type(layer).__qualname__})" for layer in foreign)
        raise ValueError(
            f"gobn.keras.convert: {names} subclass keras.layers.BatchNormalization; gobn cannot tell what their "
            "own code does, so it converts none of the model. Derive them from gobn.keras.BatchNormalization "
            "instead (it takes the same arguments), or convert the stock layers yourself.")
    converted = 0
    for layer in layers:
        if type(layer) is keras.layers.BatchNormalization:
            _adopt(layer)
            converted += 1
    if converted:
        # Functions traced with the stock layers: the next fit/evaluate/predict traces again.
        for attr in ("train_function", "test_function", "predict_function"):
            if getattr(model, attr, None) is not None:
                setattr(model, attr, None)
        # Where gobn's kernels cannot run inside XLA ("auto" resolves to False then).
        if getattr(model, "compiled", False) and getattr(model, "_jit_compile", None) \
                and not gobn._xla.available_or_false():
            model.jit_compile = False
    return model


def convert(model, in_place=False):
    """Returns the model with gobn's layers for every keras.layers.BatchNormalization.

    Each stock ``keras.layers.BatchNormalization`` (Keras 3) becomes
    ``gobn.keras.BatchNormalization``, or ``gobn.keras.SyncBatchNormalization``
    where it has ``synchronized=True``: same config (momentum, epsilon, axis,
    center, scale, initializers, regularizers, constraints, dtype policy,
    trainable, name), same weights and moving statistics, same results
    (forward pass on stock FusedBatchNormV3, backward on
    ``Gobn>FusedBatchNormGradV3``; see the module's doc). Layers found at any
    depth are converted: nested Sequential, functional and subclassed models,
    custom layers holding BatchNormalization layers in attributes, lists or
    dicts, layers shared between several places.

    It is the explicit choice, for one model; ``gobn.enable()`` instead gives
    every stock layer of the process this computation, leaving its class.

    Whether the model is copied or changed is the caller's to say, by
    ``in_place``:

    - ``in_place=False`` (the default) returns a new model and leaves the
      original as it was: ``keras.models.clone_model(model, recursive=True)``
      with the original's weights copied, for Sequential and functional
      models (keras.Sequential, keras.Model(inputs, outputs) and their nested
      models); the two train independently. A compiled model's clone is
      compiled from its compile config (a fresh optimizer, as clone_model
      does). Keras cannot copy subclassed models (``class M(keras.Model)``
      with a custom ``call``) or other layers: for them it raises TypeError.
    - ``in_place=True`` converts the model itself, of any kind, and returns
      it: the layers keep their variable objects, so a compiled model keeps
      its optimizer and its state; functions Keras traced (fit, evaluate,
      predict) are traced again at their next call. Every BatchNormalization
      layer Keras tracks is converted: those assigned to attributes of the
      model or of its (nested) layers, directly or in lists, tuples and
      dicts.

    Not supported:

    - BatchNormalization layers Keras does not track (created inside
      ``call``, or held by an object that is not a Keras layer): they stay
      stock, silently; keep layers in attributes of layers.
    - Subclasses of keras.layers.BatchNormalization other than gobn's:
      ValueError (their code is theirs; derive them from
      gobn.keras.BatchNormalization instead). gobn's layers already in the
      model are kept.
    - tf_keras (Keras 2) models and layers: TypeError; their
      BatchNormalization runs stock's fused op, whose gradient
      ``gobn.enable()`` gives gobn's kernels without any conversion.

    Args:
      model: a Keras 3 model or layer.
      in_place: False (default) for a converted copy (TypeError for a model
        Keras cannot copy), True to convert model itself.

    Returns:
      The converted model.
    """
    if not _is_keras3(model):
        module = type(model).__module__
        if module.startswith(("tf_keras", "keras.src.engine", "tensorflow.python.keras")):
            raise TypeError(
                f"gobn.keras.convert takes Keras 3 models; {type(model).__name__} is a tf_keras (Keras 2) "
                "model, whose BatchNormalization runs stock's fused op: call gobn.enable() before it runs "
                "and its gradients run on gobn unconverted.")
        raise TypeError(f"gobn.keras.convert takes a Keras 3 model or layer, not {type(model).__qualname__}")
    return _copied_or_in_place(model, in_place, _convert_in_place, "convert")


def _copied_or_in_place(model, in_place, change, caller):
    """change(model) for in_place, else change of a copy with model's weights."""
    if in_place:
        return change(model)
    cloneable = isinstance(model, keras.Sequential) or keras.src.models.functional.Functional in type(model).__mro__
    if not cloneable:
        raise TypeError(
            f"gobn.keras.{caller}: Keras cannot copy {type(model).__qualname__} (only Sequential and functional "
            f"models clone); pass in_place=True to {caller} it in place")
    clone = keras.models.clone_model(model, recursive=True)
    clone.set_weights(model.get_weights())
    return change(clone)


def _to_stock_in_place(model):
    layers = model._flatten_layers(include_self=True, recursive=True)
    changed = 0
    for layer in layers:
        if isinstance(layer, BatchNormalization):
            # gobn's classes add no state but what _gobn_init sets: the
            # layer keeps its variables, config, build state and name.
            layer.__class__ = keras.layers.BatchNormalization
            layer.supports_jit = True  # the stock layer's
            changed += 1
    if changed:
        for attr in ("train_function", "test_function", "predict_function"):
            if getattr(model, attr, None) is not None:
                setattr(model, attr, None)
    return model


def to_stock(model, in_place=False):
    """Returns the model with keras.layers.BatchNormalization for each of gobn's layers.

    The inverse of ``convert``: each ``gobn.keras.BatchNormalization`` and
    ``SyncBatchNormalization`` (at any depth) becomes the stock layer, with
    the same config (a synchronized layer keeps ``synchronized=True``),
    weights and moving statistics, and the same results to float32 rounding
    (the stock layer computes them with Keras' own ops). A ``.keras`` file of
    the result holds only stock classes, so Keras loads it where gobn is not
    installed; ``convert`` of it gives gobn's layers back. ``in_place`` is as
    for ``convert``: False (default) returns a copy (Sequential and
    functional models), True changes the model itself.

    SavedModels need no such step: ``model.export`` and
    ``tf.saved_model.save`` of gobn's layers write stock ops only.

    Args:
      model: a Keras 3 model or layer.
      in_place: False (default) for a copy (TypeError for a model Keras
        cannot copy), True to change model itself.

    Returns:
      The model with stock layers.
    """
    if not _is_keras3(model):
        raise TypeError(f"gobn.keras.to_stock takes a Keras 3 model or layer, not {type(model).__qualname__}")
    return _copied_or_in_place(model, in_place, _to_stock_in_place, "to_stock")
