"""The model zoo: MXNet's architectures (parameter counts and names) and pretrained-weight loading
from a local repository."""
import hashlib
import logging
import os
import zipfile

import numpy as np
import pytest

from ember import config
from ember import ndarray as nd
from ember.device import cpu
from ember.gluon.model_zoo import model_store, vision
from ember.gluon.model_zoo.model_store import ChecksumError, ModelFileNotFoundError


def count_parameters(net):
    """MXNet's count: every parameter, BatchNorm running statistics included."""
    return sum(p.data().size for p in net.collect_params().values())


def built(name, size, **kwargs):
    """The network after one forward pass of a batch of one size x size image."""
    net = vision.get_model(name, **kwargs)
    net.initialize()
    net(nd.zeros((1, 3, size, size)))
    return net


def dense_at(net, full_in_units):
    """Parameters the net would have if its first Dense saw `full_in_units` inputs (its size at
    224x224) instead of what a small test image gave it."""
    first_dense = next(b for b in net.features._children.values() if hasattr(b, '_units'))
    units, in_units = first_dense.weight.shape
    return count_parameters(net) + (full_in_units - in_units) * units


# name, test image size, MXNet's count with classes=1000 (networks whose Dense input does not
# depend on the image size: global pooling, or a fixed-size final pool at its native size).
COUNTS = [
    ('resnet18_v1', 32, 11_699_112),
    ('resnet50_v1', 32, 25_629_032),
    ('resnet50_v2', 32, 25_595_060),
    ('resnet152_v1', 32, 60_404_072),
    ('mobilenet1.0', 32, 4_253_864),
    ('mobilenetv2_1.0', 32, 3_539_136),
    ('squeezenet1.1', 224, 1_235_496),
    ('densenet121', 224, 8_062_504),
    ('inceptionv3', 299, 23_869_000),
    # Counted from the symbol file's layer table: convolutions with bias, 4 values per BN
    # channel, Dense 1024 -> 1000.
    ('inceptionbn', 224, 11_315_272),
]


@pytest.mark.parametrize('name,size,expected', COUNTS, ids=[c[0] for c in COUNTS])
def test_parameter_count_equals_mxnet(name, size, expected):
    assert count_parameters(built(name, size)) == expected


@pytest.mark.parametrize('name,expected', [
    ('alexnet', 61_100_840),      # first Dense: 256 * 6 * 6 inputs at 224x224
    ('vgg16', 138_357_544),       # first Dense: 512 * 7 * 7 inputs at 224x224
    ('vgg16_bn', 138_374_440),
])
def test_parameter_count_of_size_dependent_dense(name, expected):
    size, full_in_units = (63, 256 * 6 * 6) if name == 'alexnet' else (32, 512 * 7 * 7)
    assert dense_at(built(name, size), full_in_units) == expected


def test_every_listed_model_builds_with_mxnet_top_level_structure():
    for name in vision._MODELS:
        net = vision.get_model(name, classes=7)
        assert set(net._children) == {'features', 'output'}, name


def test_parameter_names_follow_mxnet():
    net = vision.resnet18_v1(prefix='resnetv10_')
    names = set(net.collect_params().keys())
    assert {'resnetv10_conv0_weight', 'resnetv10_batchnorm0_running_var',
            'resnetv10_stage1_conv0_weight', 'resnetv10_stage2_conv2_weight',
            'resnetv10_stage4_batchnorm4_gamma', 'resnetv10_dense0_bias'} <= names
    # The downsample of stage 2 is its third convolution: body conv0, conv1, then the shortcut.
    assert net.collect_params()['resnetv10_stage2_conv2_weight'].shape == (128, 64, 1, 1)
    structural = set(net._collect_params_with_prefix())
    assert {'features.0.weight', 'features.1.running_mean', 'features.4.0.body.0.weight',
            'features.5.0.downsample.0.weight', 'output.weight'} <= structural

    names = set(vision.get_model('mobilenetv2_1.0', prefix='mobilenetv20_').collect_params())
    assert {'mobilenetv20_features_conv0_weight',
            'mobilenetv20_features_linearbottleneck0_conv0_weight',
            'mobilenetv20_output_pred_weight'} <= names
    names = set(vision.inception_v3(prefix='inception30_').collect_params())
    assert {'inception30_conv0_weight', 'inception30_A1_conv0_weight',
            'inception30_E2_batchnorm8_running_mean', 'inception30_dense0_weight'} <= names


def test_bottleneck_v1_convolutions_have_biases_as_in_mxnet():
    net = vision.resnet50_v1(prefix='r_')
    params = net.collect_params()
    assert 'r_stage1_conv0_bias' in params and 'r_stage1_conv2_bias' in params
    assert 'r_stage1_conv1_bias' not in params  # the 3x3 has none


def test_get_model_names():
    assert type(vision.get_model('MobileNet0.5')).__name__ == 'MobileNet'
    alias = vision.get_model('mobilenet_v2_1.0', prefix='m_')
    canonical = vision.get_model('mobilenetv2_1.0', prefix='m_')
    assert type(alias).__name__ == 'MobileNetV2'
    assert list(alias.collect_params()) == list(canonical.collect_params())
    assert type(vision.get_model('inceptionbn')).__name__ == 'InceptionBN'


def test_unknown_model_lists_choices_and_suggests():
    with pytest.raises(ValueError) as info:
        vision.get_model('resnet50v1')
    message = str(info.value)
    assert "'resnet50v1'" in message and "did you mean 'resnet50_v1'" in message
    assert 'squeezenet1.1' in message and 'densenet201' in message


def test_classes_argument_sets_output_size():
    net = built('squeezenet1.0', 224, classes=5)
    assert net(nd.zeros((2, 3, 224, 224))).shape == (2, 5)


# -- pretrained weights -------------------------------------------------------------------------

@pytest.fixture
def sha1_table():
    """The checksum table, restored after the test (tests register their own files)."""
    saved = dict(model_store._model_sha1)
    yield model_store._model_sha1
    model_store._model_sha1.clear()
    model_store._model_sha1.update(saved)


NAME = 'mobilenet0.25'


def publish(net, repo, short_hash=None, legacy=False):
    """Save `net`'s parameters into `repo` the way MXNet's repository holds them (a zip per
    file under gluon/models/) and return the file's SHA-1. `short_hash` names the file
    (default: from its own SHA-1); `legacy` writes flat names without the network's prefix
    ('conv0_weight'), as files saved before MXNet 1.3's save_parameters do."""
    repo.mkdir(parents=True, exist_ok=True)
    staging = repo / 'staging.params'
    if legacy:
        net.collect_params().save(str(staging), strip_prefix=net.prefix)
    else:
        net.save_parameters(str(staging))
    sha1 = hashlib.sha1(staging.read_bytes()).hexdigest()
    file_name = f'{NAME}-{short_hash or sha1[:8]}'
    models = repo / 'gluon' / 'models'
    models.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(models / f'{file_name}.zip', 'w') as archive:
        archive.write(staging, f'{file_name}.params')
    staging.unlink()
    return sha1


def small_net():
    net = vision.get_model(NAME, classes=10)
    net.initialize()
    net(nd.zeros((1, 3, 32, 32)))
    return net


def assert_same_parameters(a, b):
    pa, pb = a._collect_params_with_prefix(), b._collect_params_with_prefix()
    assert list(pa) == list(pb)
    for key in pa:
        np.testing.assert_array_equal(pa[key].data().asnumpy(), pb[key].data().asnumpy())


@pytest.mark.parametrize('as_url,legacy', [(False, False), (True, False), (False, True)],
                         ids=['directory', 'file-url', 'legacy-names'])
def test_pretrained_round_trip_through_local_repository(tmp_path, sha1_table, as_url, legacy):
    repo, home = tmp_path / 'repo', tmp_path / 'home'
    source = small_net()
    sha1 = publish(source, repo, legacy=legacy)
    model_store.register(NAME, sha1)
    repo_url = repo.as_uri() if as_url else str(repo)
    with config.override(MXNET_GLUON_REPO=repo_url, MXNET_HOME=str(home)):
        loaded = vision.get_model(NAME, pretrained=True, classes=10, ctx=cpu(0))
        expected_path = home / 'models' / f'{NAME}-{sha1[:8]}.params'
        assert model_store.get_model_file(NAME) == str(expected_path)
    assert_same_parameters(source, loaded)
    image = nd.random.uniform(shape=(2, 3, 32, 32))
    np.testing.assert_allclose(loaded(image).asnumpy(), source(image).asnumpy(), rtol=1e-6)
    assert sorted(os.listdir(home / 'models')) == [expected_path.name]


def test_cached_file_is_used_without_the_repository(tmp_path, sha1_table):
    repo, root = tmp_path / 'repo', tmp_path / 'models'
    source = small_net()
    model_store.register(NAME, publish(source, repo))
    with config.override(MXNET_GLUON_REPO=str(repo)):
        first = model_store.get_model_file(NAME, root=str(root))
    # The repository is gone and unreachable: the verified local copy is enough.
    with config.override(MXNET_GLUON_REPO='https://example.invalid/'):
        assert model_store.get_model_file(NAME, root=str(root)) == first
        loaded = vision.get_model(NAME, pretrained=True, classes=10, root=str(root))
    assert_same_parameters(source, loaded)


def test_checksum_mismatch_names_file_and_hashes_and_keeps_nothing(tmp_path, sha1_table):
    repo, root = tmp_path / 'repo', tmp_path / 'models'
    wrong = 'ab' * 20
    actual = publish(small_net(), repo, short_hash=wrong[:8])
    model_store.register(NAME, wrong)
    with config.override(MXNET_GLUON_REPO=str(repo)):
        with pytest.raises(ChecksumError) as info:
            vision.get_model(NAME, pretrained=True, classes=10, root=str(root))
    message = str(info.value)
    assert f'{NAME}-{wrong[:8]}.params' in message
    assert wrong in message and actual in message
    assert os.listdir(root) == []


def test_corrupt_local_file_is_replaced_from_repository(tmp_path, sha1_table, caplog):
    repo, root = tmp_path / 'repo', tmp_path / 'models'
    source = small_net()
    sha1 = publish(source, repo)
    model_store.register(NAME, sha1)
    root.mkdir()
    path = root / f'{NAME}-{sha1[:8]}.params'
    path.write_bytes(b'truncated')
    with config.override(MXNET_GLUON_REPO=str(repo)), caplog.at_level(logging.WARNING):
        assert model_store.get_model_file(NAME, root=str(root)) == str(path)
    assert hashlib.sha1(path.read_bytes()).hexdigest() == sha1
    assert hashlib.sha1(b'truncated').hexdigest() in caplog.text


def test_corrupt_local_file_without_repository_is_not_used(tmp_path, sha1_table):
    root = tmp_path / 'models'
    root.mkdir()
    model_store.register(NAME, 'cd' * 20)
    (root / f'{NAME}-cdcdcdcd.params').write_bytes(b'truncated')
    with config.override(MXNET_GLUON_REPO=str(tmp_path / 'empty-repo')):
        with pytest.raises(ModelFileNotFoundError):
            model_store.get_model_file(NAME, root=str(root))


def test_missing_file_in_local_repository(tmp_path):
    repo, root = tmp_path / 'repo', tmp_path / 'models'
    with config.override(MXNET_GLUON_REPO=str(repo)):
        with pytest.raises(ModelFileNotFoundError) as info:
            model_store.get_model_file('resnet18_v1', root=str(root))
    message = str(info.value)
    assert 'resnet18_v1-a0666292.params' in message and str(root) in message
    assert str(repo / 'gluon' / 'models' / 'resnet18_v1-a0666292.zip') in message


def test_network_repository_says_where_to_put_the_file(tmp_path):
    root = tmp_path / 'models'
    with config.override(MXNET_GLUON_REPO='https://apache-mxnet.s3.amazonaws.com'):
        with pytest.raises(ModelFileNotFoundError) as info:
            vision.get_model('alexnet', pretrained=True, root=str(root))
    message = str(info.value)
    assert ('https://apache-mxnet.s3.amazonaws.com/gluon/models/alexnet-44335d1f.zip'
            in message)
    assert f'Put alexnet-44335d1f.params in {root}' in message
    assert 'MXNET_GLUON_REPO' in message


def test_default_root_is_mxnet_home_models(tmp_path):
    with config.override(MXNET_HOME=str(tmp_path), MXNET_GLUON_REPO=str(tmp_path / 'repo')):
        with pytest.raises(ModelFileNotFoundError) as info:
            model_store.get_model_file('squeezenet1.1')
    assert str(tmp_path / 'models') in str(info.value)


def test_unregistered_model_and_bad_checksum_registration(sha1_table):
    with pytest.raises(ValueError, match="did you mean 'resnet18_v1'"):
        model_store.short_hash('resnet18-v1')
    with pytest.raises(ValueError, match='inceptionbn'):
        vision.get_model('inceptionbn', pretrained=True)
    with pytest.raises(ValueError, match='40 lowercase hex digits'):
        model_store.register('mine', 'abc')
    model_store.register('mine', 'f' * 40)
    assert model_store.short_hash('mine') == 'ffffffff'


def test_purge_removes_params_files_only(tmp_path):
    (tmp_path / 'a-12345678.params').write_bytes(b'x')
    (tmp_path / 'notes.txt').write_text('keep')
    model_store.purge(str(tmp_path))
    assert os.listdir(tmp_path) == ['notes.txt']


def test_broken_zip_in_repository_is_reported_and_leaves_nothing(tmp_path, sha1_table):
    repo, root = tmp_path / 'repo', tmp_path / 'models'
    model_store.register(NAME, 'ef' * 20)
    models = repo / 'gluon' / 'models'
    models.mkdir(parents=True)
    (models / f'{NAME}-efefefef.zip').write_bytes(b'not a zip')
    with config.override(MXNET_GLUON_REPO=str(repo)):
        with pytest.raises(model_store.ModelStoreError, match='not a valid zip archive'):
            model_store.get_model_file(NAME, root=str(root))
    assert os.listdir(root) == []
