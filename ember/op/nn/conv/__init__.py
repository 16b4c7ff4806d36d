"""The convolution subsystem: the Convolution and Deconvolution operators and the algorithms
that run them on the CPU. Importing the package registers the operators.

What lives where, from the operator down:

``convolution``        the operators: parameters, shape inference, the forward and backward
                       passes choosing an algorithm per layer, a node's prepared call replayed
``algorithms``         one :class:`~ember.op.nn.conv.algorithms.Algorithm` record per way to
                       run a convolution or a gradient, with its facts; the rule, measurement
``generic``            im2col + GEMM on any array module (other devices, the 'gemm' gradients)
``gemm``               im2col + GEMM on NumPy arrays, split over the kernel threads
``winograd``           Winograd F(m x m, 3 x 3): what it runs, its NumPy implementation
``winograd_compiled``  the compiled F(4x4, 3x3) and its gradients, and their thread split
``pointwise``          1x1 convolutions and their weight gradient on the compiled products;
                       the packed weights those products multiply by
``line``               the 1-D Winograd F(m, r) of 1 x r and r x 1 kernels
``compiled``           the compiled module and how its calls run on the threads
``common``             window copies, the split into parts, the epilogue
``kept``               the process-wide budget of weights kept between calls
``state``              everything remembered between calls, in one object with ``reset()``
``choices``            the measured choice per problem (a cache of names)
``tuning``             the measured trade-offs, one frozen record

Adding an algorithm is one ``algorithms.register(Algorithm(...))`` with its facts.
"""
from ember.op.nn.conv import convolution  # noqa: F401  (registers the operators)
