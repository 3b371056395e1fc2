//! The kube-rs client plumb talks to the API server through: the stack `kube::Client::try_from`
//! builds, assembled from kube's public `ConfigExt` layers (the documented way to customise it),
//! with Nagle's algorithm off and HTTP/2 offered, as client-go (Multus's client) has them, HTTP/2
//! connections pinged while a request waits, and no retry, tracing or proxy layer.

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use tower::{BoxError, ServiceBuilder};

/// How long a connection with a request waiting on it may be silent before it is pinged, and
/// then how long the ping may go unanswered before the connection is closed: together less
/// than one attempt (the client's `REQUEST_TIMEOUT`, 5 s), so that the attempt's retry finds a
/// new connection. On HTTP/2 a connection gone dead (an API server or load balancer failed over
/// without a reset) would otherwise stay in the pool, and every later request would go onto it
/// and time out too.
const PING_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// The same for the daemon's watches, whose connection stays open and mostly quiet for
/// minutes: client-go's (a ping after 30 s without a frame, 15 s for its answer), not one every
/// 2 s from each node's daemon to the API server.
const WATCH_PING_AFTER: std::time::Duration = std::time::Duration::from_secs(30);
const WATCH_PING_ANSWER: std::time::Duration = std::time::Duration::from_secs(15);

/// What a client is for: a CNI call's requests, or the daemon's watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    Call,
    Watch,
}

/// The connector: TCP with `TCP_NODELAY`, then TLS as the kubeconfig says (its CA, client
/// certificate, server name), offering h2 and http/1.1. What kube's
/// `rustls_https_connector_with_connector` builds, but for HTTP/2.
fn connector(
    cfg: &kube::Config,
) -> Result<hyper_rustls::HttpsConnector<HttpConnector>, kube::Error> {
    let mut http = HttpConnector::new();
    // The URL's scheme is https; the TLS connector wrapped around this one handles it.
    http.enforce_http(false);
    // kube 5 builds its connector with hyper-util's default, `TCP_NODELAY` off (kube-rs issue
    // #2056). After the TLS handshake the client's Finished is still unacknowledged when the
    // first request is written, so the kernel holds that request until the server's ACK comes
    // back: one round trip more on every CNI call that asks the API anything, and on a loaded
    // API server the ACK can come late. Go's client-go has Nagle off, as Go does for every TCP
    // connection.
    http.set_nodelay(true);
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(cfg.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &cfg.tls_server_name {
        let name = name.clone().try_into().map_err(|e| {
            kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
        })?;
        builder =
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    // HTTP/2 as well as HTTP/1.1 by ALPN (kube's offers HTTP/1.1 only), as client-go does: on
    // an HTTP/2 connection the NAD GETs of one call go out together (`KubeCluster::nads`)
    // instead of one round trip after another. A server that does not pick h2 gets HTTP/1.1.
    Ok(builder.enable_http1().enable_http2().wrap_connector(http))
}

/// A client for `cfg`, as `kube::Client::try_from(cfg)` builds it but for Nagle and HTTP/2
/// (`connector`), and without a proxy (the caller refuses `proxy-url`). Spawns its
/// connection tasks on the tokio runtime it is called on.
///
/// Left out on purpose: kube's retry layer (plumb retries itself, bounded: `kube/failure.rs`),
/// its tracing layer (plumb installs no subscriber), gzip (not enabled), and the proxy: kube
/// fills `proxy_url` from `HTTPS_PROXY`, which runtimes behind a corporate proxy have for
/// pulling images and their plugins inherit (with `NO_PROXY` naming the API server); kube's own
/// builder, built without proxy support, refuses every call then, where this stack reaches the
/// API server directly.
pub fn client(cfg: kube::Config, usage: Use) -> Result<kube::Client, kube::Error> {
    let (ping_after, ping_answer) = match usage {
        Use::Call => (PING_AFTER, PING_AFTER),
        Use::Watch => (WATCH_PING_AFTER, WATCH_PING_ANSWER),
    };
    // The configuration's timeouts, as kube's builder sets them (`hyper-timeout`: the connect
    // timeout bounds the host name's lookup and the TLS handshake too).
    let mut timed = TimeoutConnector::new(connector(&cfg)?);
    timed.set_connect_timeout(cfg.connect_timeout);
    timed.set_read_timeout(cfg.read_timeout);
    timed.set_write_timeout(cfg.write_timeout);
    timed.set_reset_reader_on_write(cfg.reset_reader_on_write);
    let hyper = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(ping_after)
        .http2_keep_alive_timeout(ping_answer)
        .http2_keep_alive_while_idle(false)
        .build::<_, kube::client::Body>(timed);
    // Every answer counted by verb and status (`api_requests`), the daemon's metrics.
    let counted = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let verb = crate::api_requests::verb(request.method(), request.uri().query());
        let sent = hyper.request(request);
        async move {
            let answer = sent.await;
            let status = answer.as_ref().map_or(0, |r| r.status().as_u16());
            crate::api_requests::record(verb, status);
            answer
        }
    });
    let service = ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(cfg.auth_layer()?)
        .layer(cfg.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(counted);
    Ok(kube::Client::new(service, cfg.default_namespace))
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt;

    use super::*;

    #[test]
    fn connections_to_the_api_server_have_nagle_off() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let cfg = kube::Config::new(url.parse().unwrap());
        let rt = crate::runtime::current_thread().unwrap();
        let stream = rt
            .block_on(connector(&cfg).unwrap().oneshot(url.parse().unwrap()))
            .unwrap();
        let hyper_rustls::MaybeHttpsStream::Http(tcp) = stream else {
            panic!("a plain http URL gives a plain TCP stream");
        };
        assert!(tcp.inner().nodelay().unwrap(), "TCP_NODELAY is off");
    }
}
