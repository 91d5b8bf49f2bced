"""The gradients a SavedModel keeps of gobn: stock TensorFlow's ops.

``tf.saved_model.save`` (under Keras 3's ``model.export``, tf_keras'
``model.save`` and ``tf.lite.TFLiteConverter``'s SavedModels too) writes,
beside each traced function, the gradient function of every
``tf.custom_gradient`` in it: with ``SaveOptions(experimental_custom_gradients=True)``,
the default from TensorFlow 2.6 on, it traces each registered gradient again
while it saves, inside its save context. gobn's custom gradients
(``gobn.fused_batch_norm``, and the Keras layers through it) look at that
context: traced for a SavedModel, they emit stock's ``FusedBatchNormGradV3``
with the inputs stock's own gradient gives it, instead of
``Gobn>FusedBatchNormGradV3``. So

- the SavedModel holds stock ops only, and loads, serves and converts to
  TFLite where gobn was never installed (TF Serving cannot load op
  libraries);
- a loaded model still differentiates, with stock's gradient (equal to
  gobn's to float32 rounding), for fine-tuning anywhere;
- the training process itself, which differentiates the functions it traced
  outside the save context, keeps gobn's gradient.

Dropping the custom gradient from the inference path would not do: a
SavedModel keeps every function traced so far, training ones too, and a frozen
layer's gradient in the training process is gobn's. Saving with
``experimental_custom_gradients=False`` would leave the loaded model without a
gradient for the layers.
"""

import tensorflow as tf
from tensorflow.python.saved_model import save_context

# Channels-first layout → (its channels-last twin, the permutation to it, the one back).
_TO_CHANNELS_LAST = {
    "NCHW": ("NHWC", [0, 2, 3, 1], [0, 3, 1, 2]),
    "NCDHW": ("NDHWC", [0, 2, 3, 4, 1], [0, 4, 1, 2, 3]),
}


def saving():
    """Whether the gradient being traced is one tf.saved_model.save keeps."""
    return save_context.in_save_context()


def stock_fused_grad(y_backprop, x, scale, reserve_space_1, reserve_space_2, reserve_space_3, epsilon, data_format,
                     is_training):
    """(x_backprop, scale_backprop, offset_backprop) from stock's FusedBatchNormGradV3.

    The arguments are those of Gobn>FusedBatchNormGradV3. Stock's CPU kernel
    rejects channels-first inference, which gobn's computes in place, so
    there the tensors go through channels-last, as stock's own gradient of
    FusedBatchNormV3 does.
    """
    back = None
    if not is_training and data_format in _TO_CHANNELS_LAST:
        data_format, forward, back = _TO_CHANNELS_LAST[data_format]
        y_backprop, x = tf.transpose(y_backprop, forward), tf.transpose(x, forward)
    dx, dscale, doffset, _, _ = tf.raw_ops.FusedBatchNormGradV3(
        y_backprop=y_backprop, x=x, scale=scale, reserve_space_1=reserve_space_1, reserve_space_2=reserve_space_2,
        reserve_space_3=reserve_space_3, epsilon=epsilon, data_format=data_format, is_training=is_training)
    if back is not None:
        dx = tf.transpose(dx, back)
    return dx, dscale, doffset
