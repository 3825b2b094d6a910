# cython: language_level=3
"""hpcgnn's compiled kernels: one extension module, one ``.pxi`` per topic.

The C parts know nothing of Python or MPI objects; these wrappers take NumPy
buffers (and, for ParMETIS, an ``mpi4py.MPI.Comm``), release the GIL and call them.
Validation of user input happens in the Python layer above (``hpcgnn.partition``).
"""

include "parmetis.pxi"
include "gather.pxi"
include "labelprop.pxi"
include "sampling.pxi"
include "dropout.pxi"
include "order.pxi"
include "aggregate.pxi"
include "weight_grad.pxi"
include "attention.pxi"
include "csr_build.pxi"
include "guard.pxi"
