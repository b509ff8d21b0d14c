//! The worker stage (`ckf/workers`' peer): the crate's device indexers (`RadixTree`,
//! `ConcurrentRadixTreeCompressed`) and its `LowerTierIndexer` per lower tier, through their
//! public API only.
//!
//! `peer-dynamo differential TRACE` reads a trace (one command a line, decimal numbers) and
//! prints each query's answers:
//!
//! ```text
//! S worker rank tier parent|- ext:local ...   a store (tier 0 device, 1 host pinned, 2 disk, 3 external)
//! R worker rank tier ext ...                  a removal
//! C worker rank                               a worker-domain clear (device and every lower tier)
//! W worker                                    the worker's removal (every rank, every tier)
//! Q local ...                                 a query: prints "crtc N ..." and "radix N ..."
//! ```
//!
//! An answer line lists `worker:rank=device,host,disk,external` for every source with a
//! non-zero total, sorted by (worker, rank). The lower tiers are walked as the crate's
//! `query_lower_tiers_with_options` walks them: from each worker's device depth anchored on its
//! last matched device hash, root workers of the tier from position 0, in the order host
//! pinned, disk, external.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::io::BufRead;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dynamo_kv_router::indexer::concurrent_radix_tree_compressed::ConcurrentRadixTreeCompressed;
use dynamo_kv_router::indexer::{
    LowerTierContinuation, LowerTierIndexer, MatchDetails, RadixTree, SyncIndexer, WorkerTask,
};
use dynamo_kv_router::protocols::{
    ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheRemoveData,
    KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash, ResidencyProjection, RouterEvent,
    StorageTier, WorkerWithDpRank,
};

/// One indexer running its own worker loop on a thread, as `ThreadPoolIndexer` runs it.
pub struct Looped<T: SyncIndexer> {
    pub index: Arc<T>,
    tx: Option<flume::Sender<WorkerTask>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<T: SyncIndexer> Looped<T> {
    pub fn new(index: T) -> Self {
        let index = Arc::new(index);
        let (tx, rx) = flume::unbounded();
        let worker = index.clone();
        let thread = std::thread::spawn(move || {
            worker.worker(rx, None).expect("worker loop");
        });
        Looped { index, tx: Some(tx), thread: Some(thread) }
    }

    /// Applies one event and waits until the loop has applied it.
    pub fn apply(&self, event: RouterEvent) {
        let (resp, done) = tokio::sync::oneshot::channel();
        self.send(WorkerTask::EventWithAck { event, resp });
        let _ = done.blocking_recv();
    }

    /// Enqueues one event without waiting.
    pub fn enqueue(&self, event: RouterEvent) {
        self.send(WorkerTask::Event(event));
    }

    /// Waits until every task sent before has been applied (an acknowledged no-op removal).
    pub fn sync(&self) {
        self.apply(RouterEvent::new(
            u64::MAX,
            KvCacheEvent {
                event_id: 0,
                data: KvCacheEventData::Removed(KvCacheRemoveData { block_hashes: vec![] }),
                dp_rank: 0,
            },
        ));
    }

    pub fn remove_worker(&self, worker_id: u64) {
        let (resp, done) = tokio::sync::oneshot::channel();
        self.send(WorkerTask::RemoveWorker { worker_id, sweep_tree: true, resp });
        let _ = done.blocking_recv();
    }

    fn send(&self, task: WorkerTask) {
        self.tx.as_ref().unwrap().send(task).expect("worker loop gone");
    }
}

impl<T: SyncIndexer> Drop for Looped<T> {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub const LOWER_TIERS: [StorageTier; 3] =
    [StorageTier::HostPinned, StorageTier::Disk, StorageTier::External];

pub fn tier_of(code: u64) -> StorageTier {
    match code {
        0 => StorageTier::Device,
        1 => StorageTier::HostPinned,
        2 => StorageTier::Disk,
        3 => StorageTier::External,
        _ => panic!("tier {code}"),
    }
}

pub fn store(worker: u64, rank: u32, tier: StorageTier, parent: Option<u64>, blocks: &[(u64, u64)]) -> RouterEvent {
    RouterEvent::with_storage_tier(
        worker,
        KvCacheEvent {
            event_id: 0,
            data: KvCacheEventData::Stored(KvCacheStoreData {
                parent_hash: parent.map(ExternalSequenceBlockHash),
                start_position: None,
                blocks: blocks
                    .iter()
                    .map(|&(ext, local)| KvCacheStoredBlockData {
                        block_hash: ExternalSequenceBlockHash(ext),
                        tokens_hash: LocalBlockHash(local),
                        mm_extra_info: None,
                    })
                    .collect(),
            }),
            dp_rank: rank,
        },
        tier,
    )
}

pub fn remove(worker: u64, rank: u32, tier: StorageTier, ids: &[u64]) -> RouterEvent {
    RouterEvent::with_storage_tier(
        worker,
        KvCacheEvent {
            event_id: 0,
            data: KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: ids.iter().copied().map(ExternalSequenceBlockHash).collect(),
            }),
            dp_rank: rank,
        },
        tier,
    )
}

fn cleared(worker: u64, rank: u32) -> RouterEvent {
    RouterEvent::new(worker, KvCacheEvent { event_id: 0, data: KvCacheEventData::Cleared, dp_rank: rank })
}

/// The device answer plus the lower-tier cascade.
fn cascade(
    lowers: &[Looped<LowerTierIndexer>],
    locals: &[LocalBlockHash],
    device: &MatchDetails,
) -> BTreeMap<(u64, u32), [usize; 4]> {
    let mut out: BTreeMap<(u64, u32), [usize; 4]> = BTreeMap::new();
    let mut conts: HashMap<WorkerWithDpRank, LowerTierContinuation> = HashMap::new();
    for (w, &s) in &device.overlap_scores.scores {
        out.entry((w.worker_id, w.dp_rank)).or_default()[0] = s as usize;
        if let Some(&h) = device.last_matched_hashes.get(w) {
            conts.insert(*w, LowerTierContinuation::new(s as usize, h));
        }
    }
    let projection = ResidencyProjection::default();
    for (i, lower) in lowers.iter().enumerate() {
        if let Some(&first) = locals.first() {
            for w in lower.index.root_workers(first, &projection) {
                conts.entry(w).or_insert_with(|| LowerTierContinuation::from_root(0));
            }
        }
        let d = lower.index.query_match_details(locals, &conts);
        for (w, &h) in &d.hits {
            if h > 0 {
                out.entry((w.worker_id, w.dp_rank)).or_default()[i + 1] = h;
            }
        }
        conts = d.next_continuations.into_iter().collect();
    }
    out.retain(|_, v| v.iter().any(|&x| x > 0));
    out
}

fn print_answer(side: &str, q: usize, ans: &BTreeMap<(u64, u32), [usize; 4]>) {
    let mut line = format!("{side} {q}");
    for ((w, r), v) in ans {
        line.push_str(&format!(" {w}:{r}={},{},{},{}", v[0], v[1], v[2], v[3]));
    }
    println!("{line}");
}

pub fn differential(path: &str) {
    let file = std::fs::File::open(path).expect("trace");
    let crtc = Looped::new(ConcurrentRadixTreeCompressed::new());
    let mut radix = RadixTree::new();
    let lowers: Vec<Looped<LowerTierIndexer>> = LOWER_TIERS.iter().map(|_| Looped::new(LowerTierIndexer::new())).collect();
    let mut queries = 0usize;
    let num = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("number {s:?}")) };
    for line in std::io::BufReader::new(file).lines() {
        let line = line.expect("read");
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.first().copied() {
            Some("S") => {
                let (w, r, tier) = (num(f[1]), num(f[2]) as u32, tier_of(num(f[3])));
                let parent = if f[4] == "-" { None } else { Some(num(f[4])) };
                let blocks: Vec<(u64, u64)> = f[5..]
                    .iter()
                    .map(|b| {
                        let (e, l) = b.split_once(':').expect("ext:local");
                        (num(e), num(l))
                    })
                    .collect();
                let ev = store(w, r, tier, parent, &blocks);
                route(&crtc, &mut radix, &lowers, tier, ev);
            }
            Some("R") => {
                let (w, r, tier) = (num(f[1]), num(f[2]) as u32, tier_of(num(f[3])));
                let ids: Vec<u64> = f[4..].iter().map(|s| num(s)).collect();
                route(&crtc, &mut radix, &lowers, tier, remove(w, r, tier, &ids));
            }
            Some("C") => {
                let ev = cleared(num(f[1]), num(f[2]) as u32);
                let _ = radix.apply_event(ev.clone());
                crtc.apply(ev.clone());
                for l in &lowers {
                    l.apply(ev.clone());
                }
            }
            Some("W") => {
                let w = num(f[1]);
                radix.remove_worker(w);
                crtc.remove_worker(w);
                for l in &lowers {
                    l.remove_worker(w);
                }
            }
            Some("Q") => {
                let locals: Vec<LocalBlockHash> = f[1..].iter().map(|s| LocalBlockHash(num(s))).collect();
                let c = crtc.index.find_match_details_impl(&locals, false);
                print_answer("crtc", queries, &cascade(&lowers, &locals, &c));
                let d = radix.find_match_details(locals.clone(), false);
                print_answer("radix", queries, &cascade(&lowers, &locals, &d));
                queries += 1;
            }
            None => {}
            Some(other) => panic!("trace line {other:?}"),
        }
    }
}

fn route(
    crtc: &Looped<ConcurrentRadixTreeCompressed>,
    radix: &mut RadixTree,
    lowers: &[Looped<LowerTierIndexer>],
    tier: StorageTier,
    ev: RouterEvent,
) {
    match tier {
        StorageTier::Device => {
            let _ = radix.apply_event(ev.clone());
            crtc.apply(ev);
        }
        t => {
            let i = LOWER_TIERS.iter().position(|&x| x == t).unwrap();
            lowers[i].apply(ev);
        }
    }
}

// ---- the worker-stage rows (bench/peer/workers_bench_test.go builds the same fixtures) ----------

const WORKERS_PROMPT_STREAM: u64 = 0x5045_4552_574B_5052;
const WORKERS_MATCH_STREAM: u64 = 0x5045_4552_574B_4D54;
const WORKERS_COUNT: u64 = 64;
const PROMPT_BLOCKS: usize = 16;
const WINDOW: u64 = 256;
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// Prompt p's 16 local hashes: draws 16p+1 … 16p+16 of SplitMix64 from WORKERS_PROMPT_STREAM.
fn prompt_locals(p: u64) -> Vec<LocalBlockHash> {
    let mut s = crate::SplitMix(WORKERS_PROMPT_STREAM.wrapping_add((PROMPT_BLOCKS as u64 * p).wrapping_mul(GAMMA)));
    (0..PROMPT_BLOCKS).map(|_| LocalBlockHash(s.next())).collect()
}

fn prompt_holders(p: u64) -> u64 {
    if p % 4 == 0 { 4 } else { 1 }
}

/// Prompt p's stores (one per holder, no parent, external ids = sequence hashes), its removals
/// (the 16 ids leaf first, one event per holder) and its sequence hashes.
fn prompt_events(p: u64) -> (Vec<RouterEvent>, Vec<RouterEvent>, Vec<u64>) {
    let locals = prompt_locals(p);
    let seq = dynamo_kv_router::protocols::compute_seq_hash_for_block(&locals);
    let blocks: Vec<(u64, u64)> = seq.iter().zip(&locals).map(|(&s, l)| (s, l.0)).collect();
    let ids: Vec<u64> = seq.iter().rev().copied().collect();
    let (mut st, mut rm) = (Vec::new(), Vec::new());
    for h in 0..prompt_holders(p) {
        let w = (p + h) % WORKERS_COUNT;
        st.push(store(w, 0, StorageTier::Device, None, &blocks));
        rm.push(remove(w, 0, StorageTier::Device, &ids));
    }
    (st, rm, seq)
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

unsafe extern "C" {
    fn malloc_trim(pad: usize) -> i32;
}

/// The resident set after returning the allocator's free memory to the OS (glibc).
fn settled_rss() -> u64 {
    unsafe {
        malloc_trim(0);
    }
    rss_bytes()
}

/// An indexer the apply rows drive on one thread: RadixTree directly, the concurrent tree
/// through its own worker loop (events enqueued, then one acknowledged no-op to wait for them).
trait ApplyTarget {
    fn apply_all(&mut self, events: Vec<RouterEvent>);
}

impl ApplyTarget for RadixTree {
    fn apply_all(&mut self, events: Vec<RouterEvent>) {
        for ev in events {
            self.apply_event(ev).expect("apply");
        }
    }
}

impl ApplyTarget for Looped<ConcurrentRadixTreeCompressed> {
    fn apply_all(&mut self, events: Vec<RouterEvent>) {
        for ev in events {
            self.enqueue(ev);
        }
        self.sync();
    }
}

struct ApplyResult {
    store_ns: f64,
    remove_ns: f64,
    rss: f64,
    checksum: u64,
}

/// Fill to `n` memberships (untimed, RSS measured around it), a warm-up of budget/10, then
/// windows for the budget: the next 256 prompts stored (timed), the oldest 256 removed (timed).
fn apply_row<T: ApplyTarget>(n: usize, make: impl FnOnce() -> T) -> ApplyResult {
    let before = settled_rss();
    let mut ix = make();
    let mut sum = crate::Checksum::new();
    let (mut next, mut members) = (0u64, 0usize);
    while members < n {
        let (st, _, seq) = prompt_events(next);
        seq.iter().for_each(|&h| sum.add(h));
        members += PROMPT_BLOCKS * st.len();
        ix.apply_all(st);
        next += 1;
    }
    sum.add(members as u64);
    let rss = settled_rss().saturating_sub(before) as f64 / members as f64;
    let mut oldest = 0u64;
    let mut run = |limit: Duration| {
        let (mut ts, mut tr, mut bs, mut br) = (Duration::ZERO, Duration::ZERO, 0u64, 0u64);
        while ts + tr < limit {
            let mut stores = Vec::new();
            for p in next..next + WINDOW {
                stores.extend(prompt_events(p).0);
            }
            let mut removals = Vec::new();
            for p in oldest..oldest + WINDOW {
                removals.extend(prompt_events(p).1);
            }
            bs += (PROMPT_BLOCKS * stores.len()) as u64;
            br += (PROMPT_BLOCKS * removals.len()) as u64;
            let t0 = Instant::now();
            ix.apply_all(stores);
            let t1 = Instant::now();
            ix.apply_all(removals);
            let t2 = Instant::now();
            ts += t1 - t0;
            tr += t2 - t1;
            next += WINDOW;
            oldest += WINDOW;
        }
        (ts.as_nanos() as f64 / bs as f64, tr.as_nanos() as f64 / br as f64)
    };
    run(crate::budget() / 10);
    let (store_ns, remove_ns) = run(crate::budget());
    drop(ix);
    ApplyResult { store_ns, remove_ns, rss, checksum: sum.fold48() }
}

/// workers-apply/1M and /10M: the rows' metrics are the better of the two trees (the issue's
/// target is against the crate's best single-threaded row); each tree's own are beside them.
pub fn bench_apply(n: usize, name: &str) {
    let radix = apply_row(n, RadixTree::new);
    let crtc = apply_row(n, || Looped::new(ConcurrentRadixTreeCompressed::new()));
    assert_eq!(radix.checksum, crtc.checksum);
    crate::emit(
        name,
        1,
        &[
            ("store-ns/block", radix.store_ns.min(crtc.store_ns)),
            ("remove-ns/block", radix.remove_ns.min(crtc.remove_ns)),
            ("rss-B/membership", radix.rss.min(crtc.rss)),
            ("radix-store-ns/block", radix.store_ns),
            ("radix-remove-ns/block", radix.remove_ns),
            ("radix-rss-B/membership", radix.rss),
            ("crtc-store-ns/block", crtc.store_ns),
            ("crtc-remove-ns/block", crtc.remove_ns),
            ("crtc-rss-B/membership", crtc.rss),
            ("fixture-sum", radix.checksum as f64),
        ],
    );
}

/// workers-match128/N: a 128-block prompt (SplitMix64 from WORKERS_MATCH_STREAM) held in full
/// by N workers; one query per op with every worker's answer (no early exit), timed one by one.
/// RadixTree takes its sequence by value: the clone is made before the timer starts.
pub fn bench_match(n: u64, name: &str) {
    let mut rng = crate::SplitMix(WORKERS_MATCH_STREAM);
    let raw: Vec<u64> = (0..crate::QUERY_CHAIN_LEN).map(|_| rng.next()).collect();
    let locals: Vec<LocalBlockHash> = raw.iter().map(|&h| LocalBlockHash(h)).collect();
    let seq = dynamo_kv_router::protocols::compute_seq_hash_for_block(&locals);
    let blocks: Vec<(u64, u64)> = seq.iter().zip(&raw).map(|(&s, &l)| (s, l)).collect();
    let mut sum = crate::Checksum::new();
    raw.iter().for_each(|&h| sum.add(h));
    sum.add(n);
    let mut radix = RadixTree::new();
    let crtc = Looped::new(ConcurrentRadixTreeCompressed::new());
    for w in 0..n {
        radix.apply_event(store(w, 0, StorageTier::Device, None, &blocks)).expect("store");
        crtc.enqueue(store(w, 0, StorageTier::Device, None, &blocks));
    }
    crtc.sync();
    assert_eq!(radix.find_matches(locals.clone(), false).scores.len(), n as usize);
    assert_eq!(crtc.index.find_matches_impl(&locals, false).scores.len(), n as usize);
    let time = |f: &mut dyn FnMut() -> usize, limit: Duration| {
        let mut d: Vec<u64> = Vec::with_capacity(1 << 20);
        let start = Instant::now();
        while d.len() % 256 != 0 || start.elapsed() < limit {
            d.push(f() as u64);
        }
        d.sort_unstable();
        d
    };
    let mut radix_q = || {
        let q = locals.clone();
        let t0 = Instant::now();
        black_box(radix.find_matches(q, false));
        t0.elapsed().as_nanos() as usize
    };
    time(&mut radix_q, crate::budget() / 20);
    let r = time(&mut radix_q, crate::budget() / 2);
    let mut crtc_q = || {
        let t0 = Instant::now();
        black_box(crtc.index.find_matches_impl(&locals, false));
        t0.elapsed().as_nanos() as usize
    };
    time(&mut crtc_q, crate::budget() / 20);
    let c = time(&mut crtc_q, crate::budget() / 2);
    let (rp50, rp99) = (crate::quantile(&r, 1, 2), crate::quantile(&r, 99, 100));
    let (cp50, cp99) = (crate::quantile(&c, 1, 2), crate::quantile(&c, 99, 100));
    // The row is the tree with the lower p50, both of its quantiles.
    let (p50, p99) = if rp50 <= cp50 { (rp50, rp99) } else { (cp50, cp99) };
    crate::emit(
        name,
        (r.len() + c.len()) as u64,
        &[
            ("p50-ns", p50),
            ("p99-ns", p99),
            ("radix-p50-ns", rp50),
            ("radix-p99-ns", rp99),
            ("crtc-p50-ns", cp50),
            ("crtc-p99-ns", cp99),
            ("fixture-sum", sum.fold48() as f64),
        ],
    );
}
