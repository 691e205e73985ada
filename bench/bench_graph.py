"""Plans: per-node overhead of a long elementwise chain, fused elementwise groups on 4M elements
(against torch.compile, and a 10-op one against a copy of its bytes), and a small MLP forward,
against peers."""
import numpy as np

import fuel_kernel as fk
from bench.harness import Case, optional_import
from fuel_kernel.graph import Graph

CHAIN = 1000
WIDTH = 64
CYCLE = ("add", "mul", "maximum", "sub")


def _chain_plan():
    g = Graph()
    x = g.input((WIDTH,), fk.DType.F32)
    y = g.input((WIDTH,), fk.DType.F32)
    v = x
    for i in range(CHAIN):
        v = getattr(g, CYCLE[i % 4])(v, y)
    return g.compile(v)


def _onnx_chain(ort, onnx):
    from onnx import TensorProto, helper
    names = {"add": "Add", "mul": "Mul", "maximum": "Max", "sub": "Sub"}
    nodes, previous = [], "x"
    for i in range(CHAIN):
        out = f"v{i}" if i < CHAIN - 1 else "out"
        nodes.append(helper.make_node(names[CYCLE[i % 4]], [previous, "y"], [out]))
        previous = out
    tensor = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, [WIDTH])
    model = helper.make_model(helper.make_graph(nodes, "chain", [tensor("x"), tensor("y")], [tensor("out")]),
                              opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)     # what every supported onnxruntime reads
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _numpy_chain(x, y, buffers):
    ufuncs = (np.add, np.multiply, np.maximum, np.subtract)
    v = x
    for i in range(CHAIN):
        out = buffers[i % 2]
        ufuncs[i % 4](v, y, out=out)
        v = out
    return v


def _mlp_plan(weights, biases, batch):
    g = Graph()
    v = g.input((batch, weights[0].shape[0]), fk.DType.F32)
    for i, (w, b) in enumerate(zip(weights, biases)):
        v = g.add(g.matmul(v, g.constant(w)), g.constant(b))
        if i < len(weights) - 1:
            v = g.relu(v)
    # measured mode: time the matmul alternatives on these shapes once (cached on disk), since
    # native and BLAS have the same cost model and differ only in how well they run here
    return g.compile(v, measure=True)


GELU_SHAPE = (4096, 1024)          # 4M f32; a and b are rows broadcast over it


def _gelu_plans():
    g = Graph()
    x = g.input(GELU_SHAPE, fk.DType.F32)
    a = g.input(GELU_SHAPE[-1:], fk.DType.F32)
    b = g.input(GELU_SHAPE[-1:], fk.DType.F32)
    y = g.gelu(g.add(g.mul(x, a), b))
    return g.compile(y), g.compile(y, fuse=False)


def _numpy_gelu(x, a, b, t, u):
    """gelu (tanh form) of x*a + b in NumPy, with out= buffers: one pass per ufunc."""
    np.multiply(x, a, out=t)
    np.add(t, b, out=t)
    np.multiply(t, t, out=u)
    np.multiply(u, np.float32(0.044715), out=u)
    np.add(u, np.float32(1.0), out=u)
    np.multiply(u, t, out=u)
    np.multiply(u, np.float32(np.sqrt(2.0 / np.pi)), out=u)
    np.tanh(u, out=u)
    np.add(u, np.float32(1.0), out=u)
    np.multiply(u, t, out=u)
    np.multiply(u, np.float32(0.5), out=u)
    return u


def _gelu_case(rng):
    x = rng.standard_normal(GELU_SHAPE).astype(np.float32)
    a = rng.standard_normal(GELU_SHAPE[-1]).astype(np.float32)
    b = rng.standard_normal(GELU_SHAPE[-1]).astype(np.float32)
    fused, unfused = _gelu_plans()

    t, u = np.empty(GELU_SHAPE, np.float32), np.empty(GELU_SHAPE, np.float32)
    contenders = {"numpy, out=": lambda: _numpy_gelu(x, a, b, t, u),
                  "Plan.run fused": lambda: fused.run([x, a, b]),
                  "Plan.run fuse=False": lambda: unfused.run([x, a, b])}
    skipped = {}
    torch, why = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
        tx, ta, tb = torch.from_numpy(x), torch.from_numpy(a), torch.from_numpy(b)

        def torch_gelu(x, a, b):
            return torch.nn.functional.gelu(x * a + b, approximate="tanh")

        compiled = torch.compile(torch_gelu)
        with torch.no_grad():
            compiled(tx, ta, tb)                 # compile once, outside the timing

        def eager():
            with torch.no_grad():
                return torch_gelu(tx, ta, tb)

        def inductor():
            with torch.no_grad():
                return compiled(tx, ta, tb)
        contenders["torch eager (1 thread)"] = eager
        contenders["torch.compile (1 thread)"] = inductor
    else:
        skipped["torch"] = why
    group = fused.groups[0]
    return Case(name=f"gelu(x*a + b), x f32{list(GELU_SHAPE)}, a and b rows", contenders=contenders,
                baseline="numpy, out=", skipped=skipped,
                target="fused plan <= 1.0x torch.compile (1 thread)",
                notes=(f"fused: 1 group of {len(group.members)}, {group.n_tiles} tiles of "
                       f"{group.tile_elements} elements, arena {fused.peak_bytes} B; "
                       f"fuse=False: {unfused.n_steps} steps, arena {unfused.peak_bytes} B"))


def _ten_op_case(rng):
    """A 10-op elementwise expression over 4M f32 (x in, y out; a and b rows) as one fused group,
    against a copy of x into y: the same 32 MB read and written, so the ratio is the share of a
    memcpy's bandwidth the group reaches."""
    g = Graph()
    x = g.input(GELU_SHAPE, fk.DType.F32)
    a = g.input(GELU_SHAPE[-1:], fk.DType.F32)
    b = g.input(GELU_SHAPE[-1:], fk.DType.F32)
    t = g.add(g.mul(x, a), b)                                   # 2
    t = g.maximum(g.sub(g.mul(t, t), a), x)                     # 5
    t = g.abs(g.add(g.mul(t, b), x))                            # 8
    y = g.minimum(g.neg(t), a)                                  # 10
    fused, unfused = g.compile(y), g.compile(y, fuse=False)
    arrays = [rng.standard_normal(GELU_SHAPE).astype(np.float32),
              rng.standard_normal(GELU_SHAPE[-1]).astype(np.float32),
              rng.standard_normal(GELU_SHAPE[-1]).astype(np.float32)]
    out = np.empty(GELU_SHAPE, np.float32)
    (group,) = fused.groups
    return Case(name=f"10-op elementwise expression, x f32{list(GELU_SHAPE)}: fused group vs a copy of x",
                contenders={"np.copyto(y, x)": lambda: np.copyto(out, arrays[0]),
                            "np.copy(x) (a fresh y, as Plan.run returns)": lambda: np.copy(arrays[0]),
                            "Plan.run fused": lambda: fused.run(arrays),
                            "Plan.run fuse=False": lambda: unfused.run(arrays)},
                baseline="np.copyto(y, x)", target="fused <= 1/0.7 = 1.43x the copy (>= 70% of its bandwidth)",
                notes=f"fused: 1 group of {len(group.members)}, {group.n_tiles} tiles of {group.tile_elements} elements")


def cases():
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.0, WIDTH).astype(np.float32)
    y = rng.uniform(0.9, 1.1, WIDTH).astype(np.float32)
    plan = _chain_plan()
    contenders = {"fuel_kernel Plan.run": lambda: plan.run([x, y]),
                  "numpy eager, out=": lambda: _numpy_chain(x, y, [np.empty(WIDTH, np.float32)] * 2)}
    skipped = {}
    ort, why = optional_import("onnxruntime")
    onnx, why_onnx = optional_import("onnx")
    if ort is not None and onnx is not None:
        session = _onnx_chain(ort, onnx)
        feeds = {"x": x, "y": y}
        contenders["onnxruntime (1 thread)"] = lambda: session.run(None, feeds)
    else:
        skipped["onnxruntime"] = why or why_onnx
    yield _gelu_case(rng)
    yield _ten_op_case(rng)
    yield Case(name=f"chain of {CHAIN} elementwise nodes, {WIDTH} f32 (time per run)",
               contenders=contenders, baseline="numpy eager, out=", skipped=skipped,
               target="per node <= 1/8 numpy eager and <= 1/6 onnxruntime",
               notes=f"plan arena: peak {plan.peak_bytes} B, minimal live set {plan.min_live_bytes} B")

    batch, width = 32, 512
    weights = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(3)]
    biases = [rng.standard_normal(width).astype(np.float32) * 0.1 for _ in range(3)]
    inp = rng.standard_normal((batch, width)).astype(np.float32)
    mlp = _mlp_plan(weights, biases, batch)

    def numpy_mlp():
        v = inp
        for i, (w, b) in enumerate(zip(weights, biases)):
            v = v @ w + b
            if i < 2:
                v = np.maximum(v, 0)
        return v

    contenders = {"fuel_kernel Plan.run": lambda: mlp.run([inp]), "numpy": numpy_mlp}
    skipped = {}
    torch, why = optional_import("torch")
    if torch is not None:
        torch.set_num_threads(1)
        tw = [torch.from_numpy(w) for w in weights]
        tb = [torch.from_numpy(b) for b in biases]
        ti = torch.from_numpy(inp)

        def torch_mlp():
            with torch.no_grad():
                v = ti
                for i, (w, b) in enumerate(zip(tw, tb)):
                    v = torch.addmm(b, v, w)
                    if i < 2:
                        v = torch.relu(v)
                return v
        contenders["torch eager (1 thread)"] = torch_mlp
        baseline = "torch eager (1 thread)"
    else:
        skipped["torch"] = why
        baseline = "numpy"
    yield Case(name=f"3-layer MLP forward, batch {batch}, width {width}, ReLU", contenders=contenders,
               baseline=baseline, skipped=skipped, target="<= 1.0x torch eager",
               notes=f"plan arena: peak {mlp.peak_bytes} B, minimal live set {mlp.min_live_bytes} B")
