//! `ptelab compare` output: pure renderers of the comparison
//! ([`CompareView`], computed by `crate::analysis`) for LKML-friendly plain
//! text, Markdown and JSON.
//!
//! The text table follows the seeds (`size_kib | nsec_per_call`) with the
//! columns of an LKP comparison (`%change ±%`): one table per workload and
//! layout group, one row per size.
//!
//! # JSON (`"schema": "ptelab/compare/v1"`)
//!
//! One document:
//!
//! - `a`, `b`: the runs compared ([`RunRef`]): the name given on the command
//!   line, run id, kind, kernel release, machine id, start time, tags.
//! - `method`: what was computed ([`Method`]): statistic, confidence,
//!   bootstrap resamples and master seed (a hex string; cell i used the seed
//!   in its own row), rank test, correction, alpha, noise threshold, minimum
//!   samples.
//! - `rows`: one per cell key ([`CompareRow`]): the key fields, each side's
//!   median/sample count/layout (`null` when the cell is missing there),
//!   `ratio` = median B / median A with `ci_low`/`ci_high` (corrected for
//!   machine drift when `drift.corrected`; then `ratio_raw` is the
//!   uncorrected ratio), the raw and
//!   Holm-adjusted p-values, the cell's bootstrap seed, and `verdict` (one of
//!   `regression`, `improvement`, `no-change`, `not-comparable`) with a
//!   `reason` for the last.
//! - `drift`: machine drift between the runs ([`Drift`]): each run's median
//!   kernel-speed probe (ns per getppid) and whether ratios were corrected
//!   for it, with the reason.
//! - `summary`: counts per verdict.
//! - `metric`: present as `"instructions"` when the runs ran in QEMU TCG
//!   guests under icount: every per-call figure (`median_ns`) and probe
//!   (`probe_a_ns`, ...) then holds guest instructions, not nanoseconds; the
//!   field names are kept for schema stability. Absent means `"time"`
//!   (nanoseconds). `a.guest`/`b.guest` give each run's accelerator, QEMU
//!   version and kernel source; absent for host runs. Both sides always
//!   share one metric and accelerator (`compare` refuses otherwise).

use std::fmt::Write;

// Re-exported: the report's view model names them here.
pub use crate::analysis::{CompareRow, CompareView, VerdictKind};
use crate::analysis::{Drift, Method, RunRef, SideView};
use crate::markdown::{words, wrap_sep};
use crate::record::Metric;
use crate::text::format::ns;
use crate::text::table::{markdown_code, markdown_escape, Table};

/// How the tables group rows: one table per workload and layout group.
fn group_title(row: &CompareRow) -> String {
    let mut t = format!("{}, folio {}", row.workload, row.folio);
    if let Some(p) = &row.phase {
        write!(t, ", {p}").unwrap();
    }
    if row.regions != 1 {
        write!(t, ", {} regions", row.regions).unwrap();
    }
    if row.neighbor {
        t.push_str(", merged with a neighbour mapping");
    }
    t
}

fn group_key(row: &CompareRow) -> (&str, &str, Option<&str>, u32, bool) {
    (
        &row.workload,
        &row.folio,
        row.phase.as_deref(),
        row.regions,
        row.neighbor,
    )
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

/// Render `view` in `format`.
pub fn render(view: &CompareView, format: Format) -> String {
    match format {
        Format::Text => render_markup(view, Markup::Text),
        Format::Markdown => render_markup(view, Markup::Markdown),
        Format::Json => render_json(view),
    }
}

/// The JSON document, pretty-printed, with a final newline.
pub fn render_json(view: &CompareView) -> String {
    let mut s = serde_json::to_string_pretty(view).expect("the view model serializes");
    s.push('\n');
    s
}

/// Plain text or Markdown: they differ in headings, code spans, escaping and
/// table syntax only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Markup {
    Text,
    Markdown,
}

impl Markup {
    fn heading(self, out: &mut String, text: &str) {
        match self {
            Markup::Text => writeln!(out, "{text}").unwrap(),
            Markup::Markdown => writeln!(out, "#### {}", markdown_escape(text)).unwrap(),
        }
    }

    fn table(self, table: &Table) -> String {
        match self {
            Markup::Text => table.text(" | "),
            Markup::Markdown => table.markdown(),
        }
    }

    fn code(self, text: &str) -> String {
        match self {
            Markup::Text => text.to_string(),
            Markup::Markdown => markdown_code(text),
        }
    }

    /// Stored text (tags, run names) made safe for the format.
    fn user(self, text: &str) -> String {
        match self {
            Markup::Text => text.to_string(),
            Markup::Markdown => markdown_escape(text),
        }
    }
}

fn run_line(label: &str, r: &RunRef, m: Markup) -> String {
    let ids = match r.runs.as_slice() {
        [] => r.id.to_string(),
        runs => runs
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(","),
    };
    let guest = r
        .guest
        .as_ref()
        .map_or(String::new(), |g| format!(" in a {} guest", g.accel));
    let mut s = if r.runs.is_empty() {
        format!(
            "{label} = run {ids} ({}, Linux {}{guest}, {}",
            r.kind, r.kernel_release, r.started_at
        )
    } else {
        format!(
            "{label} = runs {ids} ({}, Linux {}{guest}, first started {}",
            r.kind, r.kernel_release, r.started_at
        )
    };
    if !r.tags.is_empty() {
        write!(s, ", tags {}", m.user(&r.tags.join(","))).unwrap();
    }
    s.push(')');
    if r.name != ids {
        write!(s, " from '{}'", m.user(&r.name)).unwrap();
    }
    s
}

fn pct(v: f64) -> String {
    format!("{:+.1}", v * 100.0)
}

/// The sentence naming the unit of an instruction-count comparison, for
/// every renderer (None under time, the unit the tables always had).
pub fn metric_line(metric: Metric) -> Option<String> {
    (metric == Metric::Instructions).then(|| {
        "Unit: guest instructions per call (QEMU TCG with icount), not time: it counts \
         executed instructions and cannot see cycles, cache or TLB misses."
            .to_string()
    })
}

/// The sentence saying the two sides ran under different QEMU releases
/// (None when they did not, or either ran on the host): what that does to
/// their figures (docs/guests.md, "QEMU versions").
pub(crate) fn qemu_line(a: &RunRef, b: &RunRef) -> Option<String> {
    let (ga, gb) = (a.guest.as_ref()?, b.guest.as_ref()?);
    let release = |v: &str| v.split_whitespace().next().unwrap_or(v).to_string();
    let (va, vb) = (release(&ga.qemu_version), release(&gb.qemu_version));
    (va != vb).then(|| {
        format!(
            "QEMU differs: A ran under QEMU {va}, B under {vb}. x86-64 guests see one CPU and \
             count the same on every release measured (7.2, 10.0, 11.1); arm64 guests see the \
             CPU of their release (10.0 adds MOPS, 11.1 GCS), which moves their figures."
        )
    })
}

/// The method paragraph's sentence on machine drift (None when neither run
/// recorded the probe and nothing was corrected). `replicated`: each side is
/// several runs, whose spread already carries the drift. Under
/// instructions the probes are instruction counts too, never corrected for.
pub(crate) fn drift_line(d: &Drift, replicated: bool, metric: Metric) -> Option<String> {
    let (a, b) = match (d.probe_a_ns, d.probe_b_ns) {
        (Some(a), Some(b)) => (a, b),
        _ if d.why.is_empty() => return None,
        _ => return Some(format!("Machine drift: not measured ({}).", d.why)),
    };
    let unit = metric.unit_words();
    // A probe of 0 (nothing recorded, or an icount clock too coarse) has
    // no ratio.
    let change = |a: f64, b: f64| {
        if a > 0.0 {
            format!(" ({}%)", pct(b / a - 1.0))
        } else {
            String::new()
        }
    };
    let mut what = format!(
        "Machine drift: kernel-speed probe ({unit} per getppid) A {}, B {}{}",
        ns(a),
        ns(b),
        change(a, b)
    );
    if let (Some(ma), Some(mb)) = (d.memory_a_ns, d.memory_b_ns) {
        write!(
            what,
            ", memory latency ({unit} per load) A {}, B {}{}",
            ns(ma),
            ns(mb),
            change(ma, mb)
        )
        .unwrap();
    }
    Some(if replicated || metric == Metric::Instructions {
        format!("{what}; not corrected: {}.", d.why)
    } else if d.corrected {
        format!(
            "{what}; %change is corrected for the drift per cell ({}).",
            d.why
        )
    } else {
        format!(
            "{what}; not corrected ({}), so a change this size may be the machine.",
            d.why
        )
    })
}

/// A noise threshold in percent: `2` for the 2% default, `4.8` for a
/// calibrated one.
pub fn noise_pct(noise: f64) -> String {
    let p = noise * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

/// "Noise threshold N%: where it came from." for every renderer.
pub fn noise_line(m: &Method) -> String {
    format!(
        "Noise threshold {}%: {}.",
        noise_pct(m.noise),
        m.noise_source
    )
}

fn render_markup(view: &CompareView, m: Markup) -> String {
    let mut out = String::new();
    let md = m == Markup::Markdown;
    let bullet = if md { "- " } else { "" };
    writeln!(out, "{bullet}{}", run_line("A", &view.a, m)).unwrap();
    writeln!(out, "{bullet}{}", run_line("B", &view.b, m)).unwrap();
    let me = &view.method;
    match &me.replicated {
        None => {
            let text = format!(
                "%change: {} of B vs A, ± the half-width of its {:.0}% bootstrap CI ({} \
                 resamples, seed {}). Verdict: Mann-Whitney U with Holm across {} cells at \
                 alpha {}.",
                me.statistic,
                me.confidence * 100.0,
                me.resamples,
                m.code(&me.seed),
                me.family,
                me.alpha,
            );
            writeln!(out, "{}", wrap_sep(bullet, &words(&text), "", 76))
        }
        Some(r) => {
            let text = format!(
                "%change: {} of B vs A ({} runs vs {}, each run counted once), ± the \
                 half-width of its {:.0}% Student t CI on ln run medians. Verdict: pooled t \
                 test with Holm across {} cells at alpha {}. run sd: how far each cell's \
                 runs spread.",
                me.statistic,
                r.runs_a,
                r.runs_b,
                me.confidence * 100.0,
                me.family,
                me.alpha,
            );
            writeln!(out, "{}", wrap_sep(bullet, &words(&text), "", 76))
        }
    }
    .unwrap();
    let line = noise_line(me);
    writeln!(out, "{}", wrap_sep(bullet, &words(&line), "", 76)).unwrap();
    if let Some(g) = &me.guest_bias {
        let line = format!("Guest bias (calibrate --guest): {g}.");
        writeln!(out, "{}", wrap_sep(bullet, &words(&line), "", 76)).unwrap();
    }
    if let Some(line) = drift_line(&view.drift, me.replicated.is_some(), view.metric) {
        writeln!(out, "{}", wrap_sep(bullet, &words(&line), "", 76)).unwrap();
    }
    if let Some(line) = qemu_line(&view.a, &view.b) {
        writeln!(out, "{}", wrap_sep(bullet, &words(&line), "", 76)).unwrap();
    }
    if let Some(line) = metric_line(view.metric) {
        writeln!(out, "{}", wrap_sep(bullet, &words(&line), "", 76)).unwrap();
    }
    out.push('\n');

    let mut groups: Vec<(&str, &str, Option<&str>, u32, bool)> = Vec::new();
    for r in &view.rows {
        if !groups.contains(&group_key(r)) {
            groups.push(group_key(r));
        }
    }
    // A corrected comparison also shows the raw change, so that the table
    // still reads B nsec / A nsec.
    let raw_column = view.rows.iter().any(|r| r.ratio_raw.is_some());
    let unit = view.metric.side_column();
    let mut header = Table::new()
        .right("size_kib")
        .right(format!("A {unit}"))
        .right(format!("B {unit}"))
        .right("%change ±%");
    if raw_column {
        header = header.right("raw %");
    }
    let sd_column = view.rows.iter().any(|r| r.run_sd.is_some());
    if sd_column {
        header = header.right("run sd %");
    }
    header = header.left("verdict");
    let mut reasons: Vec<String> = Vec::new();
    for key in groups {
        let rows: Vec<&CompareRow> = view.rows.iter().filter(|r| group_key(r) == key).collect();
        m.heading(&mut out, &group_title(rows[0]));
        let mut table = header.clone();
        for cells in rows.iter().map(|r| {
            let side =
                |s: &Option<SideView>| s.as_ref().map_or("-".to_string(), |s| ns(s.median_ns));
            let comparable = r.verdict != VerdictKind::NotComparable;
            let change = match (r.ratio, r.ci_low, r.ci_high) {
                (Some(ratio), Some(lo), Some(hi)) if comparable => {
                    format!("{} ±{:.1}", pct(ratio - 1.0), (hi - lo) / 2.0 * 100.0)
                }
                _ => "n/a".to_string(),
            };
            let verdict = match &r.reason {
                Some(why) => {
                    reasons.push(format!(
                        "{}, {} KiB: {why}",
                        group_title(r),
                        r.size_bytes >> 10
                    ));
                    format!("{} (see below)", r.verdict.text())
                }
                None => match (&r.guest_bias, r.verdict) {
                    (Some(g), VerdictKind::WithinGuestBias) => {
                        format!("{} ({g})", r.verdict.text())
                    }
                    _ => r.verdict.text().to_string(),
                },
            };
            let mut cells = vec![
                (r.size_bytes >> 10).to_string(),
                side(&r.a),
                side(&r.b),
                change,
            ];
            if raw_column {
                cells.push(r.ratio_raw.map_or("-".into(), |x| pct(x - 1.0)));
            }
            if sd_column {
                cells.push(r.run_sd.map_or("-".into(), |x| format!("{:.1}", x * 100.0)));
            }
            cells.push(verdict);
            cells
        }) {
            table.row(cells);
        }
        out.push_str(&m.table(&table));
        out.push('\n');
    }
    if !reasons.is_empty() {
        writeln!(out, "not comparable:").unwrap();
        for r in reasons {
            writeln!(out, "{}{}", if md { "- " } else { "  " }, m.user(&r)).unwrap();
        }
        out.push('\n');
    }
    let s = &view.summary;
    let within = if s.within_guest_bias > 0 {
        format!(", {} within guest bias", s.within_guest_bias)
    } else {
        String::new()
    };
    writeln!(
        out,
        "{} cells: {} regression{}, {} improvement{}, {} no change{within}, {} not comparable",
        s.cells,
        s.regressions,
        if s.regressions == 1 { "" } else { "s" },
        s.improvements,
        if s.improvements == 1 { "" } else { "s" },
        s.no_change,
        s.not_comparable
    )
    .unwrap();
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::view::{Summary, SCHEMA};

    fn run(id: i64, kernel: &str, tags: &[&str]) -> RunRef {
        RunRef {
            name: if tags.is_empty() {
                id.to_string()
            } else {
                tags[0].to_string()
            },
            id,
            kind: "sweep".into(),
            kernel_release: kernel.into(),
            machine_id: "0123456789abcdef0123456789abcdef".into(),
            started_at: format!("2026-05-0{id}T10:00:00Z"),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            guest: None,
            runs: Vec::new(),
        }
    }

    #[test]
    fn runs_under_different_qemu_releases_are_said_to_be() {
        let guest = |v: &str| {
            crate::record::Guest::new(crate::record::Accel::Tcg, v, "debian:6.17.8", "00")
        };
        let (mut a, mut b) = (run(1, "6.17.8", &[]), run(2, "6.17.8", &[]));
        assert_eq!(qemu_line(&a, &b), None, "host runs");
        a.guest = Some(guest("7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"));
        b.guest = Some(guest("7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"));
        assert_eq!(qemu_line(&a, &b), None, "one release");
        b.guest = Some(guest("10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)"));
        let line = qemu_line(&a, &b).unwrap();
        assert!(
            line.starts_with("QEMU differs: A ran under QEMU 7.2.22, B under 10.0.13."),
            "{line}"
        );
    }

    fn row(
        size_kib: u64,
        a: f64,
        b: f64,
        ci: (f64, f64),
        p: f64,
        verdict: VerdictKind,
    ) -> CompareRow {
        let layout = "100% 4K".to_string();
        CompareRow {
            workload: "mprotect-toggle".into(),
            size_bytes: size_kib << 10,
            folio: "4K".into(),
            phase: None,
            regions: 1,
            neighbor: false,
            a: Some(SideView {
                median_ns: a,
                samples: 50,
                layout: layout.clone(),
                runs: None,
            }),
            b: Some(SideView {
                median_ns: b,
                samples: 48,
                layout,
                runs: None,
            }),
            ratio: Some(b / a),
            ratio_raw: None,
            drift_slope: None,
            memory_slope: None,
            ci_low: Some(ci.0),
            ci_high: Some(ci.1),
            guest_bias: None,
            p_value: Some(p),
            p_holm: Some((p * 4.0).min(1.0)),
            seed: Some(format!("{:#018x}", 0x1000 + size_kib)),
            verdict,
            reason: None,
            run_sd: None,
        }
    }

    /// A fixed view: the seed 001 regression figures as a comparison.
    pub fn fixture() -> CompareView {
        let mut rows = vec![
            row(
                4,
                1713.0,
                1775.0,
                (1.031, 1.042),
                0.003,
                VerdictKind::Regression,
            ),
            row(
                40,
                2071.0,
                2093.0,
                (0.998, 1.022),
                0.04,
                VerdictKind::NoChange,
            ),
            row(
                400,
                3453.0,
                5993.0,
                (1.72, 1.75),
                1e-12,
                VerdictKind::Regression,
            ),
            row(
                4000,
                22227.0,
                18804.0,
                (0.84, 0.85),
                1e-9,
                VerdictKind::Improvement,
            ),
        ];
        let mut odd = row(
            64,
            5000.0,
            5100.0,
            (0.99, 1.05),
            0.2,
            VerdictKind::NotComparable,
        );
        odd.folio = "64K".into();
        odd.a.as_mut().unwrap().layout = "100% 64K".into();
        odd.b.as_mut().unwrap().layout = "50% 64K, 50% 4K".into();
        odd.p_holm = None;
        odd.reason = Some("layouts differ: A 100% 64K, B 50% 64K, 50% 4K".into());
        rows.push(odd);
        let mut few = row(64, 90.5, 91.0, (0.9, 1.1), 0.5, VerdictKind::NotComparable);
        few.phase = Some("rw-to-none".into());
        few.workload = "prot-transition".into();
        few.a.as_mut().unwrap().samples = 3;
        few.p_holm = None;
        few.reason = Some("too few samples (3 vs 48, need 5 each)".into());
        rows.push(few);
        let summary = Summary::of(&rows);
        CompareView {
            schema: SCHEMA,
            metric: Metric::Time,
            a: run(1, "6.16.0", &["v6.16"]),
            b: run(2, "6.17.0-rc1", &[]),
            method: Method {
                statistic: "median ns per call".into(),
                confidence: 0.95,
                resamples: 10_000,
                seed: "0x7074656c61620001".into(),
                test: "mann-whitney-u".into(),
                correction: "holm".into(),
                family: 4,
                alpha: 0.05,
                noise: 0.02,
                noise_source: "default; `ptelab calibrate` measures this machine's \
                               between-run repeatability"
                    .into(),
                guest_bias: None,
                min_samples: 5,
                replicated: None,
            },
            drift: Drift {
                probe_a_ns: Some(253.0),
                probe_b_ns: Some(241.5),
                memory_a_ns: Some(190.0),
                memory_b_ns: Some(212.0),
                corrected: false,
                why: "the runs ran different kernels; --normalize probe corrects it".into(),
            },
            rows,
            summary,
        }
    }

    /// The fixture as a same-kernel comparison whose ratios were corrected.
    fn corrected() -> CompareView {
        let mut v = fixture();
        v.b.kernel_release = v.a.kernel_release.clone();
        v.drift.corrected = true;
        v.drift.why = "same kernel, same machine".into();
        for r in v.rows.iter_mut().filter(|r| r.ratio.is_some()) {
            r.ratio_raw = r.ratio;
            r.ratio = r.ratio.map(|x| x * 253.0 / 241.5);
            r.drift_slope = Some(0.8);
            r.memory_slope = Some(0.3);
        }
        v
    }

    #[test]
    fn text_corrected_for_drift() {
        insta::assert_snapshot!(render(&corrected(), Format::Text));
    }

    #[test]
    fn drift_line_without_probes() {
        let mut d = fixture().drift;
        d.probe_b_ns = None;
        d.why = "run 2 was measured before ptelab recorded the probe".into();
        assert_eq!(
            drift_line(&d, false, Metric::Time).unwrap(),
            "Machine drift: not measured (run 2 was measured before ptelab recorded the probe)."
        );
        d.why.clear();
        assert_eq!(drift_line(&d, false, Metric::Time), None);
    }

    #[test]
    fn text() {
        insta::assert_snapshot!(render(&fixture(), Format::Text));
    }

    #[test]
    fn markdown() {
        insta::assert_snapshot!(render(&fixture(), Format::Markdown));
    }

    #[test]
    fn markdown_escapes_stored_text() {
        let mut view = fixture();
        view.a.tags = vec!["<img src=x onerror=alert(1)>".into()];
        view.b.name = "*bold* [link](x)".into();
        let md = render(&view, Format::Markdown);
        assert!(md.contains(r"\<img src=x onerror=alert(1)>"), "{md}");
        assert!(
            md.match_indices('<').all(|(i, _)| md[..i].ends_with('\\')),
            "an unescaped < in {md}"
        );
        assert!(md.contains(r"\*bold\* \[link\](x)"), "{md}");
        // Plain text keeps the words as they are.
        assert!(render(&view, Format::Text).contains("<img src=x"));
    }

    #[test]
    fn json() {
        let text = render(&fixture(), Format::Json);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["rows"][0]["verdict"], "regression");
        assert_eq!(v["rows"][4]["verdict"], "not-comparable");
        insta::assert_snapshot!(text);
    }

    /// Seed 001's table from two TCG guest runs, 6.16.12 against 6.17.13,
    /// as `ptelab compare` computes it: exact instruction counts.
    pub(crate) fn guest_view() -> CompareView {
        use crate::analysis::tests::{exact_cell, guest_run, opts};
        use crate::analysis::{compare_runs, NoiseRule};
        use crate::record::Accel;
        use crate::workload::FolioSpec;
        let run = |id: i64, kernel: &str, scale: f64| {
            let cells = [(400, 34_530.0), (4096, 180_400.0), (40960, 1_804_000.0)]
                .map(|(kib, count)| exact_cell(kib, FolioSpec::Base, count * scale));
            let mut r = guest_run(id, Accel::Tcg, cells.into());
            r.run.kernel_release = kernel.into();
            r
        };
        let a = run(1, "6.16.12+deb13-cloud-amd64", 1.0);
        let b = run(2, "6.17.13+deb13-cloud-amd64", 1.9);
        compare_runs("1", &a, "2", &b, &opts(), &NoiseRule::Fixed).unwrap()
    }

    /// Two guest runs judged against stored guest biases: 400K moves by
    /// +0.4%, within 6.17.13's ±0.66%; 4M by +1.5%, beyond its ±0.2%;
    /// 40M has its 4M calibration as the nearest; 6.16.12 has none.
    #[test]
    fn guest_bias_is_the_noise_of_guest_cells() {
        use crate::analysis::tests::{exact_cell, guest_run, opts};
        use crate::analysis::{compare_runs_paired, NoiseRule, Rules};
        use crate::record::Accel;
        use crate::workload::FolioSpec;
        let run = |id: i64, kernel: &str, scales: [f64; 3]| {
            let cells = [(400, 34_530.0), (4096, 180_400.0), (40960, 1_804_000.0)]
                .into_iter()
                .zip(scales)
                .map(|((kib, count), s)| exact_cell(kib, FolioSpec::Base, count * s))
                .collect();
            let mut r = guest_run(id, Accel::Tcg, cells);
            r.run.kernel_release = kernel.into();
            r
        };
        let (ra, rb) = ("6.16.12+deb13-cloud-amd64", "6.17.13+deb13-cloud-amd64");
        let mut a = run(1, ra, [1.0; 3]);
        if let Some(g) = a.run.guest.as_mut() {
            g.kernel_source = "debian:6.16.12 linux-image-6.16.12+deb13-cloud-amd64".into();
        }
        let b = run(2, rb, [1.004, 1.015, 1.015]);
        let mut biases = vec![
            crate::store::tests::guest_bias(rb, 400, 0.0066),
            crate::store::tests::guest_bias(rb, 4096, 0.002),
        ];
        let c = exact_cell(400, FolioSpec::Base, 1.0);
        for (i, x) in biases.iter_mut().enumerate() {
            x.id = Some(i as i64 + 1);
            (x.workload, x.phase) = (c.workload, c.phase.clone());
        }
        let rules = Rules {
            noise: NoiseRule::Calibrated(vec![]),
            guest_biases: Some(biases),
            ..Rules::default()
        };
        let view = compare_runs_paired("1", &a, "2", &b, &opts(), &rules).unwrap();
        let verdicts: Vec<VerdictKind> = view.rows.iter().map(|r| r.verdict).collect();
        assert_eq!(
            verdicts,
            [
                VerdictKind::WithinGuestBias,
                VerdictKind::Regression,
                VerdictKind::Regression
            ]
        );
        assert_eq!(view.summary.within_guest_bias, 1);
        let text = render(&view, Format::Text);
        insta::assert_snapshot!(text);
        // Without biases the 2% default calls all three no change.
        let plain = compare_runs_paired("1", &a, "2", &b, &opts(), &Rules::default()).unwrap();
        assert!(plain
            .rows
            .iter()
            .all(|r| r.verdict == VerdictKind::NoChange));
        let json: serde_json::Value = serde_json::from_str(&render(&view, Format::Json)).unwrap();
        assert_eq!(json["rows"][0]["verdict"], "within-guest-bias");
        assert_eq!(json["summary"]["within_guest_bias"], 1);
        assert!(json["method"]["guest_bias"]
            .as_str()
            .unwrap()
            .contains("not calibrated for debian:6.16.12 x86_64 at mprotect-toggle 400K 4K"));
    }

    #[test]
    fn text_in_instructions() {
        let view = guest_view();
        let text = render(&view, Format::Text);
        assert!(
            text.contains("size_kib | A instr/call | B instr/call | %change ±% | verdict"),
            "{text}"
        );
        assert!(!text.contains("nsec") && !text.contains(" ns "), "{text}");
        insta::assert_snapshot!(text);
        insta::assert_snapshot!(render(&view, Format::Markdown));
        let json: serde_json::Value = serde_json::from_str(&render(&view, Format::Json)).unwrap();
        assert_eq!(json["metric"], "instructions");
        assert_eq!(json["a"]["guest"]["accel"], "tcg");
        assert_eq!(json["method"]["statistic"], "median instructions per call");
        // A time comparison's document is as it always was: no metric key.
        let time: serde_json::Value =
            serde_json::from_str(&render(&fixture(), Format::Json)).unwrap();
        assert!(time.get("metric").is_none() && time["a"].get("guest").is_none());
    }

    #[test]
    fn summary_counts() {
        let s = fixture().summary;
        assert_eq!(
            s,
            Summary {
                cells: 6,
                regressions: 2,
                improvements: 1,
                no_change: 1,
                within_guest_bias: 0,
                not_comparable: 2
            }
        );
    }
}
