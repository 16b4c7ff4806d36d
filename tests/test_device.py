"""Device: value semantics (equality, hashing, pickling), immutability and bad input."""
import copy
import pickle

import pytest

import ember as mx
from ember.device import Device


def test_devices_compare_and_hash_by_kind_and_id():
    assert mx.cpu(0) == Device('cpu', 0) and mx.cpu(0) != mx.cpu(1) and mx.cpu(1) != mx.gpu(1)
    assert {mx.cpu(): 'a', mx.gpu(1): 'b'}[Device('gpu', 1)] == 'b'
    assert len({mx.cpu(0), Device(mx.cpu(0)), mx.cpu(1)}) == 2
    assert mx.cpu() != 'cpu(0)'


@pytest.mark.parametrize('make', [pickle.loads, copy.deepcopy, copy.copy],
                         ids=['pickle', 'deepcopy', 'copy'])
def test_devices_pickle_and_copy(make):
    original = mx.gpu(3)
    again = make(pickle.dumps(original)) if make is pickle.loads else make(original)
    assert again == original and hash(again) == hash(original) and repr(again) == 'gpu(3)'
    with again:
        assert mx.current_context() == mx.gpu(3)


def test_devices_are_immutable_and_check_their_arguments():
    with pytest.raises(AttributeError, match='immutable'):
        mx.cpu().device_id = 1
    with pytest.raises(ValueError, match=r"device type 'tpu'"):
        Device('tpu')
    with pytest.raises(ValueError, match=r'device id -1'):
        Device('cpu', -1)
