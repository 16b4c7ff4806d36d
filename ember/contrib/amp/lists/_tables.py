"""Which operators AMP runs in the low-precision type, which in float32, which in either.

Five lists per target type, under MXNet's names (``mx.contrib.amp.list_*_ops``):

target ops        products whose speed the narrow type buys: their floating inputs are cast to
                  the target type (bfloat16 keeps BatchNorm's parameters in float32)
fp32 ops          operators whose results lose too much in a narrow type: exponentials and
                  logarithms, powers, reductions, normalisations, softmax and the losses;
                  their inputs are cast to float32
conditional fp32  operators that need float32 only for some attribute values
widest-type casts operators of several inputs that must agree on a type: their inputs are
                  cast to the widest floating type among them
lp16/fp32 ops     everything else Ember registers: it runs in the type it is given

Only operators Ember registers are listed (names of MXNet that Ember lacks are left out).

>>> 'Convolution' in target_ops('bfloat16'), 'softmax' in fp32_ops('float16')
(True, True)
>>> set(target_ops('float16')) & set(fp32_ops('float16'))
set()
"""
from __future__ import annotations

from ember.op import registry

__all__ = ['TARGETS', 'target_ops', 'fp32_ops', 'conditional_fp32_ops', 'widest_type_casts',
           'lp16_fp32_ops', 'loss_output_functions', 'fp32_params', 'ember_ops_only']

TARGETS = ('float16', 'bfloat16')

_PRODUCTS = ('Convolution', 'FullyConnected')
# float16 also pays on these (MXNet's GPU list); bfloat16 keeps them in float32
_FP16_PRODUCTS = ('Deconvolution', 'RNN', 'dot', 'batch_dot', 'linalg_gemm', 'linalg_gemm2',
                  '_linalg_gemm', '_linalg_gemm2')

_SENSITIVE = (
    # exponentials, logarithms, powers and other functions that grow fast or lose digits
    'exp', 'expm1', 'log', 'log10', 'log2', 'log1p', 'log_sigmoid', 'broadcast_power',
    '_power', '_power_scalar', '_rpower_scalar', 'reciprocal', '_rdiv_scalar', 'rsqrt', 'rcbrt',
    'square', 'gamma', 'gammaln', 'erfinv', 'arccos', 'arcsin', 'arctanh', 'cosh', 'sinh', 'tan',
    '_hypot', '_hypot_scalar', 'broadcast_hypot',
    # reductions and norms
    'sum', 'sum_axis', 'nansum', 'prod', 'nanprod', 'mean', 'norm', 'moments', 'khatri_rao',
    '_square_sum', 'topk', 'argsort', 'sort',
    # normalisations, softmax and the losses
    'softmax', 'softmin', 'log_softmax', 'Softmax', 'SoftmaxOutput', 'SoftmaxActivation',
    'LayerNorm', 'InstanceNorm', 'GroupNorm', 'L2Normalization', 'LRN',
    'LinearRegressionOutput', 'LogisticRegressionOutput', 'MAERegressionOutput', 'SVMOutput',
    'softmax_cross_entropy', 'smooth_l1', 'MakeLoss', 'make_loss', 'CTCLoss', 'ctc_loss',
    '_contrib_CTCLoss', '_contrib_ctc_loss',
    # the user's Python, written for float32
    'Custom',
)
# what bfloat16 runs in float32 besides: layers MXNet's CPU kernels had no bf16 form of
_BF16_SENSITIVE = ('Deconvolution', 'RNN', 'Embedding', 'Dropout', 'ROIPooling', 'UpSampling',
                   'SequenceLast', 'SequenceMask', 'SequenceReverse')

_CONDITIONAL = (('Activation', 'act_type', ['softrelu']),
                ('LeakyReLU', 'act_type', ['elu', 'selu']))

_WIDEST = (
    'elemwise_add', 'elemwise_sub', 'elemwise_mul', 'elemwise_div', 'add_n', 'ElementWiseSum',
    '_plus', '_minus', '_mul', '_div', '_mod', '_maximum', '_minimum', '_equal', '_not_equal',
    '_greater', '_greater_equal', '_lesser', '_lesser_equal', '_logical_and', '_logical_or',
    '_logical_xor', 'broadcast_add', 'broadcast_plus', 'broadcast_sub', 'broadcast_minus',
    'broadcast_mul', 'broadcast_div', 'broadcast_mod', 'broadcast_maximum', 'broadcast_minimum',
    'broadcast_equal', 'broadcast_not_equal', 'broadcast_greater', 'broadcast_greater_equal',
    'broadcast_lesser', 'broadcast_lesser_equal', 'broadcast_logical_and',
    'broadcast_logical_or', 'broadcast_logical_xor', 'Concat', 'concat', 'stack', 'where',
)
_BF16_WIDEST = ('dot', 'batch_dot')

_LOSS_OUTPUTS = ('SoftmaxOutput', 'LinearRegressionOutput', 'LogisticRegressionOutput',
                 'MAERegressionOutput')

# inputs (by name) a bfloat16 operator keeps in float32: BatchNorm's statistics and affine
_BF16_FP32_PARAMS = {'BatchNorm': ('gamma', 'beta', 'moving_mean', 'moving_var')}


def _check(target):
    if target not in TARGETS:
        raise ValueError(f'AMP target dtype {target!r}: expected one of {", ".join(TARGETS)}')
    return target


def _known(names):
    ops = registry.all_ops()
    return [name for name in dict.fromkeys(names) if name in ops]


def target_ops(target) -> list:
    """Operators cast to the `target` type ('float16' or 'bfloat16')."""
    extra = _FP16_PRODUCTS if _check(target) == 'float16' else ()
    return _known(_PRODUCTS + extra)


def fp32_ops(target) -> list:
    """Operators cast to float32."""
    extra = _BF16_SENSITIVE if _check(target) == 'bfloat16' else ()
    return _known(_SENSITIVE + extra)


def conditional_fp32_ops(target) -> list:
    """(operator, attribute, values) run in float32 when the attribute has one of the
    values."""
    _check(target)
    return [entry for entry in _CONDITIONAL if entry[0] in registry.all_ops()]


def widest_type_casts(target) -> list:
    """Operators whose inputs are cast to the widest floating type among them."""
    extra = _BF16_WIDEST if _check(target) == 'bfloat16' else ()
    return _known(_WIDEST + extra)


def loss_output_functions(target) -> list:
    """Output layers whose gradient the dynamic loss scale multiplies (``grad_scale``)."""
    _check(target)
    return _known(_LOSS_OUTPUTS)


def fp32_params(target) -> dict:
    """Operator -> names of the inputs it keeps in float32 under `target`."""
    return dict(_BF16_FP32_PARAMS) if _check(target) == 'bfloat16' else {}


def lp16_fp32_ops(target) -> list:
    """Every other operator Ember registers: it runs in whichever type it is given."""
    taken = set(target_ops(target)) | set(fp32_ops(target)) | set(widest_type_casts(target))
    taken |= {name for name, _, _ in conditional_fp32_ops(target)}
    return sorted(name for name in registry.all_ops() if name not in taken)


def ember_ops_only(names) -> list:
    """`names` less the operators registered from outside Ember (a program's or a test's), so
    that a list read at import does not depend on what was registered before."""
    ops = registry.all_ops()
    return [n for n in names if getattr(ops[n].kernel, '__module__', '').startswith('ember.')]
