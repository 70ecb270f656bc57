//! One connection to kilnd and the typed calls on it.

use crate::error::ClientError;
use crate::events::EventStream;
use hyper_util::rt::TokioIo;
use kiln_proto::auth::Bearer;
use kiln_proto::pb;
use kiln_proto::pb::compiler_client::CompilerClient;
use kiln_proto::pb::snapshots_client::SnapshotsClient;
use kiln_proto::pb::torch_graphs_client::TorchGraphsClient;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Uri};

pub use kiln_proto::MAX_MESSAGE_BYTES;

/// How long a TCP connect may take. A Unix socket connects or fails at once.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection every call goes through: the channel, with the bearer token (if any) put on
/// each request. The Unix socket needs no token, and then none is sent.
pub type Transport = InterceptedService<Channel, Bearer>;

/// A connected kilnd client.
///
/// Cloning is cheap and clones share the connection (tonic's `Channel` multiplexes requests), so
/// the methods take `&self` and one `Client` can serve concurrent calls.
#[derive(Debug, Clone)]
pub struct Client {
    inner: CompilerClient<Transport>,
    channel: Transport,
    uri: String,
}

/// What a client of kilnd's TCP listener may need: a bearer token, and a CA to trust for
/// `https://` besides the system's. Its `Debug` never prints the token.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// Sent as `authorization: Bearer <token>` on every call; empty sends none.
    pub token: String,
    /// Extra CA certificate (PEM) for a kilnd whose certificate a private CA signed.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("token", &if self.token.is_empty() { "" } else { "<redacted>" })
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .finish()
    }
}

/// The variable naming the token file every client reads, as `KILN_DAEMON` names the daemon.
pub const TOKEN_FILE_ENV: &str = "KILN_TOKEN_FILE";
/// The variable naming a CA file (PEM) to trust for `https://` besides the system's roots.
pub const CA_FILE_ENV: &str = "KILN_CA_FILE";

impl ConnectOptions {
    /// The files `KILN_TOKEN_FILE` and `KILN_CA_FILE` name (unset or empty: none), as the `kiln`
    /// CLI and the Python client read them.
    pub fn from_env() -> Result<Self, ClientError> {
        let path = |var| std::env::var_os(var).filter(|v| !v.is_empty()).map(PathBuf::from);
        Self::from_files(path(TOKEN_FILE_ENV).as_deref(), path(CA_FILE_ENV).as_deref())
    }

    /// Reads the token (surrounding whitespace trimmed) and the CA from their files.
    pub fn from_files(token_file: Option<&Path>, ca_file: Option<&Path>) -> Result<Self, ClientError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| ClientError::Credentials { path: path.to_owned(), reason: e.to_string() })
        };
        let token = match token_file {
            Some(path) => String::from_utf8(read(path)?)
                .map_err(|_| ClientError::Credentials { path: path.to_owned(), reason: "not UTF-8".into() })?
                .trim()
                .to_owned(),
            None => String::new(),
        };
        let ca_pem = ca_file.map(read).transpose()?;
        Ok(ConnectOptions { token, ca_pem })
    }
}

/// Connects to kilnd at `uri`: `unix:///path/to/kilnd.sock`, `http://host:port` or
/// `https://host:port`, with the token and CA that `KILN_TOKEN_FILE` and `KILN_CA_FILE` name
/// ([`ConnectOptions::from_env`]). See [`connect_with`].
pub async fn connect(uri: &str) -> Result<Client, ClientError> {
    connect_with(uri, &ConnectOptions::from_env()?).await
}

/// Connects to kilnd at `uri` with `options` (a token and a CA for its TCP listener).
///
/// The connection is made eagerly, so a daemon that is not running is reported here, with a
/// message that says how to point the client elsewhere, rather than on the first call. A wrong
/// token is reported by the first call, as UNAUTHENTICATED.
pub async fn connect_with(uri: &str, options: &ConnectOptions) -> Result<Client, ClientError> {
    let unreachable =
        |err: tonic::transport::Error| ClientError::Unreachable { uri: uri.to_owned(), cause: root_cause(&err) };
    let bearer = Bearer::new(&options.token).map_err(|_| ClientError::InvalidToken)?;
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
        DaemonAddr::Https(endpoint) => {
            let mut tls = ClientTlsConfig::new().with_native_roots();
            if let Some(pem) = &options.ca_pem {
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            let endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| ClientError::InvalidUri { uri: uri.to_owned(), reason: root_cause(&e) })?;
            endpoint.connect_timeout(CONNECT_TIMEOUT).connect().await.map_err(unreachable)?
        }
    };
    let channel = InterceptedService::new(channel, bearer);
    let inner = CompilerClient::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    Ok(Client { inner, channel, uri: uri.to_owned() })
}

impl Client {
    /// The underlying connection, for the other services kilnd serves on it (gRPC health,
    /// reflection).
    pub fn channel(&self) -> Transport {
        self.channel.clone()
    }

    /// The URI this client connected to.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The generated tonic client, for calls this wrapper does not cover.
    pub fn grpc(&self) -> CompilerClient<Transport> {
        self.inner.clone()
    }

    /// The generated client of `kiln.v1.Snapshots` on this connection, with the same raised
    /// message limits: a `PutFiles` batch or a `GetFiles` message carries whole files.
    pub fn snapshots(&self) -> SnapshotsClient<Transport> {
        SnapshotsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// The generated client of `kiln.v1.TorchGraphs` on this connection.
    pub fn torch_graphs(&self) -> TorchGraphsClient<Transport> {
        TorchGraphsClient::new(self.channel.clone())
    }

    /// torch.compile jobs' returns: the fleet ledger's, or this kilnd's without a fleet cache.
    pub async fn torch_jobs(&self, job: &str, limit: u32) -> Result<pb::TorchJobsReply, ClientError> {
        let request = pb::TorchJobsRequest { job: job.to_owned(), limit };
        Ok(self.torch_graphs().torch_jobs(request).await?.into_inner())
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
    Https(Box<Endpoint>),
}

fn parse_uri(uri: &str) -> Result<DaemonAddr, ClientError> {
    let invalid = |reason: &str| ClientError::InvalidUri { uri: uri.to_owned(), reason: reason.to_owned() };
    if let Some(path) = uri.strip_prefix("unix://") {
        if path.is_empty() {
            return Err(invalid("no socket path"));
        }
        return Ok(DaemonAddr::Unix(PathBuf::from(path)));
    }
    if uri.starts_with("http://") || uri.starts_with("https://") {
        let endpoint = Box::new(Endpoint::from_shared(uri.to_owned()).map_err(|e| invalid(&root_cause(&e)))?);
        return Ok(if uri.starts_with("https://") { DaemonAddr::Https(endpoint) } else { DaemonAddr::Http(endpoint) });
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
        assert!(matches!(parse_uri("https://kilnd.example:7070").unwrap(), DaemonAddr::Https(_)));
    }

    #[test]
    fn rejects_other_uris() {
        for uri in ["unix://", "tcp://host:1", "/run/kiln/kilnd.sock", ""] {
            assert!(matches!(parse_uri(uri), Err(ClientError::InvalidUri { .. })), "{uri}");
        }
    }

    #[test]
    fn credentials_come_from_files_and_never_show_in_debug() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "  kilnd-token-0123456789\n").unwrap();
        let options = ConnectOptions::from_files(Some(&token), None).unwrap();
        assert_eq!(options.token, "kilnd-token-0123456789");
        assert!(!format!("{options:?}").contains("kilnd-token"));
        let absent = dir.path().join("absent");
        let err = ConnectOptions::from_files(None, Some(&absent)).unwrap_err();
        assert!(err.to_string().contains(&absent.display().to_string()), "{err}");
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
