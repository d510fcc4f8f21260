//! The report as one self-contained HTML file: the page is an askama
//! template (`templates/report.html`, compiled in and HTML-escaping every
//! value it prints), the style sheet is inlined, plots are inline SVG drawn
//! by a [`Plotter`], and there is no script, web font or external resource,
//! so the file opens the same offline, attached to a bug or on a web server.
//!
//! This module turns the view model into the page's rows of plain text
//! (numbers formatted, nothing escaped); the template escapes them once.
//! Only the SVG plots, the histogram bars and the tables built by
//! [`crate::text::table::Table`] are inserted as markup, and each is
//! escaped where it is made.

use askama::Template;

use crate::phrase::{
    ci, cpu_line, flush_notes, flushes, guest_line, histogram_text, kernel_line, layout_text,
    params_suffix, phase_suffix, ratio_ci, run_title, thp_brief, tool_line, vmas,
};
use crate::plot::{color, escape, Plotter, SvgPlotter};
use crate::record::Metric;
use crate::text::format::{counter, ns, opt_ns, p_value, size};
use crate::text::table::{Cell, Table};
use crate::view::{
    ClaimRow, ComparisonInfo, Knob, LayoutEvidence, ModelTable, ReportModel, RunInfo, Verdict,
    WorkloadSection,
};

const STYLE: &str = include_str!("../../templates/report.css");

/// Render `model` as HTML with the default SVG plotter.
pub fn render_html(model: &ReportModel) -> anyhow::Result<Vec<u8>> {
    render_with(model, &SvgPlotter::default())
}

/// Render `model` as HTML, drawing plots with `plotter`.
pub fn render_with(model: &ReportModel, plotter: &dyn Plotter) -> anyhow::Result<Vec<u8>> {
    let mut page = Page::new(model, plotter).render()?;
    page.push('\n');
    Ok(page.into_bytes())
}

/// The whole page.
#[derive(Template)]
#[template(path = "report.html")]
struct Page<'a> {
    title: &'a str,
    subtitle: String,
    generator: String,
    style: &'static str,
    runs: Vec<RunBlock<'a>>,
    comparison: Option<ComparisonBlock<'a>>,
    workloads: Vec<WorkloadBlock<'a>>,
    models: Vec<ModelBlock<'a>>,
    /// The claims table (HTML, escaped by [`Table`]).
    claims: Option<String>,
    /// Cells across kernels, per seed and arch.
    kernels: Vec<KernelBlock<'a>>,
    /// The runs were measured in different units (time, instructions).
    metric_note: Option<&'a str>,
    /// Per kernel function, run against baseline: heading, table, bars.
    functions: Vec<(String, String, String)>,
}

impl<'a> Page<'a> {
    fn new(model: &'a ReportModel, plotter: &dyn Plotter) -> Page<'a> {
        let subtitle = model
            .runs
            .iter()
            .map(|r| {
                format!(
                    "{}: {}, Linux {} on {}",
                    run_title(r),
                    r.kind,
                    r.env.kernel_release,
                    r.env.cpu_model.as_deref().unwrap_or("unknown CPU")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let generator = model.runs.first().map_or("ptelab".to_string(), |r| {
            format!("ptelab {}", tool_line(&r.env))
        });
        let runs = model
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                RunBlock::new(
                    r,
                    model.runs[..i]
                        .iter()
                        .find(|p| p.env == r.env && p.guest == r.guest),
                )
            })
            .collect();
        Page {
            title: &model.title,
            subtitle,
            generator,
            style: STYLE.trim_end(),
            runs,
            comparison: model.comparison.as_ref().map(ComparisonBlock::new),
            workloads: model
                .workloads
                .iter()
                .map(|w| WorkloadBlock::new(w, plotter))
                .collect(),
            models: model.models.iter().map(ModelBlock::new).collect(),
            claims: (!model.claims.is_empty()).then(|| claims_table(&model.claims)),
            kernels: model
                .kernels
                .iter()
                .map(|k| KernelBlock {
                    heading: format!("seed {}: {}", k.seed, k.heading),
                    baseline: k.baseline.as_deref(),
                    table: k.table().html(),
                    plots: k
                        .plot
                        .iter()
                        .chain(&k.relative)
                        .map(|p| plotter.plot(p))
                        .collect(),
                })
                .collect(),
            metric_note: model.metric_note.as_deref(),
            functions: model
                .functions
                .as_ref()
                .map_or(Vec::new(), functions_blocks),
        }
    }
}

/// The kernel-functions section: per pair of cells, the change of each
/// function as bars and as a table.
fn functions_blocks(
    v: &crate::analysis::functions::FunctionsView,
) -> Vec<(String, String, String)> {
    use super::mechanism::{bars_svg, diff_table, REPORT_TOP};
    v.cells
        .iter()
        .map(|c| {
            (
                format!("{}: {} (A) vs {} (B)", c.cell, v.a, v.b),
                diff_table(&c.functions, REPORT_TOP).html(),
                bars_svg(&c.functions, REPORT_TOP),
            )
        })
        .collect()
}

/// A seed's cells across kernels: heading, the baseline of the ratios, the
/// table (HTML, escaped by [`Table`]), the plots (SVG: absolute, then
/// relative to the baseline kernel).
struct KernelBlock<'a> {
    heading: String,
    baseline: Option<&'a str>,
    table: String,
    plots: Vec<String>,
}

/// One row of a run's key-value table.
struct Kv {
    key: &'static str,
    value: String,
    /// `Some("")` for `<code>`, `Some("cmdline")` for a wrapping command line.
    code: Option<&'static str>,
}

fn kv(key: &'static str, value: impl Into<String>) -> Kv {
    Kv {
        key,
        value: value.into(),
        code: None,
    }
}

fn kv_code(key: &'static str, value: impl Into<String>, class: &'static str) -> Kv {
    Kv {
        key,
        value: value.into(),
        code: Some(class),
    }
}

/// A run's environment; an earlier run recorded on the identical
/// environment is named, not repeated.
struct RunBlock<'a> {
    title: String,
    rows: Vec<Kv>,
    knobs: &'a [Knob],
}

impl<'a> RunBlock<'a> {
    fn new(r: &'a RunInfo, same: Option<&RunInfo>) -> RunBlock<'a> {
        let e = &r.env;
        let what = format!("{}, {}, {} cells", r.kind, r.status, r.cells);
        if let Some(p) = same {
            return RunBlock {
                title: run_title(r),
                rows: vec![
                    kv("run", what),
                    kv("when (UTC)", r.started_at.as_str()),
                    kv(
                        "environment",
                        format!(
                            "the same as {} (kernel, CPU, THP knobs, ptelab)",
                            run_title(p)
                        ),
                    ),
                    kv_code("command", r.command.as_str(), "cmdline"),
                ],
                knobs: &[],
            };
        }
        let when = match &r.finished_at {
            Some(f) => format!("{} to {f}", r.started_at),
            None => r.started_at.clone(),
        };
        let mut rows = vec![
            kv("run", what),
            kv("when (UTC)", when),
            kv("kernel", kernel_line(e)),
            kv("CPU", cpu_line(e)),
        ];
        if let Some(pv) = &e.paravirt {
            rows.push(kv("virtualization", pv.as_str()));
        }
        if let Some(c) = &e.kernel_cmdline {
            rows.push(kv_code("kernel cmdline", c.as_str(), "cmdline"));
        }
        if !e.thp_knobs.is_empty() {
            rows.push(kv("THP", thp_brief(&e.thp_knobs).join(", ")));
        }
        if let Some(g) = &r.guest {
            rows.push(kv("guest", guest_line(g)));
        }
        rows.push(kv("ptelab", tool_line(e)));
        rows.push(kv_code("machine id", e.machine_id.as_str(), ""));
        rows.push(kv_code("command", r.command.as_str(), "cmdline"));
        if !r.tags.is_empty() {
            rows.push(kv("tags", r.tags.join(", ")));
        }
        RunBlock {
            title: run_title(r),
            rows,
            knobs: &e.thp_knobs,
        }
    }
}

struct ComparisonBlock<'a> {
    c: &'a ComparisonInfo,
    confidence_pct: String,
    noise_pct: String,
    /// The noise and drift sentences.
    notes: Vec<&'a str>,
    regressions_class: &'static str,
    improvements_class: &'static str,
}

impl<'a> ComparisonBlock<'a> {
    fn new(c: &'a ComparisonInfo) -> ComparisonBlock<'a> {
        ComparisonBlock {
            c,
            confidence_pct: format!("{:.0}", c.confidence * 100.0),
            noise_pct: crate::compare::noise_pct(c.noise),
            notes: c
                .noise_line
                .iter()
                .chain(&c.drift)
                .chain(&c.qemu)
                .map(String::as_str)
                .collect(),
            regressions_class: if c.regressions > 0 { "bad" } else { "muted" },
            improvements_class: if c.improvements > 0 { "good" } else { "muted" },
        }
    }
}

/// The class of a verdict's cell.
fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Regression => "bad",
        Verdict::Improvement => "good",
        Verdict::NoChange | Verdict::WithinGuestBias | Verdict::NotComparable => "muted",
    }
}

struct WorkloadBlock<'a> {
    w: &'a WorkloadSection,
    /// `Median nsec per call`, or the instruction metric's sentence.
    median_of: &'static str,
    /// A side's column in the ratio table: `nsec`, `instr/call`.
    side: &'static str,
    /// Why flushes read n/a, each reason once.
    flush_notes: Vec<String>,
    id: String,
    /// Inline SVG, escaped by the plotter.
    plots: Vec<String>,
    /// One measured table per series: (label, HTML table).
    measured: Vec<(&'a str, String)>,
    ratios: Vec<(&'a str, Vec<RatioLine>)>,
    layout: Vec<LayoutLine<'a>>,
}

struct RatioLine {
    size_kib: u64,
    baseline: String,
    run: String,
    ratio: String,
    ci: String,
    p: String,
    verdict: &'static str,
    class: &'static str,
    reason: Option<String>,
}

struct LayoutLine<'a> {
    folio: &'a str,
    size_kib: u64,
    /// The stacked bar (HTML built by [`histogram_bar`]).
    bar: String,
    histogram: String,
    summary: &'a str,
    pages: String,
    pmd: String,
    misaligned: u64,
    /// `(class, text)` of the match cell.
    matches: (&'static str, String),
    after: Option<String>,
}

impl<'a> WorkloadBlock<'a> {
    fn new(w: &'a WorkloadSection, plotter: &dyn Plotter) -> WorkloadBlock<'a> {
        WorkloadBlock {
            w,
            median_of: match w.metric {
                Metric::Time => "Median nsec per call",
                Metric::Instructions => {
                    "Median guest instructions per call (QEMU TCG with icount: executed \
                     instructions, not time; blind to cycles, cache and TLB misses)"
                }
            },
            side: w.metric.side_column(),
            flush_notes: flush_notes(w.series.iter().flat_map(|s| &s.rows)),
            id: format!("run{}-{}", w.run, w.workload),
            plots: w.plots.iter().map(|p| plotter.plot(p)).collect(),
            measured: w
                .series
                .iter()
                .map(|s| (s.label.as_str(), measured_table(&s.rows, w.metric)))
                .collect(),
            ratios: w
                .comparison
                .iter()
                .map(|s| (s.label.as_str(), s.rows.iter().map(ratio_line).collect()))
                .collect(),
            layout: w
                .series
                .iter()
                .flat_map(|s| s.rows.iter().map(|r| layout_line(&s.label, r)))
                .collect(),
        }
    }
}

fn measured_table(rows: &[crate::view::MeasuredRow], metric: Metric) -> String {
    let mut t = Table::new()
        .class("cells")
        .right("size_kib")
        .right(metric.per_call_column())
        .right("95% CI")
        .right(metric.per_page_column())
        .right("flushes/call")
        .right("VMAs")
        .right("samples")
        .left("layout");
    for r in rows {
        let lay = layout_text(&r.layout);
        let lay = if r.layout.matches || !r.layout.verified {
            Cell::from(lay)
        } else {
            Cell::flagged(lay, "bad")
        };
        t.row([
            Cell::from((r.size_bytes >> 10).to_string()),
            ns(r.median_ns).into(),
            ci(r).into(),
            format!("{:.1}", r.ns_per_page).into(),
            flushes(r).into(),
            vmas(r).into(),
            r.samples.to_string().into(),
            lay,
        ]);
    }
    t.html()
}

fn ratio_line(r: &crate::view::RatioRow) -> RatioLine {
    let (ratio, ci) = ratio_ci(r, " to ");
    RatioLine {
        size_kib: r.size_bytes >> 10,
        baseline: opt_ns(r.baseline_ns),
        run: opt_ns(r.run_ns),
        ratio,
        ci,
        p: r.p_holm.map_or("-".into(), p_value),
        verdict: r.verdict.text(),
        class: verdict_class(r.verdict),
        reason: r.reason.clone(),
    }
}

fn layout_line<'a>(folio: &'a str, r: &'a crate::view::MeasuredRow) -> LayoutLine<'a> {
    let l = &r.layout;
    let matches = match (l.verified, l.matches) {
        (false, _) => ("muted", "unverified".to_string()),
        (true, true) => ("good", "yes".to_string()),
        (true, false) => (
            "bad",
            format!("no: {}", l.mismatch.as_deref().unwrap_or("")),
        ),
    };
    LayoutLine {
        folio,
        size_kib: r.size_bytes >> 10,
        bar: histogram_bar(l),
        histogram: histogram_text(l),
        summary: &l.summary,
        pages: format!("{}/{}", l.pages_present, l.pages_total),
        pmd: size(l.pmd_mapped_bytes),
        misaligned: l.misaligned_folios,
        matches,
        after: l.after.as_ref().map(|a| format!("after: {a}")),
    }
}

/// A stacked bar of the folio sizes seen, largest first.
fn histogram_bar(l: &LayoutEvidence) -> String {
    let mut s = String::from("<span class=\"hbar\">");
    for (i, b) in l.histogram.iter().enumerate() {
        s.push_str(&format!(
            "<span style=\"width:{:.1}%;background:{}\" title=\"{}\"></span>",
            b.share * 100.0,
            color(i + 2),
            escape(&format!(
                "{} x {} ({:.0}%)",
                b.count,
                b.folio,
                b.share * 100.0
            ))
        ));
    }
    s.push_str("</span>");
    s
}

struct ModelBlock<'a> {
    t: &'a ModelTable,
    params: String,
    cells: Vec<ModelCellBlock<'a>>,
}

struct ModelCellBlock<'a> {
    size_kib: u64,
    folio: &'a str,
    /// `measured{phase}: ... ns/call, ... ns/page (run N)`.
    measured: Vec<String>,
    /// (name, differs, values).
    counters: Vec<(&'a str, bool, Vec<String>)>,
}

impl<'a> ModelBlock<'a> {
    fn new(t: &'a ModelTable) -> ModelBlock<'a> {
        ModelBlock {
            t,
            params: params_suffix(t),
            cells: t
                .cells
                .iter()
                .map(|c| ModelCellBlock {
                    size_kib: c.size_bytes >> 10,
                    folio: &c.folio,
                    measured: c
                        .measured
                        .iter()
                        .map(|m| {
                            format!(
                                "measured{}: {} {}, {:.1} {} (run {})",
                                phase_suffix(m),
                                ns(m.median_ns),
                                m.metric.per_call_unit(),
                                m.ns_per_page,
                                m.metric.per_page_column(),
                                m.run
                            )
                        })
                        .collect(),
                    counters: c
                        .counters
                        .iter()
                        .map(|r| {
                            (
                                r.name.as_str(),
                                r.differs,
                                r.values.iter().map(|v| counter(*v)).collect(),
                            )
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// One line per claim, as `reproduce` closes (seed, claim, arch, verdict,
/// measured vs published); the claim's full text a click away in
/// `<details>`, each cell's repeated sentences said once.
fn claims_table(claims: &[ClaimRow]) -> String {
    use crate::text::table::html_escape as esc;
    use crate::view::claims::dedup_sentences;
    let mut s = String::from(
        "<table class=\"claims\">\n<thead><tr><th>seed</th><th>claim</th><th>arch</th>\
         <th>verdict</th><th>measured vs published</th></tr></thead>\n<tbody>\n",
    );
    for c in claims {
        let mut details = format!("<dl>\n<dt>claim</dt><dd>{}</dd>\n", esc(&c.claim));
        for (label, v) in [
            ("published", &c.published),
            ("measured", &c.measured),
            ("model", &c.model),
            ("predicted (cost model)", &c.predicted),
            ("verdict", &Some(c.verdict.clone())),
        ] {
            if let Some(v) = v {
                details.push_str(&format!(
                    "<dt>{label}</dt><dd>{}</dd>\n",
                    esc(&dedup_sentences(v))
                ));
            }
        }
        for u in &c.uncalibrated {
            details.push_str(&format!("<dt>not calibrated</dt><dd>{}</dd>\n", esc(u)));
        }
        details.push_str("</dl>");
        s.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><details><summary>{}</summary>\n{details}\n</details></td></tr>\n",
            esc(&c.seed),
            esc(&c.short_claim()),
            esc(&c.arch()),
            esc(c.word()),
            esc(&c.brief()),
        ));
    }
    s.push_str("</tbody>\n</table>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::fixture_model;

    fn html(model: &ReportModel) -> String {
        String::from_utf8(render_html(model).unwrap()).unwrap()
    }

    /// One line per claim; the rest in `<details>`, said once.
    #[test]
    fn the_claims_table_reads_like_the_closing_table() {
        let rows = crate::view::claims::tests::sample_claims();
        let t = claims_table(&rows);
        assert_eq!(t.matches("<details>").count(), rows.len());
        assert_eq!(t.matches("no kernel offered").count(), 1, "{t}");
        insta::assert_snapshot!(t);
    }

    /// Text from a stored run is printed once, escaped: a `{{nav}}` in a
    /// title is not a placeholder, and a tag cannot open an element.
    #[test]
    fn user_text_is_escaped_and_not_substituted() {
        let mut m = fixture_model();
        m.title = "{{nav}} <script>alert(1)</script>".into();
        m.runs[0].tags = vec!["{{body}}".into(), "<img src=x onerror=alert(1)>".into()];
        m.runs[0].name = "{{style}}\"'".into();
        m.runs[0].command = "ptelab bench </code><script>x</script>".into();
        m.workloads[0].warnings = vec!["<b>warn</b> & {{title}}".into()];
        m.claims[0].claim = "<i>claim</i>".into();
        // askama writes numeric entities (`&#60;`), the table escaper named
        // ones (`&lt;`): read both the same.
        let page = html(&m)
            .replace("&#60;", "&lt;")
            .replace("&#62;", "&gt;")
            .replace("&#34;", "&quot;")
            .replace("&#38;", "&amp;");
        assert!(!page.contains("<script"), "{page}");
        assert!(!page.contains("<img"));
        assert!(!page.contains("<b>warn") && !page.contains("<i>claim"));
        assert!(page.contains("<title>{{nav}} &lt;script&gt;alert(1)&lt;/script&gt;</title>"));
        assert!(page.contains("<h1>{{nav}} &lt;script&gt;"));
        // The nav appears once, in its element, and not inside the title.
        assert_eq!(page.matches("<a href=\"#env\">").count(), 1);
        assert!(page.contains("<td>{{body}}, &lt;img src=x onerror=alert(1)&gt;</td>"));
        assert!(page.contains("<h3>run 2 (&#39;{{style}}&quot;&#39;&#39;)</h3>"));
        assert!(page.contains("&lt;/code&gt;&lt;script&gt;x&lt;/script&gt;"));
        assert!(page.contains("<li>&lt;b&gt;warn&lt;/b&gt; &amp; {{title}}</li>"));
        assert!(page.contains("<td>&lt;i&gt;claim&lt;/i&gt;</td>"));
    }

    #[test]
    fn mismatched_layout_and_verdicts_are_flagged() {
        let page = html(&fixture_model());
        assert!(page.contains("<td class=\"bad\">no: requested 64K folios: none found</td>"));
        assert!(page.contains("<td class=\"bad\">REGRESSION</td>"));
        assert!(page.contains("<table class=\"cells\"><tr><th class=\"n\">size_kib</th>"));
    }
}
