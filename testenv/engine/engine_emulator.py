#!/usr/bin/env python3
"""An inference engine's KV-event publisher, for driving `processor bridge` in tests.

It speaks the wire protocol of vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py), which
SGLang shares: per data-parallel rank, a PUB socket sending three-frame messages

    [topic, sequence number (8 bytes, big-endian), msgpack payload of one event batch]

and a ROUTER socket that answers a request [identity, b"", start sequence (8 bytes)] with one
[identity, b"", sequence, payload] message per buffered batch at or after the start, then the end
marker [identity, b"", -1 (8 bytes, signed), b""]. With --replay-topic-frame the replies carry
the topic frame as vLLM's do from v0.26.0 on: [identity, b"", topic, sequence, payload] and the
end marker [identity, b"", b"", -1, b""]. The buffer keeps the last --buffer-steps
batches (the engines' default is 10,000). Rank r uses the base ports plus r, as the engines do.

The PUB socket is an XPUB socket: subscribers cannot tell the difference, and the emulator learns
when a subscriber has joined, so a test can start publishing without losing the first batches to
ZeroMQ's late-joiner window (a real engine gives no such signal; a bridge must then recover the
batches it missed from the replay socket).

Payload shapes (--wire), all msgpack written by msgspec exactly as the engines declare them:
  map       the batch and each event are maps: {"ts", "events", "data_parallel_rank"}, events
            tagged by a "type" key;
  mapevents the batch array_like, [ts, events, data_parallel_rank], each event a map tagged by
            "type", fields at their default (None) left out (vLLM 0.24.0 and later, SGLang
            0.5.20 and later);
  array     the same structs array_like: [ts, events, data_parallel_rank], events
            ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
            medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
            kv_cache_spec_sliding_window] (msgspec writes an array_like struct whole, fields at
            their default included), ["BlockRemoved", block_hashes, medium, group_idx] (vLLM
            0.22.0 to 0.23.0);
  array7    [ts, events, rank], BlockStored up to lora_name, ["BlockRemoved", block_hashes,
            medium] (vLLM 0.14.1 to 0.16.0);
  array6    the same without lora_name (vLLM 0.10.2 to 0.13.0; SGLang up to 0.5.17);
  array5    the five-field BlockStored of vLLM 0.9.0: [ts, events], ["BlockStored",
            block_hashes, parent_block_hash, token_ids, block_size, lora_id], ["BlockRemoved",
            block_hashes]; no rank, no medium, no LoRA name.
--release NAME sets the shape, hashes, replay framing and CPU medium of an engine release line
(vllm-0.9, vllm-0.11, vllm-0.15, vllm-0.22, vllm-0.24, vllm-0.26, sglang-0.5.17, sglang).
Block hashes (--hash-format): int (the low 64 bits of the block's SHA-256, unsigned: vLLM's
default), signed (the same bits as a signed 64-bit integer, as older engines sent Python hashes),
or bytes (the whole 32-byte digest).

The workload is seeded (--seed): each rank runs a block pool of at most --capacity GPU blocks that
stores chains of full blocks (new roots, and branches off resident blocks), evicts leaf blocks
when full, stores some blocks twice (the same hash from two requests, removed twice), keeps some
chains under a LoRA adapter (--lora-fraction; lora_name, and lora_id from --lora-id), salts
some new sequences with a request's cache salt (--salt-fraction, one of three salts; --salt-style
vllm: the salt is the last extra key of the sequence's first block, as vLLM sends it, on the
shapes that carry extra_keys; sglang: every store of a salted sequence names it in its
cache_salt key, as SGLang 0.5.20 and later send it, on the map shapes; the salt enters the block
hashes, so a salted sequence shares no block with an unsalted one of the same tokens), copies
chains to the CPU tier (--cpu-fraction; medium "CPU": never device residency), and, with --hybrid
(map and array wires), stores chains in a sliding-window group (group_idx 1), which a bridge must
filter out. The GPU pool is prefix-closed (only leaves are evicted), so the model is the set of
resident chains.

Control: one JSON command per line on stdin, one JSON reply per line on stdout.
  {"cmd": "subscribers"}                  current subscriptions per rank
  {"cmd": "run", "batches": N, "rate": R, "drop": [seq, ...], "ranks": [r, ...]}
        publish N batches on each rank (R batches/s per rank, 0: as fast as possible); the listed
        sequence numbers are not sent live but stay in the replay buffer
  {"cmd": "restart", "ranks": [...]}      an engine restart: sequences start again at 0, the
        replay buffer and the block pool are empty, the sockets are made anew; no clear event
  {"cmd": "clear", "ranks": [...], "drop": false}
        publish one AllBlocksCleared batch (with "drop": true it is kept off the live socket
        and reaches a subscriber only through the replay socket)
  {"cmd": "model", "path": P}             write the exact model (JSON) to P
  {"cmd": "stats"}                        counters
  {"cmd": "stop"}                         close and exit
At the end of stdin the emulator serves replay requests for --linger seconds, then exits, so a
script file can be piped in from the command line.

The model (JSON): {"block_size", "wire", "hash_format", "ranks": [{"rank", "resident": [{"lora_name",
"tokens", "blocks"}, ...] (each a resident leaf chain: every prefix of it is resident on GPU),
"absent": [...] (chains stored on other media or groups, or evicted, and not on GPU)}],
a salted chain also with "extra_keys": its blocks' extra keys as they enter their hashes (the
salt the first block's one key, as bridge/engineemu's model gives them),
"stats": {...}}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import queue
import random
import sys
import threading
import time
from typing import Any, Optional

import msgspec
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
VOCAB = 32000
MASK64 = (1 << 64) - 1


def offset_endpoint(endpoint: Optional[str], rank: int) -> Optional[str]:
    """The endpoint of one rank: the port plus the rank for tcp, a _dp suffix for inproc/ipc."""
    if not endpoint or rank == 0:
        return endpoint
    if endpoint.startswith("tcp://"):
        base, port = endpoint.rsplit(":", 1)
        return f"{base}:{int(port) + rank}"
    return f"{endpoint}_dp{rank}"


def binds(endpoint: str) -> bool:
    """The engines' rule: bind for wildcard, IPv6 any, ipc and inproc endpoints, else connect."""
    return ("*" in endpoint or "::" in endpoint or endpoint.startswith("ipc://")
            or endpoint.startswith("inproc://"))


def bind_retrying(sock: zmq.Socket, endpoint: str, patience: float = 10.0) -> None:
    """Bind, retrying while the address is still held: libzmq releases the listener of a closed
    socket in its I/O thread, so an immediate rebind (a restart) can find it busy."""
    deadline = time.monotonic() + patience
    while True:
        try:
            sock.bind(endpoint)
            return
        except zmq.ZMQError as e:
            if e.errno != zmq.EADDRINUSE or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


# ---- the wire shapes -------------------------------------------------------------------------

# The BlockStored fields each shape carries: array5 (vLLM 0.9.0) the first five, array6 (vLLM
# 0.10.2-0.13, SGLang up to 0.5.17) six, array7 (vLLM 0.14.1-0.16) seven, the others all.
STORED_FIELDS = {"array5": 5, "array6": 6, "array7": 7}

# Release lines (--release): the shape, hashes, replay framing and CPU medium each engine release
# sends, as bridge/engineemu/release.go lists them.
RELEASES = {
    "vllm-0.9": dict(wire="array5", hash_format="signed", replay_topic_frame=False, cpu_medium="CPU"),
    "vllm-0.11": dict(wire="array6", hash_format="int", replay_topic_frame=False, cpu_medium="CPU"),
    "vllm-0.15": dict(wire="array7", hash_format="int", replay_topic_frame=False, cpu_medium="CPU"),
    "vllm-0.22": dict(wire="array", hash_format="int", replay_topic_frame=False, cpu_medium="CPU"),
    "vllm-0.24": dict(wire="mapevents", hash_format="bytes", replay_topic_frame=False, cpu_medium="CPU"),
    "vllm-0.26": dict(wire="mapevents", hash_format="int", replay_topic_frame=True, cpu_medium="CPU"),
    "sglang-0.5.17": dict(wire="array6", hash_format="signed", replay_topic_frame=False, cpu_medium="CPU_PINNED"),
    "sglang": dict(wire="mapevents", hash_format="signed", replay_topic_frame=True, cpu_medium="CPU_PINNED"),
}


class Wire:
    """The msgspec structs of one wire shape and the encoder that writes them."""

    def __init__(self, shape: str, salt_style: str = "vllm") -> None:
        self.shape = shape
        self.salt_style = salt_style
        self.fields = STORED_FIELDS.get(shape, 11)
        events_as_maps = shape in ("map", "mapevents")
        opts = dict(omit_defaults=True, gc=False, array_like=not events_as_maps)
        stored_fields = [("block_hashes", list), ("parent_block_hash", Any),
                         ("token_ids", list), ("block_size", int), ("lora_id", Any),
                         ("medium", Any), ("lora_name", Any),
                         ("extra_keys", Any, None), ("group_idx", Any, None),
                         ("kv_cache_spec_kind", Any, None),
                         ("kv_cache_spec_sliding_window", Any, None)][:self.fields]
        if salt_style == "sglang" and events_as_maps:
            stored_fields.append(("cache_salt", Any, None))
        removed_fields = [("block_hashes", list), ("medium", Any), ("group_idx", Any, None)]
        removed_fields = removed_fields[:1 if self.fields == 5 else 2 if self.fields < 11 else 3]
        batch_fields = [("ts", float), ("events", list), ("data_parallel_rank", Any, None)]
        if shape == "array5":
            batch_fields = batch_fields[:2]
        self.BlockStored = msgspec.defstruct("BlockStored", stored_fields, tag=True, **opts)
        self.BlockRemoved = msgspec.defstruct("BlockRemoved", removed_fields, tag=True, **opts)
        self.AllBlocksCleared = msgspec.defstruct("AllBlocksCleared", [], tag=True, **opts)
        batch_opts = dict(opts, array_like=shape != "map")
        self.Batch = msgspec.defstruct("KVEventBatch", batch_fields, **batch_opts)
        self.encoder = msgspec.msgpack.Encoder()

    def has_medium(self) -> bool:
        return self.fields >= 6

    def has_groups(self) -> bool:
        return self.fields == 11

    def carries_salt(self) -> bool:
        """Whether this shape can say a store's cache salt in the given style."""
        if self.salt_style == "sglang":
            return self.shape in ("map", "mapevents")
        return self.has_groups()

    def stored(self, hashes, parent, tokens, block_size, lora_id, medium, lora_name, group,
               extra_keys=None, cache_salt=None):
        """extra_keys: one entry per block (None, or a tuple of the block's keys), as vLLM sends
        them from 0.17.1 on; only the shapes with the full field set carry them. cache_salt:
        SGLang's salt of a salted store (sglang style, map shapes)."""
        args = [hashes, parent, tokens, block_size, lora_id, medium, lora_name][:self.fields]
        kw = {}
        if group is not None and self.has_groups():
            kw = dict(group_idx=group[0], kv_cache_spec_kind=group[1],
                      kv_cache_spec_sliding_window=group[2])
        if extra_keys is not None and self.has_groups():
            kw["extra_keys"] = [None if k is None else tuple(k) for k in extra_keys]
        if cache_salt is not None and self.salt_style == "sglang" and self.carries_salt():
            kw["cache_salt"] = cache_salt
        return self.BlockStored(*args, **kw)

    def removed(self, hashes, medium, group):
        if not self.has_medium():
            return self.BlockRemoved(hashes)
        if not self.has_groups():
            return self.BlockRemoved(hashes, medium)
        return self.BlockRemoved(hashes, medium, None if group is None else group[0])

    def cleared(self):
        return self.AllBlocksCleared()

    def batch(self, ts: float, events: list, rank: int) -> bytes:
        if self.shape == "array5":
            return self.encoder.encode(self.Batch(ts, events))
        return self.encoder.encode(self.Batch(ts, events, rank))


def wire_hash(digest: Optional[bytes], fmt: str):
    """A block digest as the engine sends it: the 32 bytes, or their low 64 bits as an unsigned
    (int) or signed (signed) integer."""
    if digest is None:
        return None
    if fmt == "bytes":
        return digest
    v = int.from_bytes(digest, "big") & MASK64
    if fmt == "signed" and v >= 1 << 63:
        v -= 1 << 64
    return v


# ---- the block pool of one rank --------------------------------------------------------------

class Block:
    __slots__ = ("digest", "parent", "tokens", "lora", "salt", "depth", "copies", "children")

    def __init__(self, digest: bytes, parent: Optional[bytes], tokens: list[int],
                 lora: Optional[str], depth: int, salt: Optional[str] = None) -> None:
        self.digest = digest
        self.parent = parent
        self.tokens = tokens
        self.lora = lora
        self.salt = salt
        self.depth = depth
        self.copies = 1
        self.children = 0


SLIDING_GROUP = (1, "sliding_window", 128)


class IndexedSet:
    """A set with O(1) add, discard and uniform random choice (the pool's hot operations)."""

    def __init__(self) -> None:
        self.items: list = []
        self.pos: dict = {}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, x) -> bool:
        return x in self.pos

    def add(self, x) -> None:
        if x not in self.pos:
            self.pos[x] = len(self.items)
            self.items.append(x)

    def discard(self, x) -> None:
        i = self.pos.pop(x, None)
        if i is None:
            return
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self.pos[last] = i

    def drop_gpu(self) -> None:
        self.evicted.extend(self.gpu.keys())
        self.gpu.clear()
        self.gpu_keys.clear()
        self.leaves.clear()
        self.cpu.clear()
        self.window.clear()

    def clear(self) -> None:
        self.items.clear()
        self.pos.clear()

    def sample(self, rng: random.Random, n: int) -> list:
        return rng.sample(self.items, min(n, len(self.items)))


class Rank:
    """One data-parallel rank: its sockets, sequence, replay buffer and block pool."""

    def __init__(self, emu: "Emulator", rank: int) -> None:
        self.emu = emu
        self.rank = rank
        self.rng = random.Random(emu.args.seed * 1_000_003 + rank)
        self.seq = 0
        self.buffer: list[tuple[int, bytes]] = []
        self.subscribers = 0
        self.gpu: dict[bytes, Block] = {}      # resident GPU blocks (full attention)
        self.known: dict[bytes, Block] = {}    # every block ever made, for chains and the model
        self.gpu_keys = IndexedSet()           # the keys of gpu, for random choice
        self.leaves = IndexedSet()             # resident GPU blocks without resident children
        self.cpu = IndexedSet()                # blocks on the CPU tier
        self.window = IndexedSet()             # blocks stored in the sliding-window group
        self.window_only: list[bytes] = []     # sliding-window chain ends never on GPU
        self.evicted: list[bytes] = []         # GPU blocks evicted at some point
        self.pub = None
        self.replay = None
        self.open_sockets()

    # sockets

    def open_sockets(self) -> None:
        a = self.emu.args
        ctx = self.emu.ctx
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.SNDHWM, a.hwm)
        self.pub.setsockopt(zmq.XPUB_VERBOSER, 1)
        self.pub.setsockopt(zmq.LINGER, 0)
        ep = offset_endpoint(a.endpoint, self.rank)
        if a.bind or (not a.connect and binds(ep)):
            bind_retrying(self.pub, ep)
        else:
            self.pub.connect(ep)
        self.subscribers = 0
        self.replay = None
        if a.replay_endpoint:
            self.replay = ctx.socket(zmq.ROUTER)
            self.replay.setsockopt(zmq.LINGER, 0)
            self.replay.setsockopt(zmq.SNDHWM, a.replay_hwm)
            bind_retrying(self.replay, offset_endpoint(a.replay_endpoint, self.rank))

    def close_sockets(self) -> None:
        for s in (self.pub, self.replay):
            if s is not None:
                s.close(linger=0)

    def service(self) -> None:
        """Read subscription changes and answer replay requests, without blocking."""
        while self.pub.poll(0):
            msg = self.pub.recv()
            if msg[:1] == b"\x01":
                self.subscribers += 1
            elif msg[:1] == b"\x00":
                self.subscribers = max(0, self.subscribers - 1)
        while self.replay is not None and self.replay.poll(0):
            frames = self.replay.recv_multipart()
            if len(frames) != 3:
                self.emu.stats["replay_invalid"] += 1
                continue
            ident, _, start = frames
            start_seq = int.from_bytes(start, "big")
            self.emu.stats["replay_requests"] += 1
            truncate = self.emu.stats["replay_requests"] <= self.emu.args.replay_truncate
            sent = 0
            for seq, payload in self.buffer:
                if seq < start_seq:
                    continue
                if truncate and sent >= 1:
                    # A large reply whose tail the socket dropped: the client sees the end
                    # marker early and must ask again.
                    self.emu.stats["replay_truncated"] += 1
                    break
                if self.emu.args.replay_topic_frame:
                    self.replay.send_multipart((ident, b"", self.emu.topic, seq.to_bytes(8, "big"), payload))
                else:
                    self.replay.send_multipart((ident, b"", seq.to_bytes(8, "big"), payload))
                sent += 1
            self.emu.stats["replayed_batches"] += sent
            if self.emu.args.replay_topic_frame:
                self.replay.send_multipart((ident, b"", b"", END_SEQ, b""))
            else:
                self.replay.send_multipart((ident, b"", END_SEQ, b""))

    # publishing

    def publish(self, events: list, drop: bool) -> None:
        payload = self.emu.wire.batch(time.time(), events, self.rank)
        seq = self.seq
        self.seq += 1
        if not drop:
            self.pub.send_multipart((self.emu.topic, seq.to_bytes(8, "big"), payload))
        else:
            self.emu.stats["dropped_live"] += 1
        self.buffer.append((seq, payload))
        if len(self.buffer) > self.emu.args.buffer_steps:
            del self.buffer[: len(self.buffer) - self.emu.args.buffer_steps]
        self.emu.stats["batches"] += 1

    def restart(self) -> None:
        self.close_sockets()
        self.seq = 0
        self.buffer = []
        self.drop_gpu()
        self.open_sockets()
        self.emu.stats["restarts"] += 1

    def drop_gpu(self) -> None:
        self.evicted.extend(self.gpu.keys())
        self.gpu.clear()
        self.gpu_keys.clear()
        self.leaves.clear()
        self.cpu.clear()
        self.window.clear()

    def clear(self, drop: bool = False) -> None:
        self.drop_gpu()
        self.publish([self.emu.wire.cleared()], drop=drop)
        self.emu.stats["events_AllBlocksCleared"] += 1

    # the workload

    def wire_hash(self, digest: Optional[bytes]):
        return wire_hash(digest, self.emu.args.hash_format)

    def block_digest(self, parent: Optional[bytes], tokens: list[int], lora: Optional[str],
                     salt: Optional[str] = None) -> bytes:
        h = hashlib.sha256()
        h.update(parent or b"\0" * 32)
        h.update(b"".join(t.to_bytes(4, "little") for t in tokens))
        if lora:
            h.update(lora.encode())
        if salt and parent is None:
            # The engines hash the salt into the sequence's first block (vLLM: its extra keys;
            # SGLang: the salted root); the chain carries it on through the parent hashes.
            h.update(b"salt:" + salt.encode())
        return h.digest()

    def new_chain(self, parent: Optional[Block], n: int, lora: Optional[str],
                  salt: Optional[str] = None) -> list[Block]:
        bs = self.emu.args.block_size
        out = []
        prev = parent
        for _ in range(n):
            tokens = [self.rng.randrange(VOCAB) for _ in range(bs)]
            d = self.block_digest(prev.digest if prev else None, tokens, lora, salt)
            b = self.known.get(d)
            if b is None:
                b = Block(d, prev.digest if prev else None, tokens, lora, (prev.depth if prev else 0) + 1, salt)
                self.known[d] = b
            out.append(b)
            prev = b
        return out

    def stored_event(self, chain: list[Block], medium: str, group=None):
        a = self.emu.args
        first = chain[0]
        lora = first.lora
        extra_keys = None
        if first.salt and first.parent is None and self.emu.wire.salt_style == "vllm":
            extra_keys = [(first.salt,)] + [None] * (len(chain) - 1)
        return self.emu.wire.stored(
            [self.wire_hash(b.digest) for b in chain], self.wire_hash(first.parent),
            [t for b in chain for t in b.tokens], a.block_size,
            a.lora_id if lora else None, medium, lora, group, extra_keys=extra_keys,
            cache_salt=first.salt)

    def gpu_store(self) -> Optional[Any]:
        a = self.emu.args
        rng = self.rng
        if self.gpu and rng.random() < a.dup_fraction:
            # The same block stored again (two requests computed it): one more copy.
            b = self.gpu[self.gpu_keys.sample(rng, 1)[0]]
            b.copies += 1
            self.emu.stats["duplicate_stores"] += 1
            return self.stored_event([b], "GPU")
        parent = None
        if self.gpu and rng.random() < 0.7:
            parent = self.gpu[self.gpu_keys.sample(rng, 1)[0]]
        lora = parent.lora if parent else (a.lora_name if rng.random() < a.lora_fraction else None)
        salt = parent.salt if parent else (f"salt-{rng.randrange(3)}" if a.salt_fraction > 0 and rng.random() < a.salt_fraction else None)
        chain = self.new_chain(parent, rng.randint(1, 4), lora, salt)
        # A block already resident (same tokens after the same parent) is a duplicate store.
        for b in chain:
            if b.digest in self.gpu:
                b.copies += 1
            else:
                b.copies = 1
                b.children = 0
                self.gpu[b.digest] = b
                self.gpu_keys.add(b.digest)
                self.leaves.add(b.digest)
                if b.parent is not None and b.parent in self.gpu:
                    self.gpu[b.parent].children += 1
                    self.leaves.discard(b.parent)
        return self.stored_event(chain, "GPU")

    def gpu_evict(self) -> Optional[Any]:
        if not self.leaves:
            return None
        victims = [self.gpu[d] for d in self.leaves.sample(self.rng, self.rng.randint(1, 4))]
        hashes = []
        for b in victims:
            hashes.append(self.wire_hash(b.digest))
            b.copies -= 1
            if b.copies > 0:
                continue
            del self.gpu[b.digest]
            self.gpu_keys.discard(b.digest)
            self.leaves.discard(b.digest)
            self.evicted.append(b.digest)
            if b.parent is not None and b.parent in self.gpu:
                p = self.gpu[b.parent]
                p.children -= 1
                if p.children == 0:
                    self.leaves.add(p.digest)
        return self.emu.wire.removed(hashes, "GPU", None)

    def cpu_event(self) -> Optional[Any]:
        if self.cpu and self.rng.random() < 0.4:
            victims = self.cpu.sample(self.rng, self.rng.randint(1, 3))
            for d in victims:
                self.cpu.discard(d)
            return self.emu.wire.removed([self.wire_hash(d) for d in victims], self.emu.args.cpu_medium, None)
        if self.gpu and self.rng.random() < 0.5:
            # Offload a resident GPU block (the same hash on another medium).
            chain = [self.gpu[self.gpu_keys.sample(self.rng, 1)[0]]]
        else:
            # A chain that only ever lives on the CPU tier.
            chain = self.new_chain(None, self.rng.randint(1, 3), None)
        for b in chain:
            self.cpu.add(b.digest)
        return self.stored_event(chain, self.emu.args.cpu_medium)

    def window_event(self) -> Optional[Any]:
        if self.window and self.rng.random() < 0.3:
            victims = self.window.sample(self.rng, 2)
            for d in victims:
                self.window.discard(d)
            return self.emu.wire.removed([self.wire_hash(d) for d in victims], "GPU", SLIDING_GROUP)
        chain = self.new_chain(None, self.rng.randint(1, 3), None)
        for b in chain:
            self.window.add(b.digest)
        self.window_only.append(chain[-1].digest)
        return self.stored_event(chain, "GPU", SLIDING_GROUP)

    def next_batch(self) -> list:
        a = self.emu.args
        events = []
        for _ in range(self.rng.randint(1, a.max_events)):
            r = self.rng.random()
            if len(self.gpu) >= a.capacity or (self.gpu and r < 0.3):
                ev = self.gpu_evict()
            elif r < 0.3 + a.cpu_fraction and self.emu.wire.has_medium():
                ev = self.cpu_event()
            elif a.hybrid and self.emu.wire.has_groups() and r < 0.3 + a.cpu_fraction + 0.05:
                ev = self.window_event()
            else:
                ev = self.gpu_store()
            if ev is not None:
                events.append(ev)
                self.emu.stats["events_" + type(ev).__name__] += 1
        return events

    # the model

    def chain_of(self, digest: bytes) -> tuple[Optional[str], Optional[str], list[int], int]:
        tokens: list[list[int]] = []
        b = self.known[digest]
        lora, salt = b.lora, b.salt
        while True:
            tokens.append(b.tokens)
            if b.parent is None:
                break
            b = self.known[b.parent]
        tokens.reverse()
        return lora, salt, [t for blk in tokens for t in blk], len(tokens)

    def chain_json(self, digest: bytes) -> dict:
        lora, salt, tokens, n = self.chain_of(digest)
        c = {"lora_name": lora or "", "tokens": tokens, "blocks": n}
        if salt:
            c["extra_keys"] = [[salt]] + [[] for _ in range(n - 1)]
        return c

    def model(self) -> dict:
        resident = []
        for d in self.leaves.items:
            resident.append(self.chain_json(d))
        absent = []
        seen = set()
        others = [d for d in self.cpu.items if d not in self.gpu] + self.window_only[-1000:] + self.evicted[-2000:]
        for d in others:
            if d in self.gpu or d in seen:
                continue
            seen.add(d)
            absent.append(self.chain_json(d))
        resident.sort(key=lambda c: c["tokens"])
        absent.sort(key=lambda c: c["tokens"])
        return {"rank": self.rank, "next_seq": self.seq, "resident_blocks": len(self.gpu),
                "resident": resident, "absent": absent}


# ---- the emulator ----------------------------------------------------------------------------

class Emulator:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ctx = zmq.Context.instance()
        self.wire = Wire(args.wire, args.salt_style)
        self.topic = args.topic.encode()
        self.stats: dict[str, float] = {k: 0 for k in (
            "batches", "dropped_live", "replay_requests", "replayed_batches", "replay_truncated",
            "replay_invalid", "restarts", "duplicate_stores", "events_BlockStored",
            "events_BlockRemoved", "events_AllBlocksCleared")}
        self.ranks = [Rank(self, r) for r in range(args.ranks)]
        self.commands: "queue.Queue[Optional[str]]" = queue.Queue()

    def service(self) -> None:
        for r in self.ranks:
            r.service()

    def pick(self, cmd: dict) -> list[Rank]:
        want = cmd.get("ranks")
        return self.ranks if want is None else [self.ranks[i] for i in want]

    def run(self, cmd: dict) -> dict:
        n = int(cmd.get("batches", 1))
        rate = float(cmd.get("rate", 0))
        drop = set(int(s) for s in cmd.get("drop", []))
        ranks = self.pick(cmd)
        before = sum(self.stats[k] for k in self.stats if k.startswith("events_"))
        start = time.monotonic()
        for i in range(n):
            if rate > 0:
                due = start + i / rate
                while time.monotonic() < due:
                    self.service()
                    time.sleep(min(0.002, max(0.0, due - time.monotonic())))
            elif i % 64 == 0:
                self.service()
            for r in ranks:
                r.publish(r.next_batch(), drop=r.seq in drop)
        self.service()
        elapsed = time.monotonic() - start
        events = sum(self.stats[k] for k in self.stats if k.startswith("events_")) - before
        return {"seq": [r.seq for r in self.ranks], "events": events, "seconds": elapsed,
                "events_per_second": events / elapsed if elapsed > 0 else 0.0}

    def handle(self, line: str) -> tuple[dict, bool]:
        cmd = json.loads(line)
        name = cmd.get("cmd")
        if name == "subscribers":
            self.service()
            return {"subscribers": [r.subscribers for r in self.ranks]}, False
        if name == "run":
            return self.run(cmd), False
        if name == "restart":
            for r in self.pick(cmd):
                r.restart()
            return {"seq": [r.seq for r in self.ranks]}, False
        if name == "clear":
            for r in self.pick(cmd):
                r.clear(bool(cmd.get("drop", False)))
            return {"seq": [r.seq for r in self.ranks]}, False
        if name == "model":
            model = {"block_size": self.args.block_size, "wire": self.args.wire,
                     "hash_format": self.args.hash_format, "lora_name": self.args.lora_name,
                     "lora_id": self.args.lora_id,
                     "ranks": [r.model() for r in self.ranks], "stats": dict(self.stats)}
            with open(cmd["path"], "w") as f:
                json.dump(model, f)
            return {"path": cmd["path"]}, False
        if name == "stats":
            self.service()
            return {"stats": dict(self.stats), "seq": [r.seq for r in self.ranks]}, False
        if name == "stop":
            return {}, True
        raise ValueError(f"unknown command {name!r}")

    def read_stdin(self) -> None:
        for line in sys.stdin:
            if line.strip():
                self.commands.put(line)
        self.commands.put(None)

    def loop(self) -> None:
        threading.Thread(target=self.read_stdin, daemon=True).start()
        linger_until = None
        while True:
            self.service()
            if linger_until is not None:
                if time.monotonic() >= linger_until:
                    return
                time.sleep(0.005)
                continue
            try:
                line = self.commands.get(timeout=0.005)
            except queue.Empty:
                continue
            if line is None:
                linger_until = time.monotonic() + self.args.linger
                continue
            try:
                reply, stop = self.handle(line)
                reply["ok"] = True
            except Exception as e:  # a bad command is answered, never fatal
                reply, stop = {"ok": False, "error": f"{type(e).__name__}: {e}"}, False
            print(json.dumps(reply), flush=True)
            if stop:
                return

    def close(self) -> None:
        for r in self.ranks:
            r.close_sockets()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoint", default="tcp://*:5557", help="PUB endpoint of rank 0 (default %(default)s)")
    p.add_argument("--replay-endpoint", default="tcp://*:5558", help="ROUTER endpoint of rank 0; empty: none")
    p.add_argument("--bind", action="store_true", help="bind the PUB socket whatever the endpoint")
    p.add_argument("--connect", action="store_true", help="connect the PUB socket whatever the endpoint")
    p.add_argument("--topic", default="", help="ZMQ topic frame (default empty)")
    p.add_argument("--ranks", type=int, default=1, help="data-parallel ranks (ports base+rank)")
    p.add_argument("--release", choices=sorted(RELEASES),
                   help="an engine release line: sets --wire, --hash-format, --replay-topic-frame "
                        "and --cpu-medium as that release sends them (later flags still apply)")
    p.add_argument("--wire", choices=("map", "array", "array5", "array6", "array7", "mapevents"), default="map")
    p.add_argument("--hash-format", choices=("int", "signed", "bytes"), default="int")
    p.add_argument("--cpu-medium", default="CPU", help="medium of CPU-tier events (SGLang: CPU_PINNED)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--capacity", type=int, default=512, help="GPU blocks per rank before eviction")
    p.add_argument("--max-events", type=int, default=4, help="events per batch, at most")
    p.add_argument("--lora-name", default="adapter-a")
    p.add_argument("--lora-id", type=int, default=1)
    p.add_argument("--lora-fraction", type=float, default=0.2, help="share of new chains under the LoRA")
    p.add_argument("--salt-fraction", type=float, default=0.0,
                   help="share of new sequences salted with a request's cache salt (0: none)")
    p.add_argument("--salt-style", choices=("vllm", "sglang"),
                   help="how the salt is sent: vllm (the first block's extra keys) or sglang (the "
                        "cache_salt key of every store of the sequence); default: the --release's engine, else vllm")
    p.add_argument("--cpu-fraction", type=float, default=0.1, help="share of events on the CPU tier")
    p.add_argument("--dup-fraction", type=float, default=0.03, help="share of stores that repeat a block")
    p.add_argument("--hybrid", action="store_true", help="also store sliding-window group chains")
    p.add_argument("--buffer-steps", type=int, default=10_000, help="replay buffer, in batches")
    p.add_argument("--hwm", type=int, default=100_000, help="PUB send high-water mark")
    p.add_argument("--replay-hwm", type=int, default=1000,
                   help="ROUTER send high-water mark (libzmq's default, which the engines keep: a "
                        "replay of more batches than this can lose its tail, as theirs can)")
    p.add_argument("--replay-truncate", type=int, default=0,
                   help="the first N replay requests get only their first batch and the end marker")
    p.add_argument("--replay-topic-frame", action="store_true",
                   help="replay replies carry the topic frame (vLLM v0.26.0 and later)")
    p.add_argument("--linger", type=float, default=0.0, help="seconds to serve replay after stdin ends")
    argv = list(sys.argv[1:] if argv is None else argv)
    pre, _ = p.parse_known_args(argv)
    if pre.release:
        r = RELEASES[pre.release]
        p.set_defaults(wire=r["wire"], hash_format=r["hash_format"], cpu_medium=r["cpu_medium"],
                       replay_topic_frame=r["replay_topic_frame"])
    args = p.parse_args(argv)
    if args.bind and args.connect:
        p.error("--bind and --connect exclude each other")
    if args.salt_style is None:
        args.salt_style = "sglang" if (args.release or "").startswith("sglang") else "vllm"
    if args.salt_fraction > 0 and not Wire(args.wire, args.salt_style).carries_salt():
        p.error(f"--salt-fraction: the {args.wire} wire cannot carry a {args.salt_style} cache salt "
                "(vllm: array, map or mapevents, which have extra_keys; sglang: map or mapevents)")
    emu = Emulator(args)
    try:
        print(json.dumps({"ok": True, "ready": True, "ranks": args.ranks}), flush=True)
        emu.loop()
    finally:
        emu.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
