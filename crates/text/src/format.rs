//! Numbers, sizes and durations as ptelab prints them, one function each,
//! so `show`, `report`, `compare` and the messages of every layer agree.

/// Bytes the way the command line accepts them (`4K`, `2M`, or plain bytes
/// when no binary unit divides them): the one exact form, kept beside the
/// parser in the workload layer so that it round-trips through `--size`.
pub use crate::workload::size::format_size as size;

/// Nanoseconds as the seeds print them: whole numbers from 100 up, one
/// decimal below; `n/a` for an undefined figure (a cell with no samples).
pub fn ns(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A formatted number without the sign of a zero: a figure that rounds
/// to zero (a -0.0 per-call TLB count, a -0.04% change at one decimal) is
/// `0`, `0.0` or `+0.0%`, never `-0`.
pub fn no_negative_zero(s: String) -> String {
    let zero = |t: &str| {
        let digits = t.trim_end_matches('%');
        !digits.is_empty() && digits.chars().all(|c| c == '0' || c == '.')
    };
    match s.strip_prefix('-') {
        Some(rest) if zero(rest) => rest.to_string(),
        _ => s,
    }
}

/// A change in percent with its sign and `decimals` decimals (`+1.5%`,
/// `-3.0%`); one that rounds to zero is `+0.0%`.
pub fn signed_pct(v: f64, decimals: usize) -> String {
    let s = format!("{v:+.decimals$}%");
    match s.strip_prefix('-') {
        Some(rest) if no_negative_zero(s.clone()) == rest => format!("+{rest}"),
        _ => s,
    }
}

/// `v` with `decimals` decimals, or `n/a` for an undefined figure.
pub fn fixed(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        no_negative_zero(format!("{v:.decimals$}"))
    } else {
        "n/a".into()
    }
}

/// Nanoseconds as [`ns`] prints them, or `-` where there are none.
pub fn opt_ns(v: Option<f64>) -> String {
    v.map_or("-".into(), ns)
}

/// An amount of bytes that need not be a size a user typed (free space, a
/// plot tick), to three significant digits in the largest binary unit it
/// reaches: `512B`, `4K`, `1.5M`, `23.5G`.
pub fn bytes(v: f64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        let u = (1u64 << shift) as f64;
        if v >= u {
            return format!("{}{unit}", trim(v / u));
        }
    }
    format!("{}B", trim(v))
}

/// Memory in GiB with one decimal (`23.5 GiB`), as `/proc/meminfo` totals
/// are reported.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// A time given in nanoseconds, in the largest unit it reaches, to three
/// significant digits: `0.5 ns`, `100 ns`, `1 µs`, `2.5 ms`, `1 s`.
pub fn nanos(ns: f64) -> String {
    for (scale, unit) in [(1e9, "s"), (1e6, "ms"), (1e3, "µs")] {
        if ns >= scale {
            return format!("{} {unit}", trim(ns / scale));
        }
    }
    format!("{} ns", trim(ns))
}

/// A count of instructions in the largest decimal unit it reaches, to three
/// significant digits: `500 instr`, `1.5K instr`, `2M instr`, `1G instr`.
pub fn instructions(v: f64) -> String {
    for (scale, unit) in [(1e9, "G"), (1e6, "M"), (1e3, "K")] {
        if v >= scale {
            return format!("{}{unit} instr", trim(v / scale));
        }
    }
    format!("{} instr", trim(v))
}

/// A p-value: three decimals, or scientific notation below 0.001.
pub fn p_value(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

/// A counter value: integers plainly, fractions with up to 2 decimals;
/// `-` where there is none.
pub fn counter(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => no_negative_zero(format!("{v:.0}")),
        Some(v) => {
            let s = format!("{v:.2}");
            no_negative_zero(s.trim_end_matches('0').trim_end_matches('.').to_string())
        }
    }
}

/// Three significant digits without trailing zeros (`1.5`, `12.5`, `100`).
fn trim(v: f64) -> String {
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    let s = no_negative_zero(format!("{v:.digits$}"));
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_has_no_sign() {
        assert_eq!(counter(Some(-0.0)), "0");
        assert_eq!(counter(Some(-0.001)), "0");
        assert_eq!(counter(Some(-1.5)), "-1.5");
        assert_eq!(fixed(-0.04, 1), "0.0");
        assert_eq!(fixed(-0.06, 1), "-0.1");
        assert_eq!(signed_pct(-0.04, 1), "+0.0%");
        assert_eq!(signed_pct(-0.0, 1), "+0.0%");
        assert_eq!(signed_pct(-2.5, 1), "-2.5%");
        assert_eq!(signed_pct(3.0, 0), "+3%");
        assert_eq!(no_negative_zero("-0".into()), "0");
        assert_eq!(no_negative_zero("-0.00%".into()), "0.00%");
        assert_eq!(no_negative_zero("-".into()), "-");
        assert_eq!(no_negative_zero("-10".into()), "-10");
    }

    #[test]
    fn nanoseconds_as_the_seeds_print_them() {
        assert_eq!(ns(1713.4), "1713");
        assert_eq!(ns(100.0), "100");
        assert_eq!(ns(99.94), "99.9");
        assert_eq!(opt_ns(None), "-");
        assert_eq!(ns(f64::NAN), "n/a");
        assert_eq!(fixed(385.05, 1), "385.1");
        assert_eq!(fixed(f64::NAN, 0), "n/a");
    }

    #[test]
    fn sizes_round_trip_and_amounts_round() {
        assert_eq!(size(64 << 10), "64K");
        assert_eq!(size(3 << 9), "1536");
        assert_eq!(bytes(512.0), "512B");
        assert_eq!(bytes(4096.0), "4K");
        assert_eq!(bytes(1.5 * (1u64 << 20) as f64), "1.5M");
        assert_eq!(bytes(25_769_803_776.0 - (1u64 << 29) as f64), "23.5G");
        assert_eq!(gib(25_769_803_776), "24.0 GiB");
    }

    #[test]
    fn durations_in_the_largest_unit() {
        assert_eq!(nanos(0.5), "0.5 ns");
        assert_eq!(nanos(100.0), "100 ns");
        assert_eq!(nanos(2_500_000.0), "2.5 ms");
        assert_eq!(nanos(1.5e9), "1.5 s");
        assert_eq!(nanos(1e3), "1 µs");
    }

    #[test]
    fn instruction_counts_in_decimal_units() {
        assert_eq!(instructions(500.0), "500 instr");
        assert_eq!(instructions(1500.0), "1.5K instr");
        assert_eq!(instructions(2e6), "2M instr");
        assert_eq!(instructions(1.25e9), "1.25G instr");
    }

    #[test]
    fn p_values_and_counters() {
        assert_eq!(p_value(0.0123), "0.012");
        assert_eq!(p_value(0.00012), "1.2e-4");
        assert_eq!(counter(Some(100.0)), "100");
        assert_eq!(counter(Some(0.5)), "0.5");
        assert_eq!(counter(Some(5.126)), "5.13");
        assert_eq!(counter(None), "-");
    }
}
