//! The short phrases both report renderers print for view values (a CI as
//! `±1.2%`, a layout, a kernel line), so HTML and Markdown say the same.
//! Plain text: each renderer escapes them for its format.

use std::fmt::Write;

use crate::record::{Guest, Metric};
use crate::text::format;
use crate::view::{
    Environment, Knob, LayoutEvidence, MeasuredRef, MeasuredRow, ModelTable, RatioRow, RunInfo,
    Verdict,
};

/// The ratio and its CI (bounds joined by `sep`), or `n/a` for both. Like
/// `ptelab compare`: no ratio where there is no verdict.
pub fn ratio_ci(r: &RatioRow, sep: &str) -> (String, String) {
    match (r.ratio, r.ci_low, r.ci_high) {
        (Some(v), Some(lo), Some(hi)) if r.verdict != Verdict::NotComparable => {
            (format!("{v:.3}"), format!("{lo:.3}{sep}{hi:.3}"))
        }
        _ => ("n/a".into(), "n/a".into()),
    }
}

/// ` (granule=4K, contpte=true)`, or nothing without parameters.
pub fn params_suffix(t: &ModelTable) -> String {
    if t.params.is_empty() {
        String::new()
    } else {
        format!(" ({})", t.params)
    }
}

/// ` none-to-rw`, or nothing without a phase.
pub fn phase_suffix(m: &MeasuredRef) -> String {
    m.phase
        .as_deref()
        .map_or(String::new(), |p| format!(" {p}"))
}

/// `±1.2%` for the CI half-width of a row.
pub fn ci(r: &MeasuredRow) -> String {
    r.ci_half()
        .map_or("n/a".into(), |h| format!("±{:.1}%", h * 100.0))
}

/// Flushes per call, or `n/a`.
pub fn flushes(r: &MeasuredRow) -> String {
    r.flushes_per_call
        .map_or("n/a".into(), |f| format!("{f:.2}"))
}

/// Why flushes read n/a in `rows` (e.g. not observable on this arch), each
/// reason once.
pub fn flush_notes<'r>(rows: impl IntoIterator<Item = &'r MeasuredRow>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        if let (None, Some(why)) = (r.flushes_per_call, &r.flushes_unavailable) {
            let note = format!("Flushes per call n/a: {why}.");
            if !out.contains(&note) {
                out.push(note);
            }
        }
    }
    out
}

/// `1` or `1->3`.
pub fn vmas(r: &MeasuredRow) -> String {
    if r.vmas_before == r.vmas_after {
        r.vmas_before.to_string()
    } else {
        format!("{}->{}", r.vmas_before, r.vmas_after)
    }
}

/// The short observed layout, flagged when it is not what was asked.
pub fn layout_text(l: &LayoutEvidence) -> String {
    if !l.verified {
        return "unverified".into();
    }
    if l.matches {
        l.summary.clone()
    } else {
        format!("{} (MISMATCH)", l.summary)
    }
}

/// `6x64K + 4x4K`.
pub fn histogram_text(l: &LayoutEvidence) -> String {
    if l.histogram.is_empty() {
        return "-".into();
    }
    l.histogram
        .iter()
        .map(|b| format!("{}x{}", b.count, b.folio))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// THP knobs in brief: the global ones, then mTHP sizes not `never`.
pub fn thp_brief(knobs: &[Knob]) -> Vec<String> {
    let mut out: Vec<String> = knobs
        .iter()
        .filter(|k| !k.name.contains('/'))
        .map(|k| format!("{}={}", k.name, k.value))
        .collect();
    let sizes: Vec<&Knob> = knobs
        .iter()
        .filter(|k| k.name.starts_with("hugepages-"))
        .collect();
    let on: Vec<String> = sizes
        .iter()
        .filter(|k| k.value != "never")
        .map(|k| format!("{}={}", k.name, k.value))
        .collect();
    let off = sizes.len() - on.len();
    out.extend(on);
    if off > 0 {
        out.push(format!("{off} other mTHP knobs never"));
    }
    out
}

/// `Linux 6.18.4 #1 SMP, x86_64, 4K pages`.
pub fn kernel_line(e: &Environment) -> String {
    let mut s = format!("Linux {}", e.kernel_release);
    if let Some(v) = &e.kernel_version {
        write!(s, " {v}").unwrap();
    }
    write!(s, ", {}", e.arch).unwrap();
    if let Some(p) = e.page_size {
        write!(s, ", {} pages", format::size(p)).unwrap();
    }
    s
}

/// `AMD EPYC, 2 cores, 23.5 GiB`.
pub fn cpu_line(e: &Environment) -> String {
    let mut s = e.cpu_model.clone().unwrap_or_else(|| "unknown CPU".into());
    if let Some(c) = e.cores {
        write!(s, ", {c} cores").unwrap();
    }
    if let Some(m) = e.mem_total_bytes {
        write!(s, ", {}", format::gib(m)).unwrap();
    }
    s
}

/// `0.1.0 (abc1234)`.
pub fn tool_line(e: &Environment) -> String {
    match &e.git_revision {
        Some(g) => format!("{} ({g})", e.tool_version),
        None => e.tool_version.clone(),
    }
}

/// `run 3 ('latest')`.
pub fn run_title(r: &RunInfo) -> String {
    let mut s = format!("{} {}", r.role.text(), r.id);
    if r.name != r.id.to_string() {
        write!(s, " ('{}')", r.name).unwrap();
    }
    s
}

/// Where a guest run ran and in what unit: `tcg (QEMU emulator version
/// 10.0.2), kernel debian:6.17.13 ..., sha256 ab12...; figures are guest
/// instructions, not time`.
pub fn guest_line(g: &Guest) -> String {
    let unit = match g.metric {
        Metric::Instructions => "figures are guest instructions, not time",
        Metric::Time => "figures are time",
    };
    format!(
        "{} ({}), kernel {}, sha256 {}; {unit}",
        g.accel, g.qemu_version, g.kernel_source, g.kernel_sha256
    )
}
