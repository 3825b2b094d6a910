# ParMETIS / METIS binding.  ``idx_t`` and ``real_t`` are whatever the installed
# headers say; their widths are exported so that Python builds arrays to match.
cimport numpy as cnp
from libc.stdint cimport int64_t
from mpi4py cimport MPI
from mpi4py.libmpi cimport MPI_Comm

import numpy as np

cnp.import_array()

cdef extern from "parmetis.h" nogil:
    ctypedef long idx_t      # real width comes from the header
    ctypedef float real_t
    int ParMETIS_V3_PartKway(idx_t *vtxdist, idx_t *xadj, idx_t *adjncy,
                             idx_t *vwgt, idx_t *adjwgt, idx_t *wgtflag,
                             idx_t *numflag, idx_t *ncon, idx_t *nparts,
                             real_t *tpwgts, real_t *ubvec, idx_t *options,
                             idx_t *edgecut, idx_t *part, MPI_Comm *comm)

cdef extern from "metis.h" nogil:
    int METIS_OK
    int METIS_NOPTIONS
    int METIS_OPTION_SEED
    int METIS_OPTION_NUMBERING
    int METIS_SetDefaultOptions(idx_t *options)
    int METIS_PartGraphKway(idx_t *nvtxs, idx_t *ncon, idx_t *xadj, idx_t *adjncy,
                            idx_t *vwgt, idx_t *vsize, idx_t *adjwgt, idx_t *nparts,
                            real_t *tpwgts, real_t *ubvec, idx_t *options,
                            idx_t *edgecut, idx_t *part)

IDX_T_BYTES = sizeof(idx_t)
REAL_T_BYTES = sizeof(real_t)
IDX_DTYPE = np.dtype("int%d" % (8 * sizeof(idx_t)))
REAL_DTYPE = np.dtype("float%d" % (8 * sizeof(real_t)))


cdef idx_t* _iptr(object a) except? NULL:
    if a is None:
        return NULL
    cdef cnp.ndarray arr = <cnp.ndarray> a
    return <idx_t*> cnp.PyArray_DATA(arr)


cdef real_t* _rptr(object a) except? NULL:
    if a is None:
        return NULL
    cdef cnp.ndarray arr = <cnp.ndarray> a
    return <real_t*> cnp.PyArray_DATA(arr)


def parmetis_part_kway(MPI.Comm comm, vtxdist, xadj, adjncy, vwgt, adjwgt,
                       int ncon, int nparts, tpwgts, ubvec, int seed):
    """Call ``ParMETIS_V3_PartKway`` (collective over ``comm``).

    All arrays must already be C-contiguous of ``IDX_DTYPE`` / ``REAL_DTYPE``
    (``hpcgnn.partition.parmetis.part_kway`` makes sure).  Returns
    ``(status, edgecut, part)``.
    """
    cdef idx_t wgtflag = (2 if vwgt is not None else 0) + (1 if adjwgt is not None else 0)
    cdef idx_t numflag = 0
    cdef idx_t c_ncon = ncon
    cdef idx_t c_nparts = nparts
    cdef idx_t edgecut = 0
    cdef idx_t options[3]
    options[0] = 1
    options[1] = 0
    options[2] = seed
    cdef Py_ssize_t nlocal = len(xadj) - 1
    part = np.zeros(max(nlocal, 1), dtype=IDX_DTYPE)
    cdef idx_t *p_vtxdist = _iptr(vtxdist)
    cdef idx_t *p_xadj = _iptr(xadj)
    cdef idx_t *p_adjncy = _iptr(adjncy)
    cdef idx_t *p_vwgt = _iptr(vwgt)
    cdef idx_t *p_adjwgt = _iptr(adjwgt)
    cdef real_t *p_tpwgts = _rptr(tpwgts)
    cdef real_t *p_ubvec = _rptr(ubvec)
    cdef idx_t *p_part = _iptr(part)
    cdef MPI_Comm c_comm = comm.ob_mpi
    cdef int status
    with nogil:
        status = ParMETIS_V3_PartKway(p_vtxdist, p_xadj, p_adjncy, p_vwgt, p_adjwgt,
                                      &wgtflag, &numflag, &c_ncon, &c_nparts,
                                      p_tpwgts, p_ubvec, options, &edgecut, p_part,
                                      &c_comm)
    return status, int(edgecut), part[:nlocal]


def metis_part_kway(xadj, adjncy, vwgt, int ncon, int nparts, ubvec, int seed, adjwgt=None):
    """Call serial ``METIS_PartGraphKway`` (independent; one process).

    Returns ``(status, edgecut, part)``; ``status == METIS_OK`` on success.
    """
    cdef idx_t nvtxs = len(xadj) - 1
    cdef idx_t c_ncon = ncon
    cdef idx_t c_nparts = nparts
    cdef idx_t edgecut = 0
    cdef idx_t options[40]
    METIS_SetDefaultOptions(options)
    options[METIS_OPTION_SEED] = seed
    options[METIS_OPTION_NUMBERING] = 0
    part = np.zeros(max(nvtxs, 1), dtype=IDX_DTYPE)
    cdef idx_t *p_xadj = _iptr(xadj)
    cdef idx_t *p_adjncy = _iptr(adjncy)
    cdef idx_t *p_vwgt = _iptr(vwgt)
    cdef idx_t *p_adjwgt = _iptr(adjwgt)
    cdef real_t *p_ubvec = _rptr(ubvec)
    cdef idx_t *p_part = _iptr(part)
    cdef int status
    with nogil:
        status = METIS_PartGraphKway(&nvtxs, &c_ncon, p_xadj, p_adjncy, p_vwgt, NULL, p_adjwgt,
                                     &c_nparts, NULL, p_ubvec, options, &edgecut, p_part)
    return status == METIS_OK, int(edgecut), part[:nvtxs]
