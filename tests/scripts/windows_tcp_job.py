"""RowStore over TCP (``--mca btl self,tcp --mca osc sm,pt2pt``, HPCGNN_SHM_SCOPE=node),
4 ranks as 2 virtual nodes of server + trainer.  Servers own the rows and wait as
they do when serving (polling, which keeps osc pt2pt progressing) while trainers read and write them."""
import numpy as np

import hpcgnn
import hpcgnn.comm
from hpcgnn.comm.mpi import MPI
from hpcgnn.comm.progress import serve_until
from hpcgnn.comm.rma import readstats
from hpcgnn.comm.rma.rowstore import RowStore

world = MPI.COMM_WORLD
ctx = hpcgnn.comm.initialize(layout="servers=1,samplers=0,trainers=1", ranks_per_node=2)
N, D = 4000, 8
st = RowStore.create(ctx, "feat", [0, 1500, N], (D,), np.float32)   # owners: the servers
full = np.arange(N * D, dtype=np.float32).reshape(N, D)
lo, hi = st.local_range
st.local_rows[:] = full[lo:hi]
st.barrier()
if ctx.is_trainer:
    tc = ctx.trainer_comm
    rng = np.random.default_rng(ctx.rank)
    for n in (0, 1, 10, 5000):
        ids = rng.integers(0, N, n)
        assert np.array_equal(st.gather(ids), full[ids]), f"gather of {n} rows"
    st.get_first_piece_bytes = 100 * D * 4       # Rgets of 100, 300, 900, 1000, 1000.. rows
    st.max_rows_per_op = 1000
    ids = rng.integers(0, N, 5000)
    assert np.array_equal(st.gather(ids), full[ids]), "gather in growing pieces"
    st.get_first_piece_bytes, st.max_rows_per_op = RowStore.get_first_piece_bytes, RowStore.max_rows_per_op
    tc.Barrier()                     # all reads done before anyone writes
    mine = np.arange(tc.Get_rank(), N, tc.Get_size())
    st.scatter(mine, -full[mine])
    tc.Barrier()                     # every Put is complete at its owner (Flush) before any add
    st.accumulate(np.arange(N), np.ones((N, D), np.float32))
    tc.Barrier()                     # trainers only: servers stay in the barrier below
    assert np.array_equal(st.gather(np.arange(N)), -full + tc.Get_size()), "scatter + accumulate"
    # one write per line (output is unbuffered under the tests, and two trainers print
    # at once: print's pieces as separate writes interleaved, "routesroutes  {...")
    print(f"routes {st.routes()}", flush=True)
    # the reads over TCP were timed by owner host: bytes and seconds, for the epoch log
    links = readstats.gather_links(tc, readstats.take())
    (link, v), = links.items()
    remote = st.bounds[1:] - st.bounds[:-1]
    assert v["reads"] >= 5 and v["mb"] > 0 and v["mb_per_s"] > 0 and v["slowest_s"] > 0, links
    assert readstats.take() == {}, "take() starts new totals"
    print(f"readstats ok {link} {remote.tolist()}", flush=True)
    print("windows_tcp_job ok", flush=True)
done = world.Ibarrier()
if ctx.is_trainer:
    done.Wait()
else:                                # servers wait as they do when serving: polling MPI,
    polls = serve_until(done)        # sleeping only while no socket traffic comes
    print(f"server polls with traffic {polls}", flush=True)
ctx.finalize()
