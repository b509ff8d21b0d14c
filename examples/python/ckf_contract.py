"""The parts of the ckf-stream wire contract that both examples share.

Everything here is written down in docs/producers-and-routers.md; the schemas are read from the
repository's own .avsc files (schemas/), never copied.
"""

import json
import struct
from pathlib import Path

import fastavro
import xxhash

# The repository root, two levels above this file (examples/python/).
REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO_ROOT / "schemas"

# Built-in schema ids (schemas/README.md, "Schema ids"): 0x434B0000 | version << 8 | record type.
# The processes write these when no schema registry is configured; with a registry they write
# the ids the registry assigned, which a client must then look up there.
BUILTIN_ID_QUERY_REQUEST = 0x434B0102
BUILTIN_ID_QUERY_REPLY = 0x434B0103
BUILTIN_ID_KV_EVENT = 0x434B0107

# XXH3-64 seed of the sequence chain and of unsalted token blocks (producer §2.2).
CHAIN_SEED = 1337

U64 = 1 << 64


# Exit statuses of the examples, one meaning each (router.py uses all of them, producer.py the
# ones that can happen to it). argparse exits 2 on a usage error; EXIT_USAGE is the same status
# for the usage errors the scripts find themselves.
EXIT_OK = 0
EXIT_TIMEOUT = 1  # no reply (router) or no delivery report (producer) within --timeout
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3  # the reply's status is UNAVAILABLE: no requested lane was ready
EXIT_INVALID_REQUEST = 4  # the reply's status is INVALID_REQUEST: the indexer refused the request
EXIT_SCHEMA = 5  # a schema or record this client cannot read or look up (registry, schema id, body)
EXIT_KAFKA = 6  # Kafka refused: broker unreachable, topic missing, no partitions, delivery failed


def schema_text(file_name, schema_dir=SCHEMA_DIR):
    """The text of one .avsc file of the contract, as the processes embed it (and register it)."""
    with open(Path(schema_dir) / file_name, encoding="utf-8") as f:
        return f.read()


def load_schema(file_name, schema_dir=SCHEMA_DIR):
    """Parses one .avsc file of the contract with fastavro."""
    return fastavro.parse_schema(json.loads(schema_text(file_name, schema_dir)))


def frame(schema_id, body):
    """Confluent framing: magic byte 0, the schema id as a big-endian u32, the Avro body."""
    return struct.pack(">bI", 0, schema_id) + body


def unframe(value):
    """Splits a Confluent-framed value into (schema id, Avro body); raises ValueError otherwise."""
    if len(value) < 5 or value[0] != 0:
        raise ValueError("not a Confluent-framed value (magic byte 0 and a 4-byte schema id)")
    return struct.unpack(">I", value[1:5])[0], value[5:]


def to_long(u64):
    """An unsigned 64-bit value as the Avro long holding the same bits (two's complement)."""
    if not 0 <= u64 < U64:
        raise ValueError(f"{u64} is not an unsigned 64-bit value")
    return u64 - U64 if u64 >= 1 << 63 else u64


def from_long(long_value):
    """The unsigned 64-bit value whose bits an Avro long holds."""
    return long_value % U64


def salt_seed(lora_name="", cache_namespace=""):
    """The token-block hash seed: 1337, plus XXH3-64(lora_name, seed 0) when it is not empty,
    plus XXH3-64(cache_namespace, seed 1) when it is not empty, wrapping at 2^64."""
    seed = CHAIN_SEED
    if lora_name:
        seed += xxhash.xxh3_64_intdigest(lora_name.encode("utf-8"), seed=0)
    if cache_namespace:
        seed += xxhash.xxh3_64_intdigest(cache_namespace.encode("utf-8"), seed=1)
    return seed % U64


def local_block_hashes(tokens, block_size, lora_name="", cache_namespace=""):
    """One tokens_hash per full block: XXH3-64 of the block's token ids packed as little-endian
    u32, with the salt seed. A trailing partial block is dropped."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    seed = salt_seed(lora_name, cache_namespace)
    out = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tokens[start:start + block_size]
        out.append(xxhash.xxh3_64_intdigest(struct.pack(f"<{block_size}I", *block), seed=seed))
    return out


def extra_value_encoding(value):
    """The canonical encoding of one extra-key value (producer §2.2, "Extra keys"): a type tag,
    then the value, little-endian. JSON's forms are accepted: null, booleans, integers, floats,
    strings, lists (tuples), and {"bytes": "<hex>"} for a byte string."""
    if value is None:
        return b"\x00"
    if isinstance(value, bool):
        return b"\x01" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        if -(1 << 63) <= value < 1 << 63:
            return b"\x02" + struct.pack("<q", value)
        if value < U64:
            return b"\x03" + struct.pack("<Q", value)
        raise ValueError(f"extra key {value} is outside [-2^63, 2^64)")
    if isinstance(value, float):
        return b"\x04" + struct.pack("<d", value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return b"\x05" + struct.pack("<I", len(raw)) + raw
    if isinstance(value, (bytes, bytearray)):
        return b"\x06" + struct.pack("<I", len(value)) + bytes(value)
    if isinstance(value, dict) and set(value) == {"bytes"}:
        return extra_value_encoding(bytes.fromhex(value["bytes"]))
    if isinstance(value, (list, tuple)):
        return b"\x07" + struct.pack("<I", len(value)) + b"".join(extra_value_encoding(v) for v in value)
    raise ValueError(f"{value!r} is not an extra-key value")


def block_extra_keys(blocks):
    """QueryRequest.block_extra_keys for a list of the blocks' keys (entry i for block i; None or
    an empty list for a block without): each block's keys as one tuple in the canonical encoding,
    the bytes the local hash appends after the block's tokens; empty bytes for a block without.
    None when no block has keys."""
    if not blocks or not any(blocks):
        return None
    return [extra_value_encoding(list(keys)) if keys else b"" for keys in blocks]


def local_block_hashes_extra(tokens, block_size, blocks, lora_name="", cache_namespace=""):
    """local_block_hashes with per-block extra keys: a block whose keys are not empty is hashed
    over its packed tokens followed by the keys' canonical encoding (producer §2.2)."""
    encoded = block_extra_keys(blocks) or []
    seed = salt_seed(lora_name, cache_namespace)
    out = []
    for i, start in enumerate(range(0, len(tokens) - block_size + 1, block_size)):
        data = struct.pack(f"<{block_size}I", *tokens[start:start + block_size])
        if i < len(encoded):
            data += encoded[i]
        out.append(xxhash.xxh3_64_intdigest(data, seed=seed))
    return out


def sequence_hashes(local):
    """The canonical chain the relay computes from a store's tokens_hash values (informative: a
    producer sends local hashes, never canonical ones)."""
    out = []
    for h in local:
        if not out:
            out.append(h)
        else:
            out.append(xxhash.xxh3_64_intdigest(struct.pack("<QQ", out[-1], h), seed=CHAIN_SEED))
    return out


def parse_ints(text, bits):
    """Comma-separated unsigned integers (decimal or 0x hex) that fit in `bits` bits."""
    values = [int(part, 0) for part in text.split(",") if part.strip()]
    for v in values:
        if not 0 <= v < 1 << bits:
            raise ValueError(f"{v} is not an unsigned {bits}-bit integer")
    return values
