"""The gloo group inside a tpu_dist group, and the address it listens on.

gloo's default device listens on the address the machine's hostname
resolves to. Where that is a loopback address (Debian's ``127.0.1.1``
line, many containers and VMs) and the group spans hosts, the other hosts
are told to connect to their own loopback and the group cannot form; with
plain gloo one has to set ``GLOO_SOCKET_IFNAME``. tpu_dist instead listens
on the local address that routes toward ``MASTER_ADDR`` (which torchrun
sets on every worker), unless the program chose an interface itself.

``HandOver`` wraps the gloo group for the collectives: see its docstring
for why each tensor reaches gloo as an alias, and why a group waits for
gloo to let go of them before the interpreter finalizes.
"""
import datetime
import ipaddress
import os
import socket
import time
import weakref
from typing import Any, Dict, Optional

import torch
from torch._C._distributed_c10d import ProcessGroupGloo


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def listen_address() -> Optional[str]:
    """The address gloo should listen on, or None for gloo's own choice."""
    if os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("TP_SOCKET_IFNAME"):
        return None
    master = os.environ.get("MASTER_ADDR")
    if not master:
        return None
    try:
        own = socket.gethostbyname(socket.gethostname())
        master_ip = socket.gethostbyname(master)
    except OSError:
        return None
    if not _is_loopback(own) or _is_loopback(master_ip):
        return None  # gloo's choice already reaches the others, or one host
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master_ip, 9))  # UDP: nothing is sent; the kernel picks the route
            return s.getsockname()[0]
    except OSError:
        return None


# gloo counts its timeout in int64 nanoseconds: past about 292 years it
# wraps and every collective times out at once. Longer means "never".
MAX_TIMEOUT = datetime.timedelta(days=365 * 200)


def make_gloo(store, rank: int, size: int, timeout: datetime.timedelta) -> ProcessGroupGloo:
    timeout = min(timeout, MAX_TIMEOUT)
    address = listen_address()
    if address is None:
        return ProcessGroupGloo(store, rank, size, timeout)
    opts = ProcessGroupGloo._Options()
    opts._timeout = timeout
    opts._devices = [ProcessGroupGloo.create_device(hostname=address)]
    return ProcessGroupGloo(store, rank, size, opts)


# The calls that gloo runs on its worker threads (p2p runs on the caller's).
_ON_WORKERS = frozenset({
    "allreduce", "allreduce_coalesced", "reduce", "broadcast", "allgather", "_allgather_base",
    "allgather_coalesced", "allgather_into_tensor_coalesced", "gather", "scatter", "reduce_scatter",
    "_reduce_scatter_base", "reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base",
})


class HandOver:
    """The gloo group, as the collectives see it: each tensor is handed to
    gloo as an alias of its own (``detach()``: same memory, a TensorImpl
    that only gloo holds), so that ``wait_released`` can tell when gloo's
    worker threads have let go of every one.

    Why: gloo runs a collective on a worker thread, which keeps the work
    (and its tensors) a moment after completing it, while the caller has
    already moved on. A tensor with a Python object takes the GIL when its
    last C++ reference goes (PyObject preservation), so it is often that
    worker thread which takes the GIL, last. If the interpreter has started
    finalizing by then, CPython ends the thread with pthread_exit inside
    that (noexcept) release: std::terminate, "terminate called without an
    active exception" (seen: a rank exiting right after a blocking
    collective, the worker in ~AsyncAllgatherWork -> decref_pyobject ->
    take_gil -> PyThread_exit_thread). ProcessGroupGloo.shutdown does not
    stop its threads (a no-op in c10d), so the group waits instead: an
    alias's Python object dies exactly when gloo's last reference goes.
    What that thread frees after the alias's Python object (its storage,
    and with it a host view's hold on the device memory) must need no GIL:
    host views are built in C++ for that reason (``_views.host_view``). A
    ``frombuffer`` view's deleter took the GIL once more, just after the
    alias's weakref had told the group that gloo was done."""

    def __init__(self, gloo: ProcessGroupGloo) -> None:
        self.gloo = gloo
        # Aliases gloo still holds. Plain dict operations: atomic under the
        # GIL, and the weakref callbacks run on gloo's threads (or in a GC
        # pass anywhere), where a lock could deadlock.
        self._held: Dict[int, "weakref.ref[torch.Tensor]"] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.gloo, name)
        if name not in _ON_WORKERS:
            return attr

        def call(*args: Any) -> Any:
            return attr(*(self._alias(a) for a in args))

        return call

    def _alias(self, a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            alias = a.detach()
            ref = weakref.ref(alias, self._let_go)
            self._held[id(ref)] = ref
            return alias
        if isinstance(a, (list, tuple)):
            return [self._alias(x) for x in a]
        return a

    def _let_go(self, ref: "weakref.ref[torch.Tensor]") -> None:
        self._held.pop(id(ref), None)

    def wait_released(self, timeout_s: float) -> bool:
        """Blocks (GIL released) until gloo holds none of the aliases, at
        most ``timeout_s``: a work still pending in gloo, or one the program
        keeps, holds its aliases longer. True if none are left."""
        deadline = time.monotonic() + timeout_s
        while self._held and time.monotonic() < deadline:
            time.sleep(0.001)
        return not self._held
