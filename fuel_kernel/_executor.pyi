"""Type stubs for fuel_kernel._executor, the plan's nogil step loop."""
from typing import Any

from ._dispatch import BindingTable, Kernel, OpParams

# One step operand: (base_index, byte_offset, nbytes, dtype, shape, strides, offset).
StepOperand = tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], int]

class PlanProgram:
    """The compiled step list of one Plan; any number of threads may run it at once."""
    @property
    def n_bases(self) -> int: ...
    def __init__(self, table: BindingTable, n_bases: int) -> None: ...
    def __len__(self) -> int: ...
    def add_step(self, kernel: Kernel, node_id: int, node_name: str, operands: list[StepOperand],
                 params: OpParams | None) -> None: ...
    def run(self, bases: list[Any]) -> None: ...
