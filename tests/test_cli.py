"""The command line: ``python -m ember env`` and the generated reference page."""
import importlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path


from ember import cli, config
from ember.cli import env as env_command
import spec_facts

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / 'docs' / 'env_vars.md'


def run_ember(*args, **values):
    """`python -m ember ARGS` in a fresh interpreter with only `values` as Ember variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(config.PREFIXES) and k not in config.REGISTRY}
    env['PYTHONPATH'] = str(REPO) + os.pathsep + env.get('PYTHONPATH', '')
    env.update(values)
    return subprocess.run([sys.executable, '-m', 'ember', *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


# ----------------------------------------------------------------------------------------------
# The reference page.

def test_committed_page_is_up_to_date():
    assert PAGE.exists(), 'generate it: python -m ember env --markdown'
    assert PAGE.read_text() == env_command.render_markdown(), (
        'docs/env_vars.md is stale: regenerate it with `python -m ember env --markdown`')


def test_check_fails_on_a_stale_page_and_markdown_fixes_it(tmp_path, capsys):
    page = tmp_path / 'env_vars.md'
    assert cli.main(['env', '--check', str(page)]) == 1
    assert 'is missing' in capsys.readouterr().err
    assert cli.main(['env', '--markdown', str(page)]) == 0
    assert cli.main(['env', '--check', str(page)]) == 0
    page.write_text(page.read_text().replace('| 0, 1, true or false |', '| 0 or 1 |', 1))
    assert cli.main(['env', '--check', str(page)]) == 1
    assert 'is stale' in capsys.readouterr().err


def page_rows():
    """The declared variables' rows (the native libraries' table at the end is left out)."""
    rows = {}
    text = PAGE.read_text().split('## Set by Ember for native libraries')[0]
    for line in text.splitlines():
        match = re.match(r'\| `([A-Z0-9_]+)`', line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in line.strip('|').split(' | ')]
    return rows


def test_page_has_one_row_per_variable_with_every_column():
    rows = page_rows()
    assert sorted(rows) == sorted(config.REGISTRY)
    for name, cells in rows.items():
        var = config.REGISTRY[name]
        assert len(cells) == 9, cells
        kind, default, accepts, read, cache_key, owner, status, doc = cells[1:]
        assert kind == var.kind and owner == var.owner and doc == var.doc
        assert accepts == var.accepts.replace('|', '\\|')
        assert read in ('each use', 'start-up') and cache_key == ('yes' if var.cache_key else '')
        assert status.startswith('effective') == var.effective
        assert ('simulated GPU' in status) == (name in config.SIMULATED_GPU_ONLY)
        assert default


def test_page_states_defaults_and_aliases():
    rows = page_rows()
    assert rows['MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD'][2] == (
        'value of MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN')
    assert rows['MXNET_ENGINE_TYPE'][2] == '`ThreadedEnginePerDevice`'
    assert rows['MXNET_EXEC_ENABLE_INPLACE'][2] == '`1`'
    assert '(also `MXNET_EXEC_MATCH_RANGE`)' in rows['NNVM_EXEC_MATCH_RANGE'][0]
    sections = re.findall(r'^## (.+)$', PAGE.read_text(), re.M)
    assert sections[:-1] == [env_command._title(s) for s in env_command.sections()]
    assert sections[-1] == 'Set by Ember for native libraries'


def test_native_defaults_are_listed():
    text = env_command.render_text([env_command.describe(config.REGISTRY["OMP_NUM_THREADS"])])
    for default in config.NATIVE_DEFAULTS:
        assert f'{default.name} = ' in text and default.why in text


def test_page_is_written_in_our_own_words():
    spec = spec_facts.shingle_digests()
    copied = [shingle for shingle in spec_facts.prose_shingles(PAGE.read_text())
              if spec_facts.digest(shingle) in spec]
    assert not copied, [' '.join(words) for words in copied]


# ----------------------------------------------------------------------------------------------
# Printing values.

def test_text_lists_every_variable_with_value_source_and_status(capsys):
    with config.override(MXNET_EXEC_NUM_TEMP=3):
        assert cli.main(['env']) == 0
    out = capsys.readouterr().out
    for name, var in config.REGISTRY.items():
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [name])
        status = var.status
        if var.name in config.SIMULATED_GPU_ONLY:
            status = 'effective (on a simulated GPU; no GPU has run it yet)'
        assert line.rstrip().endswith(status), line
    temp = next(ln for ln in out.splitlines() if ln.split()[:1] == ['MXNET_EXEC_NUM_TEMP'])
    assert temp.split()[1:3] == ['3', 'override']
    assert 'Threads' in out and 'Graph compiler' in out


def test_text_names_each_variables_other_names(capsys):
    assert cli.main(['env']) == 0
    lines = capsys.readouterr().out.splitlines()
    aliased = [var for var in config.REGISTRY.values() if var.aliases]
    assert aliased, 'no variable has another name to show'
    for var in aliased:
        line = next(ln for ln in lines if ln.split()[:1] == [var.name])
        assert f"(also {', '.join(var.aliases)})" in line, line


def test_json_describes_every_variable(capsys):
    with config.override(MXNET_KVSTORE_USETREE=True):
        assert cli.main(['env', '--json']) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row['name']: row for row in report['variables']}
    assert sorted(rows) == sorted(config.REGISTRY)
    tree = rows['MXNET_KVSTORE_USETREE']
    assert (tree['value'], tree['text'], tree['source']) == (True, '1', 'override')
    assert rows['MXNET_ENABLE_OPERATOR_TUNING']['value'] == list(config.TUNING_DTYPES)
    for row in rows.values():
        assert row['effective'] == row['status'].startswith('effective')
        assert {'kind', 'default', 'accepts', 'read', 'cache_key', 'owner', 'doc'} <= set(row)


def test_environment_values_bad_values_and_unknown_names_in_a_new_process():
    child = run_ember('env', MXNET_CPU_WORKER_NTHREADS='3', MXNET_EXEC_MATCH_RANGE='4',
                      MXNET_EXEC_NUM_TEMP='many', MXNET_CPU_WORKR_NTHREADS='2')
    assert child.returncode == 1, child.stderr
    lines = child.stdout.splitlines()

    def fields(name):
        return next(ln for ln in lines if ln.split()[:1] == [name]).split()

    assert fields('MXNET_CPU_WORKER_NTHREADS')[1:3] == ['3', 'environment']
    assert fields('NNVM_EXEC_MATCH_RANGE')[1:6] == ['(also', 'MXNET_EXEC_MATCH_RANGE)', '4',
                                                    'environment', '(MXNET_EXEC_MATCH_RANGE)']
    assert fields('MXNET_EXEC_NUM_TEMP')[1] == 'INVALID'
    assert "error: MXNET_EXEC_NUM_TEMP='many': expected an integer" in child.stdout
    assert 'MXNET_CPU_WORKR_NTHREADS  did you mean MXNET_CPU_WORKER_NTHREADS?' in child.stdout


def test_json_in_a_new_process():
    child = run_ember('env', '--json', MXNET_ENGINE_TYPE='NaiveEngine')
    assert child.returncode == 0, child.stderr
    rows = {row['name']: row for row in json.loads(child.stdout)['variables']}
    assert rows['MXNET_ENGINE_TYPE']['value'] == 'NaiveEngine'
    assert rows['MXNET_ENGINE_TYPE']['source'] == 'environment'


# ----------------------------------------------------------------------------------------------
# Sub-commands.

def test_console_script_points_at_main():
    scripts = tomllib.loads((REPO / 'pyproject.toml').read_text())['project']['scripts']
    module_name, function = scripts['ember'].split(':')
    assert getattr(importlib.import_module(module_name), function) is cli.main


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert 'env' in capsys.readouterr().out


HELLO = '''"""Say hello (a test command)."""
def add_arguments(parser):
    parser.add_argument('--name', default='world')
def run(args):
    print('hello', args.name)
    return 3
'''


def test_a_registered_module_becomes_a_command(tmp_path, monkeypatch, capsys):
    (tmp_path / 'ember_test_hello.py').write_text(HELLO)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli._registered, 'hello', 'ember_test_hello')
    monkeypatch.setitem(cli._registered, 'broken', 'ember_test_no_such_module')
    assert cli.main(['hello', '--name', 'ember']) == 3
    assert capsys.readouterr().out == 'hello ember\n'
    assert cli.main(['broken']) == 2
    assert 'cannot load the command' in capsys.readouterr().err
    assert cli.main(['env', '--check', str(PAGE)]) == 0


def test_package_modules_are_discovered():
    assert cli.commands()['env'] == 'ember.cli.env'
    assert all(not name.startswith('_') for name in cli.commands())
