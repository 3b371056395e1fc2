//! The daemon's events, sent after the call that made them has its answer: `AddedInterface`
//! and the failure warnings go into a bounded queue that one thread empties with a client of its
//! own, one attempt each, bounded in time, so that an API server slow to take events never
//! delays or fails a call. What could not be queued or sent is counted and said.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plumb_engine::cluster::Cluster;
use plumb_engine::plan::Pod;

use crate::Say;
use crate::kube::KubeCluster;

/// The most events waiting: a few calls' worth per container the node can start at once. More
/// are dropped (and counted) rather than held in memory while the API server does not take them.
const CAPACITY: usize = 256;

/// The API time one event may take, its client built included: one attempt.
const EVENT_BUDGET: Duration = Duration::from_secs(5);

/// Failures to send are said at most this often.
const SAY_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// One event on a pod, with the kubeconfig of the call that made it (whose identity sends it).
pub struct Queued {
    pub kubeconfig: PathBuf,
    pub pod: Pod,
    pub kind: String,
    pub reason: String,
    pub message: String,
}

/// The queue, and what became of the events.
pub struct EventQueue {
    queue: SyncSender<Queued>,
    counts: Arc<Counts>,
    say: Say,
    /// When a dropped event was said last.
    said_dropped: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

impl EventQueue {
    /// The queue, emptied by a thread of its own (`plumb-events`).
    pub fn start(say: Say) -> std::io::Result<EventQueue> {
        let (queue, events) = sync_channel(CAPACITY);
        let counts = Arc::new(Counts::default());
        let (sender_counts, sender_say) = (Arc::clone(&counts), Arc::clone(&say));
        std::thread::Builder::new()
            .name("plumb-events".into())
            .spawn(move || send_all(events, &sender_counts, &sender_say))?;
        Ok(EventQueue {
            queue,
            counts,
            say,
            said_dropped: Mutex::new(None),
        })
    }

    /// Queues `event`; dropped (counted, and said now and then) when the queue is full.
    pub fn push(&self, event: Queued) {
        let (e, why) = match self.queue.try_send(event) {
            Ok(()) => return,
            Err(TrySendError::Full(e)) => (e, format!("{CAPACITY} events wait to be sent already")),
            Err(TrySendError::Disconnected(e)) => (e, "the event sender is gone".to_string()),
        };
        let dropped = self.counts.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        let mut said = self.said_dropped.lock().unwrap_or_else(|p| p.into_inner());
        if said.is_none_or(|at| at.elapsed() >= SAY_AGAIN_AFTER) {
            *said = Some(Instant::now());
            (self.say)(format_args!(
                "events: {why}; dropped the {} event on pod {}/{} ({dropped} dropped so far)",
                e.reason, e.pod.namespace, e.pod.name
            ));
        }
    }

    /// Events sent, failed and dropped so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        let c = &self.counts;
        (
            c.sent.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
            c.dropped.load(Ordering::Relaxed),
        )
    }
}

/// Sends the queued events one by one until the queue is gone, with a client of its own (not
/// the calls': a call would then find none kept and make one), kept while the kubeconfig it was
/// made from names the same files with the same contents.
fn send_all(events: Receiver<Queued>, counts: &Counts, say: &Say) {
    let mut said_failed: Option<Instant> = None;
    let mut kept: Option<KubeCluster> = None;
    while let Ok(e) = events.recv() {
        let client = match kept.take() {
            Some(mut c) if c.kubeconfig() == e.kubeconfig && c.unchanged() => {
                c.begin_call(EVENT_BUDGET);
                Ok(c)
            }
            _ => KubeCluster::with_budget(&e.kubeconfig, EVENT_BUDGET),
        };
        let sent = client.and_then(|c| {
            let sent = c.event(&e.pod, &e.kind, &e.reason, &e.message);
            kept = Some(c);
            sent
        });
        match sent {
            Ok(()) => {
                counts.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(why) => {
                let failed = counts.failed.fetch_add(1, Ordering::Relaxed) + 1;
                if said_failed.is_none_or(|at| at.elapsed() >= SAY_AGAIN_AFTER) {
                    said_failed = Some(Instant::now());
                    say(format_args!(
                        "events: could not record the {} event on pod {}/{}: {why} ({failed} \
                         not sent so far)",
                        e.reason, e.pod.namespace, e.pod.name
                    ));
                }
            }
        }
    }
}
