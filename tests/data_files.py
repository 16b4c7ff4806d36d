"""Where the tests' data lives: `tests/data/`, inside the repository (see its README files)."""
from pathlib import Path

DATA = Path(__file__).resolve().parent / 'data'
MXNET_FIXTURES = DATA / 'mxnet-1.9.1'
IMAGE_FIXTURES = DATA / 'image-mxnet'
