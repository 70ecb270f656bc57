//! Frames on a worker's pipes: a u32 little-endian length, then one message (protobuf for
//! `kilnd worker`, JSON for the Triton and torch workers, whose answers are a JSON header and a
//! body). A length past [`MAX_FRAME`] is a protocol error, so a confused peer cannot make the
//! other side allocate without bound.

use prost::Message;
use std::io::{Read, Write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Larger than any request or cubin the limits allow.
pub const MAX_FRAME: usize = 1 << 30;

fn too_large(len: usize) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("frame of {len} bytes exceeds the limit"))
}

/// Decodes a protobuf frame.
pub fn decode<M: Message + Default>(bytes: &[u8]) -> std::io::Result<M> {
    M::decode(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A worker's first frame, which says what it loaded or why it cannot serve.
pub trait Hello: Sized + Send {
    fn decode(bytes: &[u8]) -> std::io::Result<Self>;
    /// The worker's own report of why it cannot serve, if it says so.
    fn error(&self) -> Option<String>;
}

/// `kilnd worker`'s hello, in protobuf.
impl Hello for kiln_proto::pb::WorkerHello {
    fn decode(bytes: &[u8]) -> std::io::Result<Self> {
        decode(bytes)
    }

    fn error(&self) -> Option<String> {
        (!self.error.is_empty()).then(|| self.error.clone())
    }
}

/// The Python workers' (Triton's, torch's) hello: one JSON object, with `error` when it cannot
/// serve.
impl Hello for serde_json::Value {
    fn decode(bytes: &[u8]) -> std::io::Result<Self> {
        serde_json::from_slice(bytes).map_err(std::io::Error::other)
    }

    fn error(&self) -> Option<String> {
        self.get("error").and_then(serde_json::Value::as_str).map(String::from)
    }
}

/// A Python worker's answer: a u32 little-endian length, a JSON header of that length, and the
/// body (a cubin, a graph's artifacts); `worker` names it in the error of a short frame.
pub fn json_header_and_body<'a, T: serde::de::DeserializeOwned>(
    bytes: &'a [u8],
    worker: &str,
) -> std::io::Result<(T, &'a [u8])> {
    let bad = || std::io::Error::other(format!("a {worker} answer shorter than its header"));
    let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(bad)?;
    let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|_| bad())?;
    let (header, body) = rest.split_at_checked(len).ok_or_else(bad)?;
    Ok((serde_json::from_slice(header).map_err(std::io::Error::other)?, body))
}

/// Blocking read, for the worker. `Ok(None)` at a clean end of input.
pub fn read_blocking<M: Message + Default>(r: &mut impl Read) -> std::io::Result<Option<M>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(too_large(len));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    decode(&buf).map(Some)
}

/// Blocking write, for the worker.
pub fn write_blocking(w: &mut impl Write, msg: &impl Message) -> std::io::Result<()> {
    let bytes = msg.encode_to_vec();
    w.write_all(&(bytes.len() as u32).to_le_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

/// Async read of one frame's bytes, for the daemon. End of input is an error here: the worker
/// died.
pub async fn read_bytes(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let len = r.read_u32_le().await? as usize;
    if len > MAX_FRAME {
        return Err(too_large(len));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    Ok(buf)
}

/// Async write of one frame, for the daemon.
pub async fn write_bytes(w: &mut (impl tokio::io::AsyncWrite + Unpin), bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| too_large(bytes.len()))?;
    w.write_u32_le(len).await?;
    w.write_all(bytes).await?;
    w.flush().await
}
