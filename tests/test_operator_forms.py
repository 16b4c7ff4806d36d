"""Every row of the operator table, run through each of the operator's other public forms.

An operator is reachable by more names than the one its table row uses: ``mx.sym``'s function
of the same name, MXNet's aliases (``flatten`` for ``Flatten``, ``broadcast_plus`` for
``broadcast_add``) and the submodule names (``mx.nd.linalg.gemm`` for ``linalg_gemm``,
``mx.sym.contrib.box_nms`` for ``_contrib_box_nms``). Each form runs the row's inputs and
attributes, a symbol bound and run forward once, and must give the row's ``mx.nd`` result.
The table itself (tests/test_operator_table.py) checks that result against NumPy.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import ember as mx
from ember.ndarray import register as nd_register
from ember.op import registry
from ember.symbol import register as sym_register
from ember.test_utils import assert_almost_equal
from test_operator_table import CASES, _as_list, _mode

# Registered-name prefix -> the submodule that holds the operator under its short name.
SUBMODULES = {'_contrib_': 'contrib', '_linalg_': 'linalg', '_image_': 'image'}


def _public_names(op):
    """(submodule or '', short name) of every public name of `op` in mx.nd and mx.sym."""
    found = set()
    for name, other in registry.all_ops().items():
        if other is not op:
            continue
        prefix = next((p for p in SUBMODULES if name.startswith(p)), None)
        if prefix:
            found.add((SUBMODULES[prefix], name[len(prefix):]))
        elif not name.startswith('_'):
            found.add(('', name))
    return sorted(found)


def _generated(namespace, place, short, op):
    """The function generated for `op` as `namespace[.place].short`, or None where the module
    defines that name by hand (a wrapper with its own signature)."""
    holder = getattr(namespace, place) if place else namespace
    fn = getattr(holder, short, None)
    register = nd_register if namespace is mx.nd else sym_register
    if getattr(fn, '__signature__', None) != register.signature_of(op):
        return None
    return fn


def _forms(case):
    op = registry.get(case.op)
    names = _public_names(op)
    imperative = [(f'nd.{p + "." if p else ""}{s}', fn) for p, s in names
                  if (p or s != case.op) and (fn := _generated(mx.nd, p, s, op)) is not None]
    if not any(p == '' for p, _ in names):      # only internal and submodule names
        names.append(('', case.op))
    symbolic = [(f'sym.{p + "." if p else ""}{s}', fn) for p, s in names
                if (fn := _generated(mx.sym, p, s, op)) is not None]
    return imperative, symbolic


def _run_symbol(fn, case, values, ctx):
    names = [f'in{index}' for index in range(len(values))]
    out = fn(*[mx.sym.var(n) for n in names], **case.attrs)
    arrays = {n: mx.nd.array(v, ctx=ctx, dtype=np.float64) for n, v in zip(names, values)}
    aux = out.list_auxiliary_states()
    executor = out.bind(ctx, {n: a for n, a in arrays.items() if n not in aux},
                        aux_states={n: arrays[n] for n in aux})
    return executor.forward(is_train=case.train)


@pytest.mark.parametrize('case', [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_every_form_gives_the_table_result(case):
    ctx = mx.cpu(0)
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    values = [draw(rng) for draw in case.inputs]
    arrays = [mx.nd.array(v, ctx=ctx, dtype=np.float64) for v in values]
    with _mode(case.train):
        expected = [o.asnumpy() for o in _as_list(getattr(mx.nd, case.op)(*arrays, **case.attrs))]
    imperative, symbolic = _forms(case)
    assert symbolic, f'{case.op}: no mx.sym form'
    for label, fn in imperative:
        with _mode(case.train):
            got = _as_list(fn(*arrays, **case.attrs))
        _compare(label, got, expected, case)
    for label, fn in symbolic:
        _compare(label, _run_symbol(fn, case, values, ctx), expected, case)


def _compare(label, got, expected, case):
    assert len(got) == len(expected), f'{label}: {len(got)} outputs, mx.nd.{case.op} has ' \
                                      f'{len(expected)}'
    for index, (mine, want) in enumerate(zip(got, expected)):
        assert_almost_equal(mine, want, rtol=case.rtol, atol=1e-10,
                            names=(f'{label} output {index}', f'nd.{case.op}'))


def _exercised():
    names = set()
    for case in CASES:
        imperative, symbolic = _forms(case)
        names.update(f'ember.{"ndarray" if label.startswith("nd.") else "symbol"}'
                     f'{label[label.index("."):]}' for label, _ in imperative + symbolic)
    return sorted(names)


# The forms this test runs, for `python -m ember api-coverage`.
EXERCISED_API = _exercised()
