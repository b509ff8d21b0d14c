#!/usr/bin/env python3
"""A minimal router: one prefix-match QueryRequest over Kafka, and its QueryReply found by
correlation id, printed as JSON.

    python router.py --bootstrap 127.0.0.1:9092 --block-size 4 --tokens 1,2,3,4,5,6,7,8

The router reads one partition of the reply topic from its end and asks the indexer to reply
there (reply_partition), so it needs no consumer group; the reply is keyed by the correlation id.
A request not answered within --attempt-timeout is sent again with a new correlation id (its
partition may belong to a replica that died, whose partitions move only after the query group's
session timeout, indexer.query_session_timeout); the first reply to any of the ids sent wins, and
later ones are ignored.

With a schema registry (--registry, as the processes' schema_registry.urls) the request carries
the id the registry holds for schemas/query_request.avsc under the subject "<request topic>-value"
(the relay and the indexer register it there when they start), and a reply's schema id is looked
up in the registry and resolved to schemas/query_reply.avsc. Without one, the request carries the
built-in id and a reply with any other id is refused (exit status 5).

Exit status, one meaning each:
  0  the reply's status is OK (printed)
  1  no reply within --timeout, resends included
  2  usage: a flag missing, malformed or contradictory
  3  the reply's status is UNAVAILABLE: no requested lane was ready (printed)
  4  the reply's status is INVALID_REQUEST: the indexer refused the request (printed)
  5  a schema or reply this router cannot read: the registry unreachable or refusing, the
     request's subject without the schema, a reply schema id unknown (or not the built-in one
     without --registry), a reply body that does not decode
  6  Kafka failed: broker unreachable, a topic missing or without partitions, a request not
     delivered
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
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import ckf_contract as cc
import ckf_registry


def lane_mask(lanes):
    """The request's lane_mask: bit i for each physical lane i listed, or None (every lane)."""
    if not lanes:
        return None
    mask = 0
    for lane in cc.parse_ints(lanes, 4):  # physical lanes 0..15
        mask |= 1 << lane
    return mask


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
        "lane_mask": lane_mask(args.lanes),
        "reply_topic": None,  # the indexers' configured reply topic (topics.query_replies)
        "reply_partition": reply_partition,
        "request_time": datetime.datetime.now(datetime.timezone.utc),
        # lanes older than this many milliseconds are answered STALE, without a depth
        "max_age_ms": args.max_age_ms,
        # each block's extra keys (images, a cache salt) in their canonical encoding, or None
        "block_extra_keys": cc.block_extra_keys(blocks_extra_keys(args)) if args.tokens else None,
    }


def blocks_extra_keys(args):
    """The blocks' extra keys from --extra-keys (JSON, entry i for block i) with --cache-salt
    appended to the first block's keys, where vLLM puts a request's cache_salt and the bridge
    puts SGLang's."""
    blocks = json.loads(args.extra_keys) if args.extra_keys else []
    if not isinstance(blocks, list) or not all(k is None or isinstance(k, list) for k in blocks):
        raise ValueError("give a JSON list with one list (or null) per block")
    blocks = [k or [] for k in blocks]
    if args.cache_salt:
        if not blocks:
            blocks = [[]]
        blocks[0] = blocks[0] + [args.cache_salt]
    return blocks


def fail(status, message):
    """Prints one line to stderr and returns the exit status."""
    print("router: " + message, file=sys.stderr)
    return status


def topic_partitions(consumer, topic, timeout):
    """The sorted partitions of topic; raises LookupError with a one-line reason when the broker
    cannot answer, the topic does not exist or has no partitions."""
    try:
        meta = consumer.list_topics(topic, timeout=timeout)
    except KafkaException as e:
        raise LookupError(f"Kafka metadata for topic {topic}: {e.args[0].str()}") from None
    t = meta.topics.get(topic)
    if t is None or t.error is not None:
        reason = "no answer" if t is None else t.error.str()
        raise LookupError(f"topic {topic}: {reason}")
    if not t.partitions:
        raise LookupError(f"topic {topic} has no partitions")
    return sorted(t.partitions)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    ap.add_argument("--request-topic", default="ckf-queries", help="the indexers' topics.queries")
    ap.add_argument("--reply-topic", default="ckf-query-replies", help="the indexers' topics.query_replies")
    ap.add_argument("--tokens", help="comma-separated token ids (u32); the indexer hashes them")
    ap.add_argument("--block-size", type=int, default=0, help="tokens per KV block, with --tokens")
    ap.add_argument("--lora", default="", help="LoRA adapter name, with --tokens")
    ap.add_argument("--namespace", default="", help="cache namespace, with --tokens")
    ap.add_argument("--extra-keys", default="",
                    help="with --tokens: the blocks' extra keys as JSON, entry i for block i (null for none), "
                         "as the HTTP API's block_extra_keys, e.g. '[[[\"img-a\",1],\"salt-1\"],[[\"img-a\",-3]]]'")
    ap.add_argument("--cache-salt", default="", help="with --tokens: the request's cache salt (the first block's extra key)")
    ap.add_argument("--hashes", help="comma-separated local block hashes (u64) instead of --tokens")
    ap.add_argument("--lanes", default="", help="comma-separated physical lanes (0..15) to search (default: every lane)")
    ap.add_argument("--max-age-ms", type=int, default=None,
                    help="answer lanes older than this many milliseconds STALE, without a depth (default: any age)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the reply, resends included")
    ap.add_argument("--attempt-timeout", type=float, default=2.0,
                    help="seconds to wait before sending the request again with a new correlation id")
    ap.add_argument("--schemas", default=str(cc.SCHEMA_DIR), help="directory of the .avsc files")
    ckf_registry.add_arguments(ap)
    args = ap.parse_args()
    if bool(args.tokens) == bool(args.hashes):
        ap.error("give --tokens (with --block-size) or --hashes")
    if args.tokens and args.block_size < 1:
        ap.error("--block-size is required with --tokens")
    if args.max_age_ms is not None and args.max_age_ms < 0:
        ap.error("--max-age-ms must not be negative")
    if args.hashes and (args.extra_keys or args.cache_salt):
        ap.error("--extra-keys and --cache-salt go with --tokens")
    try:
        cc.parse_ints(args.tokens or args.hashes, 32 if args.tokens else 64)
    except ValueError as e:
        ap.error(f"{'--tokens' if args.tokens else '--hashes'}: {e}")
    if args.tokens:
        try:
            blocks = blocks_extra_keys(args)
            cc.block_extra_keys(blocks)
        except (ValueError, TypeError) as e:
            ap.error(f"--extra-keys: {e}")
        windows = -(-len(cc.parse_ints(args.tokens, 32)) // args.block_size) if args.block_size > 0 else 0
        if len(blocks) > windows:
            ap.error(f"--extra-keys: {len(blocks)} entries for {windows} blocks (at most one per block)")
    try:
        lane_mask(args.lanes)
    except ValueError as e:
        ap.error(f"--lanes: {e}")
    try:
        registry = ckf_registry.from_args(args, timeout=min(10.0, args.timeout))
    except ckf_registry.RegistryError as e:
        ap.error(f"--registry: {e}")

    request_schema = cc.load_schema("query_request.avsc", args.schemas)
    reader = ckf_registry.Reader(cc.load_schema("query_reply.avsc", args.schemas), cc.BUILTIN_ID_QUERY_REPLY, registry,
                                 what="reply")
    request_id = cc.BUILTIN_ID_QUERY_REQUEST
    if registry is not None:
        # The id the indexers' registry holds for this request schema under the request topic.
        try:
            request_id = registry.lookup_id(args.request_topic + "-value", cc.schema_text("query_request.avsc", args.schemas))
        except ckf_registry.RegistryError as e:
            return fail(cc.EXIT_SCHEMA, str(e))

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "unused-" + uuid.uuid4().hex,
                         "enable.auto.commit": False})
    failures = []  # delivery reports of requests that were not delivered

    def delivered(err, msg):
        if err is not None:
            failures.append(f"request to {msg.topic()} not delivered: {err.str()}")

    # A request not delivered within --timeout is reported as failed rather than kept queued.
    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 0,
                         "message.timeout.ms": max(1, int(args.timeout * 1000))})
    try:
        try:
            topic_partitions(consumer, args.request_topic, args.timeout)
            partitions = topic_partitions(consumer, args.reply_topic, args.timeout)
        except LookupError as e:
            return fail(cc.EXIT_KAFKA, str(e))
        # One reply partition, read from its current end: every reply to the request comes after.
        partition = random.choice(partitions)
        try:
            _, end = consumer.get_watermark_offsets(TopicPartition(args.reply_topic, partition), timeout=args.timeout)
        except KafkaException as e:
            return fail(cc.EXIT_KAFKA, f"end offset of {args.reply_topic} partition {partition}: {e.args[0].str()}")
        consumer.assign([TopicPartition(args.reply_topic, partition, end)])

        def send():
            correlation_id = uuid.uuid4().hex
            body = io.BytesIO()
            fastavro.schemaless_writer(body, request_schema, request_record(correlation_id, args, partition))
            producer.produce(args.request_topic, key=correlation_id.encode("utf-8"),
                             value=cc.frame(request_id, body.getvalue()), on_delivery=delivered)
            return correlation_id, producer.flush(args.attempt_timeout) == 0

        sent = []  # every correlation id sent; a reply to any of them answers the query
        deadline = time.monotonic() + args.timeout
        resend_at = deadline
        while time.monotonic() < deadline:
            if time.monotonic() >= resend_at or not sent:
                correlation_id, delivered_now = send()
                if sent:
                    print(f"router: no reply to {sent[-1]} within {args.attempt_timeout}s; sent again as {correlation_id}",
                          file=sys.stderr)
                if not delivered_now and not failures:
                    print(f"router: request {correlation_id} not delivered yet", file=sys.stderr)
                sent.append(correlation_id)
                resend_at = min(deadline, time.monotonic() + args.attempt_timeout)
            producer.poll(0)  # delivery reports of earlier sends
            if failures:
                return fail(cc.EXIT_KAFKA, failures[0])
            msg = consumer.poll(min(0.5, max(0.0, min(deadline, resend_at) - time.monotonic())))
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().retriable() or msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return fail(cc.EXIT_KAFKA, f"reading {args.reply_topic} partition {partition}: {msg.error().str()}")
            if msg.key() is None or msg.key().decode("utf-8", "replace") not in sent:
                continue  # other routers' replies share the partition
            try:
                schema_id, avro_body = cc.unframe(msg.value() or b"")
                reply = reader.read(schema_id, avro_body)
            except ValueError as e:
                return fail(cc.EXIT_SCHEMA, f"reply: {e}")
            except ckf_registry.UnreadableRecord as e:
                return fail(cc.EXIT_SCHEMA, str(e))
            except ckf_registry.RegistryError as e:
                return fail(cc.EXIT_SCHEMA, f"reading the reply: {e}")
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
                # every selected lane, searched or not: EXACT, INCOMPLETE, STALE or UNAVAILABLE, and
                # its age in ms (None while it has none); lanes above holds the searched ones' depths
                "lane_states": [{"lane": s["lane"], "state": s["state"], "age_ms": s["age_ms"]}
                                for s in reply.get("lane_states", [])],
            }))
            statuses = {"OK": cc.EXIT_OK, "UNAVAILABLE": cc.EXIT_UNAVAILABLE, "INVALID_REQUEST": cc.EXIT_INVALID_REQUEST}
            if reply["status"] not in statuses:
                return fail(cc.EXIT_SCHEMA, f"reply status {reply['status']} is not one this router knows")
            return statuses[reply["status"]]
        return fail(cc.EXIT_TIMEOUT, f"no reply to any of {len(sent)} attempts ({', '.join(sent)}) within {args.timeout}s")
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
