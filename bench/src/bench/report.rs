//! The figures a run produces and their markdown form.
//!
//! Every row pairs a kiln figure with a baseline measured in the same run, so the ratio is what
//! carries meaning; absolute numbers depend on the machine. A figure that could not be measured
//! is kept as its error text rather than dropped, so a reader sees what failed.

use std::fmt::Write as _;

/// One measured quantity, with its unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Latency or wall time in milliseconds.
    Millis(f64),
    /// Wall time in seconds, for runs long enough that milliseconds only add digits.
    Seconds(f64),
    /// Operations per second.
    PerSecond(f64),
    /// A count of events, such as compiles across a fleet.
    Count(f64),
}

/// What a value measures; only values of the same kind divide into a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Time,
    Rate,
    Count,
}

impl Value {
    /// The value in its comparison unit (milliseconds or operations per second), so a ratio
    /// of two values of compatible units is meaningful.
    fn magnitude(self) -> f64 {
        match self {
            Value::Millis(ms) => ms,
            Value::Seconds(s) => s * 1e3,
            Value::PerSecond(r) | Value::Count(r) => r,
        }
    }

    /// A time in seconds; meaningless for a rate.
    pub fn seconds(self) -> f64 {
        self.magnitude() / 1e3
    }

    fn kind(self) -> Kind {
        match self {
            Value::Millis(_) | Value::Seconds(_) => Kind::Time,
            Value::PerSecond(_) => Kind::Rate,
            Value::Count(_) => Kind::Count,
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Value::Millis(ms) if ms < 10.0 => write!(f, "{ms:.3} ms"),
            Value::Millis(ms) => write!(f, "{ms:.1} ms"),
            Value::Seconds(s) => write!(f, "{s:.2} s"),
            Value::PerSecond(r) => write!(f, "{} /s", group_thousands(r.round() as u64)),
            Value::Count(n) => write!(f, "{}", group_thousands(n.round() as u64)),
        }
    }
}

fn group_thousands(n: u64) -> String {
    let digits: Vec<char> = n.to_string().chars().rev().collect();
    let groups: Vec<String> = digits.chunks(3).map(|c| c.iter().rev().collect()).collect();
    groups.into_iter().rev().collect::<Vec<_>>().join(",")
}

/// A figure that was measured, or why it was not.
pub type Measured = Result<Value, String>;

/// The goal a row is held to. Only the explicit targets appear here.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// kiln's figure must be at most this many milliseconds.
    AtMostMillis(f64),
    /// kiln's figure may exceed the baseline's by at most this many percent.
    OverheadAtMostPercent(f64),
    /// kiln ÷ baseline must be at most this.
    RatioAtMost(f64),
    /// kiln ÷ baseline must be at least this (rates: kiln must serve this share of the baseline).
    RatioAtLeast(f64),
    /// kiln's count must be exactly this (such as compiles = distinct kernels).
    CountEquals(u64),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Target::AtMostMillis(ms) => write!(f, "≤ {ms} ms"),
            Target::OverheadAtMostPercent(p) => write!(f, "overhead ≤ {p}%"),
            Target::RatioAtMost(r) => write!(f, "≤ {r:.2}×"),
            Target::RatioAtLeast(r) => write!(f, "≥ {r:.2}×"),
            Target::CountEquals(n) => write!(f, "= {n}"),
        }
    }
}

/// One line of a table: kiln against a named baseline.
#[derive(Debug, Clone)]
pub struct Row {
    pub measurement: String,
    pub kiln: Measured,
    pub baseline_name: String,
    pub baseline: Measured,
    pub target: Option<Target>,
}

impl Row {
    pub fn new(
        measurement: impl Into<String>,
        kiln: Measured,
        baseline_name: impl Into<String>,
        baseline: Measured,
    ) -> Row {
        Row { measurement: measurement.into(), kiln, baseline_name: baseline_name.into(), baseline, target: None }
    }

    pub fn with_target(mut self, target: Target) -> Row {
        self.target = Some(target);
        self
    }

    /// kiln ÷ baseline. For times below 1 means kiln is faster; for rates above 1 means kiln
    /// serves more.
    pub fn ratio(&self) -> Option<f64> {
        let (Ok(k), Ok(b)) = (&self.kiln, &self.baseline) else { return None };
        if k.kind() != b.kind() || b.magnitude() == 0.0 {
            return None;
        }
        Some(k.magnitude() / b.magnitude())
    }

    /// Whether the target was met; `None` when the row has no target or a figure is missing.
    pub fn met(&self) -> Option<bool> {
        match self.target? {
            Target::AtMostMillis(ms) => self.kiln.as_ref().ok().map(|k| k.magnitude() <= ms),
            Target::OverheadAtMostPercent(p) => self.ratio().map(|r| (r - 1.0) * 100.0 <= p),
            Target::RatioAtMost(max) => self.ratio().map(|r| r <= max),
            Target::RatioAtLeast(min) => self.ratio().map(|r| r >= min),
            Target::CountEquals(n) => {
                self.kiln.as_ref().ok().map(|k| k.kind() == Kind::Count && k.magnitude() == n as f64)
            }
        }
    }

    fn met_cell(&self) -> String {
        let verdict = match self.met() {
            Some(true) => "met",
            Some(false) => "**missed**",
            None if self.target.is_some() => "not measured",
            None => return "—".into(),
        };
        match (self.target, self.ratio()) {
            (Some(Target::OverheadAtMostPercent(_)), Some(r)) => format!("{verdict} ({:+.1}%)", (r - 1.0) * 100.0),
            _ => verdict.into(),
        }
    }
}

/// Two decimals, or three significant digits below 0.1, so a ratio of 0.0005 does not print as
/// a misleading 0.00.
fn format_ratio(r: f64) -> String {
    let decimals = if r > 0.0 && r < 0.1 { (2.0 - r.log10().floor()) as usize } else { 2 };
    format!("{r:.decimals$}×")
}

fn cell(m: &Measured) -> String {
    match m {
        Ok(v) => v.to_string(),
        Err(e) => format!("failed: {}", e.replace('|', "/").replace('\n', " ")),
    }
}

/// One figure of the issue, (a) to (d): its rows and the notes that say how it was measured.
#[derive(Debug, Clone, Default)]
pub struct Section {
    pub title: String,
    /// How the figures were taken, written by the code that took them, so parameters such as
    /// sample counts are the ones actually used.
    pub method: Vec<String>,
    pub rows: Vec<Row>,
    /// Observations from the run: per-round times, cache statistics, anything that failed.
    pub notes: Vec<String>,
    /// Markdown after the notes, for what a list does not carry (a model built on the figures).
    pub appendix: String,
}

impl Section {
    pub fn new(title: impl Into<String>) -> Section {
        Section { title: title.into(), ..Default::default() }
    }

    /// A section whose measurement failed as a whole.
    pub fn failed(title: impl Into<String>, error: &anyhow::Error) -> Section {
        let mut s = Section::new(title);
        s.notes.push(format!("**This figure could not be measured:** {error:#}"));
        s
    }

    /// The table alone, as printed to stdout.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str("| measurement | kiln | baseline | baseline figure | kiln ÷ baseline | target | met? |\n");
        out.push_str("|---|---|---|---|---|---|---|\n");
        for r in &self.rows {
            let ratio = r.ratio().map_or("—".to_string(), format_ratio);
            let target = r.target.map_or("—".to_string(), |t| t.to_string());
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.measurement,
                cell(&r.kiln),
                r.baseline_name,
                cell(&r.baseline),
                ratio,
                target,
                r.met_cell()
            );
        }
        out
    }

    pub fn markdown(&self) -> String {
        let mut out = format!("## {}\n\n", self.title);
        if !self.rows.is_empty() {
            out.push_str(&self.table());
            out.push('\n');
        }
        if !self.method.is_empty() {
            out.push_str("How it was measured:\n\n");
            for m in &self.method {
                let _ = writeln!(out, "- {m}");
            }
            out.push('\n');
        }
        if !self.notes.is_empty() {
            out.push_str("From this run:\n\n");
            for n in &self.notes {
                let _ = writeln!(out, "- {n}");
            }
            out.push('\n');
        }
        out.push_str(&self.appendix);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_and_targets() {
        let r =
            Row::new("x", Ok(Value::Millis(1.5)), "b", Ok(Value::Millis(0.5))).with_target(Target::AtMostMillis(2.0));
        assert_eq!(r.ratio(), Some(3.0));
        assert_eq!(r.met(), Some(true));
        let r = Row::new("x", Ok(Value::Seconds(1.06)), "b", Ok(Value::Seconds(1.0)))
            .with_target(Target::OverheadAtMostPercent(5.0));
        assert_eq!(r.met(), Some(false));
        assert!(r.met_cell().contains("+6.0%"));
        let r = Row::new("x", Ok(Value::PerSecond(10.0)), "b", Ok(Value::Millis(1.0)));
        assert_eq!(r.ratio(), None, "a rate and a time do not divide");
        let r = Row::new("x", Err("boom".into()), "b", Ok(Value::Millis(1.0))).with_target(Target::AtMostMillis(2.0));
        assert_eq!(r.met(), None);
        assert_eq!(r.met_cell(), "not measured");
        let r =
            Row::new("x", Ok(Value::Count(32.0)), "b", Ok(Value::Count(256.0))).with_target(Target::CountEquals(32));
        assert_eq!((r.ratio(), r.met()), (Some(0.125), Some(true)));
        let r = Row::new("x", Ok(Value::Count(32.0)), "b", Ok(Value::Millis(1.0)));
        assert_eq!(r.ratio(), None, "a count and a time do not divide");
        let r =
            Row::new("x", Ok(Value::Seconds(1.2)), "b", Ok(Value::Seconds(1.0))).with_target(Target::RatioAtMost(1.1));
        assert_eq!(r.met(), Some(false));
    }

    #[test]
    fn formats() {
        assert_eq!(Value::PerSecond(1234567.4).to_string(), "1,234,567 /s");
        assert_eq!(Value::Millis(1.23456).to_string(), "1.235 ms");
        assert_eq!(Value::Seconds(12.345).to_string(), "12.35 s");
        assert_eq!(format_ratio(12.894), "12.89×");
        assert_eq!(format_ratio(0.000512), "0.000512×");
        assert_eq!(format_ratio(0.0512), "0.0512×");
    }
}
