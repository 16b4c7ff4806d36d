"""The configuration layer: declarations against the spec, parsing, errors, overrides."""
import ast
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ember import base, config
import spec_facts

REPO = Path(__file__).resolve().parents[1]


def clean_environ(**values):
    """This environment without any Ember variable, plus `values`, for a child interpreter."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(config.PREFIXES) and k not in config.REGISTRY
           and k not in config.ALIASES}
    env['PYTHONPATH'] = str(REPO) + os.pathsep + env.get('PYTHONPATH', '')
    env.update(values)
    return env


def run_python(code, **values):
    """Run `code` in a fresh interpreter with `values` in its environment."""
    return subprocess.run([sys.executable, '-c', code], env=clean_environ(**values), cwd=REPO,
                          capture_output=True, text=True, timeout=60)


# ----------------------------------------------------------------------------------------------
# Declarations against the spec.

def test_every_name_in_the_spec_is_declared():
    names = spec_facts.spec_names()
    assert len(names) == 81, sorted(names)
    missing = sorted(n for n in names if n not in config.REGISTRY and n not in config.ALIASES)
    assert not missing, f'declare these in ember/config.py: {missing}'
    assert config.ALIASES['MXNET_EXEC_MATCH_RANGE'] == 'NNVM_EXEC_MATCH_RANGE'


def test_only_extensions_are_missing_from_the_spec():
    names = spec_facts.spec_names()
    undocumented = sorted(n for n, var in config.REGISTRY.items()
                          if n not in names and not var.extension)
    assert not undocumented, f'not in the spec, so mark them extension=True: {undocumented}'


def declared_names_in_source():
    tree = ast.parse((REPO / 'ember' / 'config.py').read_text())
    names = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id.endswith('_var') and node.args
                and isinstance(node.args[0], ast.Constant)):
            names.append(node.args[0].value)
    return names


def test_each_variable_is_declared_once():
    names = declared_names_in_source()
    assert sorted(names) == sorted(config.REGISTRY)
    assert not set(config.ALIASES) & set(config.REGISTRY)
    with pytest.raises(RuntimeError, match='MXNET_ENGINE_TYPE is declared twice'):
        config.int_var('MXNET_ENGINE_TYPE', 1, 'again', 'engine', 'engine')
    with pytest.raises(RuntimeError, match='MXNET_EXEC_MATCH_RANGE is declared twice'):
        config.int_var('MXNET_EXEC_MATCH_RANGE', 1, 'again', 'memory', 'executor')


def test_defaults_follow_the_newest_edition():
    newest = spec_facts.variables()['newest_edition']
    names, defaults = newest['bullets'], newest['defaults']
    assert len(names) == 60 and len(set(names)) == 60
    assert sorted(set(names) - set(defaults)) == ['MXNET_HOME', 'MXNET_LIBRARY_PATH']
    for name, text in defaults.items():
        var = config.lookup(name)
        if text.startswith('<value of '):
            other = text[len('<value of '):-1]
            assert var.default_doc == f'value of {other}', name
            with config.override(**{other: 3}):
                assert config.get(name) == 3, name
            continue
        assert config.parse_value(var, text) == config.default_value(var), (name, text)


NEURON_DEFAULTS = {   # 003 states these in prose
    'NEURON_PARALLEL_COMPILE_MAX_RETRIES': 0, 'NEURON_RT_STOCHASTIC_ROUNDING_SEED': 0,
    'BUCKET_CAP_MB': 50.0, 'NEURON_NUM_RECENT_MODELS_TO_KEEP': None, 'XLA_USE_BF16': False,
    'XLA_DOWNCAST_BF16': False, 'MXNET_HOME': '~/.mxnet',
}


@pytest.mark.parametrize('name', sorted(NEURON_DEFAULTS))
def test_defaults_stated_in_prose(name):
    assert config.default_value(config.lookup(name)) == NEURON_DEFAULTS[name]


# ----------------------------------------------------------------------------------------------
# Parsing.

def parse(name, text):
    return config.parse_value(config.lookup(name), text)


@pytest.mark.parametrize('text, value', [('7', 7), (' 7 ', 7), ('+7', 7), ('-1', -1)])
def test_integers_parse(text, value):
    assert parse('MXNET_MKLDNN_CACHE_NUM', text) == value


@pytest.mark.parametrize('text', ['12abc', '1.5', '1e3', '0x10', '1_000', 'abc', '٣'])
def test_integers_must_parse_wholly(text):
    with pytest.raises(config.ConfigError, match='expected an integer'):
        parse('MXNET_MKLDNN_CACHE_NUM', text)


def test_integer_ranges_are_checked():
    with pytest.raises(config.ConfigError, match=r"NSTREAMS='3': expected an integer in \[1, 2\]"):
        parse('MXNET_GPU_WORKER_NSTREAMS', '3')
    with pytest.raises(config.ConfigError, match='>= 1'):
        parse('MXNET_CPU_WORKER_NTHREADS', '0')


@pytest.mark.parametrize('text, value', [('0.5', 0.5), ('512', 512.0), ('1e-3', 1e-3),
                                         ('.25', 0.25)])
def test_numbers_parse(text, value):
    assert parse('BUCKET_CAP_MB', text) == value


@pytest.mark.parametrize('text', ['0.5x', '1_0', 'nan', 'inf', '--1', '', '1e'])
def test_numbers_must_parse_wholly(text):
    with pytest.raises(config.ConfigError, match='BUCKET_CAP_MB'):
        parse('BUCKET_CAP_MB', text)


@pytest.mark.parametrize('text, value', [('1', True), ('0', False), ('true', True),
                                         ('TRUE', True), ('False', False), ('fAlSe', False)])
def test_booleans_accept_digits_and_words_in_any_case(text, value):
    assert parse('MXNET_KVSTORE_USETREE', text) is value


@pytest.mark.parametrize('text', ['yes', 'on', '2', 'maybe', 't'])
def test_booleans_reject_other_words(text):
    with pytest.raises(config.ConfigError, match='0, 1, true or false'):
        parse('MXNET_KVSTORE_USETREE', text)


def test_enums_are_exact_with_a_suggestion():
    assert parse('MXNET_ENGINE_TYPE', 'NaiveEngine') == 'NaiveEngine'
    with pytest.raises(config.ConfigError) as info:
        parse('MXNET_ENGINE_TYPE', 'Threaded')
    message = str(info.value)
    assert message.startswith("MXNET_ENGINE_TYPE='Threaded': expected 'NaiveEngine', "
                              "'ThreadedEngine' or 'ThreadedEnginePerDevice'")
    assert message.endswith("did you mean 'ThreadedEngine'?")
    with pytest.raises(config.ConfigError, match="did you mean 'NaiveEngine'"):
        parse('MXNET_ENGINE_TYPE', 'naiveengine')


def test_profiler_mode_also_accepts_the_words_of_its_spec():
    assert parse('MXNET_PROFILER_MODE', 'True') == '1'
    assert parse('MXNET_PROFILER_MODE', '0') == '0'


def test_structured_kinds_parse():
    assert parse('NEURON_RT_VISIBLE_CORES', '0-3') == (0, 1, 2, 3)
    assert parse('NEURON_RT_VISIBLE_CORES', '4,5') == (4, 5)
    assert parse('MXNET_ENABLE_OPERATOR_TUNING', '0') == ()
    assert parse('MXNET_ENABLE_OPERATOR_TUNING', 'float32,float16') == ('float32', 'float16')
    flags = parse('NEURON_CC_FLAGS', '--auto-cast=matmult "--cache_dir=/a b"')
    assert flags.words == ('--auto-cast=matmult', '--cache_dir=/a b')
    assert (flags.auto_cast, flags.cache_dir, flags.opt_level) == ('matmult', '/a b', 2)
    assert parse('KMP_AFFINITY', 'granularity=fine,compact,1,0')['type'] == 'compact'


# Bad values per kind; 'str' and 'path' accept any text, so nothing is bad for them.
BAD_VALUES = {
    'int': ['abc', '12abc', '1.5'],
    'float': ['abc', '0.5x', 'nan'],
    'bool': ['maybe', '2', 'yes'],
    'tuning': ['float33', 'float32,int7'],
    'cores': ['abc', '3-1', '1,1', '0,2', '1-2'],
    'affinity': ['compactt', 'compact,scatter'],
    'flags': ['"unterminated', '--auto-cast=fast', '-O3', '--no-cache'],
    'url': ['s3://bucket/cache'],
}
ANY_TEXT = ('str', 'path')


def near_miss(var):
    """A value one edit away from an accepted choice, and that choice."""
    choice = max(var.choices, key=len)
    return (choice + 'x' if len(choice) <= 2 else choice[:-1]), choice


def bad_values(var):
    if var.kind == 'enum':
        return [near_miss(var)[0]]
    assert var.kind in BAD_VALUES, f'{var.name}: add bad values for kind {var.kind!r}'
    return BAD_VALUES[var.kind]


@pytest.mark.parametrize('name', sorted(config.REGISTRY))
def test_every_variable_rejects_a_bad_value_clearly(name):
    var = config.REGISTRY[name]
    if var.kind in ANY_TEXT:
        pytest.skip(f'{name} is a {var.kind}: any text is accepted, so no value is bad')
    for bad in bad_values(var):
        with pytest.raises(config.ConfigError) as info:
            config.override(**{name: bad})
        message = str(info.value)
        assert message.startswith(f'{name}={bad!r}: expected '), message
        if var.kind == 'enum':
            assert message.endswith(f'did you mean {near_miss(var)[1]!r}?'), message


CHILD_READS_ALL = """
import json, ember
from ember import config
errors = {}
for name in config.REGISTRY:
    try:
        config.get(name)
    except config.ConfigError as exc:
        errors[name] = str(exc)
print(json.dumps(errors))
"""


def test_bad_values_in_the_environment_fail_at_the_read_not_at_import():
    env = {name: bad_values(var)[0] for name, var in config.REGISTRY.items()
           if var.kind not in ANY_TEXT}
    child = run_python(CHILD_READS_ALL, **env)
    assert child.returncode == 0, child.stderr
    errors = json.loads(child.stdout)
    assert sorted(errors) == sorted(env)
    for name, message in errors.items():
        assert message.startswith(f'{name}={env[name]!r}: expected'), message


def test_empty_values_mean_unset_and_aliases_are_read():
    code = ("from ember import config; print(config.get('MXNET_EXEC_NUM_TEMP'), "
            "config.source('MXNET_EXEC_NUM_TEMP'), config.get('NNVM_EXEC_MATCH_RANGE'), "
            "config.source('NNVM_EXEC_MATCH_RANGE'), config.get('MXNET_ENGINE_TYPE'))")
    child = run_python(code, MXNET_EXEC_NUM_TEMP='', MXNET_ENGINE_TYPE='  ',
                       MXNET_EXEC_MATCH_RANGE='4')
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ['1', 'default', '4', 'environment',
                                    'ThreadedEnginePerDevice']


def test_lookup_of_an_unknown_name_suggests_one():
    with pytest.raises(KeyError, match='did you mean .MXNET_ENGINE_TYPE'):
        config.get('MXNET_ENGIN_TYPE')


# ----------------------------------------------------------------------------------------------
# Unknown names.

def test_unknown_names_warn_once_with_the_closest_name():
    environ = {'MXNET_CPU_WORKR_NTHREADS_T1': '3', 'NEURON_FRAMEWORK_DEBUGG_T1': '1',
               'MXNET_CPU_WORKER_NTHREADS': '2', 'MXNET_EXEC_MATCH_RANGE': '4',
               'OMP_PROC_BIND': 'true', 'PATH': '/bin'}
    with pytest.warns(config.UnknownVariableWarning) as record:
        warned = config.warn_unknown(environ)
    assert warned == ['MXNET_CPU_WORKR_NTHREADS_T1', 'NEURON_FRAMEWORK_DEBUGG_T1']
    messages = [str(w.message) for w in record]
    assert messages == [
        'MXNET_CPU_WORKR_NTHREADS_T1 is not a variable Ember knows; '
        'did you mean MXNET_CPU_WORKER_NTHREADS?',
        'NEURON_FRAMEWORK_DEBUGG_T1 is not a variable Ember knows; '
        'did you mean NEURON_FRAMEWORK_DEBUG?']
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert config.warn_unknown(environ) == []


def test_every_ember_prefix_is_checked():
    environ = {prefix + 'NO_SUCH_THING_T2': '1' for prefix in config.PREFIXES}
    with pytest.warns(config.UnknownVariableWarning):
        assert config.warn_unknown(environ) == sorted(environ)


def test_import_warns_about_a_misspelled_name_once():
    child = run_python('import ember; from ember import config; config.warn_unknown()',
                       MXNET_CPU_WORKR_NTHREADS='3')
    assert child.returncode == 0, child.stderr
    lines = [line for line in child.stderr.splitlines() if 'MXNET_CPU_WORKR_NTHREADS' in line]
    assert len(lines) == 1, child.stderr
    assert lines[0].endswith('did you mean MXNET_CPU_WORKER_NTHREADS?')


# ----------------------------------------------------------------------------------------------
# Overrides.

def test_override_as_context_manager_nests_and_restores():
    before = config.get('MXNET_EXEC_NUM_TEMP')
    with config.override(MXNET_EXEC_NUM_TEMP=2):
        assert config.get('MXNET_EXEC_NUM_TEMP') == 2
        assert config.source('MXNET_EXEC_NUM_TEMP') == 'override'
        assert config.is_set('MXNET_EXEC_NUM_TEMP')
        with config.override(MXNET_EXEC_NUM_TEMP='3'):
            assert config.get('MXNET_EXEC_NUM_TEMP') == 3
        assert config.get('MXNET_EXEC_NUM_TEMP') == 2
    assert config.get('MXNET_EXEC_NUM_TEMP') == before


def test_override_as_decorator():
    @config.override(MXNET_KVSTORE_USETREE=True)
    def use_tree():
        return config.get('MXNET_KVSTORE_USETREE')

    assert use_tree() is True
    assert use_tree() is True
    assert config.get('MXNET_KVSTORE_USETREE') is False


def test_override_through_an_alias_and_back_to_the_default():
    with config.override(MXNET_EXEC_MATCH_RANGE=4):
        assert config.get('NNVM_EXEC_MATCH_RANGE') == 4
        assert config.get('MXNET_EXEC_MATCH_RANGE') == 4
        with config.override(NNVM_EXEC_MATCH_RANGE=None):
            assert config.get('MXNET_EXEC_MATCH_RANGE') == 16


def test_override_values_are_validated():
    with pytest.raises(config.ConfigError, match="MXNET_EXEC_NUM_TEMP='0'"):
        config.override(MXNET_EXEC_NUM_TEMP=0)
    with pytest.raises(config.ConfigError, match="MXNET_CPU_PARALLEL_SIZE='2.5'"):
        config.override(MXNET_CPU_PARALLEL_SIZE=2.5)
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT=2, MXNET_KVSTORE_USETREE=1):
        assert config.get('MXNET_CUDNN_AUTOTUNE_DEFAULT') == '2'
        assert config.get('MXNET_KVSTORE_USETREE') is True


STARTUP = 'EMBER_TEST_STARTUP_VALUE'


@pytest.fixture
def startup_variable():
    """A variable read once at start-up by a fake owner, removed again after the test."""
    config.int_var(STARTUP, 1, 'A test variable.', 'tests', 'fake-owner', read='startup')
    yield config.REGISTRY[STARTUP]
    del config.REGISTRY[STARTUP]


def test_startup_variable_needs_its_owner_reset_hook(startup_variable):
    with pytest.raises(config.ConfigError, match=f'{STARTUP} is read once at start-up by '
                                                 'fake-owner'):
        config.override(**{STARTUP: 2})
    seen = []

    def rebuild():
        seen.append(config.get(STARTUP))

    config.register_reset('fake-owner', rebuild)
    try:
        with config.override(**{STARTUP: 2}):
            assert seen == [2]
        assert seen == [2, 1]
        config.override(**{STARTUP: 3})(lambda: None)()
        assert seen == [2, 1, 3, 1]
    finally:
        config.unregister_reset('fake-owner', rebuild)
    with pytest.raises(config.ConfigError):
        config.override(**{STARTUP: 2})
    with pytest.raises(ValueError, match='not a reset hook'):
        config.unregister_reset('fake-owner', rebuild)


def test_a_failing_reset_hook_leaves_no_override_behind(startup_variable):
    def broken():
        if config.get(STARTUP) == 2:
            raise RuntimeError('cannot rebuild')

    config.register_reset('fake-owner', broken)
    try:
        with pytest.raises(RuntimeError, match='cannot rebuild'):
            with config.override(**{STARTUP: 2}):
                pass
        assert config.get(STARTUP) == 1
    finally:
        config.unregister_reset('fake-owner', broken)


# ----------------------------------------------------------------------------------------------
# Computed defaults.

def test_bulk_sizes_default_to_the_training_size():
    with config.override(MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN=7):
        assert config.get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD') == 7
        assert config.get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD') == 7
        with config.override(MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD=2):
            assert config.get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD') == 7
            assert config.get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD') == 2
    assert config.get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD') == 15


def test_stochastic_rounding_defaults_on_with_bf16():
    # the bf16 variables are read once at start-up: each case is a new process
    code = "from ember.op import precision; print(precision.stochastic())"
    from ember.op import precision
    assert precision.stochastic() is False
    for env in ({'XLA_USE_BF16': '1'}, {'XLA_DOWNCAST_BF16': '1'},
                {'XLA_USE_BF16': '1', 'NEURON_RT_STOCHASTIC_ROUNDING_EN': '0'}):
        child = run_python(code, **env)
        assert child.stdout.split() == [str(env.get('NEURON_RT_STOCHASTIC_ROUNDING_EN') != '0')]
    with pytest.raises(config.ConfigError, match='read once at start-up'):
        config.override(XLA_USE_BF16=True)


def test_operator_tuning_defaults_to_the_enable_variable():
    code = ("from ember import config; print(config.get('MXNET_USE_OPERATOR_TUNING'), "
            "config.get('MXNET_USE_OPERATOR_TUNING') == config.TUNING_DTYPES)")
    child = run_python(code, MXNET_ENABLE_OPERATOR_TUNING='float32,float16')
    assert child.stdout.split() == ["('float32',", "'float16')", 'False'], child.stderr
    child = run_python(code, MXNET_ENABLE_OPERATOR_TUNING='float32',
                       MXNET_USE_OPERATOR_TUNING='0')
    assert child.stdout.split() == ['()', 'False'], child.stderr
    child = run_python(code)
    assert child.stdout.split()[-1] == 'True', child.stderr


# ----------------------------------------------------------------------------------------------
# Helpers.

def test_cache_key_values_follow_overrides():
    values = config.cache_key_values()
    assert set(values) == {n for n, v in config.REGISTRY.items() if v.cache_key}
    assert 'MXNET_CPU_PARALLEL_SIZE' not in values
    with config.override(MXNET_EXEC_ENABLE_INPLACE=False):
        assert config.cache_key_values()['MXNET_EXEC_ENABLE_INPLACE'] is False


def test_child_environ_sets_removes_and_validates():
    env = config.child_environ(MXNET_ENGINE_TYPE='NaiveEngine', MXNET_KVSTORE_USETREE=True,
                               MXNET_HOME=None)
    assert env['MXNET_ENGINE_TYPE'] == 'NaiveEngine'
    assert env['MXNET_KVSTORE_USETREE'] == '1'
    assert 'MXNET_HOME' not in env
    with pytest.raises(config.ConfigError, match="did you mean 'NaiveEngine'"):
        config.child_environ(MXNET_ENGINE_TYPE='Naive')


def test_cpu_count_is_positive():
    assert config.cpu_count() >= 1


def test_data_dir_expands_mxnet_home_without_creating_it(tmp_path):
    assert base.data_dir() == os.path.expanduser(config.get('MXNET_HOME'))
    with config.override(MXNET_HOME=None):
        assert base.data_dir() == os.path.join(os.path.expanduser('~'), '.mxnet')
    target = tmp_path / 'not-yet'
    with config.override(MXNET_HOME=str(target)):
        assert base.data_dir() == str(target)
        assert not target.exists()
    with config.override(MXNET_HOME='~/ember-test-home'):
        assert base.data_dir() == os.path.join(os.path.expanduser('~'), 'ember-test-home')
