#!/usr/bin/env python3
"""A minimal engine-side producer: KV-cache store events for one worker, written as Avro KvEvent
records to its DC's KV-events topic (the topics.kv_events of that DC's relay).

    python producer.py --bootstrap 127.0.0.1:9092 --topic kv-events.dc-a1 \\
        --worker-id 7 --block-size 4 --tokens 1,2,3,4,5,6,7,8

The token ids are cut into blocks and hashed as the contract says (docs/producers-and-routers.md);
--blocks-per-event splits the blocks over several events, each after the first naming the last
block of the one before as its parent_hash. With --print-hashes it only prints the hashes as JSON.
"""

import argparse
import io
import json
import sys

import fastavro
from confluent_kafka import Producer

import ckf_contract as cc


def kv_stored_events(worker_id, local_hashes, blocks_per_event, first_block_id):
    """KvEvent records (as fastavro dicts) that store the blocks in order. Each block gets the
    engine id first_block_id + its index: engine ids are opaque to the filter, only removals and
    parent_hash refer to them."""
    per_event = blocks_per_event or len(local_hashes)
    events = []
    for start in range(0, len(local_hashes), per_event):
        chunk = local_hashes[start:start + per_event]
        parent = None if start == 0 else cc.to_long(first_block_id + start - 1)
        events.append({
            "worker_id": cc.to_long(worker_id),
            "dp_rank": 0,
            "event_id": cc.to_long(len(events) + 1),
            "storage_tier": "DEVICE",  # only DEVICE stores reach the filter
            "residency_domain": None,
            "data": ("io.ckfstream.v1.KvStored", {
                "parent_hash": parent,
                "start_position": start,
                "blocks": [{"block_hash": cc.to_long(first_block_id + start + i), "tokens_hash": cc.to_long(h)}
                           for i, h in enumerate(chunk)],
                "shared_cache_eligible": False,
            }),
        })
    return events


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    ap.add_argument("--topic", default="kv-events", help="the DC's KV-events topic (its relay's topics.kv_events)")
    ap.add_argument("--worker-id", type=lambda s: int(s, 0), default=1, help="engine worker id (u64)")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids (u32)")
    ap.add_argument("--block-size", type=int, required=True, help="tokens per KV block")
    ap.add_argument("--lora", default="", help="LoRA adapter name salting the blocks")
    ap.add_argument("--namespace", default="", help="cache namespace salting the blocks")
    ap.add_argument("--blocks-per-event", type=int, default=0, help="blocks per KvStored event (0: all in one)")
    ap.add_argument("--first-block-id", type=lambda s: int(s, 0), default=1, help="engine id of the first block")
    ap.add_argument("--schema-id", type=lambda s: int(s, 0), default=cc.BUILTIN_ID_KV_EVENT,
                    help="schema id on the wire (default: the built-in id; a registry assigns its own)")
    ap.add_argument("--schemas", default=str(cc.SCHEMA_DIR), help="directory of the .avsc files")
    ap.add_argument("--print-hashes", action="store_true", help="print the hashes as JSON and send nothing")
    args = ap.parse_args()

    tokens = cc.parse_ints(args.tokens, 32)
    local = cc.local_block_hashes(tokens, args.block_size, args.lora, args.namespace)
    if args.print_hashes:
        print(json.dumps({
            "salt_seed": cc.salt_seed(args.lora, args.namespace),
            "local_block_hashes": local,
            "canonical_hashes": cc.sequence_hashes(local),
        }))
        return 0
    if not local:
        print("producer: fewer tokens than one block: nothing to store", file=sys.stderr)
        return 2

    schema = cc.load_schema("kv_event.avsc", args.schemas)
    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(f"{msg.topic()}: {err}")

    # Key: the worker id in decimal, so every event of one worker (and so of each of its
    # (worker_id, dp_rank) sources) lands on one partition and stays in order.
    key = str(args.worker_id).encode("ascii")
    for event in kv_stored_events(args.worker_id, local, args.blocks_per_event, args.first_block_id):
        body = io.BytesIO()
        fastavro.schemaless_writer(body, schema, event)
        producer.produce(args.topic, key=key, value=cc.frame(args.schema_id, body.getvalue()), on_delivery=delivered)
    left = producer.flush(30)
    if left or failures:
        print(f"producer: {left} events undelivered; failures: {failures}", file=sys.stderr)
        return 1
    print(json.dumps({"topic": args.topic, "key": key.decode(), "blocks": len(local), "local_block_hashes": local}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
