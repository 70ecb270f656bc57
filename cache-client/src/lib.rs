//! kiln-cache-client: [`RemoteCache`], a typed client of kiln-cache (`kiln.v1.ArtifactCache`),
//! for kilnd's remote tier, the tests and the benchmarks; and [`CacheClient`], the calls kilnd's
//! fleet tier makes, which `RemoteCache` implements (as does an in-memory fake for unit tests,
//! with the `fake` feature).
//!
//! It brings tonic but not Redis, axum or prometheus (those are the server's, in
//! kiln-cache-server). It connects lazily: kilnd must start and serve while kiln-cache is down,
//! and tonic's channel reconnects on its own when it comes back. Every call carries the bearer
//! token; unary calls have a deadline. The message limits are kiln-proto's, shared with the
//! server.

use futures_util::Stream;
use kiln_proto::CacheKey;
use kiln_proto::auth::Bearer;
use kiln_proto::pb::artifact_cache_client::ArtifactCacheClient;
use kiln_proto::pb::{self, NegativeEntry, cache_get_response, cache_put_request, publish_event};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Status};

pub use kiln_proto::{MAX_MESSAGE_BYTES, MAX_NEGATIVE_LOG_BYTES};

#[cfg(feature = "fake")]
mod fake;
mod seam;

/// What a host found when its own compile of a key's inputs is not the envelope the fleet served:
/// the blake3 of the envelope `served`, of its own raw artifact (`audited`), and a line on how
/// they differ, for the quarantine record.
#[derive(Debug, Clone, Copy)]
pub struct Difference<'a> {
    pub served: &'a blake3::Hash,
    pub audited: &'a blake3::Hash,
    pub detail: &'a str,
}

#[cfg(feature = "fake")]
pub use fake::FakeCache;
pub use seam::{CacheClient, Call, Events};

/// Every way a call can fail. A gRPC failure keeps its code: kilnd treats UNAVAILABLE as "remote
/// tier down" (a miss), and the rest as a bug or a misconfiguration to report.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("invalid kiln-cache URI `{uri}`: {reason} (expected http://host:port or https://host:port)")]
    InvalidUri { uri: String, reason: String },
    #[error("the kiln-cache token holds characters that cannot travel in gRPC metadata")]
    InvalidToken,
    #[error("TLS set-up for {uri}: {reason}")]
    Tls { uri: String, reason: String },
    #[error("kiln-cache: {code:?}: {message}")]
    Rpc { code: Code, message: String },
    /// The server answered something the protocol does not allow (a key out of order, a short
    /// batch). Never retried silently: it means a broken or foreign server.
    #[error("kiln-cache broke the protocol: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The gRPC code, for errors that came from the server (or the transport).
    pub fn code(&self) -> Option<Code> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        ClientError::Rpc { code: status.code(), message: status.message().to_owned() }
    }
}

/// What the cache holds for a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// Envelope bytes, as stored, and who published them (as kiln-cache recorded it; `None`
    /// from a server or an entry older than provenance). The caller verifies the bytes
    /// (`kiln_proto::envelope::open`).
    Hit(Vec<u8>, Option<pb::Provenance>),
    /// A failed compile, remembered for a short while.
    Negative(NegativeEntry),
    Miss,
}

impl Lookup {
    /// The envelope of a hit.
    pub fn envelope(&self) -> Option<&[u8]> {
        match self {
            Lookup::Hit(bytes, _) => Some(bytes),
            _ => None,
        }
    }
}

/// One event of [`RemoteCache::watch_publish`].
#[derive(Debug, Clone, PartialEq)]
pub enum PublishEvent {
    /// The server's subscription is live (first event), or live again after a reconnect: check
    /// for the artifact now, since a publish in between may have been missed. With `values`, the
    /// server has checked already: the entries it found follow as [`PublishEvent::Value`]s.
    Subscribed,
    /// A publish, or a lease released; with `values`, a release without a result.
    Published(CacheKey),
    /// With `values` only: a watched key's entry, sent after `Subscribed` or on its publish.
    Value(CacheKey, Lookup),
}

/// The outcome of [`RemoteCache::acquire_lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// This holder holds the lease now.
    Taken,
    /// Another holder has it.
    Held,
    /// The key holds an entry already, so no lease was taken: read it.
    Present,
}

/// Connection settings beyond the URI and token.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Extra CA certificate (PEM) for `https://` servers with a private CA; the system roots are
    /// trusted too.
    pub ca_pem: Option<Vec<u8>>,
    pub connect_timeout: Duration,
    /// Deadline of each unary call, and of a whole BatchGet.
    pub request_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ca_pem: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// A kiln-cache client. Cloning is cheap and clones share the connection.
#[derive(Debug, Clone)]
pub struct RemoteCache {
    inner: ArtifactCacheClient<InterceptedService<Channel, Bearer>>,
    timeout: Duration,
    /// This host's name, sent with every publish for the artifact's provenance.
    host: String,
}

/// A fresh random lease holder token: 32 characters of `[A-Za-z0-9]`, new for each acquisition.
pub fn new_holder() -> String {
    use rand::Rng;
    rand::rng().sample_iter(rand::distr::Alphanumeric).take(32).map(char::from).collect()
}

impl RemoteCache {
    /// A client of the kiln-cache at `uri` (`http://host:port` or `https://host:port`) with
    /// `token` (empty: send none). Connects lazily, so it succeeds while the server is down;
    /// calls made then fail with UNAVAILABLE. Must be called inside a Tokio runtime.
    pub fn connect(uri: &str, token: &str) -> Result<Self, ClientError> {
        Self::connect_with(uri, token, ClientOptions::default())
    }

    pub fn connect_with(uri: &str, token: &str, options: ClientOptions) -> Result<Self, ClientError> {
        let bad = |reason: String| ClientError::InvalidUri { uri: uri.to_owned(), reason };
        let tls = if uri.starts_with("https://") {
            true
        } else if uri.starts_with("http://") {
            false
        } else {
            return Err(bad("unsupported scheme".into()));
        };
        let mut endpoint = Endpoint::from_shared(uri.to_owned())
            .map_err(|e| bad(e.to_string()))?
            .connect_timeout(options.connect_timeout)
            .tcp_nodelay(true)
            // Notice a dead server under a long watch stream.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        if tls {
            let mut config = ClientTlsConfig::new().with_native_roots();
            if let Some(pem) = &options.ca_pem {
                config = config.ca_certificate(Certificate::from_pem(pem));
            }
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| ClientError::Tls { uri: uri.to_owned(), reason: e.to_string() })?;
        }
        let bearer = Bearer::new(token).map_err(|_| ClientError::InvalidToken)?;
        let inner = ArtifactCacheClient::with_interceptor(endpoint.connect_lazy(), bearer)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(RemoteCache { inner, timeout: options.request_timeout, host: String::new() })
    }

    /// Names this host in what it publishes (`host` as kiln-cache takes it: 1 to 253 characters
    /// of `[A-Za-z0-9._-]`), so an audit can say who published what.
    pub fn with_host(self, host: &str) -> Self {
        RemoteCache { host: host.to_owned(), ..self }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut r = Request::new(message);
        r.set_timeout(self.timeout);
        r
    }

    pub async fn get(&self, key: &CacheKey) -> Result<Lookup, ClientError> {
        let req = self.request(pb::CacheGetRequest { key: key.to_hex() });
        let resp = self.inner.clone().get(req).await?.into_inner();
        answer(key, resp)
    }

    /// Every key's entry, in the order asked, in one round trip.
    pub async fn batch_get(&self, keys: &[CacheKey]) -> Result<Vec<(CacheKey, Lookup)>, ClientError> {
        let req = self.request(pb::CacheBatchGetRequest { keys: keys.iter().map(CacheKey::to_hex).collect() });
        let collect = async {
            let mut stream = self.inner.clone().batch_get(req).await?.into_inner();
            let mut out = Vec::with_capacity(keys.len());
            while let Some(resp) = stream.message().await? {
                let key = keys
                    .get(out.len())
                    .ok_or_else(|| ClientError::Protocol("more answers than keys in a BatchGet".into()))?;
                out.push((*key, answer(key, resp)?));
            }
            if out.len() != keys.len() {
                return Err(ClientError::Protocol(format!("BatchGet answered {} of {} keys", out.len(), keys.len())));
            }
            Ok(out)
        };
        tokio::time::timeout(self.timeout, collect)
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("BatchGet took too long").into()))
    }

    /// Which of `keys` hold an artifact, in order, without reading them.
    pub async fn contains(&self, keys: &[CacheKey]) -> Result<Vec<bool>, ClientError> {
        let req = self.request(pb::CacheContainsRequest { keys: keys.iter().map(CacheKey::to_hex).collect() });
        let present = self.inner.clone().contains(req).await?.into_inner().present;
        if present.len() != keys.len() {
            return Err(ClientError::Protocol(format!("Contains answered {} of {} keys", present.len(), keys.len())));
        }
        Ok(present)
    }

    /// Stores an envelope under `key`; the server verifies it against the key first.
    pub async fn put(&self, key: &CacheKey, envelope: Vec<u8>) -> Result<(), ClientError> {
        self.put_entry(key, cache_put_request::Entry::Envelope(envelope), 0).await
    }

    /// Remembers a failed compile for `ttl`: its log (cut to [`MAX_NEGATIVE_LOG_BYTES`]) and
    /// how long it took.
    pub async fn put_negative(
        &self,
        key: &CacheKey,
        mut failure: NegativeEntry,
        ttl: Duration,
    ) -> Result<(), ClientError> {
        let mut cut = failure.log.len().min(MAX_NEGATIVE_LOG_BYTES);
        while !failure.log.is_char_boundary(cut) {
            cut -= 1;
        }
        failure.log.truncate(cut);
        let ttl_ms = (ttl.as_millis() as u64).max(1);
        self.put_entry(key, cache_put_request::Entry::Negative(failure), ttl_ms).await
    }

    async fn put_entry(
        &self,
        key: &CacheKey,
        entry: cache_put_request::Entry,
        negative_ttl_ms: u64,
    ) -> Result<(), ClientError> {
        let req = self.request(pb::CachePutRequest {
            key: key.to_hex(),
            entry: Some(entry),
            negative_ttl_ms,
            publisher_host: self.host.clone(),
        });
        self.inner.clone().put(req).await?;
        Ok(())
    }

    /// Reports that the envelope served under `key` differs from this host's own compile:
    /// kiln-cache takes it out of service if the key still holds it.
    pub async fn quarantine(
        &self,
        key: &CacheKey,
        found: Difference<'_>,
    ) -> Result<pb::QuarantineResponse, ClientError> {
        let req = self.request(pb::QuarantineRequest {
            key: key.to_hex(),
            served_digest: found.served.to_hex().to_string(),
            audited_digest: found.audited.to_hex().to_string(),
            reporter_host: self.host.clone(),
            detail: found.detail.to_owned(),
        });
        Ok(self.inner.clone().quarantine(req).await?.into_inner())
    }

    /// Reports that the envelope `served` (blake3) under `key` is what this host's own compile
    /// of the key's inputs gives: kiln-cache vets its publisher for the fleet, unless it may not
    /// (the answer says why).
    pub async fn vouch(&self, key: &CacheKey, served: &blake3::Hash) -> Result<pb::VouchResponse, ClientError> {
        let req = self.request(pb::VouchRequest {
            key: key.to_hex(),
            served_digest: served.to_hex().to_string(),
            reporter_host: self.host.clone(),
        });
        Ok(self.inner.clone().vouch(req).await?.into_inner())
    }

    /// Quarantine records from `since_ms` on, oldest first.
    pub async fn list_quarantine(&self, since_ms: u64, limit: u32) -> Result<pb::QuarantineListResponse, ClientError> {
        self.list_records(pb::QuarantineListRequest { since_ms, limit, conflicts: false }).await
    }

    /// Conflicting writes from `since_ms` on, oldest first (in the answer's `conflicts`).
    pub async fn list_conflicts(&self, since_ms: u64, limit: u32) -> Result<pb::QuarantineListResponse, ClientError> {
        self.list_records(pb::QuarantineListRequest { since_ms, limit, conflicts: true }).await
    }

    /// Quarantine records or conflicting writes, as `request` asks.
    pub async fn list_records(
        &self,
        request: pb::QuarantineListRequest,
    ) -> Result<pb::QuarantineListResponse, ClientError> {
        Ok(self.inner.clone().list_quarantine(self.request(request)).await?.into_inner())
    }

    /// The kernel keys of a graph, if its manifest is stored.
    pub async fn get_manifest(&self, graph_key: &CacheKey) -> Result<Option<Vec<CacheKey>>, ClientError> {
        let req = self.request(pb::ManifestGetRequest { graph_key: graph_key.to_hex() });
        let resp = self.inner.clone().get_manifest(req).await?.into_inner();
        if !resp.found {
            return Ok(None);
        }
        let keys = resp
            .kernel_keys
            .iter()
            .map(|k| k.parse().map_err(|_| ClientError::Protocol(format!("manifest holds `{k}`"))))
            .collect::<Result<_, _>>()?;
        Ok(Some(keys))
    }

    pub async fn put_manifest(&self, graph_key: &CacheKey, kernel_keys: &[CacheKey]) -> Result<(), ClientError> {
        let req = self.request(pb::ManifestPutRequest {
            graph_key: graph_key.to_hex(),
            kernel_keys: kernel_keys.iter().map(CacheKey::to_hex).collect(),
        });
        self.inner.clone().put_manifest(req).await?;
        Ok(())
    }

    /// Takes the lease on `key` for `ttl` for `holder` (see [`new_holder`]), unless another
    /// holds it or the key already holds an entry (checked in the same atomic step).
    pub async fn acquire_lease(&self, key: &CacheKey, holder: &str, ttl: Duration) -> Result<Acquired, ClientError> {
        let req = self.request(lease(key, holder, ttl));
        let resp = self.inner.clone().acquire_lease(req).await?.into_inner();
        Ok(match (resp.ok, resp.present) {
            (true, _) => Acquired::Taken,
            (false, true) => Acquired::Present,
            (false, false) => Acquired::Held,
        })
    }

    /// Whether `holder` still held the lease; if so it now lasts `ttl` from now.
    pub async fn renew_lease(&self, key: &CacheKey, holder: &str, ttl: Duration) -> Result<bool, ClientError> {
        let req = self.request(lease(key, holder, ttl));
        Ok(self.inner.clone().renew_lease(req).await?.into_inner().ok)
    }

    /// Whether `holder` still held the lease; if so it is released.
    pub async fn release_lease(&self, key: &CacheKey, holder: &str) -> Result<bool, ClientError> {
        let req = self.request(lease(key, holder, Duration::ZERO));
        Ok(self.inner.clone().release_lease(req).await?.into_inner().ok)
    }

    /// Publish events for `keys`. The first event is [`PublishEvent::Subscribed`]; without
    /// `values`, check for the artifact after it and after every later `Subscribed`; with
    /// `values`, the server sends the entries itself ([`PublishEvent::Value`]). No deadline: the
    /// stream lives until dropped, or until the server shuts down (it then ends).
    pub async fn watch_publish(&self, keys: &[CacheKey], values: bool) -> Result<PublishStream, ClientError> {
        let req = Request::new(pb::WatchPublishRequest { keys: keys.iter().map(CacheKey::to_hex).collect(), values });
        let inner = self.inner.clone().watch_publish(req).await?.into_inner();
        Ok(PublishStream { inner })
    }

    /// Sends this host's report for the status page.
    pub async fn report_host(&self, report: pb::HostReport) -> Result<pb::HostReportResponse, ClientError> {
        let req = self.request(report);
        Ok(self.inner.clone().report_host(req).await?.into_inner())
    }

    /// Merges one process's account of a torch.compile job into the fleet ledger; the job's
    /// return, merged across the fleet.
    pub async fn report_torch_job(
        &self,
        job: &str,
        process: pb::TorchProcessCosts,
    ) -> Result<pb::TorchJobReturn, ClientError> {
        let req = self.request(pb::TorchJobReport { job: job.to_owned(), process: Some(process) });
        Ok(self.inner.clone().report_torch_job(req).await?.into_inner())
    }

    /// Jobs' returns from the fleet ledger: one job's (`job` not empty) or the most recent.
    pub async fn list_torch_jobs(&self, job: &str, limit: u32) -> Result<pb::TorchJobsReply, ClientError> {
        let req = self.request(pb::TorchJobsRequest { job: job.to_owned(), limit });
        Ok(self.inner.clone().list_torch_jobs(req).await?.into_inner())
    }

    pub async fn stats(&self) -> Result<pb::CacheStatsResponse, ClientError> {
        let req = self.request(pb::CacheStatsRequest {});
        Ok(self.inner.clone().cache_stats(req).await?.into_inner())
    }
}

fn lease(key: &CacheKey, holder: &str, ttl: Duration) -> pb::LeaseRequest {
    pb::LeaseRequest { key: key.to_hex(), holder: holder.to_owned(), ttl_ms: ttl.as_millis() as u64 }
}

fn answer(asked: &CacheKey, resp: pb::CacheGetResponse) -> Result<Lookup, ClientError> {
    if resp.key != asked.to_hex() {
        return Err(ClientError::Protocol(format!("asked for {asked}, answered for `{}`", resp.key)));
    }
    Ok(match resp.entry {
        Some(cache_get_response::Entry::Envelope(bytes)) => Lookup::Hit(bytes, resp.provenance),
        Some(cache_get_response::Entry::Negative(n)) => Lookup::Negative(n),
        None => Lookup::Miss,
    })
}

/// The events of one `WatchPublish`.
#[derive(Debug)]
pub struct PublishStream {
    inner: tonic::Streaming<pb::PublishEvent>,
}

impl PublishStream {
    /// The next event; `Ok(None)` when the server ended the stream (it is shutting down).
    pub async fn next_event(&mut self) -> Result<Option<PublishEvent>, ClientError> {
        match self.inner.message().await? {
            Some(e) => convert(e).map(Some),
            None => Ok(None),
        }
    }
}

fn convert(e: pb::PublishEvent) -> Result<PublishEvent, ClientError> {
    match e.event {
        Some(publish_event::Event::Subscribed(_)) => Ok(PublishEvent::Subscribed),
        Some(publish_event::Event::Published(k)) => {
            k.parse().map(PublishEvent::Published).map_err(|_| ClientError::Protocol(format!("published `{k}`")))
        }
        Some(publish_event::Event::Value(resp)) => {
            let key: CacheKey =
                resp.key.parse().map_err(|_| ClientError::Protocol(format!("a value for `{}`", resp.key)))?;
            let lookup = answer(&key, resp)?;
            Ok(PublishEvent::Value(key, lookup))
        }
        None => Err(ClientError::Protocol("an empty publish event".into())),
    }
}

impl Stream for PublishStream {
    type Item = Result<PublishEvent, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_next(cx).map(|e| e.map(|r| r.map_err(ClientError::from).and_then(convert)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_fresh_and_valid() {
        let (a, b) = (new_holder(), new_holder());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
    }

    #[tokio::test]
    async fn connect_is_lazy_and_checks_its_arguments() {
        assert!(RemoteCache::connect("http://127.0.0.1:1", "t").is_ok());
        assert!(matches!(RemoteCache::connect("unix:///x.sock", "t"), Err(ClientError::InvalidUri { .. })));
        assert!(matches!(RemoteCache::connect("http://127.0.0.1:1", "bad\ntoken"), Err(ClientError::InvalidToken)));
    }

    #[test]
    fn answers_must_name_the_key_asked() {
        let k = CacheKey::from_bytes([7; 32]);
        let miss = pb::CacheGetResponse { key: k.to_hex(), entry: None, provenance: None };
        assert_eq!(answer(&k, miss.clone()).unwrap(), Lookup::Miss);
        let other = CacheKey::from_bytes([8; 32]);
        assert!(matches!(answer(&other, miss), Err(ClientError::Protocol(_))));
    }
}
