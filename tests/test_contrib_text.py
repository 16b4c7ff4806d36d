"""mx.contrib.text: counting tokens, vocabularies, embeddings from files and their composition;
the expected values are MXNet 1.9.1's for the same inputs."""
import collections

import numpy as np
import pytest

import ember as mx
from ember import registry
from ember.contrib import text


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text(''.join(line + '\n' for line in lines), encoding='utf8')
    return str(path)


def counter():
    return text.utils.count_tokens_from_str('a b c\nb c c\nA')


def test_count_tokens_and_index_a_vocabulary_by_frequency():
    assert sorted(counter().items()) == [('A', 1), ('a', 1), ('b', 2), ('c', 3)]
    more = text.utils.count_tokens_from_str('x,Y;y', token_delim=',', seq_delim=';',
                                            to_lower=True,
                                            counter_to_update=collections.Counter({'x': 2}))
    assert more == collections.Counter({'x': 3, 'y': 2})
    vocab = text.vocab.Vocabulary(counter(), reserved_tokens=['<pad>'])
    assert vocab.idx_to_token == ['<unk>', '<pad>', 'c', 'b', 'A', 'a'] and len(vocab) == 6
    assert vocab.token_to_idx['A'] == 4 and vocab.reserved_tokens == ['<pad>']
    assert vocab.to_indices(['c', 'zz', 'b']) == [2, 0, 3] and vocab.to_indices('a') == 5
    assert vocab.to_tokens([0, 3]) == ['<unk>', 'b'] and vocab.to_tokens(2) == 'c'
    capped = text.vocab.Vocabulary(counter(), most_freq_count=2, min_freq=2)
    assert capped.idx_to_token == ['<unk>', 'c', 'b'] and capped.reserved_tokens is None
    with pytest.raises(ValueError, match='index 9'):
        vocab.to_tokens(9)
    with pytest.raises(ValueError, match='reserved'):
        text.vocab.Vocabulary(reserved_tokens=['<unk>'])


def test_custom_embedding_reads_vectors_and_updates_them(tmp_path):
    path = write(tmp_path, 'e.txt', ['c 1 2', 'b 3 4', 'Hi 5 6'])
    emb = text.embedding.CustomEmbedding(path)
    assert emb.idx_to_token == ['<unk>', 'c', 'b', 'Hi'] and emb.vec_len == 2
    np.testing.assert_array_equal(emb.idx_to_vec.asnumpy(), [[0, 0], [1, 2], [3, 4], [5, 6]])
    assert emb.get_vecs_by_tokens(['b', 'nope']).asnumpy().tolist() == [[3, 4], [0, 0]]
    assert emb.get_vecs_by_tokens('HI', lower_case_backup=True).asnumpy().tolist() == [0, 0]
    emb.update_token_vectors(['b', '<unk>'], mx.nd.array([[9, 9], [1, 1]]))
    assert emb.get_vecs_by_tokens(['b', 'zz']).asnumpy().tolist() == [[9, 9], [1, 1]]
    with pytest.raises(ValueError, match="'nope' is unknown"):
        emb.update_token_vectors('nope', mx.nd.array([9, 9]))
    with pytest.warns(UserWarning, match='header'):
        text.embedding.CustomEmbedding(write(tmp_path, 'h.txt', ['2 2', 'c 1 2']))


def test_embeddings_over_a_vocabulary_and_composed(tmp_path):
    vocab = text.vocab.Vocabulary(counter(), reserved_tokens=['<pad>'])
    first = text.embedding.CustomEmbedding(write(tmp_path, 'a.txt', ['c 1 2', 'b 3 4']))
    first.update_token_vectors('<unk>', mx.nd.array([1, 1]))
    second = text.embedding.CustomEmbedding(write(tmp_path, 'b.txt', ['hello 0.5 1', 'c 1 1']))
    restricted = text.embedding.CustomEmbedding(str(tmp_path / 'a.txt'), vocabulary=vocab)
    assert restricted.idx_to_token == vocab.idx_to_token
    assert restricted.idx_to_vec.asnumpy()[2:4].tolist() == [[1, 2], [3, 4]]
    both = text.embedding.CompositeEmbedding(vocab, [first, second])
    assert both.vec_len == 4 and both.idx_to_token == vocab.idx_to_token
    np.testing.assert_array_equal(both.idx_to_vec.asnumpy()[:4],
                                  [[1, 1, 0, 0], [1, 1, 0, 0], [1, 2, 1, 1], [3, 4, 0, 0]])


def test_the_registry_creates_registered_embeddings(tmp_path):
    path = write(tmp_path, 'e.txt', ['c 1 2'])

    @text.embedding.register
    class Scaled(text.embedding.CustomEmbedding):
        pretrained_file_name_sha1 = {'scaled.txt': None}

        def __init__(self, factor=2.0, **kwargs):
            super().__init__(path, **kwargs)
            self._idx_to_vec = self._idx_to_vec * factor

    try:
        made = text.embedding.create('scaled', factor=3.0)
        assert isinstance(made, Scaled)
        assert made.get_vecs_by_tokens('c').asnumpy().tolist() == [3, 6]
        assert text.embedding.get_pretrained_file_names('scaled') == ['scaled.txt']
        assert 'scaled' in text.embedding.get_pretrained_file_names()
    finally:        # the registry is process-wide
        registry._REGISTRY[text.embedding._TokenEmbedding].pop('scaled')
    with pytest.raises(KeyError, match='glove'):
        text.embedding.create('glove')
    assert text.embedding.is_np_array() is False
