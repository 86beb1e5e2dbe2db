"""Writes the seed corpus of tests/fuzz/fuzz_onnx.c into tests/fuzz/corpus/onnx:
small models over the imported ops (with python3-onnx's helpers), plus
broken ones (truncated, an opset outside 7..17, external data, nesting).
    /usr/bin/python3 tests/fuzz/make_onnx_corpus.py
Deterministic: running it again writes the same bytes."""
import os

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "onnx")
rng = np.random.default_rng(16)


def init(name, shape, dtype=np.float32):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


def save(name, nodes, inputs, outputs, inits=(), opset=13):
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    data = m.SerializeToString()
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(data)
    return data


def vi(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


os.makedirs(OUT, exist_ok=True)
mlp = save("mlp", [h.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
                   h.make_node("Relu", ["h"], ["r"]),
                   h.make_node("Softmax", ["r"], ["y"], axis=-1)],
           [vi("x", T.FLOAT, ["N", 3])], [vi("y", T.FLOAT, ["N", 4])],
           [init("w", (4, 3)), init("b", (4,))])
save("cnn", [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
             h.make_node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], ceil_mode=1),
             h.make_node("GlobalAveragePool", ["a"], ["y"])],
     [vi("x", T.FLOAT, [1, 2, 6, 6])], [vi("y", T.FLOAT, [1, 3, 1, 1])],
     [init("w", (3, 2, 3, 3)), init("b", (3,)), init("s", (3,)), init("bb", (3,)),
      init("m", (3,)), numpy_helper.from_array(np.ones(3, np.float32), "v")])
save("flatten_fold", [h.make_node("Shape", ["x"], ["s"]),
                      h.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                      h.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
                      h.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
                      h.make_node("Reshape", ["x", "shape"], ["y"])],
     [vi("x", T.FLOAT, ["N", 3, 4])], [vi("y", T.FLOAT, ["N", 12])],
     [numpy_helper.from_array(np.array(0, np.int64), "zero"),
      numpy_helper.from_array(np.array([0], np.int64), "ax"),
      numpy_helper.from_array(np.array([-1], np.int64), "m1")])
save("attention", [h.make_node("MatMul", ["x", "wq"], ["q"]),
                   h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                   h.make_node("MatMul", ["q", "xt"], ["s"]),
                   h.make_node("Div", ["s", "scale"], ["s2"]),
                   h.make_node("Where", ["mask", "s2", "ninf"], ["s3"]),
                   h.make_node("Softmax", ["s3"], ["p"], axis=-1),
                   h.make_node("MatMul", ["p", "x"], ["c"]),
                   h.make_node("LayerNormalization", ["c", "g", "bb"], ["y"], axis=-1)],
     [vi("x", T.FLOAT, ["N", 4, 8])], [vi("y", T.FLOAT, ["N", 4, 8])],
     [init("wq", (8, 8)), numpy_helper.from_array(np.array(2.0, np.float32), "scale"),
      numpy_helper.from_array(np.tril(np.ones((4, 4), bool)), "mask"),
      numpy_helper.from_array(np.array(-1e9, np.float32), "ninf"),
      init("g", (8,)), init("bb", (8,))], opset=17)
save("shape_ops", [h.make_node("Slice", ["x", "st", "en", "axs", "stp"], ["a"]),
                   h.make_node("Pad", ["a", "pads"], ["b"], mode="reflect"),
                   h.make_node("Gather", ["b", "idx"], ["c"], axis=1),
                   h.make_node("Split", ["c"], ["d", "e"], axis=1),
                   h.make_node("Concat", ["e", "d"], ["f"], axis=1),
                   h.make_node("ReduceMean", ["f"], ["g"], axes=[1], keepdims=0),
                   h.make_node("Clip", ["g", "lo", "hi"], ["y"])],
     [vi("x", T.FLOAT, [2, 8])], [vi("y", T.FLOAT, [2])],
     [numpy_helper.from_array(np.array([1], np.int64), n) for n in ["st"]] +
     [numpy_helper.from_array(np.array([7], np.int64), "en"),
      numpy_helper.from_array(np.array([1], np.int64), "axs"),
      numpy_helper.from_array(np.array([2], np.int64), "stp"),
      numpy_helper.from_array(np.array([0, 1, 0, 1], np.int64), "pads"),
      numpy_helper.from_array(np.array([0, 2, -1, 1], np.int64), "idx"),
      numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
      numpy_helper.from_array(np.array(0.5, np.float32), "hi")])
save("ints", [h.make_node("Add", ["a", "b"], ["c"]),
              h.make_node("Cast", ["c"], ["f"], to=T.FLOAT),
              h.make_node("Erf", ["f"], ["y"])],
     [vi("a", T.INT64, [3]), vi("b", T.INT64, [3])], [vi("y", T.FLOAT, [3])])
save("opset6", [h.make_node("Relu", ["x"], ["y"])], [vi("x", T.FLOAT, [2])],
     [vi("y", T.FLOAT, [2])], opset=6)
ext = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
ext.ClearField("raw_data")
ext.data_location = T.EXTERNAL
ext.external_data.add(key="location", value="w.bin")
save("external", [h.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", T.FLOAT, [2, 2])],
     [vi("y", T.FLOAT, [2, 2])], [ext])
with open(os.path.join(OUT, "truncated.onnx"), "wb") as f:
    f.write(mlp[: len(mlp) * 2 // 3])
inner = h.make_graph([], "leaf", [], [])
for _ in range(40):
    inner = h.make_graph([h.make_node("If", ["c"], ["o"], then_branch=inner)],
                         "g", [], [])
deep = h.make_model(inner, opset_imports=[h.make_opsetid("", 13)])
with open(os.path.join(OUT, "deep.onnx"), "wb") as f:
    f.write(deep.SerializeToString())
# A variadic op (Concat, Sum) with an empty input name, folded over
# constants: the folder once read the missing input (fuzz_onnx's finding).
one = numpy_helper.from_array(np.array([1], np.int64), "one")
save("variadic_empty", [h.make_node("Concat", ["one", ""], ["c"], axis=0),
                        h.make_node("Sum", ["one", "one", ""], ["s"]),
                        h.make_node("Add", ["c", "s"], ["y"])],
     [], [vi("y", T.INT64, [1])], [one])


# Findings of long fuzz_onnx runs and of reading runtime/onnx/ for the same
# classes (2026-12-02).  Each file failed on the code before its fix.
def i64(name, values, shape=None):
    a = np.array(values, np.int64)
    return numpy_helper.from_array(a if shape is None else a.reshape(shape), name)


def f32(name, values):
    return numpy_helper.from_array(np.array(values, np.float32), name)


def attr(node, name, kind, **fields):
    """An attribute written by hand: an empty list, or a value of the wrong
    type, which onnx's helpers do not make."""
    a = onnx.AttributeProto(name=name, type=kind, **fields)
    node.attribute.append(a)
    return node


A = onnx.AttributeProto
# A node without outputs, folded: the folder wrote output 0 anyway and
# nothing freed it (LeakSanitizer; fuzz_onnx's finding).
save("no_output", [h.make_node("Gather", ["one", "zero"], [], axis=0),
                   h.make_node("Identity", ["one"], ["y"])],
     [], [vi("y", T.INT64, [1])], [i64("one", [1]), i64("zero", 0)])
# An empty string attribute (auto_pad ""): protobuf-c gives its data as
# NULL, which memcpy read (UBSan, nonnull).
save("empty_string_attr", [attr(h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2]),
                                "auto_pad", A.STRING, s=b"")],
     [vi("x", T.FLOAT, [1, 1, 4, 4])], [vi("y", T.FLOAT, [1, 1, 3, 3])])
# An empty ints attribute (perm []), folded: memcpy from NULL again.
save("empty_ints_attr", [attr(h.make_node("Transpose", ["c"], ["y"]), "perm", A.INTS)],
     [], [vi("y", T.INT64, [2])], [i64("c", [1, 2])])
# Add with a third, empty input, folded: the binary ops' loop over further
# operands (meant for Sum, Min, Max) read it as a tensor.
save("binary_extra_input", [h.make_node("Add", ["one", "one", ""], ["y"])],
     [], [vi("y", T.INT64, [1])], [i64("one", [1])])
# Integer folds that overflow: Abs of INT64_MIN, INT64_MIN mod -1 (a trap),
# Pow with exponent INT64_MIN.
lo = np.iinfo(np.int64).min
save("int_abs_min", [h.make_node("Abs", ["m"], ["y"])],
     [], [vi("y", T.INT64, [1])], [i64("m", [lo])])
save("int_mod_min", [h.make_node("Mod", ["m", "n1"], ["y"])],
     [], [vi("y", T.INT64, [1])], [i64("m", [lo]), i64("n1", [-1])])
save("int_pow_min", [h.make_node("Pow", ["n1", "m"], ["y"])],
     [], [vi("y", T.INT64, [1])], [i64("m", [lo]), i64("n1", [-1])])
# A float beyond int64 clipped (and reduced): the fold converted it to
# int64 before looking at the type (UBSan, float-cast-overflow).
save("clip_huge_float", [h.make_node("Clip", ["big"], ["c"]),
                         h.make_node("ReduceSum", ["c"], ["y"], keepdims=0)],
     [], [vi("y", T.FLOAT, [])], [f32("big", [1e30, 3.0])])
# Clip's min given as an empty tensor: read as its first element.
save("clip_empty_min", [h.make_node("Clip", ["c", "none"], ["y"])],
     [], [vi("y", T.FLOAT, [2])], [f32("c", [1.0, 2.0]), f32("none", np.zeros(0))])
# A float Range near int64's end: the int64 arithmetic beside the float one
# overflowed.
save("range_huge", [h.make_node("Range", ["a", "b", "d"], ["y"])],
     [], [vi("y", T.FLOAT, [2])],
     [f32("a", 9.3e18), f32("b", 9.3e18 + 2e12), f32("d", 1e12)])
# Dropout's training_mode given as an empty tensor: read as a value.
save("dropout_empty_mode", [h.make_node("Dropout", ["c", "r", "none"], ["y"])],
     [], [vi("y", T.FLOAT, [2])],
     [f32("c", [1.0, 2.0]), f32("r", 0.5), i64("none", np.zeros(0, np.int64))], opset=13)
# Transpose with a repeated axis, folded: read past the data.
save("transpose_repeat", [h.make_node("Transpose", ["c"], ["y"], perm=[0, 0])],
     [], [vi("y", T.INT64, [2, 2])], [i64("c", [1, 2, 3, 4, 5, 6], (2, 3))])
# Split sizes 5 and -3 of an axis of 2, folded: the first part read past the
# data; sizes near int64's end, lowered: their sum overflowed.
save("split_negative", [h.make_node("Split", ["c", "sz"], ["a", "b"], axis=0),
                        h.make_node("Identity", ["a"], ["y"])],
     [], [vi("y", T.INT64, [5])], [i64("c", [1, 2]), i64("sz", [5, -3])])
save("split_huge", [h.make_node("Split", ["x", "sz"], ["a", "b"], axis=0),
                    h.make_node("Identity", ["a"], ["y"])],
     [vi("x", T.FLOAT, [2])], [vi("y", T.FLOAT, [1])],
     [i64("sz", [np.iinfo(np.int64).max, 1])])
# MatMul over an empty K (x of 2x0 by w of 0x4): the rows were the count
# divided by K (SIGFPE).
save("matmul_empty_k", [h.make_node("MatMul", ["x", "w"], ["y"])],
     [vi("x", T.FLOAT, [2, 0])], [vi("y", T.FLOAT, [2, 4])],
     [f32("w", np.zeros((0, 4)))])
# An empty initializer whose other dims multiply past int64 (2^40 x 2^40 x
# 0), flattened: the dims' product overflowed.
huge = onnx.TensorProto(name="e", data_type=T.INT64, dims=[1 << 40, 1 << 40, 0])
save("empty_huge_dims", [h.make_node("Flatten", ["e"], ["f"], axis=2),
                         h.make_node("Shape", ["f"], ["y"])],
     [], [vi("y", T.INT64, [2])], [huge])
# The same shape made by ConstantOfShape.
save("constant_of_shape_huge", [h.make_node("ConstantOfShape", ["s"], ["e"]),
                                h.make_node("Flatten", ["e"], ["f"], axis=2),
                                h.make_node("Shape", ["f"], ["y"])],
     [], [vi("y", T.INT64, [2])], [i64("s", [1 << 40, 1 << 40, 0])])
# An attribute of the wrong type (Softmax's axis as a float) was read as
# absent: the default axis, silently.
save("attr_wrong_type", [attr(h.make_node("Softmax", ["x"], ["y"]), "axis", A.FLOAT, f=0.0)],
     [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [2, 3])])
# ConstantOfShape of 16384 x 16384 (1 GiB of f32 from 16 bytes) and an Add
# of it, folded: over ten seconds and 2 GiB under the fuzzer; a fold is
# now held to the model's tensor limit (fuzz_onnx's 16 MiB).
save("fold_too_big", [h.make_node("ConstantOfShape", ["s"], ["c"]),
                      h.make_node("Add", ["c", "c"], ["y"])],
     [], [vi("y", T.FLOAT, [16384, 16384])], [i64("s", [16384, 16384])])
