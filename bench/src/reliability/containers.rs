//! A fleet of containers: Redis, kiln-cache replicas and kilnd hosts from the images
//! `scripts/images` builds, each a container with its own address, on private Docker networks
//! this harness creates, so that one part can be cut off from another (`docker network
//! disconnect`), which processes sharing 127.0.0.1 cannot be.
//!
//! Two networks: `store` joins Redis and the kiln-cache replicas, `fleet` joins the replicas
//! and the kilnd hosts, where both replicas answer to the name `kiln-cache` (Docker's DNS gives
//! every address of that alias, as a Kubernetes Service would spread connections) and replica
//! `i` also to `kiln-cache-<i>`. kilnd's `--remote` takes one URI, so a layout either gives every
//! host the shared name or spreads the hosts over the replicas by their own names (host `i` on
//! replica `i mod n`), which makes a restart's effect on each host known in advance. Both are
//! `--internal`: nothing in them reaches past this machine. Clients reach each kilnd through its
//! Unix socket, bind-mounted from a host directory (as job pods mount the node's /run/kiln), so
//! a host cut off from the fleet network still answers its own clients, as on a real node.
//!
//! Every container and network carries the label `org.kiln.fleet=<name>` and is removed when
//! the [`ContainerFleet`] is dropped, and by [`remove_leftovers`] before a run.

pub use super::docker::{Container, docker, in_netns};
use super::redis_cluster;
use anyhow::{Context, Result, bail};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The label that marks what a fleet made, for clean-up.
const LABEL: &str = "org.kiln.fleet";
/// A write token of the fleet (kiln-cache wants 16 characters at least).
pub const TOKEN: &str = "container-fleet-write-token";
/// How long a container gets to become ready.
const READY: Duration = Duration::from_secs(60);

/// The images to run: `KILN_IMAGE_KILND`, `KILN_IMAGE_KILN_CACHE` and `KILN_IMAGE_REDIS` when set
/// (`scripts/test` runs images of its debug binaries under other tags), else the names
/// `scripts/images` builds.
#[derive(Debug, Clone)]
pub struct Images {
    pub kilnd: String,
    pub cache: String,
    pub redis: String,
}

impl Images {
    pub fn from_env() -> Images {
        let version = env!("CARGO_PKG_VERSION");
        let or = |var: &str, default: String| std::env::var(var).unwrap_or(default);
        Images {
            kilnd: or("KILN_IMAGE_KILND", format!("kiln/kilnd:{version}")),
            cache: or("KILN_IMAGE_KILN_CACHE", format!("kiln/kiln-cache:{version}")),
            redis: or("KILN_IMAGE_REDIS", "kiln/redis:7.0".into()),
        }
    }
}

/// Fails with what to do when Docker or an image is missing.
pub fn check_docker(images: &Images) -> Result<()> {
    docker(&["info", "--format", "{{.ServerVersion}}"])
        .context("these scenarios run containers and need a Docker Engine this user may use")?;
    for image in [&images.kilnd, &images.cache, &images.redis] {
        docker(&["image", "inspect", "--format", "{{.Id}}", image])
            .with_context(|| format!("image {image} is missing: build it with scripts/images"))?;
    }
    Ok(())
}

/// Removes the containers and networks earlier fleets of this harness left (a killed run).
pub fn remove_leftovers() {
    let filter = format!("label={LABEL}");
    if let Ok(ids) = docker(&["ps", "-aq", "--filter", &filter]) {
        for id in ids.lines() {
            let _ = docker(&["rm", "-f", "-v", id]);
        }
    }
    if let Ok(ids) = docker(&["network", "ls", "-q", "--filter", &filter]) {
        for id in ids.lines() {
            let _ = docker(&["network", "rm", id]);
        }
    }
}

/// A kilnd host: its container and the host directory holding its socket.
#[derive(Debug, Clone)]
pub struct Host {
    pub container: Container,
    pub socket: PathBuf,
}

impl Host {
    pub fn uri(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub async fn connect(&self) -> Result<kiln_client::Client> {
        kiln_client::connect(&self.uri()).await.with_context(|| format!("connecting to {}", self.container.name))
    }
}

/// What a fleet is made of.
#[derive(Debug, Clone)]
pub struct Layout {
    pub caches: usize,
    pub hosts: usize,
    /// Lines added to every kilnd's TOML (lease TTL, hedge bound, …).
    pub kilnd_config: String,
    /// Lines added to every kiln-cache's TOML.
    pub cache_config: String,
    /// kilnd's `--concurrency`.
    pub concurrency: usize,
    /// Host `i` uses replica `i mod caches` by its own name, instead of the shared name.
    pub spread: bool,
}

impl Layout {
    /// `caches` replicas and `hosts` hosts (`--concurrency 1`) with the shipped configuration, every
    /// host on the shared name.
    pub fn new(caches: usize, hosts: usize) -> Layout {
        Layout {
            caches,
            hosts,
            kilnd_config: String::new(),
            cache_config: String::new(),
            concurrency: 1,
            spread: false,
        }
    }
}

/// A running fleet; dropping it removes its containers and networks.
#[derive(Debug)]
pub struct ContainerFleet {
    pub name: String,
    pub images: Images,
    /// The Redis servers on the store network: the one, or a Redis Cluster's nodes ([`Store`]).
    pub redis: Vec<Container>,
    pub caches: Vec<Container>,
    pub hosts: Vec<Host>,
    /// `<name>-store`: Redis and the replicas.
    pub store_net: String,
    /// `<name>-fleet`: the replicas and the hosts.
    pub fleet_net: String,
    layout: Layout,
    /// `org.kiln.fleet=<name>`, on everything this fleet starts.
    label: String,
    /// The configuration directory's bind mount, read-only at /etc/kiln.
    etc_mount: String,
    dir: PathBuf,
}

/// What the kiln-cache replicas keep the fleet in.
#[derive(Debug, Clone)]
pub enum Store {
    /// One Redis (container `<name>-redis`, alias `redis`).
    Redis,
    /// A Redis Cluster: containers `<name>-redis-<i>`, aliases `redis-<i>`, every one a seed
    /// node of kiln-cache's `--redis-cluster`.
    Cluster(redis_cluster::ClusterSpec),
}

impl ContainerFleet {
    /// Starts Redis, the replicas and the hosts, and waits until each is ready: kiln-cache
    /// reports Redis up on `/metrics`, kilnd answers `Stats` on its socket. Blocking.
    pub fn start(name: &str, work: &Path, images: &Images, layout: &Layout) -> Result<ContainerFleet> {
        ContainerFleet::start_on(name, work, images, layout, &Store::Redis)
    }

    /// [`ContainerFleet::start`] with the replicas over `store`: one Redis, or a Redis Cluster.
    pub fn start_on(
        name: &str,
        work: &Path,
        images: &Images,
        layout: &Layout,
        store: &Store,
    ) -> Result<ContainerFleet> {
        check_docker(images)?;
        let name = format!("kiln-{name}-{}", std::process::id());
        let dir = work.join(&name);
        std::fs::create_dir_all(dir.join("etc"))?;
        let mut fleet = ContainerFleet {
            store_net: format!("{name}-store"),
            fleet_net: format!("{name}-fleet"),
            label: format!("{LABEL}={name}"),
            etc_mount: format!("{}:/etc/kiln:ro", dir.join("etc").display()),
            redis: Vec::new(),
            caches: Vec::new(),
            hosts: Vec::new(),
            images: images.clone(),
            layout: layout.clone(),
            name,
            dir,
        };
        for net in [&fleet.store_net, &fleet.fleet_net] {
            docker(&["network", "create", "--internal", "--label", &fleet.label, net])?;
        }
        fleet.write_configs()?;
        let mut redis_args = Vec::new();
        match store {
            Store::Redis => {
                let args = ["--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"];
                fleet.run_redis("redis", "redis", &args.map(String::from))?;
                redis_args.extend(["--redis".to_string(), format!("redis://redis:{}", redis_cluster::PORT)]);
            }
            Store::Cluster(spec) => {
                for i in 0..spec.nodes() {
                    let alias = format!("redis-{i}");
                    fleet.run_redis(&alias, &alias, &spec.server_args())?;
                    redis_args.extend(["--redis".to_string(), format!("redis://{alias}:{}", redis_cluster::PORT)]);
                }
                redis_cluster::create(&fleet.redis, &fleet.store_net, spec)?;
                redis_args.push("--redis-cluster".into());
            }
        }
        for i in 0..layout.caches {
            let cache = fleet.run_cache(i, &redis_args)?;
            fleet.caches.push(cache);
        }
        for i in 0..layout.caches {
            fleet.wait_cache_ready(i, READY)?;
        }
        for i in 0..layout.hosts {
            let host = fleet.run_host(i, &fleet.remote(i))?;
            fleet.hosts.push(host);
        }
        for h in &fleet.hosts {
            wait_host_ready(h, READY)?;
        }
        Ok(fleet)
    }

    /// The configuration files every container mounts read-only at /etc/kiln. Every host shares
    /// one token, under which no host can vouch for another's kernels, so the fleet audits by
    /// sample (`vet = "sample"`, as before vetting): these scenarios measure serving across hosts;
    /// vetting has its own (`publish_first`), with a token per writer.
    fn write_configs(&self) -> Result<()> {
        let etc = self.dir.join("etc");
        std::fs::write(etc.join("tokens"), format!("write:{TOKEN}\n"))?;
        std::fs::write(etc.join("token"), TOKEN)?;
        std::fs::write(
            etc.join("kiln-cache.toml"),
            format!(
                "listen = \"0.0.0.0:7171\"\nmetrics = \"0.0.0.0:9465\"\nvet = \"sample\"\n{}",
                self.layout.cache_config
            ),
        )?;
        std::fs::write(
            etc.join("kilnd.toml"),
            format!("metrics = \"0.0.0.0:9464\"\ntarget = \"sm_90\"\nvet = \"sample\"\n{}", self.layout.kilnd_config),
        )?;
        // kiln-cache runs as 65532 and reads these through a read-only mount.
        for f in ["tokens", "token", "kiln-cache.toml", "kilnd.toml"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(etc.join(f), std::fs::Permissions::from_mode(0o644))?;
        }
        Ok(())
    }

    /// Starts a Redis server on the store network, reached there by `alias`.
    fn run_redis(&mut self, suffix: &str, alias: &str, args: &[String]) -> Result<()> {
        let redis = Container { name: format!("{}-{suffix}", self.name) };
        let mut run = vec!["run", "-d", "--name", redis.name.as_str(), "--hostname", alias, "--label", &self.label];
        run.extend(["--network", self.store_net.as_str(), "--network-alias", alias, &self.images.redis]);
        run.push("redis-server");
        run.extend(args.iter().map(String::as_str));
        docker(&run)?;
        self.redis.push(redis);
        Ok(())
    }

    /// Starts kiln-cache replica `i` over the Redis `redis_args` name, on the store network and,
    /// as `kiln-cache` and `kiln-cache-<i>`, on the fleet network.
    fn run_cache(&self, i: usize, redis_args: &[String]) -> Result<Container> {
        let cache = Container { name: format!("{}-cache-{i}", self.name) };
        let hostname = format!("kiln-cache-{i}");
        let mut run = vec!["run", "-d", "--name", cache.name.as_str(), "--hostname", &hostname, "--label", &self.label];
        run.extend(["--network", self.store_net.as_str(), "-v", &self.etc_mount, &self.images.cache]);
        run.extend(["--config", "/etc/kiln/kiln-cache.toml", "--tokens", "/etc/kiln/tokens"]);
        run.extend(redis_args.iter().map(String::as_str));
        docker(&run)?;
        docker(&["network", "connect", "--alias", "kiln-cache", "--alias", &hostname, &self.fleet_net, &cache.name])?;
        Ok(cache)
    }

    /// The `--remote` of host `i`: the shared name, or with [`Layout::spread`] its replica's own.
    fn remote(&self, i: usize) -> String {
        match self.layout.spread {
            true => format!("http://kiln-cache-{}:7171", i % self.layout.caches.max(1)),
            false => "http://kiln-cache:7171".to_string(),
        }
    }

    /// Starts one more host, `i` (past the layout's, so a letter no other host has), configured
    /// as the others, and waits until it answers: a fresh host with an empty cache. It is removed
    /// with the fleet. Blocking.
    pub fn fresh_host(&self, i: usize) -> Result<Host> {
        let host = self.run_host(i, &self.remote(i))?;
        wait_host_ready(&host, READY)?;
        Ok(host)
    }

    fn run_host(&self, i: usize, remote: &str) -> Result<Host> {
        let letter = char::from(b'a' + u8::try_from(i % 26).unwrap_or(0));
        let container = Container { name: format!("{}-host-{letter}", self.name) };
        let run = self.dir.join(format!("host-{letter}/run"));
        let cache = self.dir.join(format!("host-{letter}/cache"));
        std::fs::create_dir_all(&run)?;
        std::fs::create_dir_all(&cache)?;
        let (run_mount, cache_mount) =
            (format!("{}:/run/kiln", run.display()), format!("{}:/var/cache/kiln", cache.display()));
        let hostname = format!("host-{letter}");
        let concurrency = self.layout.concurrency.to_string();
        docker(&[
            "run",
            "-d",
            "--name",
            &container.name,
            "--hostname",
            &hostname,
            "--label",
            &self.label,
            "--network",
            &self.fleet_net,
            "-v",
            &run_mount,
            "-v",
            &cache_mount,
            "-v",
            &self.etc_mount,
            &self.images.kilnd,
            "--config",
            "/etc/kiln/kilnd.toml",
            "--socket",
            "/run/kiln/kilnd.sock",
            "--cache-dir",
            "/var/cache/kiln",
            "--remote",
            remote,
            "--remote-token",
            "@/etc/kiln/token",
            "--concurrency",
            &concurrency,
        ])?;
        Ok(Host { container, socket: run.join("kilnd.sock") })
    }

    /// kiln-cache `i`'s `/metrics` address on the store network (which it never leaves).
    pub fn cache_metrics(&self, i: usize) -> Result<SocketAddr> {
        Ok(SocketAddr::new(self.caches[i].ip(&self.store_net)?, 9465))
    }

    /// Sums the samples of `series` (a name with the start of its labels) on kiln-cache `i`.
    pub fn cache_metric(&self, i: usize, series: &str) -> Result<f64> {
        let text = kiln_tests::http::get(self.cache_metrics(i)?, "/metrics")?;
        Ok(sum_series(&text, series))
    }

    /// Sums `series` on host `i`'s `/metrics`, reached on the fleet network: fails while the host
    /// is cut off from it.
    pub fn host_metric(&self, i: usize, series: &str) -> Result<f64> {
        let addr = SocketAddr::new(self.hosts[i].container.ip(&self.fleet_net)?, 9464);
        let text = kiln_tests::http::get(addr, "/metrics")?;
        Ok(sum_series(&text, series))
    }

    /// Sums `series` over every host.
    pub fn hosts_metric(&self, series: &str) -> Result<f64> {
        (0..self.hosts.len()).map(|i| self.host_metric(i, series)).sum()
    }

    /// Waits until kiln-cache `i` reports its Redis up.
    pub fn wait_cache_ready(&self, i: usize, bound: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            if self.cache_metric(i, "kiln_server_redis_up").is_ok_and(|up| up >= 1.0) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > bound {
                bail!(
                    "{} did not report Redis up within {} s; its log:\n{}",
                    self.caches[i].name,
                    bound.as_secs(),
                    self.caches[i].logs_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Restarts kiln-cache replica `i` as a rolling update does (SIGTERM, up to `grace` to drain,
    /// then the same container started again) and waits until it reports Redis up; returns how
    /// long it was out. Blocking.
    pub fn restart_cache(&self, i: usize, grace: Duration) -> Result<Duration> {
        let started = Instant::now();
        docker(&["restart", "-t", &grace.as_secs().to_string(), &self.caches[i].name])?;
        self.wait_cache_ready(i, READY)?;
        Ok(started.elapsed())
    }

    /// Cuts `container` off `network` (its interface there is removed: connections through it
    /// fail, its name leaves the network's DNS).
    pub fn disconnect(&self, network: &str, container: &Container) -> Result<()> {
        docker(&["network", "disconnect", "--force", network, &container.name]).map(drop)
    }

    /// Joins `container` to `network` again, with `alias` when given.
    pub fn connect(&self, network: &str, container: &Container, alias: Option<&str>) -> Result<()> {
        let mut args = vec!["network", "connect"];
        if let Some(a) = alias {
            args.extend(["--alias", a]);
        }
        args.extend([network, container.name.as_str()]);
        docker(&args).map(drop)
    }
}

impl Drop for ContainerFleet {
    fn drop(&mut self) {
        let filter = format!("label={LABEL}={}", self.name);
        if let Ok(ids) = docker(&["ps", "-aq", "--filter", &filter]) {
            for id in ids.lines() {
                let _ = docker(&["rm", "-f", "-v", id]);
            }
        }
        for net in [&self.store_net, &self.fleet_net] {
            let _ = docker(&["network", "rm", net]);
        }
    }
}

/// Waits until a host's kilnd answers `Stats` through its socket.
fn wait_host_ready(host: &Host, bound: Duration) -> Result<()> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    loop {
        let answered = host.socket.exists()
            && runtime.block_on(async { kiln_client::connect(&host.uri()).await.ok()?.stats().await.ok() }).is_some();
        if answered {
            return Ok(());
        }
        if started.elapsed() > bound {
            bail!(
                "{} did not answer on {} within {} s; its log:\n{}",
                host.container.name,
                host.socket.display(),
                bound.as_secs(),
                host.container.logs_tail(20)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sum of every sample whose line starts with `series`.
pub fn sum_series(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}
