#!/usr/bin/env python3
"""A minimal engine-side producer: KV-cache store events for one worker, written as Avro KvEvent
records to its DC's KV-events topic (the topics.kv_events of that DC's relay).

    python producer.py --bootstrap 127.0.0.1:9092 --topic kv-events.dc-a1 \\
        --worker-id 7 --block-size 4 --tokens 1,2,3,4,5,6,7,8

The token ids are cut into blocks and hashed as the contract says (docs/producers-and-routers.md);
--blocks-per-event splits the blocks over several events, each after the first naming the last
block of the one before as its parent_hash. With --print-hashes it only prints the hashes as JSON.

With a schema registry (--registry, as the processes' schema_registry.urls) each event carries the
id the registry holds for schemas/kv_event.avsc under the subject "<topic>-value" (the relay
registers it there when it starts); without one, the built-in id.

Exit status, one meaning each (the router's numbering; 3 and 4 belong to replies):
  0  every event delivered (a JSON summary is printed)
  1  not every event acknowledged within --timeout
  2  usage: a flag missing, malformed or contradictory, or fewer tokens than one block
  5  the schema id cannot be had: the registry unreachable or refusing, the subject without
     the schema
  6  Kafka failed: broker unreachable, the topic missing or without partitions, an event
     refused
"""

import argparse
import io
import json
import sys

import fastavro
from confluent_kafka import KafkaException, Producer

import ckf_contract as cc
import ckf_registry


def kv_stored_events(worker_id, local_hashes, blocks_per_event, first_block_id, block_size):
    """KvEvent records (as fastavro dicts) that store the blocks in order. Each block gets the
    engine id first_block_id + its index: engine ids are opaque to the filter, only removals and
    parent_hash refer to them. Each event carries the engine's block size: the relay stamps it on
    its lane, and the indexer refuses token queries of another size (consumer §6.5)."""
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
                "block_size": block_size,
            }),
        })
    return events


def fail(status, message):
    """Prints one line to stderr and returns the exit status."""
    print("producer: " + message, file=sys.stderr)
    return status


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
    ap.add_argument("--schema-id", type=lambda s: int(s, 0), default=None,
                    help="schema id on the wire (default: the registry's id with --registry, else the built-in id)")
    ap.add_argument("--schemas", default=str(cc.SCHEMA_DIR), help="directory of the .avsc files")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every event to be acknowledged")
    ap.add_argument("--print-hashes", action="store_true", help="print the hashes as JSON and send nothing")
    ckf_registry.add_arguments(ap)
    args = ap.parse_args()
    if args.block_size < 1:
        ap.error("--block-size must be at least 1")
    try:
        tokens = cc.parse_ints(args.tokens, 32)
        registry = ckf_registry.from_args(args, timeout=min(10.0, args.timeout))
    except (ValueError, ckf_registry.RegistryError) as e:
        ap.error(str(e))

    local = cc.local_block_hashes(tokens, args.block_size, args.lora, args.namespace)
    if args.print_hashes:
        print(json.dumps({
            "salt_seed": cc.salt_seed(args.lora, args.namespace),
            "local_block_hashes": local,
            "canonical_hashes": cc.sequence_hashes(local),
        }))
        return cc.EXIT_OK
    if not local:
        return fail(cc.EXIT_USAGE, "fewer tokens than one block: nothing to store")

    schema = cc.load_schema("kv_event.avsc", args.schemas)
    schema_id = args.schema_id
    if schema_id is None and registry is not None:
        # The id the relay's registry holds for this schema under the KV-events topic.
        try:
            schema_id = registry.lookup_id(args.topic + "-value", cc.schema_text("kv_event.avsc", args.schemas))
        except ckf_registry.RegistryError as e:
            return fail(cc.EXIT_SCHEMA, str(e))
    if schema_id is None:
        schema_id = cc.BUILTIN_ID_KV_EVENT

    # No topic is created by this producer (a missing topic is a wrong name or a relay not yet
    # started), and an event not delivered within --timeout is reported as failed.
    producer = Producer({"bootstrap.servers": args.bootstrap, "enable.idempotence": True, "linger.ms": 0,
                         "allow.auto.create.topics": False, "message.timeout.ms": max(1, int(args.timeout * 1000))})
    try:
        meta = producer.list_topics(args.topic, timeout=args.timeout)
    except KafkaException as e:
        return fail(cc.EXIT_KAFKA, f"Kafka metadata for topic {args.topic}: {e.args[0].str()}")
    topic = meta.topics.get(args.topic)
    if topic is None or topic.error is not None or not topic.partitions:
        reason = "no answer" if topic is None else topic.error.str() if topic.error is not None else "no partitions"
        return fail(cc.EXIT_KAFKA, f"topic {args.topic}: {reason}")

    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(f"event to {msg.topic()} not delivered: {err.str()}")

    # Key: the worker id in decimal, so every event of one worker (and so of each of its
    # (worker_id, dp_rank) sources) lands on one partition and stays in order.
    key = str(args.worker_id).encode("ascii")
    for event in kv_stored_events(args.worker_id, local, args.blocks_per_event, args.first_block_id, args.block_size):
        body = io.BytesIO()
        fastavro.schemaless_writer(body, schema, event)
        producer.produce(args.topic, key=key, value=cc.frame(schema_id, body.getvalue()), on_delivery=delivered)
    left = producer.flush(args.timeout)
    if failures:
        return fail(cc.EXIT_KAFKA, f"{len(failures)} events refused, {left} unacknowledged; first: {failures[0]}")
    if left:
        return fail(cc.EXIT_TIMEOUT, f"{left} events not acknowledged within {args.timeout}s")
    print(json.dumps({"topic": args.topic, "key": key.decode(), "schema_id": schema_id, "blocks": len(local),
                      "local_block_hashes": local}))
    return cc.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
