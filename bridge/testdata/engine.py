"""A small stand-in for a vLLM engine's KV-event publisher, for the bridge's broker tests.

It speaks the engine's wire format: a PUB socket sending [topic, 8-byte big-endian sequence,
msgpack batch] and a ROUTER replay socket answering [identity, "", 8-byte start] with
[identity, "", seq, payload] per buffered batch and [identity, "", -1, ""] at the end. Batches
are recent vLLM's map form (msgspec structs with tag and omit_defaults), bytes block hashes.

Commands, one per line on stdin, each answered by one line on stdout:
  pub N        publish N batches
  drop N       publish N batches to the replay buffer only (lost on the PUB socket)
  restart      a new engine incarnation: sequence 0, empty buffer, empty cache
  state        print the device-resident block hashes (hex), space-separated
  junk         publish a batch that is not msgpack (the bridge dead-letters it)
Usage: engine.py PUB_ENDPOINT REPLAY_ENDPOINT [connect]
("connect": the PUB socket connects to the bridge, which binds, as vLLM does for an endpoint
without a wildcard; the replay socket always binds.)
"""

import selectors
import sys
import time
from collections import deque
from typing import Any, Optional, Union

import msgspec
import zmq


class Batch(msgspec.Struct, omit_defaults=True):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class Event(msgspec.Struct, omit_defaults=True, tag=True):
    pass


class BlockStored(Event):
    block_hashes: list[Union[bytes, int]]
    parent_block_hash: Optional[Union[bytes, int]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list[Any]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None


class BlockRemoved(Event):
    block_hashes: list[Union[bytes, int]]
    medium: Optional[str]
    group_idx: Optional[int] = None


BS = 4
END = (-1).to_bytes(8, "big", signed=True)


def block_hash(n: int) -> bytes:
    return n.to_bytes(32, "big")


class Engine:
    def __init__(self, pub_ep: str, replay_ep: str, connect: bool) -> None:
        ctx = zmq.Context.instance()
        self.pub = ctx.socket(zmq.PUB)
        if connect:
            self.pub.connect(pub_ep)
        else:
            self.pub.bind(pub_ep)
        self.router = ctx.socket(zmq.ROUTER)
        self.router.bind(replay_ep)
        self.enc = msgspec.msgpack.Encoder()
        self.g = 0  # batches ever made, across incarnations: hashes stay unique
        self.restart()

    def restart(self) -> None:
        self.seq = 0
        self.buffer: deque = deque(maxlen=10_000)
        self.copies: dict[bytes, int] = {}
        self.order: list[bytes] = []

    def batch(self) -> bytes:
        g = self.g
        self.g += 1
        a, b = block_hash(2 * g), block_hash(2 * g + 1)
        lora = "l1" if g % 2 else None
        events: list[Any] = [BlockStored(block_hashes=[a, b], parent_block_hash=None,
                                         token_ids=list(range(g, g + 2 * BS)), block_size=BS, lora_id=None,
                                         medium="GPU", lora_name=lora, group_idx=0,
                                         kv_cache_spec_kind="full_attention")]
        self.hold(a)
        self.hold(b)
        if g % 3 == 0 and self.order:
            again = self.order[-1]  # a second copy of a held block
            events.append(BlockStored(block_hashes=[again], parent_block_hash=None, token_ids=list(range(BS)),
                                      block_size=BS, lora_id=None, medium="GPU", lora_name=None))
            self.hold(again)
        if g % 4 == 0 and self.order:
            gone = self.order[0]
            events.append(BlockRemoved(block_hashes=[gone], medium="GPU"))
            self.copies[gone] -= 1
            if self.copies[gone] == 0:
                del self.copies[gone]
                self.order.remove(gone)
        if g % 5 == 0:
            events.append(BlockStored(block_hashes=[block_hash(10**9 + g)], parent_block_hash=None,
                                      token_ids=list(range(BS)), block_size=BS, lora_id=None, medium="CPU",
                                      lora_name=None))
        return self.enc.encode(Batch(ts=time.time(), events=events, data_parallel_rank=0))

    def hold(self, h: bytes) -> None:
        if h not in self.copies:
            self.copies[h] = 0
            self.order.append(h)
        self.copies[h] += 1

    def publish(self, n: int, live: bool, junk: bool = False) -> None:
        for _ in range(n):
            payload = b"\xc1not msgpack" if junk else self.batch()
            seq = self.seq.to_bytes(8, "big")
            if live:
                self.pub.send_multipart((b"", seq, payload))
            self.buffer.append((self.seq, payload))
            self.seq += 1

    def serve_replay(self) -> None:
        while self.router.poll(0):
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            ident, _, start = frames
            start_seq = int.from_bytes(start, "big")
            for seq, payload in self.buffer:
                if seq >= start_seq:
                    self.router.send_multipart((ident, b"", seq.to_bytes(8, "big"), payload))
            self.router.send_multipart((ident, b"", END, b""))


def main() -> None:
    eng = Engine(sys.argv[1], sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "connect")
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        eng.serve_replay()
        if not sel.select(timeout=0.005):
            continue
        line = sys.stdin.readline()
        if not line:
            return
        cmd = line.split()
        if cmd[0] == "pub":
            eng.publish(int(cmd[1]), True)
        elif cmd[0] == "drop":
            eng.publish(int(cmd[1]), False)
        elif cmd[0] == "junk":
            eng.publish(1, True, junk=True)
        elif cmd[0] == "restart":
            eng.restart()
        elif cmd[0] == "state":
            print(" ".join(sorted(h.hex() for h in eng.copies)), flush=True)
            continue
        print("ok", flush=True)


if __name__ == "__main__":
    main()
