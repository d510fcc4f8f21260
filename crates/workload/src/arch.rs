//! The two architectures ptelab knows: the model's, the guests', the hosts'.
//! Typed once; every flag that names one parses into [`Arch`], and no layer
//! below the command line matches arch strings.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::bail_usage;

/// An architecture, by the names ptelab prints (Debian's and Rust's differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Arch {
    #[serde(rename = "x86_64")]
    X86_64,
    #[serde(rename = "arm64")]
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Arm64];

    /// `x86_64` (or `x86-64`, Debian's `amd64`) and `arm64` (or `aarch64`,
    /// as `uname -m` and Rust say).
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "x86_64" | "x86-64" | "amd64" => Some(Arch::X86_64),
            "arm64" | "aarch64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// As a guest's `--arch` takes it: a usage error names what is accepted.
    pub fn parse_flag(s: &str) -> anyhow::Result<Arch> {
        match Arch::parse(s) {
            Some(a) => Ok(a),
            None => bail_usage!("unknown --arch '{s}': accepted: x86_64 (amd64), arm64 (aarch64)"),
        }
    }

    /// The canonical name (as stored in cells and printed).
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The machine ptelab runs on, when it is one of the two.
    pub fn host() -> Option<Arch> {
        Arch::parse(std::env::consts::ARCH)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Flags that take an arch (`model --arch`) offer it with the spellings
/// users type.
impl clap::ValueEnum for Arch {
    fn value_variants<'a>() -> &'a [Self] {
        &Arch::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        use clap::builder::PossibleValue;
        Some(match self {
            Arch::X86_64 => PossibleValue::new("x86_64").aliases(["x86-64", "x86", "amd64"]),
            Arch::Arm64 => PossibleValue::new("arm64").alias("aarch64"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_to_one_arch() {
        for (s, a) in [
            ("x86_64", Arch::X86_64),
            ("x86-64", Arch::X86_64),
            ("amd64", Arch::X86_64),
            ("arm64", Arch::Arm64),
            ("aarch64", Arch::Arm64),
        ] {
            assert_eq!(Arch::parse(s), Some(a));
        }
        for a in Arch::ALL {
            assert_eq!(Arch::parse(a.name()), Some(a));
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{a}\""));
        }
        assert!(crate::error::is_usage(
            &Arch::parse_flag("riscv64").unwrap_err()
        ));
    }
}
