//! GPU targets. kiln compiles to real architectures only (a cubin runs on exactly one family), so
//! a target is `sm_<major><minor>` with an optional `a` (architecture-specific features, as in
//! `sm_90a`) or `f` (family-specific) suffix. `sm_90` and `sm_90a` are different targets and
//! different keys.

use std::fmt;
use std::str::FromStr;

/// A real GPU architecture such as `sm_90` or `sm_90a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// Compute capability times ten plus minor: 90 for 9.0, 120 for 12.0.
    sm: u32,
    suffix: Option<Suffix>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Suffix {
    Arch,
    Family,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{0}` is not a GPU target: expected sm_<NN> with an optional a or f suffix, e.g. sm_90 or sm_90a")]
pub struct TargetError(pub String);

impl Target {
    /// The target of a device with compute capability `major.minor`.
    pub fn from_capability(major: u32, minor: u32) -> Self {
        Target { sm: major * 10 + minor, suffix: None }
    }

    /// Compute capability as (major, minor).
    pub fn capability(&self) -> (u32, u32) {
        (self.sm / 10, self.sm % 10)
    }

    /// The number in the name: 90 for `sm_90a`.
    pub fn sm(&self) -> u32 {
        self.sm
    }
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || TargetError(s.chars().take(64).collect());
        let rest = s.strip_prefix("sm_").ok_or_else(err)?;
        let (digits, suffix) = match rest.as_bytes().last() {
            Some(b'a') => (&rest[..rest.len() - 1], Some(Suffix::Arch)),
            Some(b'f') => (&rest[..rest.len() - 1], Some(Suffix::Family)),
            _ => (rest, None),
        };
        let valid_digits =
            (2..=3).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
        if !valid_digits {
            return Err(err());
        }
        let sm = digits.parse().map_err(|_| err())?;
        Ok(Target { sm, suffix })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let suffix = match self.suffix {
            None => "",
            Some(Suffix::Arch) => "a",
            Some(Suffix::Family) => "f",
        };
        write!(f, "sm_{}{}", self.sm, suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_real_architectures() {
        for s in ["sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_100f", "sm_120a"] {
            let t: Target = s.parse().expect(s);
            assert_eq!(t.to_string(), s);
        }
        assert_eq!("sm_90".parse::<Target>().unwrap().capability(), (9, 0));
        assert_ne!("sm_90".parse::<Target>(), "sm_90a".parse::<Target>());
    }

    #[test]
    fn refuses_everything_else() {
        for s in ["", "sm_", "sm_9", "sm_0900", "compute_90", "SM_90", "sm_90b", "sm_9x", "sm_090", "sm_90 ", "90"] {
            assert!(s.parse::<Target>().is_err(), "{s:?} parsed");
        }
    }
}
