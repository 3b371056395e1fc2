//! The API clients the daemon keeps between CNI calls ([`ClientPool`]), so that a call finds a
//! client already built and its connection to the API server already open: no kubeconfig to
//! parse, no TCP or TLS handshake.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::kube::KubeCluster;

/// The most clients kept idle: as many as calls ran together lately, up to this.
const MAX_IDLE: usize = 4;

/// How long an idle client is kept. Its connection is not looked after between calls (no task
/// reads it), so one idle for long may have been closed by the API server or a load balancer
/// in between (an AWS ALB closes idle connections after 60 s); a request on it would fail and
/// be retried on a new one. Past this, the next call builds a client, as thin mode does.
const IDLE_FOR: Duration = Duration::from_secs(30);

/// Idle clients. A call takes one for its own use and gives it back when it ends, so two calls
/// never share one (each call counts its own API budget, and a 401 rebuilds only its own
/// client). Calls at the same time each get one: the first finds none idle and builds its own,
/// as thin mode does.
pub struct ClientPool {
    idle: Mutex<Vec<Idle>>,
    /// [`MAX_IDLE`] and [`IDLE_FOR`]; other limits in tests only.
    max_idle: usize,
    idle_for: Duration,
}

impl Default for ClientPool {
    fn default() -> Self {
        ClientPool::with_limits(MAX_IDLE, IDLE_FOR)
    }
}

struct Idle {
    cluster: KubeCluster,
    since: Instant,
}

impl ClientPool {
    fn with_limits(max_idle: usize, idle_for: Duration) -> Self {
        ClientPool {
            idle: Mutex::new(Vec::new()),
            max_idle,
            idle_for,
        }
    }

    /// The idle clients, those kept past [`IDLE_FOR`] taken out: pruned on every use of the
    /// pool (take, give, the health answer's count), so that a client nobody asks for again
    /// does not keep its runtime and its connection for ever. They are to be dropped by the
    /// caller, outside the lock (their runtimes are shut down then).
    fn fresh(&self) -> (std::sync::MutexGuard<'_, Vec<Idle>>, Vec<Idle>) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let (keep, expired) = std::mem::take(&mut *idle)
            .into_iter()
            .partition(|i| i.since.elapsed() < self.idle_for);
        *idle = keep;
        (idle, expired)
    }

    /// An idle client for `kubeconfig`, readied for a call with `budget` of API time; `None`
    /// when there is none that may be used (then the call builds one). A client is given out
    /// again only while the kubeconfig and every file it names still hold what they held when
    /// it was built ([`KubeCluster::unchanged`]): a rotated service-account token is never sent
    /// after its file was replaced.
    pub fn take(&self, kubeconfig: &Path, budget: Duration) -> Option<KubeCluster> {
        let (found, expired) = {
            let (mut idle, expired) = self.fresh();
            // The most recently used: its connection is the likeliest to be open.
            let found = idle
                .iter()
                .rposition(|i| i.cluster.kubeconfig() == kubeconfig)
                .map(|at| idle.remove(at).cluster);
            (found, expired)
        };
        drop(expired);
        let mut cluster = found?;
        if !cluster.unchanged() {
            return None;
        }
        cluster.begin_call(budget);
        Some(cluster)
    }

    /// `cluster` back from a call that has ended. The oldest idle ones go when there are more
    /// than [`MAX_IDLE`].
    pub fn give(&self, cluster: KubeCluster) {
        let dropped = {
            let (mut idle, mut dropped) = self.fresh();
            idle.push(Idle {
                cluster,
                since: Instant::now(),
            });
            let over = idle.len().saturating_sub(self.max_idle);
            dropped.extend(idle.drain(..over));
            dropped
        };
        drop(dropped);
    }

    /// How many clients are idle and not expired (for tests and the daemon's health answer).
    pub fn idle(&self) -> usize {
        let (count, expired) = {
            let (idle, expired) = self.fresh();
            (idle.len(), expired)
        };
        drop(expired);
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client for a kubeconfig of its own; building one reads files only, no network.
    fn kubeconfig(dir: &Path, name: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
             clusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\", \
             insecure-skip-tls-verify: true}}]\n\
             users: [{name: u, user: {token: t}}]\n\
             contexts: [{name: x, context: {cluster: c, user: u}}]\n",
        )
        .unwrap();
        path
    }

    fn client(kubeconfig: &Path) -> KubeCluster {
        KubeCluster::from_kubeconfig(kubeconfig).unwrap()
    }

    #[test]
    fn at_most_max_idle_clients_are_kept_the_oldest_going_first() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (kubeconfig(dir.path(), "a"), kubeconfig(dir.path(), "b"));
        let pool = ClientPool::default();
        pool.give(client(&a));
        for _ in 0..MAX_IDLE {
            pool.give(client(&b));
        }
        assert_eq!(pool.idle(), MAX_IDLE);
        assert!(
            pool.take(&a, Duration::from_secs(1)).is_none(),
            "the oldest, the only one for a, went"
        );
        assert!(pool.take(&b, Duration::from_secs(1)).is_some());
        assert_eq!(pool.idle(), MAX_IDLE - 1);
    }

    #[test]
    fn expired_clients_are_neither_given_nor_counted_nor_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = kubeconfig(dir.path(), "a");
        let idle_for = Duration::from_millis(200);
        let pool = ClientPool::with_limits(MAX_IDLE, idle_for);
        pool.give(client(&a));
        pool.give(client(&a));
        assert_eq!(pool.idle(), 2);
        std::thread::sleep(idle_for + Duration::from_millis(50));
        // Given back after the others expired: they go then, not at the next take.
        pool.give(client(&a));
        assert_eq!(pool.idle.lock().unwrap().len(), 1, "pruned by give");
        std::thread::sleep(idle_for + Duration::from_millis(50));
        assert_eq!(pool.idle(), 0, "the health answer counts no expired client");
        assert_eq!(pool.idle.lock().unwrap().len(), 0, "pruned by the count");
        pool.give(client(&a));
        std::thread::sleep(idle_for + Duration::from_millis(50));
        assert!(pool.take(&a, Duration::from_secs(1)).is_none());
    }
}
