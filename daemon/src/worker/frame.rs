//! Frames on a worker's pipes: a u32 little-endian length, then one protobuf message. A length
//! past [`MAX_FRAME`] is a protocol error, so a confused peer cannot make the other side allocate
//! without bound.

use prost::Message;
use std::io::{Read, Write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Larger than any request or cubin the limits allow.
pub const MAX_FRAME: usize = 1 << 30;

fn too_large(len: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("frame of {len} bytes exceeds the limit"),
    )
}

fn bad_message(e: prost::DecodeError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
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
    M::decode(buf.as_slice()).map(Some).map_err(bad_message)
}

/// Blocking write, for the worker.
pub fn write_blocking(w: &mut impl Write, msg: &impl Message) -> std::io::Result<()> {
    let bytes = msg.encode_to_vec();
    w.write_all(&(bytes.len() as u32).to_le_bytes())?;
    w.write_all(&bytes)?;
    w.flush()
}

/// Async read, for the daemon. End of input is an error here: the worker died.
pub async fn read<M: Message + Default>(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
) -> std::io::Result<M> {
    let len = r.read_u32_le().await? as usize;
    if len > MAX_FRAME {
        return Err(too_large(len));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await?;
    M::decode(buf.as_slice()).map_err(bad_message)
}

/// Async write, for the daemon.
pub async fn write(
    w: &mut (impl tokio::io::AsyncWrite + Unpin),
    msg: &impl Message,
) -> std::io::Result<()> {
    let bytes = msg.encode_to_vec();
    w.write_u32_le(bytes.len() as u32).await?;
    w.write_all(&bytes).await?;
    w.flush().await
}
