"""MXNet's ``mx.log``: loggers that print level, time, process and place in colour.

>>> import logging
>>> from ember import log
>>> logger = log.get_logger('ember.log.doctest', level=log.INFO)
>>> logger.level == logging.INFO, log.WARNING == logging.WARNING
(True, True)
"""
import logging
import warnings

__all__ = ['CRITICAL', 'ERROR', 'WARNING', 'INFO', 'DEBUG', 'NOTSET', 'get_logger',
           'getLogger']

CRITICAL = logging.CRITICAL
ERROR = logging.ERROR
WARNING = logging.WARNING
INFO = logging.INFO
DEBUG = logging.DEBUG
NOTSET = logging.NOTSET

_LABELS = {CRITICAL: 'C', ERROR: 'E', WARNING: 'W', INFO: 'I', DEBUG: 'D'}


class _Formatter(logging.Formatter):
    """'W0505 00:29:47 3525 file.py:function:12] message', red from warnings up, green for
    information, blue below."""

    def __init__(self):
        super().__init__(datefmt='%m%d %H:%M:%S')

    def format(self, record):
        colour = ('\x1b[31m' if record.levelno >= WARNING else
                  '\x1b[32m' if record.levelno >= INFO else '\x1b[34m')
        self._style._fmt = (colour + _LABELS.get(record.levelno, 'U') +
                            '%(asctime)s %(process)d %(pathname)s:%(funcName)s:%(lineno)d]'
                            '\x1b[0m %(message)s')
        return super().format(record)


def get_logger(name=None, filename=None, filemode=None, level=WARNING):
    """The logger `name` at `level`; a named logger gets, once, a handler that writes to
    `filename` (opened with `filemode`, 'a' by default) or to stderr in colour."""
    logger = logging.getLogger(name)
    if name is not None and not getattr(logger, '_init_done', False):
        logger._init_done = True
        if filename:
            handler = logging.FileHandler(filename, filemode or 'a')
        else:
            handler = logging.StreamHandler()
            handler.setFormatter(_Formatter())
        logger.addHandler(handler)
    logger.setLevel(level)
    return logger


def getLogger(name=None, filename=None, filemode=None, level=WARNING):
    """The old name of :func:`get_logger` (deprecated)."""
    warnings.warn('getLogger is deprecated; use get_logger', DeprecationWarning, stacklevel=2)
    return get_logger(name, filename, filemode, level)
