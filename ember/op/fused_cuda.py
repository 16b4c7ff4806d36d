"""CUDA source for a fused element-wise chain: one kernel per ``_FusedElemwise`` group on a GPU
(``MXNET_USE_FUSION``, as MXNet's pointwise fusion), generated as text here and compiled by the
backend (NVRTC through CuPy's ``RawKernel``), once per chain and dtype signature.

The source has two parts. ``<name>_element`` (``__host__ __device__``) computes every step of
one element in the compute type (``float`` for float16 and float32, ``double`` for float64):
each step is one line ``T s<j> = <expression of its arguments>;`` from :data:`EXPRESSIONS`. The
kernel ``<name>`` runs it over the elements in a grid-stride loop, loading each input in its
own dtype (at the element's offset when inputs broadcast: the output's shape and each input's
element strides are arguments) and storing each output in its dtype. A chain with a step that
has no expression, or dtypes other than float16/32/64, is not generated (:func:`generate`
returns None) and runs step by step on CuPy.

>>> from ember.op.fused import chain_text, parse_chain
>>> chain = parse_chain(chain_text(1, [('_mul_scalar', {'scalar': '2'}, ['i0']),
...                                    ('relu', {}, ['s0'])], [1]))
>>> kernel = generate(chain, ('float32',), ('float32',), broadcast=False)
>>> print(kernel.source.split('{')[1].split('}')[0].strip())
T s0 = (a0 * (T)(2.0));
    T s1 = ((s0 > (T)0 || s0 != s0) ? s0 : (T)0);
    *r0 = s1;
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

__all__ = ['EXPRESSIONS', 'FusedKernel', 'generate', 'supported']

_C_TYPES = {'float16': '__half', 'float32': 'float', 'float64': 'double'}


def _scalar(attrs, key='scalar'):
    return f'(T)({float(attrs[key])!r})'


def _unary(template):
    return lambda attrs, a: template.format(a=a)


def _binary(template):
    return lambda attrs, a, b: template.format(a=a, b=b)


def _with_scalar(template):
    return lambda attrs, a: template.format(a=a, s=_scalar(attrs))


def _compare(op):
    return _binary('(T)(({a}) ' + op + ' ({b}))')


def _compare_scalar(op):
    return _with_scalar('(T)(({a}) ' + op + ' {s})')


_RELU = '(({a} > (T)0 || {a} != {a}) ? {a} : (T)0)'
_SIGMOID = '((T)0.5 * ((T)1 + tanh((T)0.5 * {a})))'
_ACTIVATIONS = {'relu': _RELU, 'sigmoid': _SIGMOID, 'tanh': 'tanh({a})',
                'softsign': '({a} / ((T)1 + fabs({a})))'}
# derivatives from the output y, as ember.op.nn.activation.ACTIVATIONS
_ACTIVATION_GRADIENTS = {'relu': '(T)({y} > (T)0)', 'sigmoid': '({y} * ((T)1 - {y}))',
                         'tanh': '((T)1 - {y} * {y})'}


def _activation(attrs, a):
    template = _ACTIVATIONS.get(attrs['act_type'])
    return None if template is None else template.format(a=a)


def _activation_gradient(attrs, grad, y):
    template = _ACTIVATION_GRADIENTS.get(attrs['act_type'])
    return None if template is None else f'({grad} * {template.format(y=y)})'


def _clip(attrs, a):
    low, high = _scalar(attrs, 'a_min'), _scalar(attrs, 'a_max')
    return f'({a} < {low} ? {low} : ({a} > {high} ? {high} : {a}))'


def _table():
    found = {
        '_copy': _unary('{a}'), 'negative': _unary('(-{a})'), 'abs': _unary('fabs({a})'),
        'square': _unary('({a} * {a})'), 'sqrt': _unary('sqrt({a})'),
        'rsqrt': _unary('((T)1 / sqrt({a}))'), 'cbrt': _unary('cbrt({a})'),
        'rcbrt': _unary('((T)1 / cbrt({a}))'), 'reciprocal': _unary('((T)1 / {a})'),
        'exp': _unary('exp({a})'), 'expm1': _unary('expm1({a})'), 'log': _unary('log({a})'),
        'log1p': _unary('log1p({a})'), 'log2': _unary('log2({a})'),
        'log10': _unary('log10({a})'), 'sin': _unary('sin({a})'), 'cos': _unary('cos({a})'),
        'tan': _unary('tan({a})'), 'sinh': _unary('sinh({a})'), 'cosh': _unary('cosh({a})'),
        'tanh': _unary('tanh({a})'), 'arcsin': _unary('asin({a})'),
        'arccos': _unary('acos({a})'), 'arctan': _unary('atan({a})'),
        'arcsinh': _unary('asinh({a})'), 'arccosh': _unary('acosh({a})'),
        'arctanh': _unary('atanh({a})'), 'erf': _unary('erf({a})'),
        'floor': _unary('floor({a})'), 'ceil': _unary('ceil({a})'),
        'trunc': _unary('trunc({a})'), 'fix': _unary('trunc({a})'),
        'sign': _unary('(T)(({a} > (T)0) - ({a} < (T)0))'),
        'degrees': _unary('({a} * (T)57.29577951308232)'),
        'radians': _unary('({a} * (T)0.017453292519943295)'),
        'relu': _unary(_RELU), 'sigmoid': _unary(_SIGMOID),
        'softsign': _unary(_ACTIVATIONS['softsign']),
        'Activation': _activation, '_backward_Activation': _activation_gradient,
        'clip': _clip,
        '_plus_scalar': _with_scalar('({a} + {s})'), '_minus_scalar': _with_scalar('({a} - {s})'),
        '_rminus_scalar': _with_scalar('({s} - {a})'), '_mul_scalar': _with_scalar('({a} * {s})'),
        '_div_scalar': _with_scalar('({a} / {s})'), '_rdiv_scalar': _with_scalar('({s} / {a})'),
        '_power_scalar': _with_scalar('pow({a}, {s})'),
        '_rpower_scalar': _with_scalar('pow({s}, {a})'),
        '_maximum_scalar': _with_scalar('({a} > {s} || {a} != {a} ? {a} : {s})'),
        '_minimum_scalar': _with_scalar('({a} < {s} || {a} != {a} ? {a} : {s})'),
        '_hypot_scalar': _with_scalar('hypot({a}, {s})'),
    }
    for op, symbol in (('equal', '=='), ('not_equal', '!='), ('greater', '>'),
                       ('greater_equal', '>='), ('lesser', '<'), ('lesser_equal', '<=')):
        found[f'_{op}_scalar'] = _compare_scalar(symbol)
        found[f'_{op}'] = found[f'broadcast_{op}'] = _compare(symbol)
    binaries = {'add': '({a} + {b})', 'sub': '({a} - {b})', 'mul': '({a} * {b})',
                'div': '({a} / {b})'}
    for name, template in binaries.items():
        found[f'elemwise_{name}'] = found[f'broadcast_{name}'] = _binary(template)
    found['_grad_add'] = _binary(binaries['add'])
    for prefix in ('_', 'broadcast_'):
        found[f'{prefix}maximum'] = _binary('({a} > {b} || {a} != {a} ? {a} : {b})')
        found[f'{prefix}minimum'] = _binary('({a} < {b} || {a} != {a} ? {a} : {b})')
        found[f'{prefix}power'] = _binary('pow({a}, {b})')
        found[f'{prefix}hypot'] = _binary('hypot({a}, {b})')
    return found


# operator name -> expression(attrs, *argument names) -> C expression, or None where the
# operator's attributes have no expression here
EXPRESSIONS = _table()


@dataclass(frozen=True)
class FusedKernel:
    """The generated CUDA source of a chain and how to launch it."""
    name: str
    source: str
    broadcast: bool         # takes (shape, strides, ndim) after the arrays
    num_inputs: int
    num_outputs: int


def supported(chain, dtypes) -> bool:
    """Whether every step has an expression and every dtype a CUDA type."""
    return all(str(np.dtype(d)) in _C_TYPES for d in dtypes) and _steps(chain) is not None


def _steps(chain):
    lines = []
    for index, step in enumerate(chain.steps):
        expression = EXPRESSIONS.get(step.op.name)
        args = [f'a{k}' if kind == 'i' else f's{k}' for kind, k in step.args]
        text = None if expression is None else expression(step.attrs, *args)
        if text is None:
            return None
        lines.append(f'T s{index} = {text};')
    return lines


def generate(chain, in_dtypes, out_dtypes, broadcast) -> FusedKernel | None:
    """The kernel of `chain` for inputs and outputs of the given dtypes (names), with
    per-input strides where `broadcast`; None where the chain has no CUDA form."""
    in_dtypes = [str(np.dtype(d)) for d in in_dtypes]
    out_dtypes = [str(np.dtype(d)) for d in out_dtypes]
    if not supported(chain, in_dtypes + out_dtypes):
        return None
    compute = 'double' if 'float64' in in_dtypes + out_dtypes else 'float'
    body = _steps(chain) + [f'*r{i} = s{step};' for i, step in enumerate(chain.outputs)]
    key = repr((body, in_dtypes, out_dtypes, broadcast)).encode()
    name = 'ember_fused_' + hashlib.sha1(key).hexdigest()[:16]
    element = _element_function(name, compute, chain.num_inputs, len(out_dtypes), body)
    kernel = _kernel_function(name, compute, in_dtypes, out_dtypes, broadcast)
    header = '#include <cuda_fp16.h>\n' if '__half' in kernel else ''
    return FusedKernel(name, header + element + kernel, broadcast, chain.num_inputs,
                       len(out_dtypes))


def _element_function(name, compute, num_inputs, num_outputs, body):
    params = [f'const T a{i}' for i in range(num_inputs)] + \
        [f'T* r{i}' for i in range(num_outputs)]
    lines = '\n    '.join(body)
    return (f'typedef {compute} T;\n'
            f'__host__ __device__ inline void {name}_element({", ".join(params)}) {{\n'
            f'    {lines}\n}}\n')


def _load(dtype, expression):
    if dtype == 'float16':
        return f'(T)__half2float({expression})'
    return f'(T)({expression})'


def _store(dtype, target, value):
    if dtype == 'float16':
        return f'{target} = __float2half((float)({value}));'
    return f'{target} = ({_C_TYPES[dtype]})({value});'


def _kernel_function(name, compute, in_dtypes, out_dtypes, broadcast):
    params = ['const long long n'] + \
        [f'const {_C_TYPES[d]}* __restrict__ in{i}' for i, d in enumerate(in_dtypes)] + \
        [f'{_C_TYPES[d]}* __restrict__ out{i}' for i, d in enumerate(out_dtypes)]
    if broadcast:
        params += ['const long long* __restrict__ shape',
                   'const long long* __restrict__ strides', 'const int ndim']
    loads = [_load(d, f'in{i}[{"off" + str(i) if broadcast else "i"}]')
             for i, d in enumerate(in_dtypes)]
    results = ', '.join(f'&r{i}' for i in range(len(out_dtypes)))
    offsets = _offsets(len(in_dtypes)) if broadcast else ''
    stores = '\n        '.join(_store(d, f'out{i}[i]', f'r{i}')
                               for i, d in enumerate(out_dtypes))
    return (f'extern "C" __global__ void {name}({", ".join(params)}) {{\n'
            f'    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n'
            f'         i += (long long)gridDim.x * blockDim.x) {{\n'
            f'{offsets}'
            f'        T {", ".join(f"r{i}" for i in range(len(out_dtypes)))};\n'
            f'        {name}_element({", ".join(loads + [results])});\n'
            f'        {stores}\n'
            f'    }}\n}}\n')


def _offsets(num_inputs):
    """Each input's element offset from the output's index: its strides (0 where it
    broadcasts) times the output's coordinates, innermost dim first."""
    declare = ', '.join(f'off{k} = 0' for k in range(num_inputs))
    adds = ' '.join(f'off{k} += c * strides[{k} * ndim + d];' for k in range(num_inputs))
    return (f'        long long {declare};\n'
            f'        long long rest = i;\n'
            f'        for (int d = ndim - 1; d >= 0; --d) {{\n'
            f'            long long c = rest % shape[d]; rest /= shape[d];\n'
            f'            {adds}\n'
            f'        }}\n')


def broadcast_strides(in_shapes, out_shape) -> list:
    """Per input, its element strides over the output's dims (0 where it broadcasts; inputs
    C-contiguous, aligned to the output's last dims as NumPy broadcasts).

    >>> broadcast_strides([(2, 3), (3,), (2, 1)], (2, 3))
    [[3, 1], [0, 1], [1, 0]]
    """
    rows = []
    for shape in in_shapes:
        shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        strides, step = [], 1
        for n in reversed(shape):
            strides.append(0 if n == 1 else step)
            step *= n
        rows.append(list(reversed(strides)))
    return rows
