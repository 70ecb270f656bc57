//! Unix socket connections that any gRPC client can use, whatever `:authority` it sends.
//!
//! A gRPC client over a Unix socket sends the socket's path as the HTTP/2 `:authority`; grpcio
//! (Python, C++, Ruby...) sends `unix:///run/kiln/kilnd.sock` as `run%2Fkiln%2Fkilnd.sock`. h2,
//! under hyper and tonic, parses `:authority` as a URI authority, refuses the `%` and resets the
//! stream (the client sees `INTERNAL: Received RST_STREAM`), and it has no setting to accept it.
//! So kilnd wraps each accepted connection in [`AnyAuthority`]: it reads the client's preface
//! and first header block; when that block's `:authority` parses (kiln's own clients send
//! `[::]:50051`) the bytes already read are handed to hyper as they came and the wrapper steps
//! aside for the rest of the connection, costing one branch per read. Only a connection whose
//! authority would be refused goes through [`filter::Filter`], which rewrites its header blocks
//! with `:authority: localhost`. Writes (server to client) are never touched.

pub mod filter;
pub mod frame;
pub mod hpack;

use filter::Filter;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};

/// Bytes read from the socket at a time while the filter is on.
const READ_CHUNK: usize = 16 * 1024;

/// A server-side connection whose client may send any `:authority`. See the module doc.
#[derive(Debug)]
pub struct AnyAuthority<S> {
    io: S,
    /// `None` once the filter stepped aside: reads go straight to `io`.
    filter: Option<Box<Filter>>,
    /// Filtered bytes not yet read by the server, from `out_at` on.
    out: Vec<u8>,
    out_at: usize,
}

impl<S> AnyAuthority<S> {
    pub fn new(io: S) -> Self {
        AnyAuthority { io, filter: Some(Box::default()), out: Vec::new(), out_at: 0 }
    }

    /// Whether this connection's header blocks are rewritten (its client sent an authority the
    /// server would refuse). For tests and logs.
    pub fn is_rewriting(&self) -> bool {
        self.filter.as_ref().is_some_and(|f| f.is_rewriting())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AnyAuthority<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.out_at < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_at);
                buf.put_slice(&this.out[this.out_at..this.out_at + n]);
                this.out_at += n;
                if this.out_at == this.out.len() {
                    this.out.clear();
                    this.out_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            let Some(filter) = this.filter.as_mut() else {
                return Pin::new(&mut this.io).poll_read(cx, buf);
            };
            if filter.is_passthrough() {
                this.filter = None;
                this.out = Vec::new();
                continue;
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                filter.finish(&mut this.out);
                if this.out.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            filter.feed(read.filled(), &mut this.out).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AnyAuthority<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for AnyAuthority<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// A Unix listener's connections, each an [`AnyAuthority`], for `serve_with_incoming`. Accepting
/// does no I/O on the connection: the first header block is read in the connection's own task,
/// so a slow client never holds up the next accept.
#[derive(Debug)]
pub struct Incoming(pub UnixListener);

impl tokio_stream::Stream for Incoming {
    type Item = io::Result<AnyAuthority<UnixStream>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let accepted = ready!(self.0.poll_accept(cx));
        Poll::Ready(Some(accepted.map(|(stream, _)| AnyAuthority::new(stream))))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client whose first request names a refused authority: the server reads the rewritten
    /// block; replies travel back untouched.
    #[tokio::test]
    async fn reads_are_filtered_and_writes_pass() {
        let (client, server) = tokio::io::duplex(64);
        let mut server = AnyAuthority::new(server);
        let fields = [(b":authority".to_vec(), b"tmp%2Fs.sock".to_vec()), (b":path".to_vec(), b"/p".to_vec())];
        let mut input = frame::PREFACE.to_vec();
        let block = hpack::tests::IndexingEncoder::default().encode(&fields);
        frame::write_headers(&mut input, 1, true, &[], &block);
        let writer = tokio::spawn(async move {
            let mut client = client;
            client.write_all(&input).await.unwrap();
            let mut reply = [0u8; 5];
            client.read_exact(&mut reply).await.unwrap();
            assert_eq!(&reply, b"hello");
        });
        let mut got = vec![0u8; frame::PREFACE.len() + frame::HEAD_LEN];
        server.read_exact(&mut got).await.unwrap();
        let head = frame::Head::parse(&got[frame::PREFACE.len()..]);
        let mut block = vec![0u8; head.len];
        server.read_exact(&mut block).await.unwrap();
        assert!(server.is_rewriting());
        let back = hpack::decoder().decode(&block).unwrap();
        assert_eq!(back[0], (b":authority".to_vec(), b"localhost".to_vec()));
        server.write_all(b"hello").await.unwrap();
        writer.await.unwrap();
    }
}
