"""MXNet's ``mx.visualization`` (``mx.viz``): a network's layers as a table, or as a graph
drawn by graphviz (``pip install graphviz``).

>>> import ember as mx
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=4, name='fc')
>>> print_summary(mx.sym.relu(net, name='act'), shape={'data': (1, 3)}, line_length=60)
____________________________________________________________
Layer (type)              Output ShapeParam Previous Layer
============================================================
data(null)                3           0
____________________________________________________________
fc(FullyConnected)        4           16    data
____________________________________________________________
act(relu)                 4           0     fc
============================================================
Total params: 16
____________________________________________________________
"""
from __future__ import annotations

import copy
import json
import re
import warnings

from ember.symbol import Symbol

__all__ = ['print_summary', 'plot_network', 'Symbol']


def _str2tuple(string):
    return re.findall(r'\d+', string)


def _shape_dict(symbol, shape):
    internals = symbol.get_internals()
    _, out_shapes, _ = internals.infer_shape(**shape)
    if out_shapes is None:
        raise ValueError(f'the input shapes {shape} do not decide every layer\'s shape')
    return dict(zip(internals.list_outputs(), out_shapes))


def _print_row(fields, positions):
    line = ''
    for field, end in zip(fields, positions):
        line = (line + str(field))[:end]
        line += ' ' * (end - len(line))
    print(line)


def _layer_params(node, shapes, pre_filter):
    """How many parameters a layer has, counted as MXNet's summary counts them."""
    op, attrs = node['op'], node.get('attrs', {})
    if op == 'Convolution':
        count = pre_filter * int(attrs['num_filter']) // int(attrs.get('num_group', '1'))
        for k in _str2tuple(attrs['kernel']):
            count *= int(k)
        return count + (0 if attrs.get('no_bias') == 'True' else int(attrs['num_filter']))
    if op == 'FullyConnected':
        extra = 0 if attrs.get('no_bias') == 'True' else 1
        return (pre_filter + extra) * int(attrs['num_hidden'])
    if op == 'BatchNorm' and shapes is not None:
        return int(shapes[node['name'] + '_output'][1]) * 2
    if op == 'Embedding':
        return int(attrs['input_dim']) * int(attrs['output_dim'])
    return 0


def _output_key(node):
    return node['name'] + '_output' if node['op'] != 'null' else node['name']


def print_summary(symbol, shape=None, line_length=120, positions=[.44, .64, .74, 1.]):
    """Print each layer with its output shape (given input `shape`s by name), its number of
    parameters and the layers it reads, then the total, as MXNet does."""
    if not isinstance(symbol, Symbol):
        raise TypeError(f'print_summary: expected a Symbol, got {type(symbol).__name__}')
    shapes = _shape_dict(symbol, shape) if shape is not None else None
    conf = json.loads(symbol.tojson())
    # MXNet reads the first head entry [node, index, version] as the set of head nodes, so
    # node 0 (the first input) always counts as one; the summary keeps that reading
    nodes, heads = conf['nodes'], set(conf['heads'][0])
    if positions[-1] <= 1:
        positions = [int(line_length * p) for p in positions]
    print('_' * line_length)
    _print_row(['Layer (type)', 'Output Shape', 'Param #', 'Previous Layer'], positions)
    print('=' * line_length)
    total = 0
    for index, node in enumerate(nodes):
        if node['op'] == 'null' and index > 0:
            continue
        out_shape = []
        if shapes is not None and (node['op'] != 'null' or index in heads):
            out_shape = shapes.get(_output_key(node), [None])[1:]
        total += _print_layer(node, nodes, heads, shapes, out_shape, positions)
        print(('=' if index == len(nodes) - 1 else '_') * line_length)
    print(f'Total params: {total}')
    print('_' * line_length)


def _print_layer(node, nodes, heads, shapes, out_shape, positions):
    previous, pre_filter = [], 0
    for entry in node.get('inputs', []) if node['op'] != 'null' else []:
        source = nodes[entry[0]]
        if source['op'] != 'null' or entry[0] in heads:
            previous.append(source['name'])
            key = _output_key(source)
            if shapes is not None and key in shapes:
                pre_filter += int(shapes[key][1:][0])
    params = _layer_params(node, shapes, pre_filter)
    _print_row([f"{node['name']}({node['op']})", 'x'.join(str(d) for d in out_shape), params,
                previous[0] if previous else ''], positions)
    for name in previous[1:]:
        _print_row(['', '', '', name], positions)
    return params


# ----------------------------------------------------------------------------------------------
# The graph

_COLOURS = ('#8dd3c7', '#fb8072', '#ffffb3', '#bebada', '#80b1d3', '#fdb462', '#b3de69',
            '#fccde5')
_WEIGHT_SUFFIXES = ('_weight', '_bias', '_beta', '_gamma', '_moving_var', '_moving_mean',
                    '_running_var', '_running_mean')


def _digraph_class():
    try:
        from graphviz import Digraph
    except ImportError as error:
        raise ImportError('plot_network draws with the graphviz package: pip install graphviz '
                          '(and the Graphviz programs to render the drawing)') from error
    return Digraph


def _node_look(node):
    """(label, fill colour) of an operator node, by its operator."""
    op, attrs, name = node['op'], node.get('attrs', {}), node['name']
    if op == 'Convolution':
        stride = 'x'.join(_str2tuple(attrs['stride'])) if 'stride' in attrs else '1'
        return (f"Convolution\n{'x'.join(_str2tuple(attrs['kernel']))}/{stride}, "
                f"{attrs['num_filter']}", _COLOURS[1])
    if op == 'FullyConnected':
        return f"FullyConnected\n{attrs['num_hidden']}", _COLOURS[1]
    if op == 'BatchNorm':
        return name, _COLOURS[3]
    if op in ('Activation', 'LeakyReLU'):
        default = 'Leaky' if op == 'LeakyReLU' else ''
        return f"{op}\n{attrs.get('act_type', default)}", _COLOURS[2]
    if op == 'Pooling':
        kernel = 'x'.join(_str2tuple(attrs['kernel'])) if 'kernel' in attrs else '[]'
        stride = 'x'.join(_str2tuple(attrs['stride'])) if 'stride' in attrs else '1'
        return f"Pooling\n{attrs['pool_type']}, {kernel}/{stride}", _COLOURS[4]
    if op in ('Concat', 'Flatten', 'Reshape'):
        return name, _COLOURS[5]
    if op == 'Softmax':
        return name, _COLOURS[6]
    return (attrs['op_type'] if op == 'Custom' else name), _COLOURS[7]


def plot_network(symbol, title='plot', save_format='pdf', shape=None, dtype=None, node_attrs={},
                 hide_weights=True):
    """A ``graphviz.Digraph`` of the network: a node per operator and input (weights hidden
    with `hide_weights`), edges labelled with shapes (given `shape`) and dtypes (given
    `dtype`). Render it with ``.render()`` or show it in a notebook."""
    digraph = _digraph_class()
    if not isinstance(symbol, Symbol):
        raise TypeError(f'plot_network: expected a Symbol, got {type(symbol).__name__}')
    shapes = _shape_dict(symbol, shape) if shape is not None else None
    types = _type_dict(symbol, dtype) if dtype is not None else None
    nodes = json.loads(symbol.tojson())['nodes']
    names = [node['name'] for node in nodes]
    if len(names) != len(set(names)):
        warnings.warn('several nodes share a name; the drawing may show a cycle: '
                      f'{sorted({n for n in names if names.count(n) > 1})}', RuntimeWarning)
    style = {'shape': 'box', 'fixedsize': 'true', 'width': '1.3', 'height': '0.8034',
             'style': 'filled', **node_attrs}
    dot = digraph(name=title, format=save_format)
    hidden = _add_nodes(dot, nodes, style, hide_weights)
    _add_edges(dot, nodes, hidden, shapes, types)
    return dot


def _type_dict(symbol, dtype):
    internals = symbol.get_internals()
    _, out_types, _ = internals.infer_type(**dtype)
    if out_types is None:
        raise ValueError(f'the input dtypes {dtype} do not decide every layer\'s dtype')
    return dict(zip(internals.list_outputs(), out_types))


def _add_nodes(dot, nodes, style, hide_weights):
    hidden = set()
    for node in nodes:
        attrs = copy.deepcopy(style)
        if node['op'] == 'null':
            if node['name'].endswith(_WEIGHT_SUFFIXES):
                if hide_weights:
                    hidden.add(node['name'])
                continue
            label, attrs['shape'], attrs['fillcolor'] = node['name'], 'oval', _COLOURS[0]
        else:
            label, attrs['fillcolor'] = _node_look(node)
        dot.node(name=node['name'], label=label, **attrs)
    return hidden


def _edge_key(source):
    if source['op'] == 'null':
        return source['name']
    key = source['name'] + '_output'
    outputs = source.get('attrs', {}).get('num_outputs')
    return key + str(int(outputs) - 1) if outputs is not None else key


def _add_edges(dot, nodes, hidden, shapes, types):
    for node in nodes:
        if node['op'] == 'null':
            continue
        inputs = node['inputs'][:1] if node['op'] == '_contrib_BilinearResize2D' else \
            node['inputs']
        for entry in inputs:
            source = nodes[entry[0]]
            if source['name'] in hidden:
                continue
            label = ''
            if shapes is not None:
                label = 'x'.join(str(d) for d in shapes[_edge_key(source)][1:])
            if types is not None:
                label += f'({types[_edge_key(source)].__name__})'
            dot.edge(tail_name=node['name'], head_name=source['name'], dir='back',
                     arrowtail='open', label=label)
