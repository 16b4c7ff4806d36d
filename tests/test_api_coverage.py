"""Ember against MXNet 1.9.1's public Python API (``python -m ember api-coverage``).

The surface was measured in MXNet's environment by ``tools/api_surface.py``. These tests print
the coverage per module (``pytest -s``), keep ``docs/api_coverage.md`` current, and fail on a
name that only raises "not implemented", a module that does not import, or a star import that
leaves out a name MXNet's brings.
"""
import json
from pathlib import Path

import pytest

from ember import cli
from ember.cli import _exercised
from ember.cli import api_coverage as coverage

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope='module')
def measured():
    return coverage.measure(REPO)


def test_surface_file_lists_kinds_and_parameters():
    surface = json.loads(coverage.SURFACE.read_text())
    assert surface['mxnet_version'] == '1.9.1'
    modules = surface['modules']
    assert {'mxnet', 'mxnet.gluon.nn', 'mxnet.test_utils', 'mxnet.rnn'} <= set(modules)
    for module, entry in modules.items():
        assert set(entry) == {'all', 'star', 'names'}, module
        assert set(entry['star']) <= set(entry['names']), module
        for name, described in entry['names'].items():
            assert described['kind'] in ('module', 'class', 'function', 'constant'), name
    assert modules['mxnet.test_utils']['names']['rand_ndarray']['params'][:2] == [
        'shape', 'stype=']


def test_every_exclusion_has_a_reason_and_covers_a_measured_name():
    surface = coverage.load_surface()['modules']
    dotted = set(surface) | {f'{m}.{n}' for m, entry in surface.items() for n in entry['names']}
    for exclusion in coverage.load_exclusions():
        assert len(exclusion.reason.split()) >= 3, exclusion
        assert any(exclusion.covers(name) for name in dotted), f'{exclusion.pattern} is stale'


def test_coverage_per_module(measured):
    print()
    print(coverage.render_text(measured))
    bad = [f'{f.dotted}: {f.status} {f.detail}' for f in measured.findings
           if f.status in (coverage.NOT_IMPLEMENTED, coverage.BROKEN)]
    assert not bad, '\n'.join(bad)


def test_coverage_page_is_up_to_date(measured):
    page = coverage.DEFAULT_PAGE
    assert page.exists(), f'generate it: {coverage.GENERATOR}'
    assert page.read_text() == coverage.render_markdown(measured), (
        f'docs/api_coverage.md is stale: regenerate it with `{coverage.GENERATOR}`')


def test_star_imports_bring_what_mxnets_bring(measured):
    gaps = measured.star_gaps()
    assert not gaps, f'`from ember.X import *` leaves out names that MXNet\'s brings: {gaps}'


def test_check_reports_a_stale_page(tmp_path, capsys, measured):
    page = tmp_path / 'api_coverage.md'
    assert coverage.check_page(page, measured) == 1
    assert 'is missing' in capsys.readouterr().err
    page.write_text(coverage.render_markdown(measured))
    assert coverage.check_page(page, measured) == 0
    assert 'api-coverage' in cli.commands()


# ----------------------------------------------------------------------------------------------
# The judge itself, on small cases.

def _takes(shape, stype='default', *, ctx=None):
    return shape, stype, ctx


def _takes_anything(*args, **kwargs):
    return args, kwargs


@pytest.mark.parametrize('expected, problem', [
    (['shape', 'stype=', '*', 'ctx='], ''),
    (['shape', 'stype='], ''),
    (['shape', 'density='], "has no parameter 'density'"),
    (['stype', 'shape'], "takes 'shape' where MXNet takes 'stype'"),
    (['shape', '**kwargs'], 'takes no **kwargs'),
])
def test_signature_check(expected, problem):
    assert coverage.signature_problem(expected, _takes) == problem
    assert coverage.signature_problem(expected, _takes_anything) == ''


def _only_raises():
    """A function that exists only to fail."""
    raise NotImplementedError('later')


def _raises_on_bad_input(x):
    if x < 0:
        raise NotImplementedError('negative sizes')
    return x


def test_a_name_that_only_raises_not_implemented_is_caught():
    assert coverage.raises_not_implemented(_only_raises)
    assert not coverage.raises_not_implemented(_raises_on_bad_input)


@pytest.mark.parametrize('pattern, name, covered', [
    ('mxnet.*.check_call', 'mxnet.autograd.check_call', True),
    ('mxnet.*.check_call', 'mxnet.autograd.record', False),
    ('mxnet.ndarray.gen_*', 'mxnet.ndarray.gen_op.relu', True),
    ('mxnet.ndarray.gen_*', 'mxnet.ndarray.relu', False),
    ('mxnet.torch', 'mxnet.torch.NDArray', True),
])
def test_exclusion_patterns(pattern, name, covered):
    assert coverage.Exclusion(pattern, 'a reason given').covers(name) is covered


def test_references_follow_imports_and_aliases():
    source = ('import mxnet as mx\nfrom ember.gluon import nn\nfrom ember import test_utils as tu\n'
              'layer = nn.Dense(2)\nF = mx.nd\nF.relu(x)\ntu.retry(3)\nother.nd.relu\n')
    found = _exercised.references_in(source)
    assert {'ember.gluon.nn.Dense', 'ember.nd.relu', 'ember.test_utils.retry'} <= found
    assert not any(name.startswith('other') for name in found)
