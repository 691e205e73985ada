"""GEMM at the shapes models have: C = A @ B with a constant B (a layer's weight), M rows from 1 (a
decode step's GEMV) to 512, K and N from 512 to 4096, F32 and BF16, single-threaded.

fuel_kernel runs a compiled Plan (the Graph packs the constant B into the GEMM engine's panels once,
at compile time); ONNX Runtime runs one MatMul node whose B is an initializer (prepacked by MLAS at
session creation); PyTorch runs torch.matmul into a preallocated output.  ONNX Runtime's CPU MatMul
has no BF16 kernel, so the BF16 rows set fuel_kernel's BF16 product against ONNX Runtime's F32
MatMul on the same values (what an ONNX model of the layer runs) and PyTorch's BF16 matmul.
Outputs are compared with each peer before timing.  Arrays and sessions are built when a case runs
(its setup), so a filtered run builds only the cases it times.
Run: python -m bench --only GEMM
"""
import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import, torch_view
from fuel_kernel.graph import Graph

ROWS = (1, 8, 32, 128, 512)
# (K, N): square layers, GPT-2's MLP up and down projections, a 4096-wide layer
DEPTH_WIDTH = ((512, 512), (2048, 2048), (768, 3072), (3072, 768), (4096, 4096))


def _ort_matmul(ort, b):
    """An ONNX Runtime session of one MatMul node x @ B, B an F32 initializer, one thread."""
    from onnx import TensorProto, helper, numpy_helper
    k, n = b.shape
    node = helper.make_node("MatMul", ["x", "B"], ["y"])
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
                              initializer=[numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _case(m, k, n, dtype, ort, ort_why, torch, torch_why):
    state = {}
    contenders, skipped = {}, {}
    label = f"fuel_kernel {dtype.short_name} Plan.run (B packed once)"
    ort_label = "onnxruntime MatMul f32 (1 thread)"
    torch_label = f"torch.matmul {dtype.short_name} (1 thread)"

    def setup():
        if state:
            return
        rng = np.random.default_rng(m * 7 + k * 3 + n)
        a32 = rng.standard_normal((m, k)).astype(np.float32)
        b32 = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        a, b = a32.astype(dtype.numpy), b32.astype(dtype.numpy)
        g = Graph()
        x = g.input((m, k), dtype)
        state["plan"] = g.compile(g.matmul(x, g.constant(b)))
        state["a"] = a
        got = np.asarray(state["plan"].run([a])).astype(np.float64)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        # F32: the engine's F32 sums; BF16: one rounding of the F32 sum to BF16 besides
        bound = (2.0 ** -7 if dtype == fk.DType.BF16 else 0.0) + k * 2.0 ** -23
        if not np.all(np.abs(got - exact) <= bound * scale + 1e-30):
            raise AssertionError(f"GEMM {m}x{k}x{n} {dtype.short_name}: the plan's product is off")
        if ort is not None:
            state["session"] = _ort_matmul(ort, b.astype(np.float32))
            state["feeds"] = {"x": a.astype(np.float32)}
            peer = state["session"].run(None, state["feeds"])[0].astype(np.float64)
            if not np.all(np.abs(peer - exact) <= bound * scale + 1e-30):
                raise AssertionError(f"GEMM {m}x{k}x{n}: ONNX Runtime's product is off")
        if torch is not None:
            state["ta"], state["tb"] = torch_view(torch, a), torch_view(torch, np.ascontiguousarray(b))
            state["out"] = np.empty((m, n), dtype.numpy)
            state["tc"] = torch_view(torch, state["out"])

    contenders[label] = lambda: state["plan"].run([state["a"]])
    if ort is not None:
        contenders[ort_label] = lambda: state["session"].run(None, state["feeds"])
    else:
        skipped["onnxruntime"] = ort_why
    if torch is not None:
        contenders[torch_label] = lambda: torch.matmul(state["ta"], state["tb"], out=state["tc"])
    else:
        skipped["torch"] = torch_why
    baseline = ort_label if ort is not None else label
    return Case(name=f"GEMM {dtype.short_name} M={m} K={k} N={n}", contenders=contenders, baseline=baseline,
                skipped=skipped, setup=setup, rate=(2.0 * m * k * n / 1e9, "GFLOP"),
                target="fuel_kernel <= 1.0x onnxruntime MatMul" if ort is not None else "onnxruntime absent: no peer")


def cases():
    ort, ort_why = optional_import("onnxruntime")
    onnx, onnx_why = optional_import("onnx")      # builds the session's model
    if onnx is None:
        ort, ort_why = None, onnx_why
    torch, torch_why = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
    for dtype in (fk.DType.F32, fk.DType.BF16):
        for k, n in DEPTH_WIDTH:
            for m in ROWS:
                yield _case(m, k, n, dtype, ort, ort_why, torch, torch_why)
