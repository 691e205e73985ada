"""Type stubs for fuel_kernel._executor, the plan's nogil step loop."""
from typing import Any

from ._dispatch import BindingTable, Kernel, OpParams

# One step operand: (base_index, byte_offset, nbytes, dtype, shape, strides, offset); in a group
# member, base_index -1 is the group's tile buffer.
StepOperand = tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], int]
# A group member's operand may end with tile_axes: the mask of the group's axes it follows.
GroupOperand = tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], int, int]
# A group's vector program: (dtype, row_len, slots (kind, base_index, byte_offset), code: ("ROW"
# opcode, member index, args) or ("CHAIN" opcode, first member index, steps (code, form, source))).
VectorProgram = tuple[int, int, list[tuple[int, int, int]], list[tuple[int, ...] | tuple[Any, ...]]]

VECTOR_OPCODES: dict[str, int]
VECTOR_SLOTS: dict[str, int]
VECTOR_LIMITS: dict[str, int]
VECTOR_FORMS: dict[str, int]

def aligned_empty(shape: tuple[int, ...], dtype: Any, alignment: int) -> Any:
    """An uninitialized C-contiguous array of shape and dtype (a numpy.dtype) whose data starts on
    an alignment (a power of two) boundary."""
    ...

class PlanProgram:
    """The compiled step list of one Plan; any number of threads may run it at once."""
    @property
    def n_bases(self) -> int: ...
    def __init__(self, table: BindingTable, n_bases: int) -> None: ...
    def __len__(self) -> int: ...
    def add_step(self, kernel: Kernel, node_id: int, node_name: str, operands: list[StepOperand],
                 params: OpParams | None) -> None: ...
    def add_group(self, node_id: int, name: str, shape: tuple[int, ...], tile_axis: int, tile_len: int,
                  tile_bytes: int, scratch_base: int, scratch_offset: int,
                  members: list[tuple[Kernel, int, str, list[StepOperand | GroupOperand], OpParams | None]
                                | tuple[Kernel, int, str, list[StepOperand | GroupOperand], OpParams | None,
                                        object | None]],
                  tile_outer: int = -1, serial: bool = False,
                  program: VectorProgram | None = None) -> tuple[bool, ...]: ...
    def vector_program(self, group: int) -> bool: ...
    def run(self, bases: list[Any]) -> None: ...
    def time_steps(self, bases: list[Any], repeats: int) -> list[float]: ...

def manifest_kernels(capsule: object, n_rows: int) -> list[tuple[int, int]]: ...
def tile_row_entries(capsule: object, n_rows: int) -> list[tuple[int, object]]: ...
