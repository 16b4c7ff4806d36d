"""Reduction trees (MXNET_KVSTORE_USETREE) for link matrices whose answers were worked out by
hand; the reasoning is in each test."""
import numpy as np
import pytest

from ember import config
from ember.kvstore import tree

MESH = tree.hybrid_cube_mesh()


def levels(found):
    return [list(level) for level in found.levels]


@pytest.mark.parametrize('backtrack', [False, True])
def test_hybrid_cube_mesh_first_tree(backtrack):
    # The only bisection cutting 4 links is the two quads {0,1,2,3} | {4,5,6,7} (any other
    # cuts 8). 0's only link into {4..7} is 4, its head. In the quad around 0 every pairing
    # cuts 4 links; the first, {0,1} | {2,3}, stays, with head 2 (the lower of 2 and 3, both
    # linked to 0). Likewise 4's quad gives {4,5} | {6,7} with head 6.
    found = tree.build_tree(MESH, 0, backtrack)
    assert levels(found) == [[(0, 4)], [(0, 2), (4, 6)], [(0, 1), (2, 3), (4, 5), (6, 7)]]
    assert all(MESH[p, c] > 0 for p, c in found.edges())


def test_penalty_steers_the_next_tree_to_unused_links():
    # After the tree rooted at 0, its seven links weigh 0.7. Around root 1 the quads still
    # split (cut 3.7) and 1's cross link 1-5 is unused. In 1's quad, pairing {1,2} | {0,3}
    # keeps the two unused links 1-2 and 0-3 inside the halves (cut 3.1, against 3.7 for
    # {1,0} | {2,3} whose inside links are used), and 3 is the far half's head (1-3 weighs
    # 1, 1-0 only 0.7).
    first, second = tree.build_trees(MESH, penalty=0.7)[:2]
    assert levels(second)[:2] == [[(1, 5)], [(1, 3), (5, 7)]]
    assert levels(second)[2][:2] == [(1, 2), (3, 0)]
    no_penalty = tree.build_trees(MESH, penalty=1.0)[1]
    assert levels(no_penalty)[2][:2] == [(1, 0), (2, 3)]


# Five devices where Kernighan-Lin's tree needs a link that does not exist. Around root 0 it
# keeps its first split {0,1,2} | {3,4} (cut 6, the least; no swap lowers it) and the head of
# {3,4} is 4 (0-4 weighs 2), but 3 and 4 are not linked. Backtracking tries the splits of cut
# 6 in order: {0,1,2} | {3,4} fails for that reason (3-4 is not a link either way round), the
# next, {0,1,3} | {2,4}, joins 0-4 and 4-2 and, around 0, 0-3 and 0-1: every edge a link.
FIVE = np.array([[0, 2, 1, 1, 2],
                 [2, 0, 2, 0, 0],
                 [1, 2, 0, 1, 2],
                 [1, 0, 1, 0, 0],
                 [2, 0, 2, 0, 0]], dtype=float)


def test_backtracking_finds_a_tree_of_real_links_where_kernighan_lin_does_not():
    heuristic = tree.build_tree(FIVE, 0, backtrack=False)
    assert levels(heuristic) == [[(0, 4)], [(0, 2), (4, 3)], [(0, 1)]]
    assert FIVE[4, 3] == 0
    exhaustive = tree.build_tree(FIVE, 0, backtrack=True)
    assert levels(exhaustive) == [[(0, 4)], [(0, 3), (4, 2)], [(0, 1)]]
    assert all(FIVE[p, c] > 0 for p, c in exhaustive.edges())


def test_backtracking_without_any_linked_tree_falls_back_to_kernighan_lin():
    isolated = np.zeros((3, 3))
    isolated[0, 1] = isolated[1, 0] = 1
    assert tree.build_tree(isolated, 0, True) == tree.build_tree(isolated, 0, False)


def test_kernighan_lin_improves_a_bad_first_split():
    # Two pairs strongly linked, 0-3 and 1-2; the first split {0,1} | {2,3} cuts both (20),
    # one swap (1 for 3) gives {0,3} | {1,2}, which cuts only the weak links (2).
    weights = np.array([[0, 1, 0, 10], [1, 0, 10, 0], [0, 10, 0, 1], [10, 0, 1, 0]], float)
    assert tree.kernighan_lin(weights, (0, 1, 2, 3), 0) == ((0, 3), (1, 2))


def test_slices_for_trees_cover_the_array_evenly():
    assert tree.slices_for_trees(10, 4) == [(0, 3), (3, 5), (5, 8), (8, 10)]
    assert tree.slices_for_trees(2, 4) == [(0, 1), (1, 1), (1, 2), (2, 2)]


def test_cpu_link_matrix_weighs_shared_cores_highest():
    weights = tree.cpu_link_matrix([0, 1, 2], cores=(0, 0, 0))
    assert weights.tolist() == [[0, 3, 3], [3, 0, 3], [3, 3, 0]]
    two = tree.cpu_link_matrix([0, 1], cores=config.process_cores()[:1] * 2)
    assert two[0, 1] == 3


def test_configured_method_and_penalty_are_used(monkeypatch):
    from ember import device
    devices = [device.cpu(i) for i in range(5)]
    tree.use_link_matrix(devices, FIVE)
    try:
        with config.override(MXNET_KVSTORE_TREE_BACKTRACK=True):
            assert levels(tree.trees_for(devices)[0])[1] == [(0, 3), (4, 2)]
        assert levels(tree.trees_for(devices)[0])[1] == [(0, 2), (4, 3)]
        with pytest.raises(ValueError, match=r'\(5, 5\)'):
            tree.use_link_matrix(devices, np.zeros((4, 4)))
    finally:
        tree.use_link_matrix(devices, None)
    eight = [device.cpu(i) for i in range(8)]
    tree.use_link_matrix(eight, MESH)
    try:
        # the hand-checked second trees of test_penalty_steers_the_next_tree_to_unused_links
        assert levels(tree.trees_for(eight)[1])[2][:2] == [(1, 2), (3, 0)]
        with config.override(MXNET_KVSTORE_TREE_LINK_USAGE_PENALTY=1.0):
            assert levels(tree.trees_for(eight)[1])[2][:2] == [(1, 0), (2, 3)]
    finally:
        tree.use_link_matrix(eight, None)
