//! Region sizes as typed on the command line: `400K`, `4M`, `1G` (binary units).

/// Parse a size with an optional binary suffix (K, M, G, T; `KiB`/`KB` also
/// accepted). A bare number is bytes. Zero is refused. The error is the
/// reason alone, with what is accepted (clap names the flag and the value).
pub fn size_bytes(text: &str) -> Result<u64, String> {
    let accepted = "expected a positive number with an optional binary suffix K, M, G or T \
                    (1K = 1024 bytes), e.g. 4K, 400K, 40M, 1G";
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let shift = match suffix.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(accepted.to_string()),
    };
    let n: u64 = num.parse().map_err(|_| accepted.to_string())?;
    if n == 0 {
        return Err(format!("the size must be above zero; {accepted}"));
    }
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("too large for 64 bits; {accepted}"))
}

/// Format bytes the way the CLI accepts them (largest exact binary unit).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_suffixes() {
        assert_eq!(size_bytes("4K").unwrap(), 4096);
        assert_eq!(size_bytes("400k").unwrap(), 409_600);
        assert_eq!(size_bytes("40M").unwrap(), 40 << 20);
        assert_eq!(size_bytes("1G").unwrap(), 1 << 30);
        assert_eq!(size_bytes("64KiB").unwrap(), 65536);
        assert_eq!(size_bytes("8192").unwrap(), 8192);
    }

    #[test]
    fn refuses_bad_sizes_saying_what_is_accepted() {
        for bad in ["12Q", "0", "", "K", "-4K", "4.5M", "99999999999T"] {
            let err = size_bytes(bad).unwrap_err();
            assert!(err.contains("K, M, G"), "{bad}: {err}");
        }
        assert!(size_bytes("0").unwrap_err().contains("above zero"));
    }

    #[test]
    fn formats_round_trip() {
        for s in ["4K", "400K", "4M", "1G", "40M"] {
            assert_eq!(format_size(size_bytes(s).unwrap()), s);
        }
    }
}
