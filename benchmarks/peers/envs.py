"""The peers' virtual environments: created once under a cache directory, reused after.

    python benchmarks/peers/envs.py [--env-dir ~/.cache/ember-bench] [--torch-wheel PATH]

Each environment is finished when its stamp file holds the requirement it was built for; a
half-built one (interrupted pip) is removed and built again. Packages are named, never
registry hosts: pip reaches whatever index this machine's pip configuration names.
"""
from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENV_DIR = Path('~/.cache/ember-bench').expanduser()
TORCH_VERSION = '2.13.0'
STAMP = 'ember-bench-ready'
# Where a local torch wheel has been seen: pip's find-links folder, wheel piles, home.
WHEEL_PLACES = ('/opt/wheels', '/opt/pypi*/files', '~/wheels', '~', '/tmp')


@dataclass(frozen=True)
class PeerEnv:
    """One virtual environment: its folder name and what pip installs into it."""
    name: str
    requirements: tuple

    def path(self, env_dir):
        return Path(env_dir) / self.name

    def python(self, env_dir):
        return self.path(env_dir) / 'bin' / 'python'

    def stamp_text(self):
        return ' '.join(self.requirements)

    def ready(self, env_dir):
        stamp = self.path(env_dir) / STAMP
        return stamp.is_file() and stamp.read_text().strip() == self.stamp_text()


MXNET_ENV = PeerEnv('mxnet-1.9.1', ('mxnet==1.9.1', 'numpy==1.23.5'))


def find_torch_wheel(version=TORCH_VERSION):
    """The path of a local CPU wheel of torch `version` for this Python, or None."""
    tag = f'cp{sys.version_info.major}{sys.version_info.minor}'
    for place in WHEEL_PLACES:
        pattern = os.path.join(os.path.expanduser(place), f'torch-{version}*-{tag}-*.whl')
        found = sorted(glob.glob(pattern))
        cpu_builds = [path for path in found if '+cpu' in path] or found
        if cpu_builds:
            return cpu_builds[0]
    return None


def torch_env(wheel):
    """The PyTorch environment, installed from the local wheel `wheel`.

    Naming the file keeps pip from taking a multi-GB CUDA build from an index."""
    if wheel is None:
        raise FileNotFoundError(
            f'no local wheel torch-{TORCH_VERSION}*.whl for this Python in {WHEEL_PLACES}: '
            'pass --torch-wheel PATH, or leave torch out with --frameworks ember,mxnet')
    # NumPy only keeps torch from warning at import; the runner does not use it.
    return PeerEnv(f'torch-{TORCH_VERSION}-cpu', (str(wheel), 'numpy'))


def create(env, env_dir, log=print):
    """Build `env` under `env_dir` unless it is ready; returns the seconds spent."""
    if env.ready(env_dir):
        return 0.0
    start = time.perf_counter()
    path = env.path(env_dir)
    shutil.rmtree(path, ignore_errors=True)
    log(f'creating {path} with {env.stamp_text()} ...')
    subprocess.run([sys.executable, '-m', 'venv', str(path)], check=True)
    pip = [str(env.python(env_dir)), '-m', 'pip', 'install', '--quiet',
           '--disable-pip-version-check']
    subprocess.run(pip + list(env.requirements), check=True)
    (path / STAMP).write_text(env.stamp_text() + '\n')
    seconds = time.perf_counter() - start
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--env-dir', type=Path, default=DEFAULT_ENV_DIR)
    parser.add_argument('--torch-wheel', default=None)
    parser.add_argument('--only', choices=('mxnet', 'torch'), default=None)
    args = parser.parse_args(argv)
    envs = {'mxnet': lambda: MXNET_ENV,
            'torch': lambda: torch_env(args.torch_wheel or find_torch_wheel())}
    for name, make in envs.items():
        if args.only in (None, name):
            create(make(), args.env_dir)


if __name__ == '__main__':
    main()
