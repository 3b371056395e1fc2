//! The API clients the daemon keeps between CNI calls, so that a call finds a client already
//! built and its connection to the API server already open: no kubeconfig to parse, no TCP or
//! TLS handshake (DESIGN.md: the daemon keeps the client and the connection across calls).
//!
//! A call takes a client for its own use and gives it back when it ends, so two calls never
//! share one (each call counts its own API budget, and a 401 rebuilds only its own client).
//! Calls at the same time each get one: the first finds none idle and builds its own, as thin
//! mode does. A client is given out again only while the kubeconfig and every file it names
//! still hold what they held when it was built ([`KubeCluster::unchanged`]): a rotated
//! service-account token is never sent after its file was replaced.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cluster::KubeCluster;

/// The most clients kept idle: as many as calls ran together lately, up to this.
const MAX_IDLE: usize = 4;

/// How long an idle client is kept. Its connection is not looked after between calls (no task
/// reads it), so one idle for long may have been closed by the API server or a load balancer
/// in between (an AWS ALB closes idle connections after 60 s); a request on it would fail and
/// be retried on a new one. Past this, the next call builds a client, as thin mode does.
const IDLE_FOR: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct ClientPool {
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    cluster: KubeCluster,
    since: Instant,
}

impl ClientPool {
    /// An idle client for `kubeconfig`, readied for a call with `budget` of API time; `None`
    /// when there is none that may be used (then the call builds one).
    pub fn take(&self, kubeconfig: &Path, budget: Duration) -> Option<KubeCluster> {
        let (found, expired) = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let (keep, expired): (Vec<Idle>, Vec<Idle>) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|i| i.since.elapsed() < IDLE_FOR);
            *idle = keep;
            // The most recently used: its connection is the likeliest to be open.
            let found = idle
                .iter()
                .rposition(|i| i.cluster.kubeconfig() == kubeconfig)
                .map(|at| idle.remove(at).cluster);
            (found, expired)
        };
        // Their runtimes are shut down outside the lock.
        drop(expired);
        let mut cluster = found?;
        if !cluster.unchanged() {
            return None;
        }
        cluster.begin_call(budget);
        Some(cluster)
    }

    /// `cluster` back from a call that has ended. The oldest idle one goes when there are more
    /// than [`MAX_IDLE`].
    pub fn give(&self, cluster: KubeCluster) {
        let dropped = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.push(Idle {
                cluster,
                since: Instant::now(),
            });
            (idle.len() > MAX_IDLE).then(|| idle.remove(0))
        };
        drop(dropped);
    }

    /// How many clients are idle (for tests and the daemon's health answer).
    pub fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}
