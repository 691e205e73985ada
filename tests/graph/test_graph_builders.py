"""Graph's op builders: one explicit method per op schema, with a real signature and a docstring.

Most are generated at build time from fuel_kernel/spec.py (GeneratedBuilders, which Graph derives
from); the ones with a special signature are written in graph/builders.py."""
import inspect
import pydoc

import numpy as np
import pytest

import fuel_kernel as fk
from fuel_kernel import ops, spec
from fuel_kernel import params as P
from fuel_kernel.graph import Graph
from fuel_kernel.graph._generated_builders import GeneratedBuilders

F32 = fk.DType.F32
SCHEMA_OPS = sorted(ops.SCHEMAS, key=int)


@pytest.mark.parametrize("op", SCHEMA_OPS, ids=lambda op: op.short_name)
def test_every_schema_op_has_a_documented_builder_method(op):
    method = inspect.getattr_static(Graph, op.short_name, None)
    assert inspect.isfunction(method), f"Graph has no {op.short_name}() method"
    assert method.__doc__ and method.__doc__.strip(), f"Graph.{op.short_name} has no docstring"
    keywords = set(inspect.signature(method).parameters)
    family = ops.schema(op).params
    wanted = set(inspect.signature(getattr(P, family)).parameters) | {"backend"}
    if op is not fk.OpKind.CAST:                     # cast(x, dtype): its output dtype is the argument
        wanted.add("params")
    assert wanted <= keywords, f"{op.short_name} lacks keywords {wanted - keywords}"


def test_help_lists_every_builder():
    text = pydoc.render_doc(Graph, renderer=pydoc.plaintext)
    for op in SCHEMA_OPS:
        assert f"\n |  {op.short_name}(self, " in text, op.short_name


def test_builders_are_not_made_on_the_fly():
    assert "__getattr__" not in Graph.__dict__
    with pytest.raises(AttributeError):
        Graph().no_such_op


def test_keywords_build_the_same_params_as_the_constructor(rng):
    g = Graph()
    x = g.input((4, 5), F32)
    by_keywords = [g.sum(x, dims=(1,), keepdim=True), g.cumsum(x, axis=1, exclusive=True),
                   g.concat(x, x, axis=0), g.clamp(x, min=-1, max=1), g.triu(x, diagonal=1)]
    by_params = [g.sum(x, params=P.reduce((1,), True)), g.cumsum(x, params=P.cumsum(1, exclusive=True)),
                 g.concat(x, x, params=P.concat(0)), g.clamp(x, params=P.clamp(-1, 1)),
                 g.triu(x, params=P.triangular(1))]
    a = rng.standard_normal((4, 5)).astype(np.float32)
    results = g.compile(by_keywords + by_params).run([a])
    for left, right in zip(results[:5], results[5:]):
        np.testing.assert_array_equal(left, right)
    np.testing.assert_array_equal(results[0], a.sum(1, keepdims=True, dtype=np.float64).astype(np.float32))


def test_no_keywords_means_no_params_as_before():
    g = Graph()
    x = g.input((4, 5), F32)
    assert g.sum(x).shape == ()                      # params none: reduce every dim
    assert g.triu(x).producer.params is None


def test_params_and_keywords_together_or_a_missing_keyword_are_params_errors():
    g = Graph()
    x = g.input((4, 5), F32)
    with pytest.raises(fk.ParamsError):
        g.sum(x, dims=(0,), params=P.reduce((0,)))
    with pytest.raises(fk.ParamsError):
        g.cumsum(x, exclusive=True)                  # params.cumsum needs axis


def test_optional_inputs_and_variadic_concat():
    g = Graph()
    x, w, b = g.input((1, 2, 5, 5), F32), g.input((3, 2, 3, 3), F32), g.input((3,), F32)
    assert len(g.conv2d(x, w).producer.inputs) == 2
    assert len(g.conv2d(x, w, b, padding=1).producer.inputs) == 3
    assert g.conv2d(x, w, b, padding=1).shape == (1, 3, 5, 5)
    assert g.concat(b, b, b, axis=0).shape == (9,)


@pytest.mark.parametrize("op_spec", spec.OPS, ids=lambda o: o.name.lower())
def test_every_spec_op_has_a_builder_with_its_inputs_and_source(op_spec):
    """A builder takes the spec's input names as its leading parameters (an op writing into a
    destination takes it after its first input), is a def with source text
    (what IDEs and help() read) and is generated unless its signature is special."""
    method = inspect.getattr_static(Graph, op_spec.name.lower())
    parameters = list(inspect.signature(method).parameters.values())[1:]
    if op_spec.name == "CONCAT":
        assert parameters[0].kind is inspect.Parameter.VAR_POSITIONAL
    elif op_spec.shape == "destination":          # writes into a state: (src, dst, position)
        assert [p.name for p in parameters[:3]] == [op_spec.args[0], "dst", *op_spec.args[1:]]
    else:
        assert [p.name for p in parameters[:len(op_spec.args)]] == list(op_spec.args)
    assert f"def {op_spec.name.lower()}(" in inspect.getsource(method)
    generated = (isinstance(op_spec.inputs, int) and op_spec.dtype is not None
                 and op_spec.name not in spec.HANDWRITTEN_BUILDERS)
    assert (op_spec.name.lower() in GeneratedBuilders.__dict__) == generated
    assert (op_spec.name.lower() in Graph.__dict__) == (not generated)
