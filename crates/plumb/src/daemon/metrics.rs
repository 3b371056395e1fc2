//! `plumb daemon --metrics-address ADDR`: Prometheus text (prometheus-client) of the calls, their
//! delegates, the API requests, the caches and the events, with `/healthz` (alive) and `/readyz`
//! (the caches serve) beside `/metrics`. A daemon started while another holds the address (two
//! pods of the DaemonSet on one node during a rollout) serves calls, and binds the address as
//! soon as it is free.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{Shared, say};

/// How often a daemon whose metrics address is taken tries it again.
const BIND_AGAIN: Duration = Duration::from_secs(5);

/// The most networks the delegates' durations are labelled with by name.
const MAX_NETWORKS: usize = 64;
/// The longest network name used as a label (a CNI network name is a short identifier).
const MAX_NETWORK_NAME: usize = 128;

/// The most connections to the metrics address served at once; more wait in the backlog.
const MAX_CONNECTIONS: usize = 16;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    command: String,
    /// The CNI error code, 0 for success.
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabel {
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DelegateLabels {
    network: String,
    command: String,
}

/// A call's or a delegate's duration: 1 ms to about 33 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// What is counted as it happens; the rest is read at each scrape ([`Snapshot`]).
pub(super) struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    call_seconds: Family<CommandLabel, Histogram, fn() -> Histogram>,
    delegate_seconds: Family<DelegateLabels, Histogram, fn() -> Histogram>,
    dynamic_changes: Family<ResultLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        let call_seconds = Family::new_with_constructor(seconds as fn() -> Histogram);
        let delegate_seconds = Family::new_with_constructor(seconds as fn() -> Histogram);
        registry.register(
            "plumb_cni_calls",
            "CNI calls answered, by command and CNI result code (0: success)",
            calls.clone(),
        );
        registry.register(
            "plumb_cni_call_duration_seconds",
            "How long CNI calls took in the daemon, by command",
            call_seconds.clone(),
        );
        registry.register(
            "plumb_delegate_duration_seconds",
            "How long delegate plugins took, by network and command",
            delegate_seconds.clone(),
        );
        let dynamic_changes = Family::<ResultLabel, Counter>::default();
        registry.register(
            "plumb_dynamic_changes",
            "Changes of running pods' attachments (--dynamic), by result: applied, refused \
             (the new annotation cannot be applied) or failed (what it attached rolled back, or \
             the pod's network-status not written)",
            dynamic_changes.clone(),
        );
        Metrics {
            registry,
            calls,
            call_seconds,
            delegate_seconds,
            dynamic_changes,
        }
    }
}

impl Metrics {
    /// One call answered: its command, CNI code (0: success) and duration.
    pub(super) fn call(&self, command: &str, code: u32, took: Duration) {
        let command = known_command(command);
        // The spec's codes and the plugins' range (CNI spec 1.1 §6); anything else, which a
        // delegate could print, as one value.
        let code = match code {
            0..=11 | 100..=199 | 999 => code.to_string(),
            _ => "other".to_string(),
        };
        self.calls
            .get_or_create(&CallLabels {
                command: command.clone(),
                code,
            })
            .inc();
        self.call_seconds
            .get_or_create(&CommandLabel { command })
            .observe(took.as_secs_f64());
    }

    /// One change of a running pod's attachments made (`applied`) or not (`refused`, `failed`).
    pub(super) fn dynamic_change(&self, result: &'static str) {
        (self.dynamic_changes)
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// What the calls' delegates are timed with. Network names come from NADs, which anyone
    /// allowed to make one names: the first [`MAX_NETWORKS`] are labelled by name, any other as
    /// `other`, so that the metrics cannot grow without end.
    pub(super) fn delegate_observer(&self) -> cni::runtime::RanHook {
        let family = self.delegate_seconds.clone();
        let named = std::sync::Mutex::new(std::collections::BTreeSet::<String>::new());
        Arc::new(move |run: &cni::runtime::PluginRun<'_>| {
            let network = {
                let mut named = named.lock().unwrap_or_else(|p| p.into_inner());
                let fits = run.network.len() <= MAX_NETWORK_NAME
                    && (named.contains(run.network) || named.len() < MAX_NETWORKS);
                if fits {
                    named.insert(run.network.to_string());
                    run.network.to_string()
                } else {
                    "other".to_string()
                }
            };
            family
                .get_or_create(&DelegateLabels {
                    network,
                    command: known_command(run.command.as_str()),
                })
                .observe(run.took.as_secs_f64());
        })
    }

    /// The Prometheus text of everything.
    fn render(&self, shared: &Shared) -> String {
        let mut out = String::new();
        let mut now = Registry::default();
        now.register_collector(Box::new(Snapshot::of(shared)));
        for registry in [&self.registry, &now] {
            // Writing to a String does not fail.
            let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, registry);
        }
        out
    }
}

/// A label value from the runtime's `CNI_COMMAND`, which any caller may set: the commands of
/// the spec, anything else as one value, so that no caller can grow the metrics without end.
fn known_command(command: &str) -> String {
    match command {
        "ADD" | "DEL" | "CHECK" | "GC" | "STATUS" | "VERSION" => command.to_string(),
        _ => "other".to_string(),
    }
}

/// What is read at each scrape.
#[derive(Debug)]
struct Snapshot {
    in_flight: u64,
    refused: u64,
    api: Vec<(&'static str, u16, u64)>,
    caches: Option<plumb_cluster::caches::Report>,
    events: (u64, u64, u64),
}

impl Snapshot {
    fn of(shared: &Shared) -> Snapshot {
        use std::sync::atomic::Ordering;
        Snapshot {
            in_flight: shared.running.load(Ordering::SeqCst) as u64,
            refused: shared.refused.load(Ordering::Relaxed),
            api: plumb_cluster::api_requests::counts(),
            caches: shared.connect.caches().map(|c| c.report()),
            events: shared.connect.events.counts(),
        }
    }
}

/// Writes one metric of `kind` (`counter` or `gauge`) with a value per label set.
fn write_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    counter: bool,
    values: &[(Vec<(&str, String)>, u64)],
) -> Result<(), std::fmt::Error> {
    let kind = if counter {
        prometheus_client::metrics::MetricType::Counter
    } else {
        prometheus_client::metrics::MetricType::Gauge
    };
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in values {
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let member = metric.encode_family(&labels)?;
        if counter {
            ConstCounter::new(*value).encode(member)?;
        } else {
            ConstGauge::new(*value as i64).encode(member)?;
        }
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        write_family(
            e,
            "plumb_cni_calls_in_flight",
            "CNI calls running now",
            false,
            &[(vec![], self.in_flight)],
        )?;
        write_family(
            e,
            "plumb_cni_calls_refused",
            "CNI calls answered code 11 for want of a turn (--max-calls, --max-wait)",
            true,
            &[(vec![], self.refused)],
        )?;
        let api: Vec<_> = (self.api.iter())
            .map(|(verb, status, n)| {
                (
                    vec![("verb", verb.to_string()), ("status", status.to_string())],
                    *n,
                )
            })
            .collect();
        write_family(
            e,
            "plumb_api_requests",
            "Requests to the Kubernetes API server, by verb and HTTP status (0: no answer)",
            true,
            &api,
        )?;
        let (sent, failed, dropped) = self.events;
        let events: Vec<_> = [("sent", sent), ("failed", failed), ("dropped", dropped)]
            .into_iter()
            .map(|(result, n)| (vec![("result", result.to_string())], n))
            .collect();
        write_family(
            e,
            "plumb_events",
            "Events on pods, by what became of them",
            true,
            &events,
        )?;
        let Some(r) = &self.caches else {
            return Ok(());
        };
        let kinds = [("pods", &r.pods), ("nads", &r.nads)];
        let per_kind = |f: &dyn Fn(&plumb_cluster::caches::KeptReport) -> u64| -> Vec<_> {
            kinds
                .iter()
                .map(|(kind, k)| (vec![("kind", kind.to_string())], f(k)))
                .collect()
        };
        write_family(
            e,
            "plumb_cache_objects",
            "Objects in the watch caches",
            false,
            &per_kind(&|k| k.objects as u64),
        )?;
        write_family(
            e,
            "plumb_cache_synced",
            "Whether a watch cache serves calls (1) or not yet, or no longer (0)",
            false,
            &per_kind(&|k| u64::from(k.synced)),
        )?;
        let lookups: Vec<_> = kinds
            .iter()
            .flat_map(|(kind, k)| {
                [("hit", k.hits), ("miss", k.misses)].map(|(result, n)| {
                    (
                        vec![("kind", kind.to_string()), ("result", result.to_string())],
                        n,
                    )
                })
            })
            .collect();
        write_family(
            e,
            "plumb_cache_lookups",
            "Lookups of the watch caches: served (hit) or read from the API (miss)",
            true,
            &lookups,
        )
    }
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` for as long as the daemon runs; while
/// the address is taken, tries it again every [`BIND_AGAIN`].
pub(super) async fn serve(addr: SocketAddr, shared: Arc<Shared>) {
    let mut said = false;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            // Anything but a taken address (one this host does not have, a port not allowed)
            // does not go away by waiting.
            Err(e) if e.kind() != std::io::ErrorKind::AddrInUse => {
                say(format_args!(
                    "metrics: cannot listen on {addr}: {e}; serving calls without metrics"
                ));
                return;
            }
            Err(e) => {
                if !said {
                    say(format_args!(
                        "metrics: cannot listen on {addr}: {e} (another daemon during a \
                         rollout?); serving calls, trying again every {} s",
                        BIND_AGAIN.as_secs()
                    ));
                    said = true;
                }
                tokio::time::sleep(BIND_AGAIN).await;
            }
        }
    };
    say(format_args!(
        "metrics: serving /metrics, /healthz and /readyz on {addr}"
    ));
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = Arc::clone(&open).acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let _slot = slot;
            let service =
                hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                    let answer = answer(request.uri().path(), &shared);
                    async move { Ok::<_, std::convert::Infallible>(answer) }
                });
            // The timer gives hyper its header-read timeout (30 s): a client that connects and
            // says nothing does not keep its slot.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer(path: &str, shared: &Shared) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            shared.metrics.render(shared),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" => match super::serve::readiness(shared) {
            (true, why) => (StatusCode::OK, "text/plain", why),
            (false, why) => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", why),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delegates_are_labelled_by_at_most_max_networks_names_and_the_rest_as_other() {
        let metrics = Metrics::default();
        let observe = metrics.delegate_observer();
        let long = "n".repeat(MAX_NETWORK_NAME + 1);
        let names: Vec<String> = (0..MAX_NETWORKS + 5).map(|i| format!("net-{i}")).collect();
        for network in names
            .iter()
            .map(String::as_str)
            .chain([long.as_str(), "net-0"])
        {
            observe(&cni::runtime::PluginRun {
                network,
                plugin_type: "bridge",
                command: cni::exec::Command::Add,
                took: Duration::from_millis(3),
                succeeded: true,
            });
        }
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry).unwrap();
        let counted: Vec<&str> = (text.lines())
            .filter(|l| l.starts_with("plumb_delegate_duration_seconds_count"))
            .collect();
        assert_eq!(counted.len(), MAX_NETWORKS + 1, "{counted:?}");
        let count = |network: &str| {
            let key = format!(
                "plumb_delegate_duration_seconds_count{{network=\"{network}\",command=\"ADD\"}} "
            );
            counted
                .iter()
                .find_map(|l| l.strip_prefix(key.as_str()))
                .map(str::to_string)
        };
        assert_eq!(
            count("net-0").as_deref(),
            Some("2"),
            "a name seen before keeps its label"
        );
        assert_eq!(
            count("other").as_deref(),
            Some("6"),
            "5 names past the bound and a long one"
        );
        assert_eq!(count(&format!("net-{MAX_NETWORKS}")), None);
    }
}
