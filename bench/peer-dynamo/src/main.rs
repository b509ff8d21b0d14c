//! The Rust half of `make bench-peer`: the rows of `docs/perf/peer-report.md` measured on the
//! published `dynamo-kv-router` crate (pinned in `Cargo.toml`), through its public API only.
//!
//! The Go half is `bench/peer` (`BenchmarkPeer*`); both build the same fixtures from the same
//! SplitMix64 streams (producer §6.1), so the tables, chains, deltas and key streams are equal
//! word for word. Each fixture prints a checksum that the report generator (`tools/peerreport`)
//! compares with the Go side's before it computes any ratio.
//!
//! Output: one JSON object per line on stdout,
//! `{"side":"rust","name":ROW,"iterations":N,"metrics":{UNIT:VALUE,...}}`, with the units the
//! Go benchmarks report (`ns/op`, `p50-ns`, `p99-ns`, `ns/block`, `ns/event`, `load-pct`,
//! `omitted`, `fixture-sum`).
//!
//! Usage: `peer-dynamo [ROW-SUBSTRING]`; `PEER_BENCH_MS` (default 1000) is the measured time per
//! row, after a warm-up of a tenth of it. The Go benchmarks run for the default `-benchtime=1s`.

mod workers;

use std::hint::black_box;
use std::time::{Duration, Instant};

use dynamo_kv_router::identity::{
    CacheSemanticsId, DcId, IdentitySource, IndexerDomainId, PoolId, RoutingScopeId,
};
use dynamo_kv_router::indexer::cuckoo::{
    CKF_LANE_COUNT, CanonicalSequenceBlockHash, CkfConfig, ConsumerInstanceId, DcCkfFormatIdentity,
    DcCkfState, GlobalCkfBucketImage, GlobalCkfDelta, GlobalCkfIndexer, GlobalCkfIngestOutcome,
    GlobalCkfLaneIngestor, GlobalCkfManifest, GlobalCkfSnapshot, LaneLease, PrefixSearchConfig,
    ProducerIdentity,
};
use dynamo_kv_router::protocols::{
    ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheEventError,
    KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash, RouterEvent,
    compute_next_seq_hash, compute_seq_hash_for_block,
};

// ---- shared fixture parameters (mirrored in bench/peer/fixture.go) ----------------------------

/// The filter seed of every fixture: the crate's default (producer §5.1).
const FILTER_SEED: u64 = 0x5DEE_CE66_D1B5_4A33;
/// ALTERNATE_BUCKET_DOMAIN of producer §3, used only to build the query fixture.
const ALTERNATE_BUCKET_DOMAIN: u64 = 0x9E37_79B9_7F4A_7C15;

const QUERY_BUCKETS: usize = 1 << 20;
const QUERY_CHAIN_LEN: usize = 128;
const QUERY_CHAINS_PER_SHAPE: usize = 512;
const QUERY_STREAM: u64 = 0x5045_4552_5155_4552;

const SNAPSHOT_BUCKETS: usize = 1 << 20;
const SNAPSHOT_STREAM: u64 = 0x5045_4552_534E_4150;

const DELTA_BUCKETS: usize = 1 << 20;
const DELTA_IMAGES: usize = 23;
const DELTA_RING: usize = 1 << 12;
const DELTA_STREAM: u64 = 0x5045_4552_4445_4C54;

const CHAIN_STREAM: u64 = 0x5045_4552_4348_4149;
const ADDRESSING_BUCKETS: usize = 1 << 12;

const LOOKUP_STREAM: u64 = 0x5045_4552_4C4F_4F4B;
const LOOKUP_RING_STREAM: u64 = 0x5045_4552_4C52_494E;
const LOOKUP_RING: usize = 1 << 16;

const STORE_WINDOW: usize = 1024;
const STORE_STREAM_90: u64 = 0x5045_4552_5354_3930;
const STORE_STREAM_FILL: u64 = 0x5045_4552_5354_3530;

// ---- SplitMix64 (producer §6.1) ---------------------------------------------------------------

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// FNV-1a over 64-bit words, folded to 48 bits so that a Go benchmark metric (a float64)
/// carries it exactly.
struct Checksum(u64);

impl Checksum {
    fn new() -> Self {
        Checksum(0xCBF2_9CE4_8422_2325)
    }
    fn add(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x0000_0100_0000_01B3);
    }
    fn fold48(&self) -> u64 {
        (self.0 ^ (self.0 >> 48)) & ((1 << 48) - 1)
    }
}

// ---- output -----------------------------------------------------------------------------------

fn emit(name: &str, iterations: u64, metrics: &[(&str, f64)]) {
    let body: Vec<String> = metrics
        .iter()
        .map(|(unit, value)| format!("\"{unit}\":{value}"))
        .collect();
    println!(
        "{{\"side\":\"rust\",\"name\":\"{name}\",\"iterations\":{iterations},\"metrics\":{{{}}}}}",
        body.join(",")
    );
}

fn budget() -> Duration {
    let ms = std::env::var("PEER_BENCH_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1000);
    Duration::from_millis(ms.max(1))
}

fn quantile(sorted: &[u64], num: usize, den: usize) -> f64 {
    sorted[sorted.len() * num / den] as f64
}

// ---- consumer fixtures ------------------------------------------------------------------------

fn domain() -> IndexerDomainId {
    let mut semantics = [0u8; 16];
    semantics[0] = 0xC5;
    let mut routing = [0u8; 16];
    routing[0] = 0x5C;
    IndexerDomainId::new(
        CacheSemanticsId::new(semantics, IdentitySource::Explicit),
        RoutingScopeId::new(routing, IdentitySource::Explicit),
    )
}

const CONSUMER: u64 = 1;

/// Expected blocks per DC that give exactly `buckets` buckets (producer §5.2).
fn expected_blocks_for(buckets: usize) -> usize {
    buckets * 16 / 5
}

/// The crate builds a format identity only inside a producer; the format of a real producer of
/// that size is what a consumer must match anyway.
fn format_for(buckets: usize) -> DcCkfFormatIdentity {
    let state = DcCkfState::new(CkfConfig::new(expected_blocks_for(buckets))).expect("config");
    let format = state.format();
    assert_eq!(format.bucket_count(), buckets);
    assert_eq!(format.seed(), FILTER_SEED);
    format
}

struct Consumer {
    indexer: GlobalCkfIndexer,
    format: DcCkfFormatIdentity,
    pools: Vec<PoolId>,
}

impl Consumer {
    fn new(buckets: usize, lanes: usize) -> Self {
        let format = format_for(buckets);
        let mut manifest_lanes = [None; CKF_LANE_COUNT];
        let mut pools = Vec::new();
        for (lane, slot) in manifest_lanes.iter_mut().enumerate().take(lanes) {
            let pool = PoolId::new(domain(), DcId::new(100 + lane as u64));
            *slot = Some(pool);
            pools.push(pool);
        }
        let manifest = GlobalCkfManifest::new(
            ConsumerInstanceId::new(CONSUMER),
            domain(),
            format,
            manifest_lanes,
        )
        .expect("manifest");
        let indexer =
            GlobalCkfIndexer::new(manifest, PrefixSearchConfig::default()).expect("indexer");
        Consumer {
            indexer,
            format,
            pools,
        }
    }

    fn identity(&self, lane: usize) -> ProducerIdentity {
        ProducerIdentity::new(self.pools[lane], 4, 1, self.format)
    }

    fn lease(lane: usize, epoch: u64) -> LaneLease {
        LaneLease::new(ConsumerInstanceId::new(CONSUMER), lane as u8, epoch)
    }

    /// Claims `lane`, assigns epoch 1 and installs `words` at sequence 0.
    fn ready_lane(&self, lane: usize, words: Vec<u64>) -> GlobalCkfLaneIngestor {
        let mut ingestor = self.indexer.claim_lane(lane).expect("claim");
        ingestor
            .assign(self.identity(lane), Self::lease(lane, 1))
            .expect("assign");
        let snapshot = GlobalCkfSnapshot::new(
            self.identity(lane),
            Self::lease(lane, 1),
            0,
            words.into_boxed_slice(),
        );
        match ingestor.install_snapshot(&snapshot) {
            GlobalCkfIngestOutcome::SnapshotInstalled { .. } => ingestor,
            other => panic!("snapshot of lane {lane}: {other:?}"),
        }
    }
}

/// Bucket pair and fingerprint per producer §3. The crate keeps its addressing private, so the
/// query fixture computes placement from the specification; `query_fixture` then checks through
/// the crate's own query that every placed prefix is found, which fails on any disagreement.
fn fixture_probe(hash: u64, mask: usize) -> (u16, usize, usize) {
    let mixed = xxhash_rust::xxh3::xxh3_64_with_seed(&hash.to_le_bytes(), FILTER_SEED);
    let fp = match mixed as u16 {
        0 => 1,
        v => v,
    };
    let a = ((mixed >> 16) as usize) & mask;
    let d = xxhash_rust::xxh3::xxh3_64_with_seed(
        &fp.to_le_bytes(),
        FILTER_SEED ^ ALTERNATE_BUCKET_DOMAIN,
    ) as usize
        & mask;
    (fp, a, a ^ if d == 0 { 1 } else { d })
}

fn lowest_empty(word: u64) -> Option<u32> {
    (0..4).find(|s| (word >> (16 * s)) & 0xFFFF == 0)
}

struct QueryFixture {
    consumer: Consumer,
    _ingestors: Vec<GlobalCkfLaneIngestor>,
    shared: Vec<Vec<LocalBlockHash>>,
    divergent: Vec<Vec<LocalBlockHash>>,
    depths: Vec<[usize; CKF_LANE_COUNT]>,
    checksum: u64,
    load: f64,
}

/// The query fixture, in this order (bench/peer builds the same):
/// 1. 2 × 512 chains of 128 local hashes, one SplitMix64 draw each; the first 512 are "shared",
///    the rest "divergent";
/// 2. a shared chain is present in every lane at depth 128; a divergent chain gets, lane by
///    lane, a depth `draw % 129` redrawn until it differs from the chain's earlier lanes;
/// 3. on empty lanes, chain by chain, lane by lane, position by position, the fingerprint goes
///    into the lowest empty slot of bucket A, else of bucket B (a fixture with both full fails);
/// 4. then each lane, bucket by bucket, draws `occ` and `fps`; empty slot `s` gets the
///    fingerprint `uint16(fps >> 16s)` (0 → 1) when bit `s` of `occ` is set (≈ 50 % load).
fn query_fixture() -> QueryFixture {
    let mask = QUERY_BUCKETS - 1;
    let mut rng = SplitMix(QUERY_STREAM);
    let mut sum = Checksum::new();
    let mut chains: Vec<Vec<u64>> = Vec::with_capacity(2 * QUERY_CHAINS_PER_SHAPE);
    for _ in 0..2 * QUERY_CHAINS_PER_SHAPE {
        chains.push((0..QUERY_CHAIN_LEN).map(|_| rng.next()).collect());
    }
    let mut depths = Vec::with_capacity(chains.len());
    for c in 0..chains.len() {
        let mut d = [QUERY_CHAIN_LEN; CKF_LANE_COUNT];
        if c >= QUERY_CHAINS_PER_SHAPE {
            for lane in 0..CKF_LANE_COUNT {
                loop {
                    let v = (rng.next() % (QUERY_CHAIN_LEN as u64 + 1)) as usize;
                    if !d[..lane].contains(&v) {
                        d[lane] = v;
                        break;
                    }
                }
            }
        }
        depths.push(d);
    }
    let mut lanes = vec![vec![0u64; QUERY_BUCKETS]; CKF_LANE_COUNT];
    for (c, chain) in chains.iter().enumerate() {
        let local: Vec<LocalBlockHash> = chain.iter().map(|&h| LocalBlockHash(h)).collect();
        let seq = compute_seq_hash_for_block(&local);
        let probes: Vec<(u16, usize, usize)> =
            seq.iter().map(|&h| fixture_probe(h, mask)).collect();
        for (lane, words) in lanes.iter_mut().enumerate() {
            for &(fp, a, b) in &probes[..depths[c][lane]] {
                if let Some(s) = lowest_empty(words[a]) {
                    words[a] |= u64::from(fp) << (16 * s);
                } else if let Some(s) = lowest_empty(words[b]) {
                    words[b] |= u64::from(fp) << (16 * s);
                } else {
                    panic!("query fixture: both buckets full for chain {c} lane {lane}");
                }
            }
        }
    }
    let mut occupied = 0u64;
    for words in lanes.iter_mut() {
        for w in words.iter_mut() {
            let occ = rng.next();
            let fps = rng.next();
            for s in 0..4 {
                if (*w >> (16 * s)) & 0xFFFF == 0 && (occ >> s) & 1 == 1 {
                    let fp = match (fps >> (16 * s)) as u16 {
                        0 => 1,
                        v => v,
                    };
                    *w |= u64::from(fp) << (16 * s);
                }
            }
            occupied += (0..4).filter(|s| (*w >> (16 * s)) & 0xFFFF != 0).count() as u64;
        }
    }
    for chain in &chains {
        chain.iter().for_each(|&h| sum.add(h));
    }
    for d in &depths {
        d.iter().for_each(|&v| sum.add(v as u64));
    }
    for words in &lanes {
        words.iter().for_each(|&w| sum.add(w));
    }
    let load = occupied as f64 / (4 * QUERY_BUCKETS * CKF_LANE_COUNT) as f64;

    let consumer = Consumer::new(QUERY_BUCKETS, CKF_LANE_COUNT);
    let ingestors: Vec<GlobalCkfLaneIngestor> = lanes
        .into_iter()
        .enumerate()
        .map(|(lane, words)| consumer.ready_lane(lane, words))
        .collect();
    let as_local = |c: &Vec<u64>| c.iter().map(|&h| LocalBlockHash(h)).collect::<Vec<_>>();
    let shared: Vec<_> = chains[..QUERY_CHAINS_PER_SHAPE]
        .iter()
        .map(as_local)
        .collect();
    let divergent: Vec<_> = chains[QUERY_CHAINS_PER_SHAPE..]
        .iter()
        .map(as_local)
        .collect();
    let fixture = QueryFixture {
        consumer,
        _ingestors: ingestors,
        shared,
        divergent,
        depths,
        checksum: sum.fold48(),
        load,
    };
    fixture.check_shared_prefixes();
    fixture
}

impl QueryFixture {
    /// Every shared chain must be found at full depth in every lane: this is what proves that
    /// the fixture's placement agrees with the crate's addressing.
    fn check_shared_prefixes(&self) {
        for (c, chain) in self.shared.iter().enumerate() {
            let result = self
                .consumer
                .indexer
                .find_prefix_matches(chain)
                .expect("query");
            for (lane, m) in result.lanes().iter().enumerate() {
                let depth = m.map(|m| m.prefix_depth()).unwrap_or(0) as usize;
                assert_eq!(
                    depth, self.depths[c][lane],
                    "shared chain {c} lane {lane}: the crate finds depth {depth}"
                );
            }
        }
    }
}

fn bench_queries(name: &str, fx: &QueryFixture, chains: &[Vec<LocalBlockHash>]) {
    let run = |limit: Duration| {
        let mut d: Vec<u64> = Vec::with_capacity(1 << 20);
        let start = Instant::now();
        let mut i = 0usize;
        while !i.is_multiple_of(256) || start.elapsed() < limit {
            let chain = &chains[i % chains.len()];
            let t0 = Instant::now();
            let result = fx.consumer.indexer.find_prefix_matches(chain);
            let dt = t0.elapsed();
            black_box(result.expect("query"));
            d.push(dt.as_nanos() as u64);
            i += 1;
        }
        d
    };
    run(budget() / 10);
    let mut d = run(budget());
    let mean = d.iter().sum::<u64>() as f64 / d.len() as f64;
    d.sort_unstable();
    emit(
        name,
        d.len() as u64,
        &[
            ("ns/op", mean),
            ("p50-ns", quantile(&d, 1, 2)),
            ("p99-ns", quantile(&d, 99, 100)),
            ("fixture-sum", fx.checksum as f64),
            ("load-pct", fx.load * 100.0),
        ],
    );
}

fn bench_snapshot_install() {
    let consumer = Consumer::new(SNAPSHOT_BUCKETS, 1);
    let mut rng = SplitMix(SNAPSHOT_STREAM);
    let words: Vec<u64> = (0..SNAPSHOT_BUCKETS).map(|_| rng.next()).collect();
    let mut sum = Checksum::new();
    words.iter().for_each(|&w| sum.add(w));
    let mut ingestor = consumer.indexer.claim_lane(0).expect("claim");
    let mut epoch = 0u64;
    let mut snapshot = Some(GlobalCkfSnapshot::new(
        consumer.identity(0),
        Consumer::lease(0, 0),
        0,
        words.into_boxed_slice(),
    ));
    let mut run = |limit: Duration| {
        let (mut total, mut n) = (Duration::ZERO, 0u64);
        while total < limit {
            epoch += 1;
            // Re-leasing moves the words; it does not copy them (untimed either way).
            let (identity, _, sequence, buckets) = snapshot.take().expect("snapshot").into_parts();
            let next =
                GlobalCkfSnapshot::new(identity, Consumer::lease(0, epoch), sequence, buckets);
            let t0 = Instant::now();
            ingestor
                .assign(consumer.identity(0), Consumer::lease(0, epoch))
                .expect("assign");
            let out = ingestor.install_snapshot(&next);
            total += t0.elapsed();
            assert!(
                matches!(out, GlobalCkfIngestOutcome::SnapshotInstalled { .. }),
                "{out:?}"
            );
            snapshot = Some(next);
            n += 1;
        }
        (total, n)
    };
    run(budget() / 10);
    let (total, n) = run(budget());
    emit(
        "snapshot-install",
        n,
        &[
            ("ns/op", total.as_nanos() as f64 / n as f64),
            ("fixture-sum", sum.fold48() as f64),
        ],
    );
}

/// 4,096 deltas of 23 distinct random buckets (redrawn on a repeat within a delta) and random
/// values, from one SplitMix64 stream: bucket draw then value draw, image by image.
fn delta_images() -> (Vec<Vec<GlobalCkfBucketImage>>, u64) {
    let mut rng = SplitMix(DELTA_STREAM);
    let mut sum = Checksum::new();
    let mut ring = Vec::with_capacity(DELTA_RING);
    for _ in 0..DELTA_RING {
        let mut images: Vec<GlobalCkfBucketImage> = Vec::with_capacity(DELTA_IMAGES);
        while images.len() < DELTA_IMAGES {
            let bucket = (rng.next() as usize) & (DELTA_BUCKETS - 1);
            let value = rng.next();
            if images.iter().all(|im| im.bucket() != bucket) {
                sum.add(bucket as u64);
                sum.add(value);
                images.push(GlobalCkfBucketImage::new(bucket, value));
            }
        }
        ring.push(images);
    }
    (ring, sum.fold48())
}

fn bench_delta_apply() {
    let consumer = Consumer::new(DELTA_BUCKETS, 1);
    let mut ingestor = consumer.ready_lane(0, vec![0; DELTA_BUCKETS]);
    let (ring, checksum) = delta_images();
    let mut sequence = 0u64;
    let mut run = |limit: Duration| {
        let (mut total, mut n) = (Duration::ZERO, 0u64);
        while total < limit {
            // A delta's sequence numbers are fixed at construction, so each pass over the ring
            // builds its deltas first (untimed), then applies them (timed).
            let deltas: Vec<GlobalCkfDelta> = ring
                .iter()
                .enumerate()
                .map(|(k, images)| {
                    let base = sequence + k as u64;
                    GlobalCkfDelta::new(
                        consumer.identity(0),
                        Consumer::lease(0, 1),
                        base,
                        base + 1,
                        images.clone(),
                    )
                })
                .collect();
            let t0 = Instant::now();
            for delta in &deltas {
                let out = ingestor.apply_delta(delta);
                if !matches!(out, GlobalCkfIngestOutcome::DeltaApplied { .. }) {
                    panic!("delta: {out:?}");
                }
            }
            total += t0.elapsed();
            sequence += deltas.len() as u64;
            n += deltas.len() as u64;
        }
        (total, n)
    };
    run(budget() / 10);
    let (total, n) = run(budget());
    emit(
        "delta-apply",
        n,
        &[
            ("ns/op", total.as_nanos() as f64 / n as f64),
            ("fixture-sum", checksum as f64),
        ],
    );
}

// ---- hashing rows -----------------------------------------------------------------------------

fn chain_locals() -> Vec<u64> {
    let mut rng = SplitMix(CHAIN_STREAM);
    (0..QUERY_CHAIN_LEN).map(|_| rng.next()).collect()
}

/// seqhash-chain: the crate's public chain step, `compute_next_seq_hash`, over a 128-block
/// chain into a reused buffer (what `ckf.AppendSequenceHashes` does on the Go side).
fn bench_seqhash_chain() {
    let local: Vec<LocalBlockHash> = chain_locals().into_iter().map(LocalBlockHash).collect();
    let mut out: Vec<u64> = Vec::with_capacity(local.len());
    let mut run = |limit: Duration| {
        let start = Instant::now();
        let mut n = 0u64;
        while !n.is_multiple_of(1024) || start.elapsed() < limit {
            out.clear();
            let chain = black_box(&local);
            let mut prev = chain[0].0;
            out.push(prev);
            for &l in &chain[1..] {
                prev = compute_next_seq_hash(prev, l);
                out.push(prev);
            }
            black_box(&out);
            n += 1;
        }
        (start.elapsed(), n)
    };
    run(budget() / 10);
    let (total, n) = run(budget());
    let mut sum = Checksum::new();
    out.iter().for_each(|&h| sum.add(h));
    emit(
        "seqhash-chain",
        n,
        &[
            (
                "ns/block",
                total.as_nanos() as f64 / (n as f64 * QUERY_CHAIN_LEN as f64),
            ),
            ("fixture-sum", sum.fold48() as f64),
        ],
    );
}

/// seqhash-vec: the crate's slice-returning chain function `compute_seq_hash_for_block`, which
/// allocates its result (the Go side: `ckf.SequenceHashes`, which allocates one slice too).
fn bench_seqhash_vec() {
    let local: Vec<LocalBlockHash> = chain_locals().into_iter().map(LocalBlockHash).collect();
    let run = |limit: Duration| {
        let start = Instant::now();
        let mut n = 0u64;
        while !n.is_multiple_of(1024) || start.elapsed() < limit {
            black_box(compute_seq_hash_for_block(black_box(&local)));
            n += 1;
        }
        (start.elapsed(), n)
    };
    run(budget() / 10);
    let (total, n) = run(budget());
    emit(
        "seqhash-vec",
        n,
        &[(
            "ns/block",
            total.as_nanos() as f64 / (n as f64 * QUERY_CHAIN_LEN as f64),
        )],
    );
}

/// addressing: the crate's addressing is private; its nearest public operation is
/// `DcCkfState::contains`, which prepares the probe (fingerprint, bucket A, bucket B) and tests
/// both buckets. An empty 2^12-bucket state (32 KiB, cache-resident) keeps the two loads cheap;
/// the keys are 1, 2, 3, … as canonical hashes.
fn bench_addressing() {
    let state =
        DcCkfState::new(CkfConfig::new(expected_blocks_for(ADDRESSING_BUCKETS))).expect("state");
    assert_eq!(state.format().bucket_count(), ADDRESSING_BUCKETS);
    let run = |limit: Duration| {
        let start = Instant::now();
        let mut n = 0u64;
        let mut hits = 0u64;
        while !n.is_multiple_of(4096) || start.elapsed() < limit {
            n += 1;
            let h = CanonicalSequenceBlockHash::root(LocalBlockHash(black_box(n)));
            hits += u64::from(state.contains(h));
        }
        black_box(hits);
        (start.elapsed(), n)
    };
    run(budget() / 10);
    let (total, n) = run(budget());
    emit(
        "addressing",
        n,
        &[("ns/op", total.as_nanos() as f64 / n as f64)],
    );
}

/// lookup/2^k/{hit,miss}: a fresh state of 2^k buckets filled to 90 % of its slots with one-block
/// root stores (token hashes from LOOKUP_STREAM ^ buckets, external ids 0, 1, 2, …), then two
/// rings of LOOKUP_RING canonical hashes drawn interleaved from LOOKUP_RING_STREAM ^ buckets: a
/// stored block's (the fill token at index next() % fill count) and a never-stored stream value.
/// One `contains` per op, cycling through the ring. The checksum folds the fill tokens, both rings
/// and how many ring entries the filter reports present (false positives included).
fn bench_lookup(buckets: usize) {
    let mut state = new_state(buckets);
    let mut keys = SplitMix(LOOKUP_STREAM ^ buckets as u64);
    let fill = 4 * buckets * 9 / 10;
    let mut sum = Checksum::new();
    let mut omitted = 0u64;
    let mut tokens = Vec::with_capacity(fill);
    for id in 0..fill as u64 {
        let k = keys.next();
        sum.add(k);
        tokens.push(k);
        omitted += u64::from(apply_store(&mut state, store_event(id, k)));
    }
    let mut ring = SplitMix(LOOKUP_RING_STREAM ^ buckets as u64);
    let mut hit = Vec::with_capacity(LOOKUP_RING);
    let mut miss = Vec::with_capacity(LOOKUP_RING);
    for _ in 0..LOOKUP_RING {
        let h = tokens[(ring.next() % fill as u64) as usize];
        let m = ring.next();
        sum.add(h);
        sum.add(m);
        hit.push(CanonicalSequenceBlockHash::root(LocalBlockHash(h)));
        miss.push(CanonicalSequenceBlockHash::root(LocalBlockHash(m)));
    }
    for keys in [&hit, &miss] {
        sum.add(keys.iter().filter(|&&h| state.contains(h)).count() as u64);
    }
    let resident = state.stats().aggregation().occupied_slot_count();
    for (kind, keys) in [("hit", &hit), ("miss", &miss)] {
        let run = |limit: Duration| {
            let start = Instant::now();
            let mut n = 0usize;
            let mut found = 0u64;
            while !n.is_multiple_of(4096) || start.elapsed() < limit {
                found += u64::from(state.contains(keys[n & (LOOKUP_RING - 1)]));
                n += 1;
            }
            black_box(found);
            (start.elapsed(), n as u64)
        };
        run(budget() / 10);
        let (total, n) = run(budget());
        emit(
            &format!("lookup/2^{}/{kind}", buckets.trailing_zeros()),
            n,
            &[
                ("ns/op", total.as_nanos() as f64 / n as f64),
                ("load-pct", resident as f64 * 100.0 / (4 * buckets) as f64),
                ("omitted", omitted as f64),
                ("fixture-sum", sum.fold48() as f64),
            ],
        );
    }
}

// ---- producer rows ----------------------------------------------------------------------------

const WORKER: u64 = 1;

/// A one-block store of a root block: external id `id`, token hash `tokens`, worker 1 rank 0,
/// Device tier, Worker residency (the crate's in-process default).
fn store_event(id: u64, tokens: u64) -> RouterEvent {
    RouterEvent::new(
        WORKER,
        KvCacheEvent {
            event_id: id,
            data: KvCacheEventData::Stored(KvCacheStoreData {
                parent_hash: None,
                start_position: None,
                blocks: vec![KvCacheStoredBlockData {
                    block_hash: ExternalSequenceBlockHash(id),
                    tokens_hash: LocalBlockHash(tokens),
                    mm_extra_info: None,
                }],
            }),
            dp_rank: 0,
        },
    )
}

fn remove_event(id: u64) -> RouterEvent {
    RouterEvent::new(
        WORKER,
        KvCacheEvent {
            event_id: id,
            data: KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: vec![ExternalSequenceBlockHash(id)],
            }),
            dp_rank: 0,
        },
    )
}

/// Applies a store and returns whether its fingerprint was omitted for capacity; any other
/// error is a broken fixture.
fn apply_store(state: &mut DcCkfState, event: RouterEvent) -> bool {
    let outcome = state.apply_event(event);
    match outcome.first_error() {
        None => false,
        Some(KvCacheEventError::CapacityExhausted) => true,
        Some(other) => panic!("store: {other:?}"),
    }
}

fn new_state(buckets: usize) -> DcCkfState {
    let state = DcCkfState::new(CkfConfig::new(expected_blocks_for(buckets))).expect("state");
    assert_eq!(state.format().bucket_count(), buckets);
    state
}

/// producer-store/2^k@90: the state holds between 90 % of its slots minus one window (1,024
/// blocks) and 90 %; each timed window stores 1,024 new one-block events (token hashes from one
/// SplitMix64 stream, external ids 0, 1, 2, …), then the 1,024 oldest blocks are removed
/// (untimed). Events are built before the timer starts.
fn bench_store_at_90(name: &str, buckets: usize) {
    let mut state = new_state(buckets);
    let mut keys = SplitMix(STORE_STREAM_90 ^ buckets as u64);
    let base = (4 * buckets) * 9 / 10 - STORE_WINDOW;
    let mut omitted = 0u64;
    let mut sum = Checksum::new();
    for id in 0..base as u64 {
        let k = keys.next();
        sum.add(k);
        omitted += u64::from(apply_store(&mut state, store_event(id, k)));
    }
    let (mut next_id, mut oldest) = (base as u64, 0u64);
    let mut run = |limit: Duration, omitted: &mut u64| {
        let (mut total, mut n) = (Duration::ZERO, 0u64);
        while total < limit {
            let events: Vec<RouterEvent> = (0..STORE_WINDOW as u64)
                .map(|j| store_event(next_id + j, keys.next()))
                .collect();
            let t0 = Instant::now();
            for event in events {
                *omitted += u64::from(apply_store(&mut state, event));
            }
            total += t0.elapsed();
            next_id += STORE_WINDOW as u64;
            n += STORE_WINDOW as u64;
            for id in oldest..oldest + STORE_WINDOW as u64 {
                let outcome = state.apply_event(remove_event(id));
                assert!(outcome.first_error().is_none() && outcome.unknown_removals() == 0);
            }
            oldest += STORE_WINDOW as u64;
        }
        (total, n)
    };
    run(budget() / 10, &mut omitted);
    let (total, n) = run(budget(), &mut omitted);
    let resident = state.stats().aggregation().occupied_slot_count();
    emit(
        name,
        n,
        &[
            ("ns/event", total.as_nanos() as f64 / n as f64),
            ("load-pct", resident as f64 * 100.0 / (4 * buckets) as f64),
            ("omitted", omitted as f64),
            ("fixture-sum", sum.fold48() as f64),
        ],
    );
}

/// producer-store/2^16/0-50: a fresh 2^16-bucket state (built untimed) takes one-block events
/// until half of its slots hold a fingerprint (131,072 stores); every pass uses the same key
/// stream. ns/op is per event.
fn bench_store_fill_50() {
    let buckets = 1usize << 16;
    let count = 2 * buckets;
    let mut keys = SplitMix(STORE_STREAM_FILL);
    let tokens: Vec<u64> = (0..count).map(|_| keys.next()).collect();
    let mut sum = Checksum::new();
    tokens.iter().for_each(|&k| sum.add(k));
    let mut last_resident = 0usize;
    let mut run = |limit: Duration| {
        let (mut total, mut n) = (Duration::ZERO, 0u64);
        while total < limit {
            let mut state = new_state(buckets);
            let events: Vec<RouterEvent> = tokens
                .iter()
                .enumerate()
                .map(|(id, &k)| store_event(id as u64, k))
                .collect();
            let t0 = Instant::now();
            for event in events {
                assert!(!apply_store(&mut state, event), "omission below 50 %");
            }
            total += t0.elapsed();
            n += count as u64;
            last_resident = state.stats().aggregation().occupied_slot_count();
        }
        (total, n)
    };
    run(budget() / 10);
    let (total, n) = run(budget());
    emit(
        "producer-store/2^16/0-50",
        n,
        &[
            ("ns/event", total.as_nanos() as f64 / n as f64),
            (
                "load-pct",
                last_resident as f64 * 100.0 / (4 * buckets) as f64,
            ),
            ("fixture-sum", sum.fold48() as f64),
        ],
    );
}

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    if filter == "differential" {
        let path = std::env::args().nth(2).expect("usage: peer-dynamo differential TRACE");
        workers::differential(&path);
        return;
    }
    let want = |name: &str| name.contains(&filter);
    if want("query128/shared") || want("query128/divergent") {
        let fx = query_fixture();
        if want("query128/shared") {
            bench_queries("query128/shared", &fx, &fx.shared);
        }
        if want("query128/divergent") {
            bench_queries("query128/divergent", &fx, &fx.divergent);
        }
    }
    if want("snapshot-install") {
        bench_snapshot_install();
    }
    if want("seqhash-chain") {
        bench_seqhash_chain();
    }
    if want("seqhash-vec") {
        bench_seqhash_vec();
    }
    if want("addressing") {
        bench_addressing();
    }
    for k in [16u32, 20] {
        if want(&format!("lookup/2^{k}/hit")) || want(&format!("lookup/2^{k}/miss")) {
            bench_lookup(1 << k);
        }
    }
    if want("delta-apply") {
        bench_delta_apply();
    }
    if want("producer-store/2^16@90") {
        bench_store_at_90("producer-store/2^16@90", 1 << 16);
    }
    if want("producer-store/2^20@90") {
        bench_store_at_90("producer-store/2^20@90", 1 << 20);
    }
    if want("producer-store/2^16/0-50") {
        bench_store_fill_50();
    }
    for n in [8u64, 64, 512] {
        let name = format!("workers-match128/{n}");
        if want(&name) {
            workers::bench_match(n, &name);
        }
    }
    for (n, name) in [(1usize << 20, "workers-apply/1M"), (10 << 20, "workers-apply/10M")] {
        if want(name) {
            workers::bench_apply(n, name);
        }
    }
}
