"""`ember im2rec` writes what MXNet 1.9.1's tools/im2rec.py wrote from the same images
(tests/data/image-mxnet): lists, and records re-encoded, passed through, resized to PNG and
with packed labels, byte for byte."""
import shutil

import pytest

from ember import cli
from data_files import IMAGE_FIXTURES

IMAGES = str(IMAGE_FIXTURES / 'images')


def test_lists_match_mxnet_in_file_order_and_shuffled(tmp_path, capsys):
    assert cli.main(['im2rec', str(tmp_path / 'files'), IMAGES, '--list', '--recursive',
                     '--no-shuffle']) == 0
    assert (tmp_path / 'files.lst').read_bytes() == (IMAGE_FIXTURES / 'im2rec.lst').read_bytes()
    assert cli.main(['im2rec', str(tmp_path / 'mixed'), IMAGES, '--list', '--recursive',
                     '--train-ratio', '0.5', '--test-ratio', '0.25']) == 0
    train = (tmp_path / 'mixed_train.lst').read_text().splitlines()
    test = (tmp_path / 'mixed_test.lst').read_text().splitlines()
    val = (tmp_path / 'mixed_val.lst').read_text().splitlines()
    assert (len(train), len(test), len(val)) == (6, 3, 3)
    assert 'cat 0' in capsys.readouterr().out


@pytest.mark.parametrize('variant, options', [
    ('jpg', ['--num-thread', '3']),
    ('pass', ['--pass-through']),
    ('png', ['--resize', '24', '--encoding', '.png', '--quality', '3']),
    ('labels2', ['--pack-label', '--pass-through']),
])
def test_records_match_mxnet_byte_for_byte(tmp_path, variant, options):
    shutil.copy(IMAGE_FIXTURES / f'{variant}.lst', tmp_path)
    assert cli.main(['im2rec', str(tmp_path / variant), IMAGES, '--no-progress'] + options) == 0
    for suffix in ('.rec', '.idx'):
        assert (tmp_path / f'{variant}{suffix}').read_bytes() == \
            (IMAGE_FIXTURES / f'{variant}{suffix}').read_bytes()


def test_an_unreadable_image_is_named_then_skipped_or_stops_the_run(tmp_path, capsys):
    root = tmp_path / 'images'
    shutil.copytree(IMAGES, root)
    (root / 'cat' / 'b.jpg').write_bytes(b'not a jpeg')
    (root / 'dog' / 'e.png').unlink()
    shutil.copy(IMAGE_FIXTURES / 'im2rec.lst', tmp_path / 'all.lst')
    assert cli.main(['im2rec', str(tmp_path / 'all'), str(root), '--no-progress']) == 0
    errors = capsys.readouterr().err
    assert 'cannot read image' in errors and 'cat/b.jpg' in errors and 'dog/e.png' in errors
    assert 'skipped 2 image(s)' in errors
    assert len((tmp_path / 'all.idx').read_text().splitlines()) == 10
    assert cli.main(['im2rec', str(tmp_path / 'all'), str(root), '--no-progress',
                     '--on-error', 'stop']) == 1
    assert 'stopped (--on-error stop)' in capsys.readouterr().err
    assert cli.main(['im2rec', str(tmp_path / 'none'), str(root)]) == 1
