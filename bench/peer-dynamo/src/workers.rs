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
use std::io::BufRead;
use std::sync::Arc;

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
