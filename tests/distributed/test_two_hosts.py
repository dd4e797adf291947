"""Two hosts: the same DDP script under torchrun on each of two "hosts",
network namespaces joined by a veth pair (10.213.N.1 and 10.213.N.2), as
docs/distributed.md "Multi-host" launches it: ``--nnodes=2 --node_rank=i
--nproc_per_node=1`` with the store at host 0's address (static
rendezvous), or torchrun's c10d rendezvous there; gloo on the namespace's
interface (``GLOO_SOCKET_IFNAME``). Both ranks end with the weights of one
CPU process trained on the full batches.

Creating namespaces needs root and iproute2's ``ip``; the test skips
without them. The namespaces (and the veth pair, which dies with them) are
removed afterwards, also when the test fails, and every process is killed
after a deadline."""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import torch

from . import _two_hosts_worker as W

WORKER = os.path.join(os.path.dirname(__file__), "_two_hosts_worker.py")
PORT = 29500
RDZV_PORT = 29400


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and run.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {run.stderr.strip()}")
    return run


def _kill_all_in(ns: str) -> None:
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


@contextlib.contextmanager
def two_hosts():
    """Yields [(namespace, interface, address)] for host 0 and host 1."""
    tag = uuid.uuid4().hex[:6]  # interface names: at most 15 characters
    subnet = f"10.213.{int(tag[:2], 16)}"
    hosts = [(f"tpu2h-{tag}-{i}", f"tpu2h{tag}{i}", f"{subnet}.{i + 1}") for i in range(2)]
    made = []
    try:
        for ns, _, _ in hosts:
            run = _ip("netns", "add", ns, check=False)
            if run.returncode != 0:
                pytest.skip(f"cannot create a network namespace (ip netns add: {run.stderr.strip()})")
            made.append(ns)
        (ns0, if0, _), (ns1, if1, _) = hosts
        _ip("link", "add", if0, "type", "veth", "peer", "name", if1)
        for ns, ifname, address in hosts:
            _ip("link", "set", ifname, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", ifname)
            _ip("-n", ns, "link", "set", ifname, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for ns in made:
            _kill_all_in(ns)
            _ip("netns", "del", ns, check=False)  # its end of the veth pair goes with it
        for _, ifname, _ in hosts:  # if it never reached its namespace
            if _ip("link", "show", ifname, check=False).returncode == 0:
                _ip("link", "del", ifname, check=False)


def _torchrun_on(hosts, out: str, timeout: float, rendezvous: str = "static", gloo_ifname: bool = True):
    """torchrun on each host; returns their (returncode, output) once both
    ended, or after killing every process in the namespaces at the deadline
    (torchrun starts its workers in sessions of their own)."""
    master = hosts[0][2]
    procs, logs = [], []
    for node_rank, (ns, ifname, address) in enumerate(hosts):
        env = dict(os.environ, OMP_NUM_THREADS="1", TPU_DIST_TEST_OUT=out)
        env.pop("TORCH_TPU_CHIPS", None)  # one chip on each host
        if gloo_ifname:
            env["GLOO_SOCKET_IFNAME"] = ifname
        if rendezvous == "static":  # host 0 serves the store; ranks follow node_rank
            where = [f"--node_rank={node_rank}", f"--master_addr={master}", f"--master_port={PORT}"]
        else:  # c10d; the hostname ("localhost"-like, the same on both) resolves to neither address, so
            # host 0 is told it serves the store, and each host which address the others reach it at
            where = ["--rdzv_backend=c10d", f"--rdzv_endpoint={master}:{RDZV_PORT}", "--rdzv_id=two-hosts",
                     f"--rdzv_conf=is_host={'true' if node_rank == 0 else 'false'}", f"--local_addr={address}"]
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
               "--nnodes=2", "--nproc_per_node=1", *where, WORKER]
        logs.append(open(os.path.join(out, f"host{node_rank}.log"), "w+"))  # a file: no pipe a worker could hold
        procs.append(subprocess.Popen(cmd, env=env, stdout=logs[-1], stderr=subprocess.STDOUT,
                                      start_new_session=True))
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = any(p.poll() is None for p in procs)
    if killed:
        for ns, _, _ in hosts:
            _kill_all_in(ns)
    results = []
    for p, log in zip(procs, logs):
        p.wait(10)
        log.seek(0)
        results.append((p.returncode, (f"[killed after {timeout} s]\n" if killed else "") + log.read()))
        log.close()
    return results


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0,
                    reason="network namespaces for two hosts need root (ip netns add)")
@pytest.mark.skipif(shutil.which("ip") is None, reason="network namespaces need iproute2's `ip` (not installed)")
@pytest.mark.parametrize("rendezvous,gloo_ifname", [("static", True), ("c10d", True), ("static", False)])
def test_ddp_on_two_hosts_matches_one_cpu_process(rendezvous, gloo_ifname):
    """Without GLOO_SOCKET_IFNAME, where the hostname resolves to a loopback
    address, tpu_dist's gloo listens on the address toward MASTER_ADDR."""
    with two_hosts() as hosts, tempfile.TemporaryDirectory() as out:
        results = _torchrun_on(hosts, out, timeout=150, rendezvous=rendezvous, gloo_ifname=gloo_ifname)
        report = "\n".join(f"host {i} (rc {rc}):\n{text[-4000:]}" for i, (rc, text) in enumerate(results))
        assert all(rc == 0 for rc, _ in results), report
        ranks = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(2)]
    want = W.train_reference()
    for r, got in enumerate(ranks):
        assert (got["rank"], got["world"], got["node_rank"]) == (r, 2, r)
        if rendezvous == "static":  # node_rank chose the rank; c10d numbers the hosts as they join
            assert got["address"] == hosts[r][2]
        assert got["config"] == "tpu:tpu_dist" and got["device"] == "tpu:0"
        torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want["losses"]), rtol=1e-5, atol=1e-6)
        for a, b in zip(got["params"], want["params"], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert sorted(got["address"] for got in ranks) == [h[2] for h in hosts]  # one rank on each "host"
    for a, b in zip(ranks[0]["params"], ranks[1]["params"], strict=True):
        assert torch.equal(a, b)  # the ranks stay in step
