"""tpu tensors and torch.multiprocessing: device memory is private to its
process, so sending a tpu tensor to another process raises a clear
RuntimeError (at put/send, in the caller), and nothing hangs; CPU tensors
still go through. Each scenario runs in its own interpreter with a timeout,
since a hang is the failure mode, with spawn-context children."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import queue
    import types

    import torch
    import torch.multiprocessing as mp


    def echo(q_in, q_out):
        # Reports each item it receives (or the error unpickling raised);
        # stops at None or after a minute without input.
        while True:
            try:
                item = q_in.get(timeout=60)
            except queue.Empty:
                q_out.put(("timeout", ""))
                return
            except RuntimeError as e:
                q_out.put(("error", str(e)))
                continue
            if item is None:
                return
            if isinstance(item, torch.Tensor):
                item.add_(1)  # shared memory: the sender sees this
                q_out.put(("ok", str(item.device)))
            else:
                q_out.put(("ok", type(item).__name__))


    def expect_raise(what, fn):
        try:
            fn()
        except RuntimeError as e:
            msg = str(e)
            ok = "cannot be shared between processes" in msg and ".cpu()" in msg
            print(what, "RAISED", ok)
        else:
            print(what, "DID NOT RAISE")


    def main():
        ctx = mp.get_context("spawn")
        x = torch.ones(3, device="tpu")
        for make in (ctx.Queue, ctx.JoinableQueue):
            q_in, q_out = make(), ctx.Queue()
            p = ctx.Process(target=echo, args=(q_in, q_out))
            p.start()
            name = make.__name__
            cpu = torch.zeros(4)
            q_in.put(cpu)
            print(name, "cpu", q_out.get(timeout=60), cpu.tolist())
            expect_raise(name + " tensor", lambda: q_in.put(x))
            expect_raise(name + " nested", lambda: q_in.put({"a": [1, (x,)]}))
            expect_raise(name + " parameter", lambda: q_in.put(torch.nn.Parameter(x)))
            expect_raise(name + " module", lambda: q_in.put([torch.nn.Linear(2, 2).to(x.device)]))
            expect_raise(name + " storage", lambda: q_in.put(x.untyped_storage()))
            expect_raise(name + " nowait", lambda: q_in.put_nowait([x]))
            # Hidden where put does not look: the receiver gets the error.
            q_in.put(types.SimpleNamespace(t=x))
            print(name, "hidden", q_out.get(timeout=60)[0])
            q_in.put(torch.arange(3))
            print(name, "after", q_out.get(timeout=60))
            q_in.put(None)
            p.join(60)
            print(name, "exit", p.exitcode)
        simple = ctx.SimpleQueue()
        expect_raise("SimpleQueue", lambda: simple.put(x))
        a, b = ctx.Pipe()
        expect_raise("Pipe", lambda: a.send([x]))
        a.send(torch.ones(2))
        print("Pipe cpu", b.recv().tolist())


    if __name__ == "__main__":
        main()
    """
)


def test_tpu_tensor_on_queue_raises_and_nothing_hangs(tmp_path):
    script = tmp_path / "mp_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    for name in ("Queue", "JoinableQueue"):
        # CPU tensors are shared: the child's add_ shows in the parent.
        assert f"{name} cpu ('ok', 'cpu') [1.0, 1.0, 1.0, 1.0]" in out, out
        for case in ("tensor", "nested", "parameter", "module", "storage", "nowait"):
            assert f"{name} {case} RAISED True" in out, out
        assert f"{name} hidden error" in out, out
        assert f"{name} after ('ok', 'cpu')" in out, out
        assert f"{name} exit 0" in out, out
    assert "SimpleQueue RAISED True" in out, out
    assert "Pipe RAISED True" in out, out
    assert "Pipe cpu [1.0, 1.0]" in out, out
    # No traceback from a queue's feeder thread, no deprecation noise.
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "TypedStorage is deprecated" not in proc.stderr, proc.stderr[-3000:]
