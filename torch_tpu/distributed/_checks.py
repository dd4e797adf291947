"""Argument checks: on this rank (devices, dtypes, sizes) and across ranks.

Gloo aborts the whole process when a message is larger than the buffer
posted for it (``op.preamble.length <= op.nbytes`` in its TCP pair), so a
collective whose sizes differ between ranks would kill every rank instead of
raising. Before each collective the ranks therefore exchange a small,
fixed-size record (``Meta``) with one gloo all_gather: the collective's name
and number, dtype, root, reduce op, element counts, and two checksums over
who sends how many elements to whom. Every rank sees the same records and so
reaches the same verdict; either all ranks run the collective or all raise
the same error. A rank whose own arguments are wrong still takes part in the
exchange, with an error code, so that the others raise at once instead of
waiting for the timeout.

The record has the same size for every collective, so even ranks that call
different collectives exchange it safely and learn of the divergence.
"""
from typing import Dict, Iterable, List, Optional, Sequence

import torch

_MAGIC = 0x7470755F64697374  # "tpu_dist"
_P = (1 << 61) - 1  # checksums are taken modulo this prime

# Positions in the record.
MAGIC, SEQ, OP, ERROR, DTYPE, ROOT, REDOP, COUNT, SIG, SEND, RECV, NTENSORS = range(12)
META_LEN = 16

OPS = [
    "barrier",
    "all_reduce",
    "all_reduce_coalesced",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "all_gather_into_tensor_coalesced",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
]
_OP_ID = {name: i + 1 for i, name in enumerate(OPS)}

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.uint16, torch.uint32, torch.uint64,
    torch.float8_e4m3fn, torch.float8_e5m2,
]
_DTYPE_ID = {d: i + 1 for i, d in enumerate(DTYPES)}


def weight(src: int, dst: int) -> int:
    """A pseudo-random nonzero weight of the (sender, receiver) pair."""
    x = (src * 0x9E3779B1 + dst * 0x85EBCA77 + 0x632BE59B) % _P
    x = (x * x + 0x27D4EB2F) % _P
    return x or 1


def fingerprint(values: Iterable[int]) -> int:
    """A position-sensitive hash of a list of counts (coalesced sizes)."""
    h = 0
    for i, v in enumerate(values):
        h = (h + weight(i, 7) * (int(v) % _P)) % _P
    return h


class Meta:
    """This rank's record for one collective."""

    def __init__(self, name: str, seq: int) -> None:
        self.name = name
        self.values = [0] * META_LEN
        self.values[MAGIC] = _MAGIC
        self.values[SEQ] = seq
        self.values[OP] = _OP_ID[name]
        self.values[ROOT] = -1
        self.values[REDOP] = -1
        self.send = 0
        self.recv = 0

    def set(self, **fields: int) -> "Meta":
        for key, value in fields.items():
            if key == "dtype":
                self.values[DTYPE] = _DTYPE_ID.get(value, 0)
            else:
                self.values[globals()[key.upper()]] = int(value)
        return self

    def sends(self, src: int, dst: int, count: int) -> None:
        """This rank sends ``count`` elements from rank ``src`` to ``dst``."""
        self.send = (self.send + weight(src, dst) * count) % _P

    def receives(self, src: int, dst: int, count: int) -> None:
        self.recv = (self.recv + weight(src, dst) * count) % _P

    def fail(self) -> None:
        self.values[ERROR] = 1

    def tensor(self) -> torch.Tensor:
        self.values[SEND] = self.send
        self.values[RECV] = self.recv
        return torch.tensor(self.values, dtype=torch.int64)


def _ranks(ranks: Sequence[int]) -> str:
    return "rank " + str(ranks[0]) if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _groups(rows: List[List[int]], field: int) -> Dict[int, List[int]]:
    out: Dict[int, List[int]] = {}
    for rank, row in enumerate(rows):
        out.setdefault(row[field], []).append(rank)
    return out


def verdict(rows: List[List[int]], me: int, equal: Sequence[int]) -> Optional[str]:
    """None if the records agree, else the reason (the same on every rank).

    ``equal``: the fields that must be equal across ranks for this collective."""
    name = OPS[rows[me][OP] - 1]
    bad = [r for r, row in enumerate(rows) if row[MAGIC] != _MAGIC]
    if bad:
        return f"{_ranks(bad)} sent a malformed record (a different torch-tpu version?)"
    ops = _groups(rows, OP)
    seqs = _groups(rows, SEQ)
    if len(ops) > 1 or len(seqs) > 1:
        calls = "; ".join(
            f"rank {r}: {OPS[row[OP] - 1]} (collective #{row[SEQ]})" for r, row in enumerate(rows)
        )
        return f"the ranks called different collectives: {calls}"
    failed = [r for r, row in enumerate(rows) if row[ERROR]]
    if failed:
        return (f"{_ranks(failed)} failed in {name} before it reached gloo (bad arguments, or the work queued "
                f"before it failed; see the error on {'that rank' if len(failed) == 1 else 'those ranks'})")
    labels = {DTYPE: "dtype", ROOT: "root (src/dst)", REDOP: "reduce op", COUNT: "number of elements",
              SIG: "sizes of the tensor list", NTENSORS: "number of tensors"}
    for field in equal:
        groups = _groups(rows, field)
        if len(groups) > 1:
            shown = "; ".join(f"{_ranks(rs)}: {_show(field, v)}" for v, rs in groups.items())
            return f"the {labels[field]} differs across ranks ({shown})"
    if sum(row[SEND] for row in rows) % _P != sum(row[RECV] for row in rows) % _P:
        return "the element counts that ranks send do not match the counts the receiving ranks expect"
    return None


def _show(field: int, value: int) -> str:
    if field == DTYPE:
        return str(DTYPES[value - 1]) if 0 < value <= len(DTYPES) else "?"
    if field == REDOP:
        return str(torch.distributed.ReduceOp.RedOpType(value)).split(".")[-1]
    return str(value)


# --- local checks ------------------------------------------------------------


def check_tensors(name: str, tensors: Sequence[torch.Tensor], what: Sequence[str]) -> torch.device:
    """All tensors on one cpu or tpu device, dense; returns that device."""
    device = None
    first = None
    for t, label in zip(tensors, what):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tpu_dist {name}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if t.layout != torch.strided:
            raise ValueError(f"tpu_dist {name}: {label} is a {t.layout} tensor; only dense (strided) tensors are supported")
        if t.device.type not in ("tpu", "cpu"):
            raise ValueError(f"tpu_dist {name}: {label} is on {t.device}; tpu_dist takes tpu (or cpu) tensors")
        if t.is_complex():
            raise TypeError(f"tpu_dist {name}: {label} is complex; pass torch.view_as_real(tensor)")
        if device is None:
            device, first = t.device, label
        elif t.device != device:
            raise ValueError(
                f"tpu_dist {name}: all tensors must be on one device, but {first} is on {device} "
                f"and {label} is on {t.device}"
            )
    return device if device is not None else torch.device("cpu")


def check_dtypes(name: str, tensors: Sequence[torch.Tensor], what: Sequence[str]) -> None:
    for t, label in zip(tensors[1:], what[1:]):
        if t.dtype != tensors[0].dtype:
            raise TypeError(
                f"tpu_dist {name}: {label} is {t.dtype} but {what[0]} is {tensors[0].dtype}; "
                "all tensors of a collective must have one dtype"
            )
