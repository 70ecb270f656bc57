//! TCP listeners for kiln's servers, with a backlog sized for a fleet reconnecting at once.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// Connections the kernel may queue before the server accepts them. tokio's `bind` asks for
/// 1024; when a thousand hosts reconnect together (kiln-cache restarted, a fleet started at
/// once) a full queue drops SYNs. The client's kernel resends one at one second and again at three,
/// so a second drop runs past kiln's 2 s connect timeout: kiln-reliability's scenario 2 met
/// 151 overflows and two failed calls with 1024, none with this. The kernel caps the backlog at
/// `net.core.somaxconn` (4096 on current kernels).
pub const BACKLOG: u32 = 4096;

/// Binds `addr` as `TcpListener::bind` does (address reuse on Unix), with [`BACKLOG`].
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_and_accepts() {
        let listener = bind("127.0.0.1:0".parse().expect("address")).expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (connected, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        assert!(connected.is_ok() && accepted.is_ok());
    }

    #[tokio::test]
    async fn a_taken_port_is_an_error() {
        let first = bind("127.0.0.1:0".parse().expect("address")).expect("bind");
        let addr = first.local_addr().expect("local address");
        assert!(bind(addr).is_err());
    }
}
