"""The CUDA source that element-wise fusion generates for a GPU (ember.op.fused_cuda), checked
without a GPU: nvcc compiles every kernel to PTX for Hopper, and compiles the per-element
function (``__host__ __device__``) into a host program whose results must equal the fused
operator's on the CPU. Skipped where nvcc is missing."""
import shutil
import subprocess

import numpy as np
import pytest

from ember.op import fused_cuda, registry
from ember.op.fused import chain_text, parse_chain
from ember.op.registry import KernelContext

NVCC = shutil.which('nvcc')
needs_nvcc = pytest.mark.skipif(NVCC is None, reason='needs nvcc (the CUDA compiler)')

# (inputs, steps, outputs): small graphs of the kinds the fusion pass makes
CHAINS = {
    'scale_shift_relu': (1, [('_mul_scalar', {'scalar': '2'}, ['i0']),
                             ('_plus_scalar', {'scalar': '-1'}, ['s0']), ('relu', {}, ['s1'])],
                         [2]),
    'residual_dag': (2, [('elemwise_add', {}, ['i0', 'i1']),
                         ('Activation', {'act_type': 'sigmoid'}, ['s0']),
                         ('elemwise_mul', {}, ['s1', 'i0']), ('tanh', {}, ['s2'])], [3, 1]),
    'relu_gradient': (2, [('elemwise_add', {}, ['i0', 'i1']),
                          ('_backward_Activation', {'act_type': 'relu'}, ['s0', 'i1'])], [1]),
    'math': (2, [('exp', {}, ['i0']), ('log1p', {}, ['s0']), ('broadcast_maximum', {},
                                                               ['s1', 'i1']),
                 ('clip', {'a_min': '-0.5', 'a_max': '2.5'}, ['s2']),
                 ('_rdiv_scalar', {'scalar': '3'}, ['s3']), ('square', {}, ['s4'])], [5]),
    'compare_sign': (2, [('broadcast_greater', {}, ['i0', 'i1']), ('sign', {}, ['i0']),
                         ('elemwise_sub', {}, ['s1', 's0'])], [2]),
}


def _chain(name):
    return parse_chain(chain_text(*CHAINS[name]))


def _values(num_inputs, rng):
    return [rng.uniform(-2, 2, 16) for _ in range(num_inputs)]


def test_every_chain_has_a_cuda_form_and_unknown_steps_have_none():
    for name in CHAINS:
        assert fused_cuda.generate(_chain(name), ['float32'] * 2, ['float32'] * 2,
                                   False) is not None, name
    odd = parse_chain(chain_text(1, [('gammaln', {}, ['i0']), ('exp', {}, ['s0'])], [1]))
    assert fused_cuda.generate(odd, ['float32'], ['float32'], False) is None
    assert fused_cuda.generate(_chain('math'), ['int32', 'float32'], ['float32'], False) is None


def test_broadcast_strides_follow_numpy_broadcasting():
    assert fused_cuda.broadcast_strides([(4, 1, 3), (5, 3), (1,)], (4, 5, 3)) == [
        [3, 0, 1], [0, 3, 1], [0, 0, 0]]


def _signatures(chain):
    """(in dtypes, out dtypes, broadcast) variants of one chain."""
    n_in, n_out = chain.num_inputs, len(chain.outputs)
    return [(['float32'] * n_in, ['float32'] * n_out, False),
            (['float16'] * n_in, ['float16'] * n_out, True),
            (['float64'] * n_in, ['float64'] * n_out, True)]


@needs_nvcc
def test_generated_kernels_compile_to_hopper_ptx(tmp_path):
    sources = []
    for name in CHAINS:
        for index, (ins, outs, broadcast) in enumerate(_signatures(_chain(name))):
            kernel = fused_cuda.generate(_chain(name), ins, outs, broadcast)
            path = tmp_path / f'{name}_{index}.cu'
            path.write_text(kernel.source)
            sources.append((path, kernel.name))
    result = subprocess.run([NVCC, '--ptx', '-arch=sm_90', '-std=c++14', '-odir', str(tmp_path)]
                            + [str(p) for p, _ in sources], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    for path, name in sources:
        ptx = path.with_suffix('.ptx').read_text()
        assert f'.entry {name}(' in ptx


def _harness(kernel, values, num_outputs):
    """A host program printing the element function's results on `values` (one list per
    input), one line per element."""
    count = len(values[0])
    arrays = '\n'.join(f'static const double v{k}[{count}] = {{{", ".join(map(repr, v))}}};'
                       for k, v in enumerate(values))
    args = ', '.join([f'(T)v{k}[e]' for k in range(len(values))]
                     + [f'&r{k}' for k in range(num_outputs)])
    prints = ' '.join(f'printf("%.17g ", (double)r{k});' for k in range(num_outputs))
    return (f'{kernel.source}\n#include <cstdio>\n{arrays}\n'
            f'int main() {{\n  for (int e = 0; e < {count}; ++e) {{\n'
            f'    T {", ".join(f"r{k}" for k in range(num_outputs))};\n'
            f'    {kernel.name}_element({args});\n    {prints} printf("\\n");\n  }}\n}}\n')


def _cpu_fused(chain_args, values, dtype):
    op = registry.get('_FusedElemwise')
    text = chain_text(*chain_args)
    ins = [np.asarray(v, dtype) for v in values]
    outs = [np.empty(16, dtype) for _ in chain_args[2]]
    op.kernel({'chain': text}, ins, outs, KernelContext(None))
    return outs


@needs_nvcc
@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_element_functions_compute_what_the_cpu_computes(tmp_path, dtype):
    rng = np.random.default_rng(0)
    programs = []
    for name, chain_args in CHAINS.items():
        values = _values(chain_args[0], rng)
        values = [np.asarray(v, dtype).astype(np.float64).tolist() for v in values]
        kernel = fused_cuda.generate(_chain(name), [dtype] * chain_args[0],
                                     [dtype] * len(chain_args[2]), False)
        source = tmp_path / f'{name}.cu'
        source.write_text(_harness(kernel, values, len(chain_args[2])))
        programs.append((name, chain_args, values, source))
    for name, chain_args, values, source in programs:
        binary = source.with_suffix('')
        built = subprocess.run([NVCC, '-std=c++14', '-o', str(binary), str(source)],
                               capture_output=True, text=True, timeout=300)
        assert built.returncode == 0, built.stderr
        printed = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
        got = np.array([[float(x) for x in line.split()] for line in printed.stdout.splitlines()])
        want = np.stack(_cpu_fused(chain_args, values, dtype), axis=1)
        rtol = 2e-6 if dtype == 'float32' else 1e-13
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=name)
