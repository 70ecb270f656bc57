//! kiln-serve: what the two daemons, kilnd and kiln-cache, both do around their gRPC services,
//! written once. Each daemon keeps its own metrics, pages and routes; this crate only carries
//! them.
//!
//! - [`init_tracing`]: logging to stderr, filtered by `KILN_LOG` (default `info`).
//! - [`shutdown_signal`]: resolves on SIGTERM or SIGINT.
//! - [`arm_stop_deadline`]: a daemon told to stop exits by a deadline, whatever still runs.
//! - [`every::Every`]: the clock of a periodic task, which ticks until the daemon stops.
//! - [`render`]: a Prometheus registry as the text exposition; [`metrics`]: the label sets and
//!   per-job torch.compile gauges both daemons export.
//! - [`status_routes`]: a status page's `/` (HTML) and `/status.json` routes over one snapshot.
//! - [`serve_metrics`]: serves `/metrics` beside those pages on the `--metrics` listener.
//! - [`tcp::bind`]: TCP listeners with a backlog sized for a fleet reconnecting at once.
//! - [`unix`]: kilnd's Unix socket connections, which take any client's `:authority` (grpcio
//!   sends the socket path, which h2 refuses).
//! - [`html`]: the status pages' HTML builder, which escapes every text it is given.
//! - [`auth`]: the bearer-token layer in front of both daemons' gRPC services.
//! - [`config_keys`]: the keys a config file accepts, and the test both daemons run that their
//!   shipped example configs list every one and their `--help` reads as plain text.
//!
//! kiln-proto stays free of axum, the socket filter and the pages: the clients link it, and they
//! serve nothing.

pub mod auth;
pub mod config_keys;
pub mod every;
pub mod html;
pub mod metrics;
pub mod tcp;
pub mod torch_jobs;
pub mod unix;

use axum::http::header;
use axum::routing::get;
use prometheus_client::registry::Registry;
use std::borrow::Borrow;
use std::time::Duration;

/// Logs to stderr, filtered by `KILN_LOG` (`tracing_subscriber`'s `EnvFilter` syntax), `info`
/// when it is unset or does not parse. Colours only on a terminal: journald, a log file or a
/// container's log would otherwise keep the escape codes. Call once, first thing in `main`.
pub fn init_tracing() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("KILN_LOG").unwrap_or_else(|_| "info".into()))
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// Resolves when the process gets SIGTERM or SIGINT. When the handlers cannot be installed it
/// logs so, naming the daemon (`name`), and never resolves.
pub async fn shutdown_signal(name: &str) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop {name} with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// How long past its drain bound a stopping daemon may take to flush its last answers, shut its
/// runtime down and remove its socket before [`arm_stop_deadline`] ends it.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// Makes sure a daemon told to stop does stop, as systemd and Kubernetes expect (they kill what
/// does not): once armed, a plain thread, outside the async runtime so that nothing wedged in
/// it can hold the thread up, exits the process with status 1 if it still runs after `bound`;
/// and a second SIGTERM or SIGINT exits it at once, for a user at a terminal who does not want
/// to wait for the drain. Call it from the shutdown future, inside the runtime.
pub fn arm_stop_deadline(name: &'static str, bound: Duration) {
    let spawned = std::thread::Builder::new().name("stop-deadline".into()).spawn(move || {
        std::thread::sleep(bound);
        tracing::error!(?bound, "{name} did not exit within {bound:?} of being told to stop; exiting now");
        std::process::exit(1);
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the stop deadline's thread; {name} may outlive its drain bound");
    }
    tokio::spawn(async move {
        shutdown_signal(name).await;
        tracing::warn!("{name} told to stop again; exiting now without draining");
        std::process::exit(1);
    });
}

/// The Prometheus text exposition of `registry`.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// A status page's routes: `/`, the page `html` draws from a snapshot, and `/status.json`, the
/// snapshot itself in JSON. `snapshot` is called once per request, on either route.
pub fn status_routes<T, S, Fut>(
    snapshot: impl Fn() -> Fut + Clone + Send + Sync + 'static,
    html: impl Fn(&T) -> String + Clone + Send + Sync + 'static,
) -> axum::Router
where
    T: serde::Serialize + ?Sized,
    S: Borrow<T> + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let json = snapshot.clone();
    axum::Router::new()
        .route(
            "/",
            get(move || {
                let (snapshot, html) = (snapshot.clone(), html.clone());
                async move {
                    let page = html(snapshot().await.borrow());
                    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page)
                }
            }),
        )
        .route(
            "/status.json",
            get(move || {
                let snapshot = json.clone();
                async move {
                    let body = serde_json::to_string(snapshot().await.borrow())
                        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
                    ([(header::CONTENT_TYPE, "application/json")], body)
                }
            }),
        )
}

/// Serves `/metrics` (what `render` returns, as OpenMetrics text) and `pages` beside it (the
/// status page) on `listener` until `shutdown` resolves.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
    pages: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Said once bound, so a port of 0 (any free one) can be found in the log.
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics and the status page");
    }
    let app =
        pages.route(
            "/metrics",
            get(move || {
                let render = render.clone();
                async move {
                    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], render())
                }
            }),
        );
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use prometheus_client::metrics::counter::Counter;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tower::ServiceExt;

    #[derive(Debug, serde::Serialize)]
    struct Snapshot {
        hosts: u32,
    }

    fn registry() -> Registry {
        let mut registry = Registry::with_prefix("kiln_test");
        let counter = Counter::<u64>::default();
        counter.inc();
        registry.register("things", "Things counted", counter);
        registry
    }

    async fn fetch(app: axum::Router, path: &str) -> (String, String) {
        let response = app.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let kind = response.headers()[header::CONTENT_TYPE].to_str().unwrap().to_owned();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (kind, String::from_utf8(body.to_vec()).unwrap())
    }

    #[test]
    fn render_is_the_text_exposition() {
        let text = render(&registry());
        assert!(text.contains("kiln_test_things_total 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[tokio::test]
    async fn status_routes_draw_the_page_and_the_json_from_one_snapshot() {
        // An owned snapshot (kilnd's) and a shared one (kiln-cache's) both do.
        let owned = status_routes(|| async { Snapshot { hosts: 3 } }, |s: &Snapshot| format!("<p>{} hosts", s.hosts));
        let shared = Arc::new(Snapshot { hosts: 4 });
        let shared = status_routes(
            move || {
                let s = Arc::clone(&shared);
                async move { s }
            },
            |s: &Snapshot| format!("<p>{} hosts", s.hosts),
        );
        assert_eq!(fetch(owned.clone(), "/").await, ("text/html; charset=utf-8".into(), "<p>3 hosts".into()));
        assert_eq!(fetch(owned, "/status.json").await, ("application/json".into(), "{\"hosts\":3}".into()));
        assert_eq!(fetch(shared, "/status.json").await.1, "{\"hosts\":4}");
    }

    #[tokio::test]
    async fn serve_metrics_serves_metrics_and_the_pages_until_shutdown() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let registry = Arc::new(registry());
        let pages = axum::Router::new().route("/", get(|| async { "page" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(serve_metrics(listener, move || render(&registry), pages, async {
            let _ = stopped.await;
        }));
        for (path, want) in [("/metrics", "kiln_test_things_total 1"), ("/", "page")] {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            assert!(response.starts_with("HTTP/1.1 200"), "{response}");
            assert!(response.contains(want), "{response}");
            if path == "/metrics" {
                assert!(response.contains("application/openmetrics-text; version=1.0.0"), "{response}");
            }
        }
        stop.send(()).unwrap();
        served.await.unwrap().unwrap();
    }
}
