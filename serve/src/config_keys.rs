//! Which keys a config file struct accepts, read from its `Deserialize` impl, so a test can
//! check that a shipped example config lists every one of them: an example that claims every
//! key but lacks some sends users to the source.

use serde::de::{self, Deserialize, Deserializer, Visitor};
use std::fmt;

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

    #[test]
    fn reads_the_fields_and_finds_the_unlisted() {
        let fields = keys::<Sample>();
        assert_eq!(fields, ["alpha", "tokens"]);
        assert_eq!(missing_from("# alpha = 3\n", &fields), ["tokens"]);
        assert!(missing_from("alpha=1\n# [[tokens]]\n", &fields).is_empty());
        assert_eq!(missing_from("# alphabet = 1\n", &fields), ["alpha", "tokens"]);
    }
}
