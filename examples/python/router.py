#!/usr/bin/env python3
"""A minimal router: one prefix-match QueryRequest over Kafka, and its QueryReply found by
correlation id, printed as JSON.

    python router.py --bootstrap 127.0.0.1:9092 --block-size 4 --tokens 1,2,3,4,5,6,7,8

The router reads one partition of the reply topic from its end and asks the indexer to reply
there (reply_partition), so it needs no consumer group; the reply is keyed by the correlation id.
A request not answered within --attempt-timeout is sent again with a new correlation id (its
partition may belong to a replica that died, whose partitions move only after the query group's
session timeout, indexer.query_session_timeout); the first reply to any of the ids sent wins, and
later ones are ignored. Exit status: 0 for an OK reply, 3 for UNAVAILABLE or INVALID_REQUEST, 1
when no reply came within --timeout.
"""

import argparse
import datetime
import io
import json
import random
import struct
import sys
import time
import uuid

import fastavro
from confluent_kafka import Consumer, Producer, TopicPartition

import ckf_contract as cc


def request_record(correlation_id, args, reply_partition):
    if args.hashes:
        hashes = cc.parse_ints(args.hashes, 64)
        query_input = ("io.ckfstream.v1.LocalBlockHashes", {"hashes": struct.pack(f"<{len(hashes)}Q", *hashes)})
    else:
        tokens = cc.parse_ints(args.tokens, 32)
        query_input = ("io.ckfstream.v1.TokenIds", {
            "tokens": struct.pack(f"<{len(tokens)}I", *tokens),
            "block_size": args.block_size,
            "lora_name": args.lora or None,
            "cache_namespace": args.namespace or None,
        })
    return {
        "correlation_id": correlation_id,
        "input": query_input,
        "lane_mask": None,  # every lane
        "reply_topic": None,  # the indexers' configured reply topic (topics.query_replies)
        "reply_partition": reply_partition,
        "request_time": datetime.datetime.now(datetime.timezone.utc),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    ap.add_argument("--request-topic", default="ckf-queries", help="the indexers' topics.queries")
    ap.add_argument("--reply-topic", default="ckf-query-replies", help="the indexers' topics.query_replies")
    ap.add_argument("--tokens", help="comma-separated token ids (u32); the indexer hashes them")
    ap.add_argument("--block-size", type=int, default=0, help="tokens per KV block, with --tokens")
    ap.add_argument("--lora", default="", help="LoRA adapter name, with --tokens")
    ap.add_argument("--namespace", default="", help="cache namespace, with --tokens")
    ap.add_argument("--hashes", help="comma-separated local block hashes (u64) instead of --tokens")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the reply, resends included")
    ap.add_argument("--attempt-timeout", type=float, default=2.0,
                    help="seconds to wait before sending the request again with a new correlation id")
    ap.add_argument("--schemas", default=str(cc.SCHEMA_DIR), help="directory of the .avsc files")
    args = ap.parse_args()
    if bool(args.tokens) == bool(args.hashes):
        ap.error("give --tokens (with --block-size) or --hashes")
    if args.tokens and args.block_size < 1:
        ap.error("--block-size is required with --tokens")

    request_schema = cc.load_schema("query_request.avsc", args.schemas)
    reply_schema = cc.load_schema("query_reply.avsc", args.schemas)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "unused-" + uuid.uuid4().hex,
                         "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0})
    try:
        # One reply partition, read from its current end: every reply to the request comes after.
        meta = consumer.list_topics(args.reply_topic, timeout=args.timeout)
        partitions = sorted(meta.topics[args.reply_topic].partitions)
        if not partitions:
            print(f"router: reply topic {args.reply_topic} has no partitions", file=sys.stderr)
            return 1
        partition = random.choice(partitions)
        _, end = consumer.get_watermark_offsets(TopicPartition(args.reply_topic, partition), timeout=args.timeout)
        consumer.assign([TopicPartition(args.reply_topic, partition, end)])

        def send():
            correlation_id = uuid.uuid4().hex
            body = io.BytesIO()
            fastavro.schemaless_writer(body, request_schema, request_record(correlation_id, args, partition))
            producer.produce(args.request_topic, key=correlation_id.encode("utf-8"),
                             value=cc.frame(cc.BUILTIN_ID_QUERY_REQUEST, body.getvalue()))
            return correlation_id, producer.flush(args.attempt_timeout) == 0

        sent = []  # every correlation id sent; a reply to any of them answers the query
        deadline = time.monotonic() + args.timeout
        resend_at = deadline
        while time.monotonic() < deadline:
            if time.monotonic() >= resend_at or not sent:
                correlation_id, delivered = send()
                if sent:
                    print(f"router: no reply to {sent[-1]} within {args.attempt_timeout}s; sent again as {correlation_id}",
                          file=sys.stderr)
                if not delivered:
                    print(f"router: request {correlation_id} not delivered yet", file=sys.stderr)
                sent.append(correlation_id)
                resend_at = min(deadline, time.monotonic() + args.attempt_timeout)
            msg = consumer.poll(min(0.5, max(0.0, min(deadline, resend_at) - time.monotonic())))
            if msg is None or msg.error() is not None or msg.key() is None or msg.key().decode("utf-8", "replace") not in sent:
                continue  # other routers' replies share the partition
            schema_id, avro_body = cc.unframe(msg.value())
            if schema_id != cc.BUILTIN_ID_QUERY_REPLY:
                print(f"router: reply schema id {schema_id:#x} is not the built-in one: "
                      "look it up in the schema registry", file=sys.stderr)
                return 1
            reply = fastavro.schemaless_reader(io.BytesIO(avro_body), reply_schema)
            print(json.dumps({
                "correlation_id": reply["correlation_id"],
                "attempts": len(sent),
                "status": reply["status"],
                "error_message": reply["error_message"],
                "ready_lanes": reply["ready_lanes"],
                # lanes whose DC's filter omits blocks for capacity: their depth may be short
                "incomplete_lanes": reply["incomplete_lanes"],
                "query_blocks": reply["query_blocks"],
                "lanes": [{"lane": m["lane"], "dc_id": cc.from_long(m["dc_id"]), "pool": m["pool"], "depth": m["depth"]}
                          for m in reply["lanes"]],
            }))
            return 0 if reply["status"] == "OK" else 3
        print(f"router: no reply to any of {len(sent)} attempts ({', '.join(sent)}) within {args.timeout}s", file=sys.stderr)
        return 1
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
