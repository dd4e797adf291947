"""Streams and events: thin subclasses of torch.Stream and torch.Event,
which reach the runtime through the tpu device guard."""
from typing import Any, Optional

import torch

from torch_tpu.tpu._utils import _device_t, _get_device_index


def _tpu_device(device: _device_t) -> torch.device:
    return torch.device("tpu", _get_device_index(device, optional=True))


class Stream(torch.Stream):
    """An in-order queue of work on one chip (see torch.cuda.Stream).

    ``Stream()`` takes a stream from the chip's pool; streams are never
    destroyed, as on CUDA."""

    def __new__(cls, device: _device_t = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=_tpu_device(device), priority=priority)

    def wait_event(self, event: torch.Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional[torch.Event] = None) -> torch.Event:
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<torch.tpu.Stream device={self.device} stream_id={self.stream_id}>"


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


class _EventMeta(type(torch.Event)):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "tpu"


class Event(torch.Event, metaclass=_EventMeta):
    """A point in a stream (see torch.cuda.Event). Timing is always on.

    ``Event(...)`` returns a plain ``torch.Event`` on the tpu device, because
    PyTorch's event methods (``elapsed_time``) accept only exact
    ``torch.Event`` objects; ``isinstance(e, torch.tpu.Event)`` still holds."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise ValueError("torch.tpu.Event: interprocess events are not supported")
        return torch.Event(device="tpu", enable_timing=enable_timing, blocking=blocking)


def current_stream(device: _device_t = None) -> Stream:
    return _wrap(torch.accelerator.current_stream(_get_device_index(device, optional=True)))


def default_stream(device: _device_t = None) -> Stream:
    index = _get_device_index(device, optional=True)
    device_type = torch.accelerator.current_stream(index).device_type
    return Stream(stream_id=0, device_index=index, device_type=device_type)


def is_current_stream_capturing() -> bool:
    """False: tpu streams have no capture mode (no graphs yet), so nothing
    that asks before a capture-unsafe call needs to hold back."""
    return False


def set_stream(stream: torch.Stream) -> None:
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes ``stream`` current on its chip (and the chip current) inside a with block."""

    def __init__(self, stream: Optional[torch.Stream]):
        # Checked here: a CPU stream would otherwise fail later as an
        # invalid chip index (its device_index is -1).
        if stream is not None and not isinstance(stream, torch.Stream):
            raise TypeError(f"torch.tpu.stream: expected a torch.Stream or None, got {type(stream).__name__}")
        if stream is not None and stream.device.type != "tpu":
            raise ValueError(f"torch.tpu.stream: expected a tpu stream, got a stream on {stream.device}")
        self.stream = stream
        self.prev_stream: Optional[torch.Stream] = None
        self.prev_device = -1

    def __enter__(self) -> Optional[torch.Stream]:
        if self.stream is None:
            return None
        from torch_tpu import _C

        self.prev_device = _C._current_device()
        self.prev_stream = torch.accelerator.current_stream(self.stream.device_index)
        _C._set_device(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *args: Any) -> bool:
        if self.stream is None:
            return False
        from torch_tpu import _C

        torch.accelerator.set_stream(self.prev_stream)
        _C._set_device(self.prev_device)
        return False


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    return StreamContext(stream)
