"""NumPy's linear algebra that ``mx.np.linalg`` offers on host copies (MXNet's
``mxnet.numpy.fallback_linalg``), no gradient.

>>> from ember import numpy as np
>>> int(np.linalg.matrix_rank(np.eye(3)))
3
"""
from __future__ import annotations

import numpy as onp

from ember.numpy.multiarray import fallback

__all__ = ['cond', 'lstsq', 'matrix_power', 'matrix_rank', 'multi_dot', 'qr']

cond = fallback(onp.linalg.cond, 'cond')
lstsq = fallback(onp.linalg.lstsq, 'lstsq')
matrix_power = fallback(onp.linalg.matrix_power, 'matrix_power')
matrix_rank = fallback(onp.linalg.matrix_rank, 'matrix_rank')
multi_dot = fallback(onp.linalg.multi_dot, 'multi_dot')
qr = fallback(onp.linalg.qr, 'qr')
