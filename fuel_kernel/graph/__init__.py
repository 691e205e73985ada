"""Graph builder, planner and Plan: build a tensor program once, run it many times in C.

Graph        (builders.py) one builder method per op (g.add(x, y), g.matmul(a, b), g.cast(x, "f16"),
             ...) infers each node's shape and dtype from the op schema (fuel_kernel.ops) and
             consults the binding table with the node's backend as it builds it: a missing kernel
             raises NoKernelError at the line that builds the node.  transpose / broadcast_to /
             slicing / reshape (of a contiguous value) are views: metadata only.
Value, Node  (values.py) a symbolic tensor is a view (shape, strides, offset) into one Buffer.
compile()    (planner.py) 1. drops nodes the outputs do not need; 2. replaces subgraphs that match
             a runtime fused op's decomposition (fused.py) when the fused kernel is estimated
             faster; 3. picks one alternative per node (fuel_kernel.route); 4. the contiguize gate
             inserts a CONTIGUIZE step only for an operand that is not contiguous and whose chosen
             kernel lacks strided_input; 5. groups connected elementwise steps of one output shape
             to run tile by tile (compile(fuse=False) skips 2 and 5); 6. emits one C step per
             kernel call or group.
Plan         (plan.py) places intermediates and group tile buffers in one arena, reusing memory
             by liveness (greedy by size over lifetime intervals).  Plan.run validates the inputs, allocates the outputs
             and runs every step in one nogil loop (fuel_kernel._executor).  Each thread gets its
             own arena, so threads may share a plan.
"""
from .builders import Graph
from .fused import VERIFY_SHAPE, FusedOp, fused_op, register_runtime_fused
from .plan import ARENA_ALIGNMENT, Plan
from .values import MAX_BYTES, MAX_DIMS, Buffer, Node, Value

__all__ = ["Graph", "Plan", "Value", "Node", "Buffer", "FusedOp", "register_runtime_fused", "fused_op",
           "ARENA_ALIGNMENT", "MAX_DIMS", "MAX_BYTES", "VERIFY_SHAPE"]
