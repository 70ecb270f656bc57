//! Frames on a worker's pipes: a u32 little-endian length, then one message (protobuf for
//! `kilnd worker`, JSON for the Triton workers). A length past [`MAX_FRAME`] is a protocol error,
//! so a confused peer cannot make the other side allocate without bound.

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
