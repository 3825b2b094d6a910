"""The one-sided data plane: tables of rows spread over the ranks
(:class:`~hpcgnn.comm.rma.rowstore.RowStore`), read and written with MPI RMA and
shared memory.  A row of another host is fetched here (``RowStore.gather``: one
``MPI_Rget`` stream per owner, :mod:`.transfers`); rows on this host are read in
place.  :mod:`.rowchecks` is the layout and routing logic, :mod:`.datatypes` the MPI
datatypes, :mod:`.rowwrites` the ``Put``/``Accumulate`` side, :mod:`.facts` the
read-only facts (ranges, owners, routes), :mod:`.hugepages` the
memory advice."""
