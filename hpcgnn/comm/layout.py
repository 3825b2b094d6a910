"""Role layouts: which rank of which node is a server, a sampler or a trainer.

Pure logic, no MPI: :func:`plan_roles` maps node sizes to roles, and every rank
computes the same plan from the same gathered sizes, so a layout that does not fit
is rejected on every rank with the same message.

Syntax (per node)::

    servers=1,samplers=1,trainers=2
    servers=1,trainers=rest                 # trainers fill the node
    server_nodes=1,servers=1,samplers=1,trainers=2
        # separate mode: the first server_nodes nodes hold servers (and the
        # samplers, next to the data); every other node holds trainers only.

Inside a node, local ranks are given out in the order servers, samplers, trainers.
"""
from __future__ import annotations

from dataclasses import dataclass
import difflib

from ..errors import LayoutError

ROLES = ("server", "sampler", "trainer")
_KEYS = ("servers", "samplers", "trainers", "server_nodes")
DEFAULT_LAYOUT = "servers=1,samplers=0,trainers=rest"


@dataclass(frozen=True)
class Layout:
    """Ranks per role per node; ``trainers=None`` means "the rest of the node"."""

    servers: int = 1
    samplers: int = 0
    trainers: int | None = None
    server_nodes: int = 0

    @classmethod
    def parse(cls, text: str | Layout | None) -> Layout:
        """Parse ``"servers=1,samplers=0,trainers=2"`` (``None``: the default layout)."""
        if isinstance(text, Layout):
            return text
        if text is None or not str(text).strip():
            text = DEFAULT_LAYOUT
        values: dict[str, int | None] = {}
        for item in str(text).replace(";", ",").split(","):
            item = item.strip()
            if not item:
                continue
            key, sep, val = item.partition("=")
            key = key.strip()
            if not sep:
                raise LayoutError(f"layout {text!r}: item {item!r} is not key=value")
            if key not in _KEYS:
                close = difflib.get_close_matches(key, _KEYS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise LayoutError(f"layout {text!r}: unknown key {key!r}{hint}; keys are {', '.join(_KEYS)}")
            val = val.strip()
            if key == "trainers" and val in ("rest", "*"):
                values[key] = None
                continue
            try:
                n = int(val)
            except ValueError:
                raise LayoutError(f"layout {text!r}: {key}={val!r} is not a non-negative integer") from None
            if n < 0:
                raise LayoutError(f"layout {text!r}: {key}={n} is negative")
            values[key] = n
        return cls(**values)

    def __str__(self) -> str:
        t = "rest" if self.trainers is None else str(self.trainers)
        s = f"servers={self.servers},samplers={self.samplers},trainers={t}"
        return f"server_nodes={self.server_nodes},{s}" if self.server_nodes else s


def plan_roles(layout: Layout, node_sizes: list[int]) -> list[list[str]]:
    """Roles by node and local rank, or :class:`LayoutError` if the layout does not fit.

    ``node_sizes[k]`` is the number of ranks on node ``k``.  Pure function: every
    rank gets the same answer from the same sizes.
    """
    nnodes = len(node_sizes)
    desc = f"layout '{layout}' on {nnodes} node(s) with {node_sizes} rank(s)"
    if layout.server_nodes:
        if layout.server_nodes >= nnodes:
            raise LayoutError(f"{desc}: server_nodes={layout.server_nodes} leaves no node for trainers")
        if layout.servers < 1:
            raise LayoutError(f"{desc}: separate mode needs servers>=1 on each server node")
    plan = []
    for k, n in enumerate(node_sizes):
        if k < layout.server_nodes:
            roles = ["server"] * layout.servers + ["sampler"] * layout.samplers
            if len(roles) != n:
                raise LayoutError(f"{desc}: server node {k} has {n} rank(s) but servers+samplers="
                                  f"{len(roles)}")
        else:
            front = 0 if layout.server_nodes else layout.servers + layout.samplers
            ntrain = n - front if layout.trainers is None else layout.trainers
            if ntrain < 1 or front + ntrain != n:
                want = "at least 1" if layout.trainers is None else str(layout.trainers)
                need = (f"trainers={layout.trainers}" if layout.server_nodes else
                        f"{layout.servers} server(s) + {layout.samplers} sampler(s) + {want} trainer(s)"
                        + ("" if layout.trainers is None else f" = {front + layout.trainers} ranks"))
                raise LayoutError(f"{desc}: node {k} has {n} rank(s), which does not fit {need}"
                                  + (" (at least one trainer per node)" if ntrain < 1 else "")
                                  + _virtual_nodes_hint(n, None if layout.trainers is None or layout.server_nodes
                                                        else front + layout.trainers))
            if layout.server_nodes:
                roles = ["trainer"] * ntrain
            else:
                roles = ["server"] * layout.servers + ["sampler"] * layout.samplers + ["trainer"] * ntrain
        plan.append(roles)
    return plan


def _virtual_nodes_hint(n: int, per_node: int | None) -> str:
    """Where ``n`` ranks of one node are several whole nodes of the layout: how to run
    them as virtual nodes (one machine, or ranks grouped other than by host)."""
    if per_node is None or per_node < 1 or n <= per_node or n % per_node:
        return ""
    return (f"; to run them as {n // per_node} nodes of {per_node} ranks, set HPCGNN_RANKS_PER_NODE={per_node} "
            f"(or ranks_per_node={per_node})")


def describe_plan(plan: list[list[str]]) -> str:
    """One line per node: ``node 0: server, trainer, trainer``."""
    return "\n".join(f"node {k}: " + ", ".join(roles) for k, roles in enumerate(plan))
