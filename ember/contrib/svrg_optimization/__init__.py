"""``mx.contrib.svrg_optimization``: stochastic variance-reduced gradient training of a Module
(:class:`~ember.contrib.svrg_optimization.svrg_module.SVRGModule`)."""
from ember.contrib.svrg_optimization import svrg_module
from ember.contrib.svrg_optimization.svrg_module import SVRGModule

__all__ = ['SVRGModule', 'svrg_module']
