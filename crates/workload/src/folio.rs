//! Folio layout specs shared by `bench`, `sweep` and `model` (docs/architecture.md,
//! "Folio layout specs").
//!
//! A spec names the layout a user asks for; whether the running kernel can give
//! it is decided by the kernel backend (which sizes it offers), and whether it
//! did is decided by layout verification, never assumed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::usage;

/// The folio layout requested for a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum FolioSpec {
    /// `4K`: order-0 pages only (MADV_NOHUGEPAGE, no mTHP size enabled).
    Base,
    /// `16K`..`1M`: anonymous mTHP of this many bytes, PTE-mapped.
    Mthp(u64),
    /// `2M`: PMD-mapped THP.
    Pmd,
    /// `2M-pte`: PMD-sized THP folios mapped by PTEs (the seeds' VMA-split trick).
    PmdPte,
}

/// Sizes of anonymous mTHP folios the spec grammar knows (a kernel may offer
/// fewer; order 1 is never offered for anonymous memory).
pub const MTHP_SIZES: [u64; 7] = [
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
];

/// PMD size on x86-64 and arm64 with 4K pages.
pub const PMD_SIZE: u64 = 2 << 20;

impl FolioSpec {
    /// Every spec, in size order, as the grammar accepts them.
    pub fn all() -> Vec<FolioSpec> {
        let mut v = vec![FolioSpec::Base];
        v.extend(MTHP_SIZES.iter().map(|&s| FolioSpec::Mthp(s)));
        v.extend([FolioSpec::Pmd, FolioSpec::PmdPte]);
        v
    }

    /// Bytes in one folio of this layout (4 KiB base pages).
    pub fn folio_bytes(self) -> u64 {
        match self {
            FolioSpec::Base => 4096,
            FolioSpec::Mthp(b) => b,
            FolioSpec::Pmd | FolioSpec::PmdPte => PMD_SIZE,
        }
    }

    /// Folio order with 4 KiB base pages.
    pub fn order(self) -> u32 {
        (self.folio_bytes() / 4096).trailing_zeros()
    }

    /// True when the folios are mapped by a PMD entry rather than by PTEs.
    pub fn pmd_mapped(self) -> bool {
        matches!(self, FolioSpec::Pmd)
    }

    /// Alignment the region gets by default: its folio size.
    pub fn alignment(self) -> u64 {
        self.folio_bytes()
    }

    /// The spec `text` spells (case-insensitive), if any.
    pub fn parse(text: &str) -> Option<FolioSpec> {
        let norm = text.trim().to_ascii_uppercase();
        match norm.as_str() {
            "4K" => Some(FolioSpec::Base),
            "2M" => Some(FolioSpec::Pmd),
            "2M-PTE" => Some(FolioSpec::PmdPte),
            _ => MTHP_SIZES
                .iter()
                .copied()
                .map(FolioSpec::Mthp)
                .find(|m| m.to_string() == norm),
        }
    }

    /// The accepted spellings, for error messages.
    pub fn accepted() -> String {
        FolioSpec::all()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for FolioSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FolioSpec::Base => f.write_str("4K"),
            FolioSpec::Mthp(b) if b % (1 << 20) == 0 => write!(f, "{}M", b >> 20),
            FolioSpec::Mthp(b) => write!(f, "{}K", b >> 10),
            FolioSpec::Pmd => f.write_str("2M"),
            FolioSpec::PmdPte => f.write_str("2M-pte"),
        }
    }
}

impl FromStr for FolioSpec {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        FolioSpec::parse(s).ok_or_else(|| {
            usage(format!(
                "unknown folio spec '{s}': accepted specs are {}",
                FolioSpec::accepted()
            ))
        })
    }
}

impl From<FolioSpec> for String {
    fn from(s: FolioSpec) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for FolioSpec {
    type Error = anyhow::Error;
    fn try_from(s: String) -> anyhow::Result<Self> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_spec() {
        for spec in FolioSpec::all() {
            assert_eq!(spec.to_string().parse::<FolioSpec>().unwrap(), spec);
        }
        assert_eq!("64k".parse::<FolioSpec>().unwrap(), FolioSpec::Mthp(65536));
        assert_eq!("2m-pte".parse::<FolioSpec>().unwrap(), FolioSpec::PmdPte);
    }

    #[test]
    fn orders() {
        assert_eq!(FolioSpec::Base.order(), 0);
        assert_eq!(FolioSpec::Mthp(64 << 10).order(), 4);
        assert_eq!(FolioSpec::PmdPte.order(), 9);
        assert!(FolioSpec::Pmd.pmd_mapped() && !FolioSpec::PmdPte.pmd_mapped());
    }

    #[test]
    fn unknown_spec_lists_accepted() {
        let err = "48K".parse::<FolioSpec>().unwrap_err();
        assert!(crate::error::is_usage(&err));
        assert!(err.to_string().contains("4K, 16K, 32K, 64K"), "{err}");
        assert!("8K".parse::<FolioSpec>().is_err());
    }
}
