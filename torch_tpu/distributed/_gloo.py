"""The gloo group inside a tpu_dist group, and the address it listens on.

gloo's default device listens on the address the machine's hostname
resolves to. Where that is a loopback address (Debian's ``127.0.1.1``
line, many containers and VMs) and the group spans hosts, the other hosts
are told to connect to their own loopback and the group cannot form; with
plain gloo one has to set ``GLOO_SOCKET_IFNAME``. tpu_dist instead listens
on the local address that routes toward ``MASTER_ADDR`` (which torchrun
sets on every worker), unless the program chose an interface itself.
"""
import datetime
import ipaddress
import os
import socket
from typing import Optional

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
