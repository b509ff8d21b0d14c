"""Writes the engine-shaped batch payloads the Go decoder tests read (testdata/shapes/*.msgpack).

Each shape is encoded by msgspec from struct definitions that mirror the field order and the
encoder options (array_like, omit_defaults, tag) of one engine version, as bridge/README.md
describes them. Run: python3 gen_shapes.py (needs msgspec); commit the output.
"""

import os
from typing import Any, Optional, Union

import msgspec

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shapes")
TOKENS = list(range(100, 108))  # two blocks of 4


def write(name: str, payload: bytes) -> None:
    with open(os.path.join(OUT, name + ".msgpack"), "wb") as f:
        f.write(payload)


# Recent vLLM: map form, bytes hashes, every optional field.
class MapBatch(msgspec.Struct, omit_defaults=True):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class MapEvent(msgspec.Struct, omit_defaults=True, tag=True):
    pass


class MStored(MapEvent, tag="BlockStored"):
    block_hashes: list[Union[bytes, int]]
    parent_block_hash: Optional[Union[bytes, int]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list[Optional[list[Any]]]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None


class MStoredFuture(MStored, tag="BlockStored"):
    some_future_field: Optional[str] = None


class MRemoved(MapEvent, tag="BlockRemoved"):
    block_hashes: list[Union[bytes, int]]
    medium: Optional[str]
    group_idx: Optional[int] = None


class MCleared(MapEvent, tag="AllBlocksCleared"):
    pass


class MUnknown(MapEvent, tag="BlockMoved"):
    block_hashes: list[int]


h1, h2, h0 = b"\x01" * 32, b"\x02" * 32, b"\x00" * 32
write("vllm_map_bytes", msgspec.msgpack.encode(MapBatch(ts=1.5, data_parallel_rank=2, events=[
    MStored(block_hashes=[h1, h2], parent_block_hash=h0, token_ids=TOKENS, block_size=4, lora_id=None,
            medium="GPU", lora_name="adapter-a", extra_keys=[None, ["salt"]], group_idx=0,
            kv_cache_spec_kind="full_attention"),
    MStored(block_hashes=[h1], parent_block_hash=None, token_ids=TOKENS[:4], block_size=4, lora_id=None,
            medium="GPU", lora_name=None, group_idx=1, kv_cache_spec_kind="sliding_window",
            kv_cache_spec_sliding_window=128),
    MRemoved(block_hashes=[h2], medium="CPU", group_idx=0),
    MCleared(),
])))
write("vllm_map_future_fields", msgspec.msgpack.encode(MapBatch(ts=2.0, events=[
    MStoredFuture(block_hashes=[7, 8], parent_block_hash=None, token_ids=TOKENS, block_size=4, lora_id=3,
                  medium=None, lora_name=None, some_future_field="x"),
])))
write("unknown_event", msgspec.msgpack.encode(MapBatch(ts=2.0, events=[MUnknown(block_hashes=[1])])))


# Older vLLM: array form, integer hashes, the batch carries the rank.
class ArrBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class ArrEvent(msgspec.Struct, array_like=True, omit_defaults=True, tag=True):
    pass


class AStored(ArrEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str] = None
    extra_keys: Optional[list[Any]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None
    trailing_a: Optional[int] = None
    trailing_b: Optional[str] = None


class ARemoved(ArrEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: Optional[str]


class ACleared(ArrEvent, tag="AllBlocksCleared"):
    pass


write("vllm_array_ints", msgspec.msgpack.encode(ArrBatch(ts=3.25, data_parallel_rank=1, events=[
    AStored(block_hashes=[-5, 2**63 + 9], parent_block_hash=-1, token_ids=TOKENS, block_size=4, lora_id=None,
            medium="GPU"),
    ARemoved(block_hashes=[-5], medium="GPU"),
    ACleared(),
])))
write("vllm_array_trailing", msgspec.msgpack.encode(ArrBatch(ts=4.0, events=[
    AStored(block_hashes=[11], parent_block_hash=None, token_ids=TOKENS[:4], block_size=4, lora_id=None,
            medium="GPU", lora_name="a", group_idx=0, kv_cache_spec_kind="full_attention", trailing_a=1,
            trailing_b="later version"),
])))


# SGLang: array form, five-field BlockStored, no rank in the batch.
class SBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[Any]


class SStored(ArrEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]


class SRemoved(ArrEvent, tag="BlockRemoved"):
    block_hashes: list[int]


write("sglang_array", msgspec.msgpack.encode(SBatch(ts=5.0, events=[
    SStored(block_hashes=[21, 22], parent_block_hash=20, token_ids=TOKENS, block_size=4, lora_id=None),
    SRemoved(block_hashes=[21, 22]),
    ACleared(),
])))
