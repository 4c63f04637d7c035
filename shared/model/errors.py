"""Errors raised while loading a model, each naming the file and the problem."""


class ModelLoadError(Exception):
    """A model directory that cannot be served: unsupported, missing or corrupt."""
