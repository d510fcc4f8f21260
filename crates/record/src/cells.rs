//! Tables of measured cells in the seeds' style (`size_kib | nsec_per_call`),
//! with the columns a reviewer asks for next: the 95% CI of the median,
//! ns per page, TLB flushes per call and the observed layout. A run measured
//! in guest instructions reads `instr_per_call` and `instr/page` instead.

use std::fmt::Write;

use crate::text::format::fixed;
use crate::text::table::Table;
use crate::workload::FolioSpec;
use crate::{CellResult, Metric};

/// Heading line naming what was measured where.
pub fn heading(workload: &str, kernel: &str, cpu: &str, pin: Option<usize>) -> String {
    let pin = pin.map_or("unpinned".to_string(), |c| format!("pinned to CPU {c}"));
    format!("{workload} on Linux {kernel} ({cpu}, {pin})")
}

/// One table per (folio, phase, placement) group, rows by size, in time
/// (a run on the host or a KVM guest).
pub fn render_table(cells: &[CellResult]) -> String {
    render_table_in(cells, Metric::Time)
}

/// [`render_table`] for cells measured in `metric`.
pub fn render_table_in(cells: &[CellResult], metric: Metric) -> String {
    let per_page = metric.per_page_column();
    let mut out = String::new();
    let mut groups: Vec<(FolioSpec, Option<String>, bool)> = Vec::new();
    for c in cells {
        let key = (c.folio, c.phase.clone(), c.neighbor);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (folio, phase, neighbor) in groups {
        let mut title = format!("folio {folio}");
        if let Some(p) = &phase {
            write!(title, ", {p}").unwrap();
        }
        if neighbor {
            title.push_str(", merged with a neighbour mapping");
        }
        writeln!(out, "{title}").unwrap();
        // The seeds' fixed widths, as the floor of each column.
        let mut t = Table::new()
            .right("size_kib")
            .min_width(9)
            .right(metric.per_call_column())
            .min_width(13)
            .right("95% CI")
            .min_width(7)
            .right(per_page)
            .min_width(9)
            .right("flushes/call")
            .min_width(12)
            .right("VMAs")
            .min_width(5)
            .left("layout");
        for c in cells
            .iter()
            .filter(|c| c.folio == folio && c.phase == phase && c.neighbor == neighbor)
        {
            let ns = &c.ns_per_call;
            // The larger side, as the runner's stop rule and its warning
            // measure it (the interval of a median is rarely symmetric).
            let ci = if ns.ci_low.is_finite() && ns.median > 0.0 {
                format!(
                    "±{:.1}%",
                    (ns.median - ns.ci_low).max(ns.ci_high - ns.median) / ns.median * 100.0
                )
            } else {
                "n/a".into()
            };
            let flushes = c
                .tlb_flushes
                .per_call
                .map_or("n/a".into(), |f| format!("{f:.2}"));
            let lay = if c.verified {
                let mut s = c.layout.summary();
                if !c.layout.matches {
                    s.push_str(" (MISMATCH)");
                }
                s
            } else {
                "unverified".into()
            };
            let vmas = if c.vmas_before == c.vmas_after {
                c.vmas_before.to_string()
            } else {
                format!("{}->{}", c.vmas_before, c.vmas_after)
            };
            t.row([
                (c.size_bytes / 1024).to_string(),
                fixed(ns.median, 0),
                ci,
                fixed(c.ns_per_page, 1),
                flushes,
                vmas,
                lay,
            ]);
        }
        out.push_str(&t.text(" | "));
        out.push('\n');
    }
    if let Some(line) = machine_speed(cells, metric) {
        writeln!(out, "{line}\n").unwrap();
    }
    // Why flushes read n/a (e.g. not observable on this arch), once each.
    let mut why: Vec<&str> = Vec::new();
    for c in cells {
        if let (None, Some(w)) = (c.tlb_flushes.per_call, c.tlb_flushes.unavailable.as_deref()) {
            if !why.contains(&w) {
                why.push(w);
            }
        }
    }
    for w in why {
        writeln!(out, "flushes/call n/a: {w}\n").unwrap();
    }
    let warnings: Vec<String> = cells
        .iter()
        .flat_map(|c| {
            c.warnings.iter().map(move |w| {
                format!(
                    "{} {}K {}: {w}",
                    c.folio,
                    c.size_bytes / 1024,
                    c.phase.as_deref().unwrap_or("")
                )
            })
        })
        .collect();
    if !warnings.is_empty() {
        out.push_str("warnings:\n");
        for w in warnings {
            writeln!(out, "  {}", w.replace("  ", " ")).unwrap();
        }
    }
    out
}

/// The machine-speed probes over every block of `cells` (median and range),
/// so a reader can tell a slow machine from a slow kernel; None when no cell
/// recorded them. Under instructions the probes count instructions too
/// (and the memory probe sees no latency), so they are not a speed.
fn machine_speed(cells: &[CellResult], metric: Metric) -> Option<String> {
    let units = metric.unit_words();
    let describe = |name: &str, unit: &str, per_cell: fn(&CellResult) -> &[f64]| {
        let median = crate::run_median(cells, per_cell)?;
        let all = cells.iter().flat_map(|c| per_cell(c).iter().copied());
        let (lo, hi) = all.fold((f64::INFINITY, 0.0f64), |(l, h), p| (l.min(p), h.max(p)));
        Some(format!(
            "{name} {median:.0} {units} per {unit} ({lo:.0}-{hi:.0})"
        ))
    };
    let parts: Vec<String> = [
        describe("kernel", "getppid", |c| &c.probe_ns),
        describe("memory", "load", |c| &c.memory_probe_ns),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| match metric {
        Metric::Time => format!(
            "machine speed, median (range) over blocks: {}",
            parts.join(", ")
        ),
        Metric::Instructions => format!(
            "probes in guest instructions (not a speed), median (range) over blocks: {}",
            parts.join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::fixtures::fixture;

    #[test]
    fn table_snapshot() {
        let cells = vec![
            fixture(4, 1713.0, FolioSpec::Base),
            fixture(400, 34530.0, FolioSpec::Base),
            fixture(4096, 180400.0, FolioSpec::Mthp(64 << 10)),
        ];
        insta::assert_snapshot!(render_table(&cells));
    }

    #[test]
    fn machine_speed_line_when_probes_were_recorded() {
        let mut a = fixture(4, 1713.0, FolioSpec::Base);
        let mut b = fixture(400, 34530.0, FolioSpec::Base);
        assert_eq!(machine_speed(&[a.clone()], Metric::Time), None);
        a.probe_ns = vec![186.0, 255.0];
        b.probe_ns = vec![190.0];
        assert_eq!(
            machine_speed(&[a.clone(), b.clone()], Metric::Time).unwrap(),
            "machine speed, median (range) over blocks: kernel 190 ns per getppid (186-255)"
        );
        a.memory_probe_ns = vec![200.0, 240.0];
        let line = machine_speed(&[a.clone(), b.clone()], Metric::Time).unwrap();
        assert!(
            line.ends_with(", memory 220 ns per load (200-240)"),
            "{line}"
        );
        let line = machine_speed(&[a, b], Metric::Instructions).unwrap();
        assert!(
            line.starts_with("probes in guest instructions (not a speed)")
                && line.contains("kernel 190 instructions per getppid (186-255)")
                && !line.contains(" ns "),
            "{line}"
        );
    }

    #[test]
    fn an_unobservable_flush_count_reads_why_never_zero() {
        let mut c = fixture(4, 1713.0, FolioSpec::Base);
        c.tlb_flushes = crate::TlbFlushes {
            calls: 64,
            unavailable: Some(
                "tlb:tlb_flush cannot be counted: not observable on this arch (aarch64): \
                 only x86 emits the tracepoint"
                    .into(),
            ),
            ..Default::default()
        };
        let text = render_table(&[c]);
        assert!(text.contains("|          n/a |"), "{text}");
        assert!(!text.contains("0.00"), "{text}");
        assert!(text.contains("flushes/call n/a: tlb:tlb_flush cannot be counted: not observable on this arch (aarch64)"), "{text}");
    }

    #[test]
    fn instruction_table_snapshot() {
        // A TCG guest's cells: icount figures repeat exactly (zero spread).
        let mut cells = vec![
            fixture(400, 34530.0, FolioSpec::Base),
            fixture(4096, 180400.0, FolioSpec::Mthp(64 << 10)),
        ];
        for c in &mut cells {
            let m = c.ns_per_call.median;
            c.ns_per_call.ci_low = m;
            c.ns_per_call.ci_high = m;
            c.probe_ns = vec![298.0, 298.0];
            c.memory_probe_ns = vec![4.0];
        }
        let text = render_table_in(&cells, Metric::Instructions);
        assert!(!text.contains("nsec") && !text.contains("ns/") && !text.contains(" ns "));
        insta::assert_snapshot!(text);
    }
}
