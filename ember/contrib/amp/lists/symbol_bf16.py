"""The bfloat16 lists of AMP under the constant names MXNet's ``amp.lists.symbol_bf16`` uses.

They are :mod:`ember.contrib.amp.lists`' bfloat16 lists, read when this module is imported
(so they hold the operators Ember registers, not those a program adds);
``BF16_USE_FP32_PARAMS`` maps an operator to the inputs it keeps in float32.

>>> from ember.contrib.amp.lists import symbol_bf16
>>> symbol_bf16.BF16_FUNCS
['Convolution', 'FullyConnected']
>>> symbol_bf16.BF16_USE_FP32_PARAMS['BatchNorm']
['gamma', 'beta', 'moving_mean', 'moving_var']
"""
from ember.contrib.amp.lists import _tables as _lists

BF16_FUNCS = _lists.target_ops('bfloat16')
BF16_FP32_FUNCS = _lists.ember_ops_only(_lists.lp16_fp32_ops('bfloat16'))
FP32_FUNCS = _lists.fp32_ops('bfloat16')
BF16_USE_FP32_PARAMS = {op: list(names) for op, names in _lists.fp32_params('bfloat16').items()}
CONDITIONAL_FP32_FUNCS = _lists.conditional_fp32_ops('bfloat16')
WIDEST_TYPE_CASTS = _lists.widest_type_casts('bfloat16')
LOSS_OUTPUT_FUNCTIONS = _lists.loss_output_functions('bfloat16')
