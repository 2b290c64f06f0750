"""The operator library (tensor-expression builders with FLOP counts) and its workload catalogue.

>>> from tensorir import ops
>>> A, B, C = ops.matmul(256, 256, 256)
"""
from tensorir.ops.library import (  # noqa: F401
    avg_pool2d, batch_matmul, conv2d, conv_output_size, dense, depthwise_conv2d, elementwise_chain,
    layer_norm, matmul, max_pool2d, pad2d, softmax,
)
