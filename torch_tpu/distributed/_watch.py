"""Which ranks did not join: the store keeps each rank's last collective.

Before a collective goes to gloo, each rank writes ``issued/<rank>`` =
``"<number> <name>"`` to the group's store (one small write per collective):
the last collective the rank has started, which for an asynchronous call is
when its group's communication thread reaches it, not when it was issued.
When a collective fails (gloo's timeout, a peer that closed its
connection), the failing rank reads every rank's entry: those that have not
reached this collective's number did not join it. At creation each rank also
writes its host and pid, so that on one host a rank that died is named as
such.

The store outlives the ranks under torchrun (the agent serves it) and with a
FileStore; if the store itself is gone, the message says so instead.
"""
import datetime
import os
import socket
import time
from typing import List, Optional, Tuple

import torch.distributed as dist

_READ_TIMEOUT = datetime.timedelta(seconds=2)
# A failure that comes fast (a peer closed its connection) may reach this
# rank before a live peer has issued the collective; such a peer is given
# this long to show up before it is named as one that did not join.
_GRACE_S = 2.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except OSError:
            return True


class Watch:
    def __init__(self, store: dist.Store, rank: int, size: int, group: str, timeout: datetime.timedelta) -> None:
        self.store = dist.PrefixStore("tpu_dist/", store)
        self.rank = rank
        self.size = size
        self.group = group
        self.timeout = timeout
        self.host = socket.gethostname()
        self.enabled = True
        try:
            self.store.set(f"proc/{rank}", f"{self.host} {os.getpid()}")
        except Exception:  # a store that cannot take writes: no diagnostics
            self.enabled = False

    def issued(self, seq: int, name: str) -> None:
        if not self.enabled:
            return
        try:
            self.store.set(f"issued/{self.rank}", f"{seq} {name}")
        except Exception:
            self.enabled = False

    def _read(self, key: str) -> Optional[str]:
        if not self.store.check([key]):
            return None
        return self.store.get(key).decode()

    def missing(self, seq: int, grace: float) -> Tuple[List[Tuple[int, str]], List[int]]:
        """(ranks that have not issued collective ``seq``, with what they
        issued last), (those of them known to have died). Live ranks that
        are behind are given ``grace`` seconds to catch up."""
        old = self.store.timeout
        self.store.set_timeout(_READ_TIMEOUT)
        try:
            procs = {}
            for r in range(self.size):
                proc = self._read(f"proc/{r}") if r != self.rank else None
                if proc:
                    host, pid = proc.rsplit(" ", 1)
                    procs[r] = int(pid) if host == self.host else None
            deadline = time.monotonic() + grace
            while True:
                behind, dead = [], []
                for r in range(self.size):
                    if r == self.rank:
                        continue
                    entry = self._read(f"issued/{r}")
                    if (int(entry.split(" ", 1)[0]) if entry else 0) < seq:
                        behind.append((r, f"#{entry}" if entry else "nothing yet"))
                        if procs.get(r) is not None and not _alive(procs[r]):
                            dead.append(r)
                if len(behind) == len(dead) or time.monotonic() >= deadline:
                    return behind, dead
                time.sleep(0.05)
        finally:
            self.store.set_timeout(old)

    def explain(self, name: str, seq: int, cause: BaseException,
                timeout: Optional[datetime.timedelta] = None) -> dist.DistBackendError:
        """The error a failed collective raises: what, which ranks, why.
        ``timeout``: the call's own, where it has one (else the group's)."""
        timeout = timeout or self.timeout
        head = (
            f"tpu_dist: {name} (collective #{seq} of group '{self.group}', on rank {self.rank} "
            f"of {self.size}) failed"
        )
        text = str(cause).strip()
        timed_out = "Timed out" in text or "timeout" in text.lower()
        if timed_out:
            head += f" within the timeout of {timeout.total_seconds():g} s"
        parts = [head]
        if self.enabled:
            try:
                grace = 0.0 if timed_out else min(_GRACE_S, timeout.total_seconds() / 4)
                behind, dead = self.missing(seq, grace)
                if behind:
                    ranks = ", ".join(str(r) for r, _ in behind)
                    lasts = "; ".join(f"rank {r} last started {what}" for r, what in behind)
                    parts.append(f"ranks that did not join it: [{ranks}] ({lasts})")
                else:
                    parts.append("every rank had issued it")
                if dead:
                    parts.append("no longer running: [" + ", ".join(map(str, dead)) + "]")
            except Exception as e:  # the store is gone too (its host died)
                parts.append(f"the store cannot tell which ranks did not join ({type(e).__name__}: {e})")
        parts.append(f"gloo: {text}")
        return dist.DistBackendError("; ".join(parts))
