//! Real Redis and real `kiln-cache` processes for tests.
//!
//! - [`RedisServer`]: a private `redis-server` on a Unix socket in a temporary directory (no TCP:
//!   `--port 0`), which a test can stop and restart on the same socket.
//! - [`RedisCluster`]: a Redis Cluster of N masters (and optionally their replicas) on loopback
//!   ports, created with `redis-cli --cluster create`; a node can be killed to force a failover.
//! - [`CacheServer`]: a `kiln-cache` process with its own tokens, config, gRPC and metrics ports,
//!   stopped with SIGTERM and checked to exit 0, or killed and restarted on the same ports.
//!
//! A missing `redis-server` fails the test with what to run; nothing is ever skipped.

use crate::env;
use crate::stderr::StderrTail;
use kiln_cache_client::{ClientOptions, RemoteCache};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A read-write token every [`CacheServer`] accepts unless told otherwise.
pub const WRITE_TOKEN: &str = "test-write-token-0123456789";
/// A read-only token every [`CacheServer`] accepts unless told otherwise.
pub const READ_TOKEN: &str = "test-read-token-0123456789";

/// `redis-server` or `redis-cli` from PATH, or a panic that says how to get it.
pub fn redis_tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file()));
    found.unwrap_or_else(|| {
        panic!(
            "{name} is missing: run scripts/test, which installs Redis \
             (or `apt-get install -y redis-server`)"
        )
    })
}

fn kill_and_wait(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends PING over RESP and checks for PONG.
fn pong(mut stream: impl Read + Write) -> bool {
    let mut buf = [0u8; 7];
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok() && stream.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// A `redis-server` on a private Unix socket.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    pub socket: PathBuf,
    dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("redis.sock");
        let mut r = RedisServer { child: None, socket, dir };
        r.restart();
        r
    }

    /// `unix:///.../redis.sock`, as `--redis` takes it.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Starts the server again (after [`RedisServer::stop`]) on the same socket, empty.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "redis-server is already running");
        let child = Command::new(redis_tool("redis-server"))
            .args(["--port", "0", "--unixsocketperm", "700", "--save", "", "--appendonly", "no"])
            .arg("--unixsocket")
            .arg(&self.socket)
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--daemonize", "no", "--loglevel", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let up = std::os::unix::net::UnixStream::connect(&self.socket)
                .is_ok_and(|s| s.set_read_timeout(Some(Duration::from_secs(2))).is_ok() && pong(s));
            if up {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not answer on {} within 20 s", self.socket.display());
    }

    /// Kills the server (SIGKILL: an outage, not a shutdown) and waits for it.
    pub fn stop(&mut self) {
        let mut child = self.child.take().expect("redis-server is running");
        kill_and_wait(&mut child);
        let _ = std::fs::remove_file(&self.socket);
    }

    /// `redis-cli -s SOCKET ARGS...` with raw output, trailing newline removed.
    pub fn cli(&self, args: &[&str]) -> Vec<u8> {
        let socket = self.socket.to_string_lossy().into_owned();
        let mut all = vec!["-s", socket.as_str(), "--raw"];
        all.extend_from_slice(args);
        cli(&all)
    }
}

fn cli(args: &[&str]) -> Vec<u8> {
    let out = Command::new(redis_tool("redis-cli")).args(args).stdin(Stdio::null()).output().expect("run redis-cli");
    assert!(out.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut stdout = out.stdout;
    if stdout.last() == Some(&b'\n') {
        stdout.pop();
    }
    stdout
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_wait(&mut c);
        }
    }
}

/// A Redis Cluster on loopback: masters only, or masters with replicas.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Child>,
    pub ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// A cluster of `masters` masters and no replicas.
    pub fn start(masters: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(masters, 0)
    }

    /// A cluster of `masters` masters, each with `replicas` replicas, every replica in sync
    /// before this returns (a master killed right after start-up can then fail over).
    pub fn start_with_replicas(masters: usize, replicas: usize) -> RedisCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let total = masters * (1 + replicas);
        // A node also listens on port + 10000 for the cluster bus.
        let ports: Vec<u16> = (0..total).map(|_| crate::ports::free_with_bus()).collect();
        let mut cluster = RedisCluster { nodes: Vec::new(), ports: ports.clone(), _dir: dir };
        for p in &ports {
            let node_dir = cluster._dir.path().join(p.to_string());
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let child = Command::new(redis_tool("redis-server"))
                .args(["--bind", "127.0.0.1", "--port", &p.to_string()])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"])
                .arg("--dir")
                .arg(&node_dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn redis-server");
            cluster.nodes.push(child);
        }
        for p in &ports {
            wait_tcp_pong(*p);
        }
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        let replicas = replicas.to_string();
        args.extend(["--cluster-replicas", replicas.as_str(), "--cluster-yes"]);
        cli(&args);
        let deadline = Instant::now() + Duration::from_secs(30);
        let ready = |p: &u16| {
            let state = cluster.cli_on(*p, &["CLUSTER", "INFO"]);
            let role = String::from_utf8_lossy(&cluster.cli_on(*p, &["INFO", "replication"])).into_owned();
            String::from_utf8_lossy(&state).contains("cluster_state:ok")
                && (role.contains("role:master") || role.contains("master_link_status:up"))
        };
        while !ports.iter().all(ready) {
            assert!(Instant::now() < deadline, "the cluster did not reach state ok within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// `redis-cli -p PORT --raw ARGS...` against one node, without following redirects.
    pub fn cli_on(&self, port: u16, args: &[&str]) -> Vec<u8> {
        let port = port.to_string();
        let mut all = vec!["-p", port.as_str(), "--raw"];
        all.extend_from_slice(args);
        cli(&all)
    }

    /// The ports of the nodes that `port` sees as masters that serve slots and are not failed.
    pub fn masters_seen_by(&self, port: u16) -> Vec<u16> {
        let nodes = String::from_utf8_lossy(&self.cli_on(port, &["CLUSTER", "NODES"])).into_owned();
        nodes
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let flags = *fields.get(2)?;
                let serves_slots = fields.len() > 8;
                let master = flags.split(',').any(|f| f == "master") && !flags.contains("fail");
                let port = fields.get(1)?.split('@').next()?.rsplit(':').next()?.parse().ok()?;
                (master && serves_slots).then_some(port)
            })
            .collect()
    }

    /// Whether the node on `port` reports `cluster_state:ok`.
    pub fn state_ok_on(&self, port: u16) -> bool {
        String::from_utf8_lossy(&self.cli_on(port, &["CLUSTER", "INFO"])).contains("cluster_state:ok")
    }

    /// SIGKILL to the node on `port`: an outage with no failover handshake of its own.
    pub fn kill9(&mut self, port: u16) {
        let i = self.ports.iter().position(|p| *p == port).expect("a node of this cluster");
        kill_and_wait(&mut self.nodes[i]);
    }

    /// Seed node URLs for `--redis`.
    pub fn urls(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect()
    }

    /// `redis-cli -c -p PORT ARGS...` against the first node, following redirects.
    pub fn cli(&self, args: &[&str]) -> Vec<u8> {
        let port = self.ports[0].to_string();
        let mut all = vec!["-c", "-p", port.as_str(), "--raw"];
        all.extend_from_slice(args);
        cli(&all)
    }
}

fn wait_tcp_pong(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let up = TcpStream::connect(("127.0.0.1", port))
            .is_ok_and(|s| s.set_read_timeout(Some(Duration::from_secs(2))).is_ok() && pong(s));
        if up {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server on port {port} did not answer within 20 s");
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for c in &mut self.nodes {
            kill_and_wait(c);
        }
    }
}

/// How to start a `kiln-cache`.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    pub redis: Vec<String>,
    pub cluster: bool,
    /// Lines of the tokens file; by default one read and one write token.
    pub tokens: Vec<String>,
    /// Extra TOML for the config file.
    pub config: String,
    /// Certificate and key (PEM) to serve TLS with.
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl CacheOptions {
    pub fn new(redis: Vec<String>) -> Self {
        CacheOptions {
            redis,
            cluster: false,
            tokens: vec![format!("read:{READ_TOKEN}"), format!("write:{WRITE_TOKEN}")],
            config: String::new(),
            tls: None,
        }
    }
}

/// A private Redis and a kiln-cache over it with the test tokens: the fleet cache a test's kilnd
/// hosts share.
pub fn fleet() -> (RedisServer, CacheServer) {
    let redis = RedisServer::start();
    let cache = CacheServer::start(CacheOptions::new(vec![redis.url()]));
    (redis, cache)
}

/// A running `kiln-cache`. Dropping it kills the process; [`CacheServer::stop`] stops it with
/// SIGTERM and asserts a clean exit.
#[derive(Debug)]
pub struct CacheServer {
    child: Option<Child>,
    /// The end of its stderr, which still reaches the test's stderr as it comes.
    stderr: StderrTail,
    pub addr: SocketAddr,
    pub metrics: SocketAddr,
    tls: bool,
    /// Kept to start the server again on the same ports ([`CacheServer::restart`]).
    options: CacheOptions,
    _dir: tempfile::TempDir,
}

impl CacheServer {
    /// A kilnd host of this fleet cache, writing with [`WRITE_TOKEN`]; `config` adds lines to its
    /// config file. Every such host shares the token, so none can vouch for another (a writer
    /// cannot vouch for its own token): unless `config` sets `vet`, they serve each other's
    /// kernels as `vet = "sample"` does, which is what the tests of sharing want. The tests of
    /// vetting set `vet` and give hosts tokens of their own.
    pub fn host(&self, config: &str) -> crate::daemon::Daemon {
        let config = if config.lines().any(|l| l.trim_start().starts_with("vet ")) {
            config.to_owned()
        } else {
            format!("vet = \"sample\"\n{config}")
        };
        crate::daemon::Daemon::start(crate::daemon::Daemon::fleet_options(&self.uri(), WRITE_TOKEN, &config))
    }

    /// Starts a kiln-cache and waits until it accepts connections and serves `/metrics`.
    pub fn start(options: CacheOptions) -> CacheServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let (addr, metrics) = (crate::ports::free_addr(), crate::ports::free_addr());
        let (child, stderr) = Self::spawn_teed(&options, &dir, addr, metrics);
        let tls = options.tls.is_some();
        let mut server = CacheServer { child: Some(child), stderr, addr, metrics, tls, options, _dir: dir };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if !self.alive() {
                panic!("kiln-cache exited during start-up; its stderr ended:\n{}", self.stderr.after_exit());
            }
            if TcpStream::connect(self.addr).is_ok() && crate::http::get(self.metrics, "/metrics").is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("kiln-cache did not answer within 30 s");
    }

    /// SIGKILL, as a crashed or preempted server dies: no drain, no goodbye to its clients.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("kiln-cache is running");
        kill_and_wait(&mut child);
    }

    /// Starts the server again (after [`CacheServer::kill9`]) on the same ports with the same
    /// options, so its clients reconnect to the address they already have.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "kiln-cache is already running");
        let (child, stderr) = Self::spawn_teed(&self.options, &self._dir, self.addr, self.metrics);
        (self.child, self.stderr) = (Some(child), stderr);
        self.wait_ready();
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// [`CacheServer::spawn`] with its stderr passed through and its end kept.
    fn spawn_teed(
        options: &CacheOptions,
        dir: &tempfile::TempDir,
        addr: SocketAddr,
        metrics: SocketAddr,
    ) -> (Child, StderrTail) {
        let mut child = Self::spawn(options, dir, Stdio::piped(), addr, metrics);
        let stderr = StderrTail::tee(child.stderr.take().expect("piped stderr"));
        (child, stderr)
    }

    /// Spawns a kiln-cache with `options`, its files in `dir`, on `addr` and `metrics`.
    fn spawn(
        options: &CacheOptions,
        dir: &tempfile::TempDir,
        stderr: Stdio,
        addr: SocketAddr,
        metrics: SocketAddr,
    ) -> Child {
        let tokens = dir.path().join("tokens");
        std::fs::write(&tokens, options.tokens.join("\n")).expect("write tokens");
        let config = dir.path().join("kiln-cache.toml");
        std::fs::write(&config, &options.config).expect("write config");
        let mut cmd = Command::new(env::binary("kiln-cache"));
        cmd.arg("--listen")
            .arg(addr.to_string())
            .arg("--metrics")
            .arg(metrics.to_string())
            .arg("--config")
            .arg(&config)
            .env("KILN_LOG", "warn")
            .stdin(Stdio::null())
            .stderr(stderr);
        for k in ["KILN_CACHE_REDIS", "KILN_CACHE_TOKENS", "KILN_CACHE_REDIS_CLUSTER", "KILN_CACHE_INSECURE_NO_AUTH"] {
            cmd.env_remove(k);
        }
        if !options.tokens.is_empty() {
            cmd.arg("--tokens").arg(&tokens);
        }
        for r in &options.redis {
            cmd.arg("--redis").arg(r);
        }
        if options.cluster {
            cmd.arg("--redis-cluster");
        }
        if let Some((cert, key)) = &options.tls {
            cmd.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        cmd.spawn().expect("spawn kiln-cache")
    }

    /// `http://127.0.0.1:PORT` (or `https://localhost:PORT` with TLS, matching the test cert).
    pub fn uri(&self) -> String {
        if self.tls { format!("https://localhost:{}", self.addr.port()) } else { format!("http://{}", self.addr) }
    }

    pub fn client(&self, token: &str) -> RemoteCache {
        RemoteCache::connect(&self.uri(), token).expect("kiln-cache client")
    }

    pub fn client_with(&self, token: &str, options: ClientOptions) -> RemoteCache {
        RemoteCache::connect_with(&self.uri(), token, options).expect("kiln-cache client")
    }

    /// The `/metrics` text.
    pub fn metrics_text(&self) -> String {
        crate::http::get(self.metrics, "/metrics").expect("GET /metrics")
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// SIGTERM, then asserts exit status 0 within `bound`.
    pub fn stop_within(mut self, bound: Duration) {
        crate::procs::terminate(self.child.take().expect("running"), "kiln-cache", bound);
    }

    pub fn stop(self) {
        self.stop_within(Duration::from_secs(15));
    }
}

/// Runs `kiln-cache` with `options` expecting it to refuse to start; returns its stderr.
pub fn cache_server_refuses(options: CacheOptions) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let (addr, metrics) = (crate::ports::free_addr(), crate::ports::free_addr());
    let child = CacheServer::spawn(&options, &dir, Stdio::piped(), addr, metrics);
    let out = child.wait_with_output().expect("wait for kiln-cache");
    assert!(!out.status.success(), "kiln-cache started; it should have refused");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

impl Drop for CacheServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_and_wait(&mut c);
        }
    }
}
