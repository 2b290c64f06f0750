"""Op kinds of the graph IR: for each, its inputs, attributes, type inference, numpy semantics and
fusion pattern. The kinds and their semantics are ONNX's, with attributes normalized by the
importer (Python ints/floats/strs/tuples; ONNX's attribute-like inputs become attributes).

The canonical op set (``Pattern`` in brackets):

- unary [ELEMWISE]: Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Neg, Abs, Reciprocal, Erf, Identity,
  Clip(min, max: floats, default -inf/+inf), Gelu(approximate: "none" | "tanh"); Cast(to: numpy
  dtype name) [INJECTIVE];
- binary with multidirectional broadcasting [BROADCAST]: Add, Sub, Mul, Div, Pow, Equal, Less,
  Greater; Where(condition, X, Y) broadcasting all three;
- [OUT_FUSABLE]: MatMul (numpy's batched semantics), Gemm(alpha, beta, transA, transB; C
  optional), Conv (2-d NCHW; strides (2), pads (4: top, left, bottom, right), dilations (2),
  group; bias optional);
- BatchNormalization(epsilon; X, scale, B, mean, var; inference), LayerNormalization(axis >= 0,
  epsilon; X, Scale, B?) [REDUCE], Gelu - defined in ``normalization``;
- [REDUCE]: MaxPool(kernel_shape, strides, pads, dilations, ceil_mode), AveragePool(kernel_shape,
  strides, pads, count_include_pad, ceil_mode), GlobalAveragePool, Softmax(axis >= 0),
  ReduceMean, ReduceSum, ReduceMax(axes: sorted non-negative tuple, keepdims: 0 | 1);
- [INJECTIVE]: Transpose(perm), Reshape(shape: final static shape), Concat(axis >= 0),
  Slice(starts, ends, axes, steps: normalized and clamped), Gather(axis >= 0; indices an input),
  Expand(shape: final static shape).

Defined in ``activation``, ``extra``, ``reduce_extra`` and ``deconv``:

- unary [ELEMWISE]: LeakyRelu(alpha), ThresholdedRelu(alpha), Elu(alpha), Selu(alpha, gamma),
  HardSigmoid(alpha, beta), HardSwish, Swish(alpha), Softplus, Softsign, Mish, Celu(alpha), Shrink(bias, lambd),
  Sin, Cos, Floor, Ceil, Round (halves to even) on floats; Sign; Not (bool); Trilu(upper, k);
- binary [BROADCAST]: Max, Min, PRelu(X, slope: broadcast to X), LessOrEqual, GreaterOrEqual,
  And, Or, Xor, Mod(fmod; floats only with fmod=1, which folds at import but has no kernel);
- [INJECTIVE]: Pad(pads: 2 * rank ints, begins then ends, negative crops; mode: "constant" |
  "reflect" | "edge"; value: float), Tile(repeats), GatherElements(axis >= 0; indices an input);
- [REDUCE]: ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare (axes, keepdims as for
  ReduceSum), ArgMax, ArgMin(axis >= 0, keepdims, select_last_index; int64 output),
  LRN(size, alpha, beta, bias), LogSoftmax(axis >= 0), CumSum(axis >= 0, exclusive, reverse),
  TopK(axis >= 0, k, largest, output: 0 values | 1 int64 indices; one node per ONNX output used);
- [OUT_FUSABLE]: ConvTranspose (2-d NCHW; strides, pads (4), dilations, output_padding (2), group;
  bias optional; the importer resolves ONNX's output_shape and auto_pad=SAME_* into pads and
  output_padding, and turns one with known weights and no dilation into a Conv over the
  output phases followed by their interleaving).

Imported as existing kinds (no op of their own): ONNX's variadic Sum, Mean, Max, Min (chains of
Add/Max/Min, Mean with a Div), Split (a Slice per output), Resize nearest/linear/cubic (Gathers with
import-time index maps, linear weighted by constants), GlobalMaxPool (ReduceMax),
DepthToSpace/SpaceToDepth (Reshape, Transpose, Reshape), InstanceNormalization,
GroupNormalization and ReduceLogSumExp (their arithmetic in existing kinds), Einsum (ReduceSum,
Transpose, Reshape, batched MatMul), ScatterND, ScatterElements and GatherND with indices known at
import time (a Concat of the flattened inputs and one Gather with a constant map). 1-d Conv, MaxPool, AveragePool and ConvTranspose (N, C, L) run
as their 2-d kinds over (N, C, 1, L) between Reshapes.

ONNX's Flatten, Squeeze and Unsqueeze become Reshape; Shape, ConstantOfShape, Range, Constant
and anything computable from static shapes are folded by the importer; Dropout (inference) and
Identity are dropped (an Identity is kept only to give a graph output its ONNX name).

>>> from graph.ops import get_op
>>> get_op("Relu").pattern
<Pattern.ELEMWISE: 0>
"""
from graph.ops.registry import OpDef, Pattern, UnknownOpError, all_ops, get_op, register  # noqa: F401
from graph.ops import elementwise, linalg, normalization, pool, reduce, shape  # noqa: F401  (registration)
from graph.ops import activation, deconv, extra, reduce_extra  # noqa: F401  (registration)
