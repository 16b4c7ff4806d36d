"""What the tests need to know of the specification, kept in `tests/data/spec/`.

The specification's documents are not part of the repository, so the facts the tests check
against were taken from them once, by this module:

    python tests/spec_facts.py PATH/TO/SPEC

writes `variables.json` (the variable names each document mentions, and the bullets of the
newest MXNet edition with the default each states) and `shingles.txt` (a short hash of every
run of eight words of the documents' prose, so that a test can tell text copied from them
without the repository holding that text).
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / 'data' / 'spec'
VARIABLES = HERE / 'variables.json'
SHINGLES = HERE / 'shingles.txt'

NAME = re.compile(r'\b(?:MXNET|NNVM|DMLC|NEURON|XLA|OMP|KMP|BUCKET)_[A-Z0-9_]*[A-Z0-9]')
SHINGLE_WORDS = 8


def prose_shingles(text, size=SHINGLE_WORDS):
    """Runs of `size` words, leaving out variable names, code spans, quoted words and URLs."""
    text = re.sub(r"`[^`]*`|'[^'\s]*'|https?://\S+", ' ', NAME.sub(' ', text))
    words = re.findall(r'[a-z0-9]+', text.lower())
    return {tuple(words[i:i + size]) for i in range(len(words) - size + 1)}


def digest(shingle):
    """A 12-hex-digit hash of one shingle: enough to tell ~20,000 of them apart."""
    return hashlib.sha256(' '.join(shingle).encode()).hexdigest()[:12]


def newest_edition_bullets(text):
    """(names of the bullets in order, {name: the default text it states})."""
    names, defaults, current = [], {}, None
    for line in text.splitlines():
        bullet = re.match(r'\* ([A-Z][A-Z0-9_]+)\s*$', line.strip())
        if bullet:
            current = bullet.group(1)
            names.append(current)
            continue
        found = re.search(r'\(default=([^)`]*)', line)
        if current and found and current not in defaults:
            defaults[current] = found.group(1).strip().strip('\'"')
    return names, defaults


def variables():
    """The facts of `variables.json`: {'documents': {file: [names]}, 'newest_edition': ...}."""
    return json.loads(VARIABLES.read_text())


def spec_names():
    """Every variable name that any document of the specification mentions."""
    return {name for names in variables()['documents'].values() for name in names}


def shingle_digests():
    return set(SHINGLES.read_text().split())


def write(spec_dir):
    documents = sorted(Path(spec_dir).glob('*.txt'))
    texts = {path.name: path.read_text(errors='replace') for path in documents}
    newest = next(name for name in texts if name.startswith('000_'))
    bullets, defaults = newest_edition_bullets(texts[newest])
    facts = {'documents': {name: sorted(set(NAME.findall(text)))
                           for name, text in texts.items()},
             'newest_edition': {'document': newest, 'bullets': bullets, 'defaults': defaults}}
    HERE.mkdir(parents=True, exist_ok=True)
    VARIABLES.write_text(json.dumps(facts, indent=1, sort_keys=True) + '\n')
    shingles = set()
    for text in texts.values():
        shingles |= prose_shingles(text)
    SHINGLES.write_text('\n'.join(sorted({digest(s) for s in shingles})) + '\n')


if __name__ == '__main__':
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit('usage: python tests/spec_facts.py PATH/TO/SPEC (the folder of the spec documents)')
    write(sys.argv[1])
