//! One connection to kilnd and the typed calls on it.

use crate::error::ClientError;
use crate::events::EventStream;
use hyper_util::rt::TokioIo;
use kiln_proto::pb;
use kiln_proto::pb::compiler_client::CompilerClient;
use kiln_proto::pb::snapshots_client::SnapshotsClient;
use std::path::PathBuf;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};

pub use kiln_proto::MAX_MESSAGE_BYTES;

/// How long a TCP connect may take. A Unix socket connects or fails at once.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected kilnd client.
///
/// Cloning is cheap and clones share the connection (tonic's `Channel` multiplexes requests), so
/// the methods take `&self` and one `Client` can serve concurrent calls.
#[derive(Debug, Clone)]
pub struct Client {
    inner: CompilerClient<Channel>,
    channel: Channel,
    uri: String,
}

/// Connects to kilnd at `uri`: `unix:///path/to/kilnd.sock` or `http://host:port`.
///
/// The connection is made eagerly, so a daemon that is not running is reported here, with a
/// message that says how to point the client elsewhere, rather than on the first call.
pub async fn connect(uri: &str) -> Result<Client, ClientError> {
    let unreachable =
        |err: tonic::transport::Error| ClientError::Unreachable { uri: uri.to_owned(), cause: root_cause(&err) };
    let channel = match parse_uri(uri)? {
        DaemonAddr::Unix(path) => {
            // tonic needs an http URI even when the connector ignores it; this one is never dialled.
            let endpoint = Endpoint::from_static("http://[::]:50051");
            let connector = tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            });
            endpoint.connect_with_connector(connector).await.map_err(unreachable)?
        }
        DaemonAddr::Http(endpoint) => endpoint.connect_timeout(CONNECT_TIMEOUT).connect().await.map_err(unreachable)?,
    };
    let inner = CompilerClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    Ok(Client { inner, channel, uri: uri.to_owned() })
}

impl Client {
    /// The underlying connection, for the other services kilnd serves on it (gRPC health,
    /// reflection).
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// The URI this client connected to.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The generated tonic client, for calls this wrapper does not cover.
    pub fn grpc(&self) -> CompilerClient<Channel> {
        self.inner.clone()
    }

    /// The generated client of `kiln.v1.Snapshots` on this connection, with the same raised
    /// message limits: a `PutFiles` batch or a `GetFiles` message carries whole files.
    pub fn snapshots(&self) -> SnapshotsClient<Channel> {
        SnapshotsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// Submits a graph and streams its events until the job is done.
    pub async fn compile(&self, mut request: pb::CompileRequest) -> Result<EventStream, ClientError> {
        // The stream unbatches for its readers (see [`EventStream`]).
        request.batch_results = true;
        let response = self.inner.clone().compile(request).await?;
        Ok(EventStream::new(response.into_inner()))
    }

    /// Submits a graph and returns its job id at once; the daemon keeps working with no client
    /// attached, and [`Client::watch`] follows the job later.
    pub async fn submit(&self, request: pb::CompileRequest) -> Result<String, ClientError> {
        let response = self.inner.clone().submit(request).await?;
        Ok(response.into_inner().job_id)
    }

    /// Streams a job's events, replaying those already emitted first.
    pub async fn watch(&self, job_id: &str) -> Result<EventStream, ClientError> {
        let request = pb::WatchRequest { job_id: job_id.to_owned(), batch_results: true };
        let response = self.inner.clone().watch(request).await?;
        Ok(EventStream::new(response.into_inner()))
    }

    /// Asks the caches only: never compiles, and a kernel in no tier comes back as a miss.
    pub async fn lookup(&self, mut request: pb::CompileRequest) -> Result<EventStream, ClientError> {
        request.batch_results = true;
        let response = self.inner.clone().lookup(request).await?;
        Ok(EventStream::new(response.into_inner()))
    }

    /// Pulls graphs and kernels from the fleet cache into the daemon's local tiers; the stream
    /// reports progress and ends with `finished`.
    pub async fn warm(&self, request: pb::WarmRequest) -> Result<tonic::Streaming<pb::WarmProgress>, ClientError> {
        Ok(self.inner.clone().warm(request).await?.into_inner())
    }

    /// Counters, toolchains, GPUs and tier sizes of the daemon.
    pub async fn stats(&self) -> Result<pb::StatsResponse, ClientError> {
        let response = self.inner.clone().stats(pb::StatsRequest {}).await?;
        Ok(response.into_inner())
    }
}

/// Where the daemon listens, parsed from its URI.
#[derive(Debug)]
enum DaemonAddr {
    Unix(PathBuf),
    /// Boxed: an `Endpoint` is large next to a path.
    Http(Box<Endpoint>),
}

fn parse_uri(uri: &str) -> Result<DaemonAddr, ClientError> {
    let invalid = |reason: &str| ClientError::InvalidUri { uri: uri.to_owned(), reason: reason.to_owned() };
    if let Some(path) = uri.strip_prefix("unix://") {
        if path.is_empty() {
            return Err(invalid("no socket path"));
        }
        return Ok(DaemonAddr::Unix(PathBuf::from(path)));
    }
    if uri.starts_with("http://") {
        let endpoint = Endpoint::from_shared(uri.to_owned()).map_err(|e| invalid(&root_cause(&e)))?;
        return Ok(DaemonAddr::Http(Box::new(endpoint)));
    }
    if uri.starts_with("https://") {
        return Err(invalid("TLS to kilnd is not supported; kilnd listens on plain http"));
    }
    Err(invalid("unknown scheme"))
}

/// The innermost error message: tonic's own `Display` says only "transport error", while the
/// useful part ("No such file or directory", "Connection refused") sits at the end of the chain.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(next) = current.source() {
        current = next;
    }
    current.to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_unix_and_http() {
        match parse_uri("unix:///run/kiln/kilnd.sock").unwrap() {
            DaemonAddr::Unix(path) => assert_eq!(path, PathBuf::from("/run/kiln/kilnd.sock")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_uri("http://127.0.0.1:7070").unwrap(), DaemonAddr::Http(_)));
    }

    #[test]
    fn rejects_other_uris() {
        for uri in ["unix://", "https://host:1", "tcp://host:1", "/run/kiln/kilnd.sock", ""] {
            assert!(matches!(parse_uri(uri), Err(ClientError::InvalidUri { .. })), "{uri}");
        }
    }

    #[tokio::test]
    async fn missing_socket_is_reported_as_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("unix://{}/absent.sock", dir.path().display());
        let err = connect(&uri).await.unwrap_err();
        assert!(matches!(err, ClientError::Unreachable { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&uri), "{text}");
        assert!(text.contains("is kilnd running?"), "{text}");
        assert!(text.contains("No such file"), "{text}");
    }
}
