//! A private `redis-server`, a minimal RESP client for raw GETs, and `redis-benchmark`.
//!
//! The server listens on a Unix socket in the run's own directory, with persistence off, so
//! nothing else on the machine shares it and a run leaves nothing behind. It also listens on a
//! free loopback TCP port, only because sccache 0.19 refuses `unix://` Redis endpoints (its
//! OpenDAL backend answers "endpoint is invalid"); the kiln comparisons use the socket.
//! The client speaks just enough RESP for SET, GET and FLUSHALL: pulling in a Redis crate for
//! three commands would add more than it measures, and a raw socket is the fairest baseline.

use anyhow::{Context, Result, bail, ensure};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    pub socket: PathBuf,
    pub port: u16,
}

impl RedisServer {
    pub fn start(dir: &Path) -> Result<RedisServer> {
        std::fs::create_dir_all(dir)?;
        let socket = dir.join("redis.sock");
        let port = kiln_tests::ports::free();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .arg("--unixsocket")
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .context("starting redis-server (scripts/bench installs it with apt)")?;
        let server = RedisServer { child, socket, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.connect().is_err() {
            if Instant::now() > deadline {
                bail!("redis-server did not listen on {} within 10 s", server.socket.display());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(server)
    }

    /// The server's process id, for its CPU time.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn connect(&self) -> Result<Resp> {
        let stream =
            UnixStream::connect(&self.socket).with_context(|| format!("connecting to {}", self.socket.display()))?;
        Ok(Resp { reader: BufReader::new(stream.try_clone()?), writer: stream })
    }

    /// The endpoint sccache takes: TCP, since it refuses `unix://`.
    pub fn tcp_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One RESP connection.
#[derive(Debug)]
pub struct Resp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

impl Resp {
    /// Sends `commands` in one write and reads one reply per command: a pipeline, so N GETs
    /// cost one round trip, as a well-written cache client would fetch a graph's kernels.
    pub fn pipeline(&mut self, commands: &[Vec<&[u8]>]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::new();
        for c in commands {
            encode(&mut out, c);
        }
        self.writer.write_all(&out)?;
        commands.iter().map(|_| self.reply()).collect()
    }

    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.pipeline(&[vec![b"SET", key, value]])?;
        Ok(())
    }

    pub fn flushall(&mut self) -> Result<()> {
        self.pipeline(&[vec![b"FLUSHALL"]])?;
        Ok(())
    }

    /// GETs every key in one round trip; a missing key is an error, since a baseline that
    /// fetched nothing would flatter itself.
    pub fn get_all(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let commands: Vec<Vec<&[u8]>> = keys.iter().map(|k| vec![b"GET".as_slice(), k]).collect();
        self.pipeline(&commands)?
            .into_iter()
            .zip(keys)
            .map(|(v, k)| v.with_context(|| format!("GET {} found nothing", String::from_utf8_lossy(k))))
            .collect()
    }

    /// One reply: a bulk string (`None` for nil), or a status, or an error.
    fn reply(&mut self) -> Result<Option<Vec<u8>>> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let line = line.trim_end();
        match line.as_bytes().first() {
            Some(b'+') | Some(b':') => Ok(Some(line.as_bytes()[1..].to_vec())),
            Some(b'-') => bail!("redis: {}", &line[1..]),
            Some(b'$') => {
                let len: i64 = line[1..].parse().context("bulk length")?;
                if len < 0 {
                    return Ok(None);
                }
                let mut value = vec![0u8; len as usize + 2];
                self.reader.read_exact(&mut value)?;
                value.truncate(len as usize);
                Ok(Some(value))
            }
            _ => bail!("unexpected RESP reply {line:?}"),
        }
    }
}

/// GET requests per second that `redis-benchmark` measured: `-t set,get`, so the GET test reads
/// the key the SET test wrote, with values of `value_bytes` and `clients` connections.
pub fn benchmark_get_rps(server: &RedisServer, value_bytes: usize, clients: usize, requests: usize) -> Result<f64> {
    let out = Command::new("redis-benchmark")
        .arg("-s")
        .arg(&server.socket)
        .args(["-t", "set,get", "--csv", "-d"])
        .arg(value_bytes.to_string())
        .arg("-c")
        .arg(clients.to_string())
        .arg("-n")
        .arg(requests.to_string())
        .output()
        .context("running redis-benchmark (scripts/bench installs it with apt)")?;
    ensure!(out.status.success(), "redis-benchmark failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    parse_get_rps(&text).with_context(|| format!("no GET line in redis-benchmark's output:\n{text}"))
}

/// The `rps` field of the `"GET",...` line of `redis-benchmark --csv`.
fn parse_get_rps(csv: &str) -> Option<f64> {
    csv.lines()
        .find(|l| l.starts_with("\"GET\""))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|v| v.trim_matches('"').parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_benchmark_csv() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"90000.00\",\"0.1\"\n\"GET\",\"123456.78\",\"0.1\"\n";
        assert_eq!(parse_get_rps(csv), Some(123456.78));
        assert_eq!(parse_get_rps("\"SET\",\"1\"\n"), None);
    }

    #[test]
    fn encodes_resp() {
        let mut out = Vec::new();
        encode(&mut out, &[b"GET", b"k"]);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }
}
