"""Reduction trees over the links between devices (``MXNET_KVSTORE_USETREE``).

A link matrix ``W`` weighs how well each pair of devices communicates (0: no direct link). A tree
is built by bisection: the devices split into two halves, the root's half and the other, whose
*head* is its device most strongly linked to the root; the root and the head are joined at the
top, and each half becomes a subtree the same way, rooted at the root and at the head. A tree
over n devices thus has ceil(log2 n) levels, and a reduction runs them bottom-up (each child
adds its partial sum into its parent), a broadcast top-down.

Two ways to bisect:

- Kernighan-Lin (the default): start from a split and swap pairs of devices while that lowers
  the weight of the links cut, keeping the best prefix of a pass of swaps; fast, a heuristic.
- Backtracking (``MXNET_KVSTORE_TREE_BACKTRACK``): try the bisections in order of their cut and
  the heads in order of their link, backtracking whenever a subtree cannot be built, until every
  edge of the tree is a real link; the Kernighan-Lin tree where no such tree exists.

One tree is built per root, in order; each tree multiplies the weight of the links it uses by
``MXNET_KVSTORE_TREE_LINK_USAGE_PENALTY``, so the later trees prefer other links. Arrays of at
least ``MXNET_KVSTORE_TREE_ARRAY_BOUND`` elements are cut into one slice per tree.

>>> W = hybrid_cube_mesh()
>>> print(build_tree(W, 0))
tree rooted at 0: [(0, 4)] [(0, 2), (4, 6)] [(0, 1), (2, 3), (4, 5), (6, 7)]
"""
from __future__ import annotations

import itertools
import os
import sys
from dataclasses import dataclass

import numpy as np

from ember import backend, config

__all__ = ['Tree', 'build_tree', 'build_trees', 'trees_for', 'link_matrix', 'cpu_link_matrix',
           'use_link_matrix', 'hybrid_cube_mesh', 'slices_for_trees', 'BACKTRACK_LIMIT']

_EPS = 1e-9
# Backtracking enumerates bisections; past this many devices it takes Kernighan-Lin's.
BACKTRACK_LIMIT = 16


@dataclass(frozen=True)
class Tree:
    """``levels[k]`` holds the (parent, child) edges of level k, level 0 the top."""

    root: int
    levels: tuple

    def __str__(self):
        return f'tree rooted at {self.root}: ' + ' '.join(
            str(list(level)) for level in self.levels)

    def edges(self):
        return [edge for level in self.levels for edge in level]


def build_tree(weights, root, backtrack=False):
    """The tree rooted at `root` over all devices of the link matrix `weights`."""
    weights = np.asarray(weights, dtype=np.float64)
    nodes = tuple(range(len(weights)))
    levels = None
    if backtrack and len(nodes) <= BACKTRACK_LIMIT:
        levels = _backtrack(weights, nodes, root, {})
    if levels is None:
        levels = _kernighan_lin_tree(weights, nodes, root)
    return Tree(root, tuple(tuple(level) for level in levels))


def build_trees(weights, backtrack=False, penalty=0.7):
    """One tree per root (0, 1, ...), each penalising the links it uses for the next."""
    weights = np.array(weights, dtype=np.float64)
    trees = []
    for root in range(len(weights)):
        tree = build_tree(weights, root, backtrack)
        for parent, child in tree.edges():
            weights[parent, child] *= penalty
            weights[child, parent] *= penalty
        trees.append(tree)
    return trees


# ----------------------------------------------------------------------------------------------
# Kernighan-Lin

def _kernighan_lin_tree(weights, nodes, root):
    if len(nodes) == 1:
        return []
    near, far = kernighan_lin(weights, nodes, root)
    head = _head(weights, root, far)
    return _join(root, head, _kernighan_lin_tree(weights, near, root),
                 _kernighan_lin_tree(weights, far, head))


def kernighan_lin(weights, nodes, root):
    """Split `nodes` into (near, far), near holding `root` and ceil(n/2) devices, lowering the
    weight of the links between them by Kernighan-Lin passes."""
    others = [node for node in nodes if node != root]
    split = (len(nodes) + 1) // 2 - 1
    near, far = [root] + others[:split], others[split:]
    while True:
        swaps, gains = _one_pass(weights, near, far, root)
        totals = np.cumsum(gains) if gains else np.array([0.0])
        best = int(np.argmax(totals))
        if not gains or totals[best] <= _EPS:
            return tuple(sorted(near)), tuple(sorted(far))
        for a, b in swaps[:best + 1]:
            near[near.index(a)], far[far.index(b)] = b, a


def _one_pass(weights, near, far, root):
    """The swaps of one pass, each the best remaining pair, and their gains."""
    side = {node: 0 for node in near}
    side.update({node: 1 for node in far})
    gain_of = {node: _external(weights, node, side) for node in side}
    free_near = [n for n in near if n != root]
    free_far = list(far)
    swaps, gains = [], []
    while free_near and free_far:
        gain, a, b = max((gain_of[a] + gain_of[b] - 2 * weights[a, b], -a, -b)
                         for a in free_near for b in free_far)
        a, b = -a, -b
        swaps.append((a, b))
        gains.append(gain)
        free_near.remove(a)
        free_far.remove(b)
        for node in free_near:
            gain_of[node] += 2 * weights[node, a] - 2 * weights[node, b]
        for node in free_far:
            gain_of[node] += 2 * weights[node, b] - 2 * weights[node, a]
    return swaps, gains


def _external(weights, node, side):
    """Links to the other side minus links to its own (Kernighan-Lin's D value)."""
    total = 0.0
    for other, other_side in side.items():
        if other != node:
            total += weights[node, other] * (1 if other_side != side[node] else -1)
    return total


# ----------------------------------------------------------------------------------------------
# Backtracking

def _backtrack(weights, nodes, root, memo):
    """Levels of a tree over `nodes` whose every edge is a link, or None if none exists."""
    if len(nodes) == 1:
        return []
    key = (nodes, root)
    if key in memo:
        return memo[key]
    memo[key] = None
    for near, far in _bisections_by_cut(weights, nodes, root):
        below_near = _backtrack(weights, near, root, memo)
        if below_near is None:
            continue
        for head in sorted(far, key=lambda n: (-weights[root, n], n)):
            if weights[root, head] <= 0:
                break
            below_far = _backtrack(weights, far, head, memo)
            if below_far is not None:
                memo[key] = _join(root, head, below_near, below_far)
                return memo[key]
    return None


def _bisections_by_cut(weights, nodes, root):
    others = [node for node in nodes if node != root]
    size = (len(nodes) + 1) // 2 - 1
    splits = []
    for chosen in itertools.combinations(others, size):
        near = tuple(sorted((root,) + chosen))
        far = tuple(node for node in others if node not in chosen)
        cut = sum(weights[a, b] for a in near for b in far)
        splits.append((cut, near, far))
    splits.sort(key=lambda split: (split[0], split[1]))
    return [(near, far) for _, near, far in splits]


# ----------------------------------------------------------------------------------------------
# Shared pieces

def _head(weights, root, far):
    return min(far, key=lambda node: (-weights[root, node], node))


def _join(root, head, below_near, below_far):
    depth = max(len(below_near), len(below_far))
    merged = []
    for k in range(depth):
        level = list(below_near[k]) if k < len(below_near) else []
        level += list(below_far[k]) if k < len(below_far) else []
        merged.append(level)
    return [[(root, head)]] + merged


def slices_for_trees(size, count):
    """``count`` (begin, end) element ranges cutting `size` elements as evenly as possible.

    >>> slices_for_trees(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    """
    bounds = [size * k // count for k in range(count + 1)]
    bounds = [size - bounds[count - k] for k in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


# ----------------------------------------------------------------------------------------------
# Link matrices

def hybrid_cube_mesh():
    """The links of 8 GPUs in a hybrid cube mesh (DGX-1): two fully linked quads, 0-3 and 4-7,
    and device i linked to i + 4."""
    weights = np.zeros((8, 8))
    for quad in ((0, 1, 2, 3), (4, 5, 6, 7)):
        for a, b in itertools.combinations(quad, 2):
            weights[a, b] = weights[b, a] = 1
    for i in range(4):
        weights[i, i + 4] = weights[i + 4, i] = 1
    return weights


def cpu_link_matrix(device_ids, cores=None):
    """Links between CPU contexts: context i works on the i-th core of the process (cycling).
    Contexts on the same physical core are linked 3, on one package 2, across packages 1.

    >>> cpu_link_matrix([0, 1], cores=(0, 0)).tolist()
    [[0.0, 3.0], [3.0, 0.0]]
    """
    cores = tuple(cores or config.process_cores())
    places = [_core_place(cores[i % len(cores)]) for i in device_ids]
    weights = np.zeros((len(device_ids), len(device_ids)))
    for a, b in itertools.permutations(range(len(device_ids)), 2):
        weights[a, b] = _place_link(places[a], places[b])
    return weights


def _place_link(first, second):
    if first == second:
        return 3.0
    return 2.0 if first[0] == second[0] else 1.0


def _core_place(core):
    """(package, physical core) of a logical CPU; SMT siblings share both."""
    base = f'/sys/devices/system/cpu/cpu{core}/topology'
    try:
        with open(os.path.join(base, 'physical_package_id')) as f:
            package = int(f.read())
        with open(os.path.join(base, 'core_id')) as f:
            physical = int(f.read())
    except (OSError, ValueError):
        return (0, core)
    return (package, physical)


_given: dict = {}


def use_link_matrix(devices, weights):
    """Use `weights` for the contexts `devices` instead of the derived matrix (None: forget)."""
    key = tuple(devices)
    if weights is None:
        _given.pop(key, None)
        return
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (len(key), len(key)):
        raise ValueError(f'link matrix of shape {weights.shape} for {len(key)} devices: '
                         f'expected ({len(key)}, {len(key)})')
    _given[key] = weights


def link_matrix(devices):
    """The link matrix of `devices`: given by :func:`use_link_matrix`, else derived from the
    cores of CPU contexts, or for GPUs from their P2P matrix (``backend.peer_matrix``, which
    ``MXNET_ENABLE_GPU_P2P`` turns off); GPUs without any direct link (or mixed with CPU
    contexts) all reach each other through the host alike, so they count as all linked."""
    key = tuple(devices)
    if key in _given:
        return _given[key]
    if all(dev.device_type != 'gpu' for dev in key):
        return cpu_link_matrix([dev.device_id for dev in key])
    if all(dev.device_type == 'gpu' for dev in key):
        weights = np.array(backend.peer_matrix([dev.device_id for dev in key]), np.float64)
        if weights.any():
            return weights
    weights = np.ones((len(key), len(key)))
    np.fill_diagonal(weights, 0)
    return weights


def trees_for(devices):
    """One tree per device of `devices` (indices into it), built from :func:`link_matrix`
    with the configured method and penalty; printed under ``MXNET_KVSTORE_LOGTREE``."""
    backtrack = config.get('MXNET_KVSTORE_TREE_BACKTRACK')
    penalty = config.get('MXNET_KVSTORE_TREE_LINK_USAGE_PENALTY')
    trees = build_trees(link_matrix(devices), backtrack, penalty)
    if config.get('MXNET_KVSTORE_LOGTREE'):
        _log(devices, trees, backtrack)
    return trees


def _log(devices, trees, backtrack):
    method = 'backtracking' if backtrack else 'Kernighan-Lin'
    for tree in trees:
        print(f'kvstore: {method} tree rooted at {devices[tree.root]}:', file=sys.stderr)
        for depth, level in enumerate(tree.levels, 1):
            edges = ', '.join(f'{devices[p]} <- {devices[c]}' for p, c in level)
            print(f'  level {depth}: {edges}', file=sys.stderr)
