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
