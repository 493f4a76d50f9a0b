"""The errors of a model directory: one line each, what the command line prints (exit status 2)."""

from __future__ import annotations


class ModelDirError(ValueError):
    """A model directory that is missing, incomplete, corrupt or made for another config."""


class ModelDirLocked(ModelDirError):
    """Another live `train` process holds the model directory."""


class CheckpointWriteError(ModelDirError):
    """A checkpoint could not be written (a full disk, most often); its partial files are gone."""
