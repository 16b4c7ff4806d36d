"""The float16 lists of AMP under the constant names MXNet's ``amp.lists.symbol_fp16`` uses.

They are :mod:`ember.contrib.amp.lists`' float16 lists, read when this module is imported (so
they hold the operators Ember registers, not those a program adds).

>>> from ember.contrib.amp.lists import symbol_fp16
>>> 'Convolution' in symbol_fp16.FP16_FUNCS, 'softmax' in symbol_fp16.FP32_FUNCS
(True, True)
"""
from ember.contrib.amp.lists import _tables as _lists

FP16_FUNCS = _lists.target_ops('float16')
FP16_FP32_FUNCS = _lists.ember_ops_only(_lists.lp16_fp32_ops('float16'))
FP32_FUNCS = _lists.fp32_ops('float16')
CONDITIONAL_FP32_FUNCS = _lists.conditional_fp32_ops('float16')
WIDEST_TYPE_CASTS = _lists.widest_type_casts('float16')
LOSS_OUTPUT_FUNCTIONS = _lists.loss_output_functions('float16')
