//! Typed command-line values: each flag is parsed once, at the flag, by one
//! of these `value_parser` functions or `ValueEnum`s. A bad value is a clap
//! error (exit 2) whose message says what is accepted.

use std::time::Duration;

use clap::ValueEnum;
use ptelab_model::Granule;

use crate::workload::size::size_bytes;
use crate::workload::FolioSpec;

/// `--size`, `--sizes`, `--swapfile`: bytes, with binary suffixes.
pub fn size(text: &str) -> Result<u64, String> {
    size_bytes(text)
}

/// `--folio`, `--folios`: a folio layout spec.
pub fn folio(text: &str) -> Result<FolioSpec, String> {
    FolioSpec::parse(text).ok_or_else(|| format!("accepted specs are {}", FolioSpec::accepted()))
}

/// `model --granule`: the base page size modelled.
pub fn granule(text: &str) -> Result<Granule, String> {
    Granule::parse(text).ok_or_else(|| "accepted granules are 4K, 16K, 64K (arm64)".to_string())
}

const DURATIONS: &str = "expected a duration such as 500ms, 2s, 1.5s or 1m";

/// `--time`: a positive duration (`500ms`, `2s`, `1.5s`, `1m`; a bare
/// number is seconds).
pub fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && (v * mult).is_finite() && v * mult < 1e9 => {
            Ok(Duration::from_secs_f64(v * mult))
        }
        Ok(_) => Err(format!("{DURATIONS} (above zero)")),
        Err(_) => Err(DURATIONS.to_string()),
    }
}

/// `calibrate --span`: a duration as [`duration`], or `0` (no spread).
pub fn span(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    duration(text).map_err(|e| format!("{e}, or 0"))
}

/// `--tag`: a name `compare`, `report` and `show` can tell from a run id or
/// `latest~N` (`store::is_tag_name`).
pub fn tag(text: &str) -> Result<String, String> {
    if crate::store::is_tag_name(text) {
        Ok(text.to_string())
    } else {
        Err(
            "a tag is a non-empty name that is not a number, does not start with 'latest' \
             and has no comma (e.g. base, v6.18-rc1, patched)"
                .to_string(),
        )
    }
}

/// `compare --seed`: a decimal or 0x-hex 64-bit number.
pub fn seed(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.map_err(|_| "expected a decimal or 0x-hex 64-bit number".to_string())
}

/// `compare --format`: how the comparison is printed (`--json` aside).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TextFormat {
    /// Aligned plain-text table.
    Text,
    /// Markdown table (for a PR comment).
    #[value(alias = "md")]
    Markdown,
}

/// `compare --normalize`: the analysis layer's `Normalize`, offered as
/// flag values (the analysis layer knows nothing of clap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NormalizeFlag {
    /// When both runs ran the same kernel release on the same machine (on
    /// different kernels the probe's own syscall path may have changed)
    Auto,
    /// Always, when both runs recorded the probe
    Probe,
    /// Never: compare raw times
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(duration("3").unwrap(), Duration::from_secs(3));
        for bad in ["fast", "0s", "-1s", "", "ms", "1e400s", "infs"] {
            let e = duration(bad).unwrap_err();
            assert!(e.contains("500ms, 2s, 1.5s or 1m"), "{bad}: {e}");
        }
        assert_eq!(span("0").unwrap(), Duration::ZERO);
        assert_eq!(span("3m").unwrap(), Duration::from_secs(180));
        assert!(span("soon").unwrap_err().ends_with("or 0"));
    }

    #[test]
    fn sizes_folios_tags_and_seeds() {
        assert_eq!(size("400K").unwrap(), 409_600);
        assert!(size("12Q").unwrap_err().contains("K, M, G"));
        assert_eq!(folio("2m-pte").unwrap(), FolioSpec::PmdPte);
        assert!(folio("48K").unwrap_err().contains("4K, 16K, 32K, 64K"));
        assert_eq!(tag("base").unwrap(), "base");
        for bad in ["12", "a,b", "latest-ish", ""] {
            assert!(tag(bad).is_err(), "{bad}");
        }
        assert_eq!(granule("16k").unwrap(), Granule::K16);
        assert!(granule("8K").unwrap_err().contains("4K, 16K, 64K"));
        assert_eq!(seed("0x2a").unwrap(), 42);
        assert_eq!(seed("42").unwrap(), 42);
        assert!(seed("zz").is_err());
    }
}
