//! The status page's counts as per-minute buckets: which minute an event falls in, the hash
//! fields one minute's counts are kept under in Redis, and the sum of a window of minutes.
//!
//! A minute's hash (`layout::status_minute_key`) holds, as integers:
//! - `r:<result>`: keys read (`hit`, `miss`, `negative`, `corrupt`), fleet-wide, as
//!   `kiln_server_lookups_total` counts them;
//! - `hit:<class>` and `us:<class>`: hits of artifacts of `class`, and the compile microseconds
//!   those artifacts cost (what the hits saved);
//! - `pub:<class>`: artifacts of `class` stored (Put), that is compiles the fleet did not have.
//!
//! A class is what the artifact's envelope names as its toolchain: `nvrtc`, `ptxas`, `triton`,
//! or `blob/<namespace>` for named blobs. A cache key is a blake3 digest and names nothing, so a
//! miss cannot be attributed to a class: the fleet's hit rate counts misses, a class's hit rate
//! is hits against the artifacts of that class the fleet had to compile and store.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Minutes a page covers.
pub const WINDOW_MINUTES: u64 = 60;

/// How long a minute's hash lives in Redis: the window and some slack for clocks that disagree.
pub const MINUTE_TTL_MS: u64 = 2 * WINDOW_MINUTES * 60_000;
const _: () = assert!(MINUTE_TTL_MS > WINDOW_MINUTES * 60_000);

/// Longest class name kept; longer ones (and odd characters) are counted as [`OTHER`].
const MAX_CLASS_LEN: usize = 64;

/// Where classes that are not kept are counted.
pub const OTHER: &str = "other";

/// The minute (since the Unix epoch) that `unix_ms` falls in.
pub fn minute_of(unix_ms: u64) -> u64 {
    unix_ms / 60_000
}

/// The minutes of the window that ends with the minute of `now_ms`, oldest first.
pub fn window(now_ms: u64) -> std::ops::RangeInclusive<u64> {
    let last = minute_of(now_ms);
    last.saturating_sub(WINDOW_MINUTES - 1)..=last
}

/// A counted event, as a hash field.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// A key read, by its result label.
    Result(&'static str),
    Hit(String),
    SavedMicros(String),
    Published(String),
}

impl Field {
    pub fn name(&self) -> String {
        match self {
            Field::Result(r) => format!("r:{r}"),
            Field::Hit(c) => format!("hit:{c}"),
            Field::SavedMicros(c) => format!("us:{c}"),
            Field::Published(c) => format!("pub:{c}"),
        }
    }
}

/// A class name as it may be stored: the envelope's toolchain when it is 1 to 64 characters of
/// `[A-Za-z0-9._/-]`, else [`OTHER`]. Envelopes come from clients; this keeps their names plain.
pub fn class(toolchain: &str) -> &str {
    let plain = !toolchain.is_empty()
        && toolchain.len() <= MAX_CLASS_LEN
        && toolchain.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'));
    if plain { toolchain } else { OTHER }
}

/// One class's figures over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ClassCounts {
    pub hits: u64,
    pub published: u64,
    pub seconds_saved: f64,
}

impl ClassCounts {
    /// Hits against hits plus compiles stored: the share of this class's demand the fleet served.
    pub fn hit_rate(&self) -> Option<f64> {
        rate(self.hits, self.hits + self.published)
    }
}

/// The sum of a window of minutes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Window {
    pub hits: u64,
    pub misses: u64,
    pub negative: u64,
    pub corrupt: u64,
    pub seconds_saved: f64,
    /// By class name.
    pub classes: BTreeMap<String, ClassCounts>,
    /// Hits and misses per minute, oldest first, for the page's minute table.
    pub minutes: Vec<MinuteCounts>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MinuteCounts {
    pub minute: u64,
    pub hits: u64,
    pub misses: u64,
}

impl Window {
    /// Adds one minute's hash as Redis returned it. Fields this version does not know are
    /// ignored, so a newer replica's fields never break an older one's page.
    pub fn add(&mut self, minute: u64, fields: &HashMap<String, u64>) {
        let mut this = MinuteCounts { minute, ..Default::default() };
        for (name, &n) in fields {
            let Some((kind, rest)) = name.split_once(':') else { continue };
            match (kind, rest) {
                ("r", "hit") => {
                    self.hits += n;
                    this.hits += n;
                }
                ("r", "miss") => {
                    self.misses += n;
                    this.misses += n;
                }
                ("r", "negative") => self.negative += n,
                ("r", "corrupt") => self.corrupt += n,
                ("hit", c) => self.classes.entry(c.to_owned()).or_default().hits += n,
                ("pub", c) => self.classes.entry(c.to_owned()).or_default().published += n,
                ("us", c) => {
                    let s = n as f64 / 1e6;
                    self.classes.entry(c.to_owned()).or_default().seconds_saved += s;
                    self.seconds_saved += s;
                }
                _ => {}
            }
        }
        self.minutes.push(this);
    }

    /// Hits against every key read that found no artifact (misses, negative and corrupt entries).
    pub fn hit_rate(&self) -> Option<f64> {
        rate(self.hits, self.hits + self.misses + self.negative + self.corrupt)
    }
}

fn rate(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_and_windows() {
        assert_eq!(minute_of(0), 0);
        assert_eq!(minute_of(59_999), 0);
        assert_eq!(minute_of(60_000), 1);
        let now = 1_700_000_123_456;
        let w = window(now);
        assert_eq!(w.clone().count() as u64, WINDOW_MINUTES);
        assert_eq!(*w.end(), now / 60_000);
        assert_eq!(*w.start(), now / 60_000 - 59);
        // Near the epoch the window is shorter, never negative.
        assert_eq!(window(5 * 60_000), 0..=5);
    }

    #[test]
    fn fields_round_trip_through_a_window() {
        let fields = |pairs: &[(Field, u64)]| pairs.iter().map(|(f, n)| (f.name(), *n)).collect::<HashMap<_, _>>();
        let mut w = Window::default();
        w.add(
            10,
            &fields(&[
                (Field::Result("hit"), 3),
                (Field::Result("miss"), 1),
                (Field::Hit("nvrtc".into()), 3),
                (Field::SavedMicros("nvrtc".into()), 1_500_000),
                (Field::Published("nvrtc".into()), 1),
            ]),
        );
        w.add(
            11,
            &fields(&[
                (Field::Result("hit"), 1),
                (Field::Result("negative"), 1),
                (Field::Result("corrupt"), 1),
                (Field::Hit("blob/triton".into()), 1),
            ]),
        );
        let mut unknown = HashMap::new();
        unknown.insert("zz:future".to_owned(), 9);
        unknown.insert("nocolon".to_owned(), 9);
        w.add(12, &unknown);
        assert_eq!((w.hits, w.misses, w.negative, w.corrupt), (4, 1, 1, 1));
        assert_eq!(w.hit_rate(), Some(4.0 / 7.0));
        assert!((w.seconds_saved - 1.5).abs() < 1e-9);
        let nvrtc = &w.classes["nvrtc"];
        assert_eq!((nvrtc.hits, nvrtc.published), (3, 1));
        assert_eq!(nvrtc.hit_rate(), Some(0.75));
        assert_eq!(w.classes["blob/triton"].hit_rate(), Some(1.0));
        let per_minute: Vec<_> = w.minutes.iter().map(|m| (m.minute, m.hits, m.misses)).collect();
        assert_eq!(per_minute, vec![(10, 3, 1), (11, 1, 0), (12, 0, 0)]);
        assert_eq!(Window::default().hit_rate(), None);
    }

    #[test]
    fn classes_are_plain_or_other() {
        assert_eq!(class("nvrtc"), "nvrtc");
        assert_eq!(class("blob/inductor-fx.v2"), "blob/inductor-fx.v2");
        for odd in ["", "<b>", "has space", "ünï", &"a".repeat(65)] {
            assert_eq!(class(odd), OTHER, "{odd}");
        }
    }
}
