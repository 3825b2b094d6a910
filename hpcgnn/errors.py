"""Exception types.  Every error hpcgnn raises for bad input names the file, the
field (dataset, key, argument) and, where it matters, the rank."""


class HpcgnnError(Exception):
    """Base class of hpcgnn's errors."""


class InputError(HpcgnnError, ValueError):
    """Bad user input: a file, dataset, argument or configuration key."""


class LayoutError(InputError):
    """A role layout that does not fit the ranks of the launch."""


class PartitionError(HpcgnnError):
    """The partitioner failed or produced something unusable."""


class NonFiniteLoss(HpcgnnError):
    """A training step's loss was NaN or infinite: every trainer stopped at that step
    (raised alike on each), without a checkpoint of the state it left."""


class PeerFailed(HpcgnnError):
    """Another rank's process is gone, or stopped longer than ``HPCGNN_TIMEOUT``
    (seen from its host): the message names that rank; the job ends."""


class DGLError(InputError):
    """Raised where DGL raises ``dgl.DGLError`` (a layer given a block it cannot
    use, a bad argument), so a ported script's ``except dgl.DGLError`` still
    catches it (``hpcgnn.DGLError``)."""
