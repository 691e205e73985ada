"""Values and nodes: the symbolic tensors (views into buffers) and op nodes a Graph is made of."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, Optional, Tuple, Union

import numpy as np

from ..errors import ShapeError
from ..ops import MAX_BYTES, check_output_shape   # noqa: F401  (MAX_BYTES re-exported)
from ..types import DType, OpKind

if TYPE_CHECKING:
    from ..records import BindingKey
    from .builders import Graph

MAX_DIMS = 8


# ---- shape checks: every refusal is a ShapeError -------------------------------------------------
def _extent(value: Any, what: str) -> int:
    """An integer argument (an extent, an axis, an index) as a Python int; never truncates 1.5."""
    if isinstance(value, bool):
        raise ShapeError(f"{what} must be an integer, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ShapeError(f"{what} must be an integer, not {type(value).__name__} {value!r}") from None


def _as_tuple(values: Any, what: str, error: type[Exception] = ShapeError, of: str = "integers") -> tuple[Any, ...]:
    """`values` as a tuple; a str, bytes or anything not iterable is an `error`."""
    message = f"{what} must be a sequence of {of}, not {type(values).__name__}"
    if isinstance(values, (str, bytes)):
        raise error(f"{message} {values!r}")
    try:
        return tuple(values)
    except TypeError:
        raise error(message) from None


def _int_sequence(values: Any, what: str) -> tuple[int, ...]:
    """A tuple of ints from an int or an iterable of ints (as NumPy accepts shape=5)."""
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        values = (values,)
    return tuple(_extent(v, f"{what} entry {i}") for i, v in enumerate(_as_tuple(values, what)))


def _check_size(shape: tuple[int, ...], itemsize: int = 1, what: str = "shape") -> Any:
    """Refuse a shape with too many dims, or whose element count or byte size does not fit int64."""
    if len(shape) > MAX_DIMS:
        raise ShapeError(f"{what} {shape} has {len(shape)} dims; at most {MAX_DIMS} are supported")
    return check_output_shape(shape, itemsize, what)


# ---- values and nodes -----------------------------------------------------------------------------
@dataclass
class Buffer:
    """A contiguous allocation: a caller input or state, a constant, or a node's result."""
    id: int
    kind: str                   # "input", "state" (an input written in place), "const", "node"
    shape: tuple[int, ...]
    dtype: DType
    array: Optional[np.ndarray] = None      # constants only
    name: str = ""

    @property
    def nbytes(self) -> int:
        """The buffer's size in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"<Buffer {self.id}{label}: {self.kind} {self.dtype.short_name}{list(self.shape)}>"


class Value:
    """A symbolic tensor: a view (shape, strides and offset in elements) into one Buffer."""

    def __init__(self, graph: Graph, buffer: Buffer, shape: Any, strides: Any, offset: int,
                 dtype: DType | int, producer: Optional[Node] = None) -> None:
        self.graph = graph
        self.buffer = buffer
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.offset = int(offset)
        self.dtype = DType(dtype)
        self.producer = producer     # the Node whose result buffer this views, if any

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return len(self.shape)

    @property
    def is_contiguous(self) -> bool:
        """Whether the view's strides are C-contiguous for its shape."""
        return self.strides == _contiguous_strides(self.shape)

    @property
    def is_whole_buffer(self) -> bool:
        """Whether the view is its whole buffer, contiguous from offset 0."""
        return self.offset == 0 and self.shape == self.buffer.shape and self.is_contiguous

    @property
    def has_broadcast(self) -> bool:
        """Whether an axis of extent > 1 has stride 0."""
        return any(s == 0 and n > 1 for s, n in zip(self.strides, self.shape))

    def __repr__(self) -> str:
        made_by = f" from node {self.producer.id} {self.producer.label}" if self.producer is not None else ""
        view = "" if self.is_whole_buffer else f" view strides={list(self.strides)} offset={self.offset}"
        return f"<Value {self.dtype.short_name}{list(self.shape)} of buffer {self.buffer.id}{view}{made_by}>"

    # views
    @property
    def T(self) -> Value:
        """The view with its axes reversed (Graph.transpose)."""
        return self.graph.transpose(self)

    def __getitem__(self, index: Any) -> Value:
        return self.graph.slice_view(self, index)

    # arithmetic sugar for elementwise graphs
    def __add__(self, other: Value) -> Value:
        return self.graph.add(self, other)

    def __sub__(self, other: Value) -> Value:
        return self.graph.sub(self, other)

    def __mul__(self, other: Value) -> Value:
        return self.graph.mul(self, other)

    def __truediv__(self, other: Value) -> Value:
        return self.graph.div(self, other)

    def __neg__(self) -> Value:
        return self.graph.neg(self)

    def __matmul__(self, other: Value) -> Value:
        return self.graph.matmul(self, other)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


@dataclass
class Node:
    """One op applied to Values; its results are `outputs` (one Value per output of the op)."""
    id: int
    key: Union[OpKind, BindingKey]      # BindingKey for a runtime fused op
    inputs: List[Value]
    params: Any                         # an OpParams, or None
    dtypes: Tuple[DType, ...]           # the inputs', then the outputs'
    backend: int
    outputs: List[Value] = field(default_factory=list)
    name: str = ""

    @property
    def output(self) -> Value:
        """The first (for most ops the only) output."""
        return self.outputs[0]

    @property
    def label(self) -> str:
        """The op's short name, or the runtime fused op's name ("fused#<id>")."""
        return self.key.short_name if isinstance(self.key, OpKind) else self.key.name

    def __repr__(self) -> str:
        dtypes = ", ".join(DType(d).short_name for d in self.dtypes)
        operands = ", ".join(f"buffer {v.buffer.id}" for v in self.inputs)
        params = f" {self.params!r}" if self.params is not None else ""
        return f"<Node {self.id} {self.label}({dtypes}) on ({operands}){params}>"

