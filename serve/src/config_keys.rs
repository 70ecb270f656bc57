//! Which keys a config file struct accepts, read from its `Deserialize` impl, so a test can
//! check that a shipped example config lists every one of them: an example that claims every
//! key but lacks some sends users to the source. [`assert_documented`] is that test, and the
//! one on `--help`, as both daemons run them.

use serde::de::{self, Deserialize, Deserializer, Visitor};
use std::fmt;

/// Panics unless a daemon's flags `F` and config file `T` are documented for users: its `--help`
/// holds no rustdoc link (``[`Config::merge`]`` in a flag's doc comment reads as noise there),
/// and `example`, the shipped example config at `example_path`, lists every key of `T`.
pub fn assert_documented<'de, F: clap::CommandFactory, T: Deserialize<'de>>(example_path: &str, example: &str) {
    let mut command = F::command();
    let help = command.render_long_help().to_string();
    assert!(!help.contains("[`"), "{} --help holds a rustdoc link:\n{help}", command.get_name());
    let missing = missing_from(example, &keys::<T>());
    assert!(missing.is_empty(), "{example_path} does not list {missing:?}");
}

/// The field names serde's derive gives `T` (its `FIELDS`), in declaration order.
pub fn keys<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
    let mut probe = FieldProbe(None);
    let _ = T::deserialize(&mut probe);
    probe.0.map(<[_]>::to_vec).unwrap_or_default()
}

/// The keys of `keys` that `example` neither sets nor shows commented out (a line that starts,
/// after an optional `#`, with `KEY =` or `[[KEY]]`).
pub fn missing_from<'a>(example: &str, keys: &[&'a str]) -> Vec<&'a str> {
    let listed = |key: &str| {
        example.lines().any(|line| {
            let line = line.trim_start().trim_start_matches('#').trim_start();
            line.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='))
                || line.starts_with(&format!("[[{key}]]"))
        })
    };
    keys.iter().copied().filter(|k| !listed(k)).collect()
}

/// A deserializer that records the fields a struct asks for, then stops.
struct FieldProbe(Option<&'static [&'static str]>);

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field probe")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for &mut FieldProbe {
    type Error = Stop;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        self.0 = Some(fields);
        Err(Stop)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Sample {
        alpha: Option<u32>,
        tokens: Vec<String>,
    }

    /// Flags with a rustdoc link in a doc comment, where `--help` shows it as it is.
    #[derive(clap::Parser)]
    #[command(name = "sample")]
    #[allow(dead_code)]
    struct SampleFlags {
        /// Read by [`Sample`].
        #[arg(long)]
        alpha: Option<u32>,
    }

    /// The same flags, their help in plain text.
    #[derive(clap::Parser)]
    #[command(name = "sample")]
    #[allow(dead_code)]
    struct PlainFlags {
        /// The alpha setting.
        #[arg(long)]
        alpha: Option<u32>,
    }

    #[test]
    fn plain_help_and_a_full_example_are_documented() {
        assert_documented::<PlainFlags, Sample>("sample.toml", "# alpha = 1\n# [[tokens]]\n");
    }

    #[test]
    #[should_panic(expected = "sample.toml does not list [\"tokens\"]")]
    fn an_example_without_a_key_is_not() {
        assert_documented::<PlainFlags, Sample>("sample.toml", "# alpha = 1\n");
    }

    #[test]
    #[should_panic(expected = "sample --help holds a rustdoc link")]
    fn a_rustdoc_link_in_help_is_not() {
        assert_documented::<SampleFlags, Sample>("sample.toml", "# alpha = 1\n# [[tokens]]\n");
    }

    #[test]
    fn reads_the_fields_and_finds_the_unlisted() {
        let fields = keys::<Sample>();
        assert_eq!(fields, ["alpha", "tokens"]);
        assert_eq!(missing_from("# alpha = 3\n", &fields), ["tokens"]);
        assert!(missing_from("alpha=1\n# [[tokens]]\n", &fields).is_empty());
        assert_eq!(missing_from("# alphabet = 1\n", &fields), ["alpha", "tokens"]);
    }
}
