"""The user-facing errors of a sweep, in one dependency-free module.

Every stage of sweep raises ConfigError (the cluster's own, cluster/config.py, becomes this
one where sweep reads the `cluster:` section or connects), and importing this module imports
nothing else, so the block math and the configs share it without pulling in Dask.
Each message is one line that names the field or path and the fix; `tdos` prints it
without a traceback.
"""


class ConfigError(ValueError):
    """A config value is wrong; the message names the field (`cluster.workers: ...`)."""


class StoreMismatch(Exception):
    """The store at the given path cannot take this sweep: made from another config, of
    another format, or not a tdos store."""


class CheckpointChanged(Exception):
    """The checkpoint's weight files differ from the ones recorded when the store was made."""


class NonCausal(Exception):
    """A layer's output depends on later tokens: its J_tt have no spectral meaning."""


class SelfCheckFailed(Exception):
    """A worker's J_tt disagrees with autograd of transformers' unmodified layer (or a
    Mamba-style layer's Δ_t cannot be read): nothing of that model is written."""


class UnsupportedTransformers(Exception):
    """The installed transformers is older than the generic path needs."""


class RouteFailed(Exception):
    """A model failed on the layer-local route and then on the whole-model route: the message
    names the model, the layer, the step that failed and the transformers release."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters; its type's name when it
    has none): what a one-line error quotes of a library's own."""
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__
