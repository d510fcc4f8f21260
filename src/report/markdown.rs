//! The report as Markdown for a mailing-list reply: the same content as the
//! HTML report without images. Tables are padded so that they read as plain
//! text, lines stay within 80 columns where the data allows (a kernel
//! command line does not), and every measured series is also printed as the
//! seeds' `size_kib | nsec_per_call` block.

use std::fmt::Write;

use crate::report::view::{
    ClaimRow, ComparisonInfo, Environment, Knob, LayoutEvidence, MeasuredRef, MeasuredRow,
    ModelTable, RatioRow, ReportModel, RunInfo, Verdict, WorkloadSection,
};
use crate::workload::size::format_size;

/// Render `model` as Markdown (UTF-8).
pub fn render_markdown(model: &ReportModel) -> anyhow::Result<Vec<u8>> {
    let mut out = String::new();
    writeln!(out, "# {}\n", model.title)?;
    for (i, r) in model.runs.iter().enumerate() {
        let same = model.runs[..i].iter().find(|p| p.env == r.env);
        environment(&mut out, r, same)?;
    }
    if let Some(c) = &model.comparison {
        comparison(&mut out, c)?;
    }
    for w in &model.workloads {
        workload(&mut out, w)?;
    }
    for t in &model.models {
        model_table(&mut out, t)?;
    }
    if !model.claims.is_empty() {
        claims(&mut out, &model.claims)?;
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    Ok(out.into_bytes())
}

/// Nanoseconds as the seeds print them: whole numbers from 100 up.
pub(crate) fn ns(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Nanoseconds as [`ns`] prints them, or `-` where there are none.
pub(crate) fn opt_ns(v: Option<f64>) -> String {
    v.map_or("-".into(), ns)
}

/// The ratio and its CI (bounds joined by `sep`), or `n/a` for both. Like
/// `ptelab compare`: no ratio where there is no verdict.
pub(crate) fn ratio_ci(r: &RatioRow, sep: &str) -> (String, String) {
    match (r.ratio, r.ci_low, r.ci_high) {
        (Some(v), Some(lo), Some(hi)) if r.verdict != Verdict::NotComparable => {
            (format!("{v:.3}"), format!("{lo:.3}{sep}{hi:.3}"))
        }
        _ => ("n/a".into(), "n/a".into()),
    }
}

/// ` (granule=4K, contpte=true)`, or nothing without parameters.
pub(crate) fn params_suffix(t: &ModelTable) -> String {
    if t.params.is_empty() {
        String::new()
    } else {
        format!(" ({})", t.params)
    }
}

/// ` none-to-rw`, or nothing without a phase.
pub(crate) fn phase_suffix(m: &MeasuredRef) -> String {
    m.phase
        .as_deref()
        .map_or(String::new(), |p| format!(" {p}"))
}

/// `±1.2%` for the CI half-width of a row.
pub(crate) fn ci(r: &MeasuredRow) -> String {
    r.ci_half()
        .map_or("n/a".into(), |h| format!("±{:.1}%", h * 100.0))
}

/// Flushes per call, or `n/a`.
pub(crate) fn flushes(r: &MeasuredRow) -> String {
    r.flushes_per_call
        .map_or("n/a".into(), |f| format!("{f:.2}"))
}

/// `1` or `1->3`.
pub(crate) fn vmas(r: &MeasuredRow) -> String {
    if r.vmas_before == r.vmas_after {
        r.vmas_before.to_string()
    } else {
        format!("{}->{}", r.vmas_before, r.vmas_after)
    }
}

/// The short observed layout, flagged when it is not what was asked.
pub(crate) fn layout_text(l: &LayoutEvidence) -> String {
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
pub(crate) fn histogram_text(l: &LayoutEvidence) -> String {
    if l.histogram.is_empty() {
        return "-".into();
    }
    l.histogram
        .iter()
        .map(|b| format!("{}x{}", b.count, b.folio))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// A counter value: integers plainly, fractions with up to 2 decimals.
pub(crate) fn counter(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) => {
            let s = format!("{v:.2}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        }
    }
}

/// THP knobs in brief: the global ones, then mTHP sizes not `never`.
pub(crate) fn thp_brief(knobs: &[Knob]) -> Vec<String> {
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
pub(crate) fn kernel_line(e: &Environment) -> String {
    let mut s = format!("Linux {}", e.kernel_release);
    if let Some(v) = &e.kernel_version {
        write!(s, " {v}").unwrap();
    }
    write!(s, ", {}", e.arch).unwrap();
    if let Some(p) = e.page_size {
        write!(s, ", {} pages", format_size(p)).unwrap();
    }
    s
}

/// `AMD EPYC, 2 cores, 23.5 GiB`.
pub(crate) fn cpu_line(e: &Environment) -> String {
    let mut s = e.cpu_model.clone().unwrap_or_else(|| "unknown CPU".into());
    if let Some(c) = e.cores {
        write!(s, ", {c} cores").unwrap();
    }
    if let Some(m) = e.mem_total_bytes {
        write!(s, ", {:.1} GiB", m as f64 / (1u64 << 30) as f64).unwrap();
    }
    s
}

/// `0.1.0 (abc1234)`.
pub(crate) fn tool_line(e: &Environment) -> String {
    match &e.git_revision {
        Some(g) => format!("{} ({g})", e.tool_version),
        None => e.tool_version.clone(),
    }
}

/// `run 3 ('latest')`.
pub(crate) fn run_title(r: &RunInfo) -> String {
    let mut s = format!("{} {}", r.role.text(), r.id);
    if r.name != r.id.to_string() {
        write!(s, " ('{}')", r.name).unwrap();
    }
    s
}

/// Greedy word wrap of `items` joined by ", " after `lead`, at `width`.
fn wrap(lead: &str, items: &[String], width: usize) -> String {
    wrap_sep(lead, items, ",", width)
}

/// The words of `text`, for [`wrap_sep`].
pub(crate) fn words(text: &str) -> Vec<String> {
    text.split(' ').map(str::to_string).collect()
}

/// Greedy wrap of `items`, each but the last followed by `sep` and a space,
/// after `lead`; continuation lines are indented under the first item.
pub(crate) fn wrap_sep(lead: &str, items: &[String], sep: &str, width: usize) -> String {
    let indent = " ".repeat(lead.chars().count());
    let mut out = String::from(lead);
    let mut col = lead.chars().count();
    for (i, item) in items.iter().enumerate() {
        let piece = if i + 1 < items.len() {
            format!("{item}{sep}")
        } else {
            item.clone()
        };
        let n = piece.chars().count();
        if i > 0 {
            if col + 1 + n > width {
                out.push('\n');
                out.push_str(&indent);
                col = indent.len();
            } else {
                out.push(' ');
                col += 1;
            }
        }
        out.push_str(&piece);
        col += n;
    }
    out
}

/// A Markdown table padded to read as plain text. `right[i]` aligns column
/// i to the right (numbers).
pub(crate) fn table(header: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count().max(3)).collect();
    for row in rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::from("|");
        for (i, c) in cells.enumerate() {
            let pad = width[i] - c.chars().count();
            if right[i] {
                write!(s, " {}{c} |", " ".repeat(pad)).unwrap();
            } else {
                write!(s, " {c}{} |", " ".repeat(pad)).unwrap();
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(&mut header.iter().copied());
    out.push('|');
    for (i, w) in width.iter().enumerate() {
        if right[i] {
            write!(out, "{}:|", "-".repeat(w + 1)).unwrap();
        } else {
            write!(out, ":{}|", "-".repeat(w + 1)).unwrap();
        }
    }
    out.push('\n');
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// A run's environment; `same` is an earlier run recorded on the identical
/// environment, which is not repeated.
fn environment(out: &mut String, r: &RunInfo, same: Option<&RunInfo>) -> anyhow::Result<()> {
    let e = &r.env;
    writeln!(out, "## Environment of {}\n", run_title(r))?;
    writeln!(
        out,
        "- what:    {}, {}, {} cells",
        r.kind, r.status, r.cells
    )?;
    if let Some(p) = same {
        writeln!(out, "- when:    {}", r.started_at)?;
        writeln!(
            out,
            "- same kernel, CPU, THP knobs and ptelab as {}",
            run_title(p)
        )?;
        writeln!(out, "- command: `{}`\n", r.command)?;
        return Ok(());
    }
    let finished = r
        .finished_at
        .as_deref()
        .map_or(String::new(), |f| format!(" to {f}"));
    writeln!(out, "- when:    {}{finished}", r.started_at)?;
    writeln!(out, "- kernel:  {}", kernel_line(e))?;
    writeln!(out, "- CPU:     {}", cpu_line(e))?;
    if let Some(pv) = &e.paravirt {
        let words: Vec<String> = pv.split(' ').map(str::to_string).collect();
        writeln!(out, "{}", wrap_sep("- virt:    ", &words, "", 78))?;
    }
    if let Some(c) = &e.kernel_cmdline {
        writeln!(out, "- cmdline: `{c}`")?;
    }
    if !e.thp_knobs.is_empty() {
        writeln!(out, "{}", wrap("- THP:     ", &thp_brief(&e.thp_knobs), 78))?;
    }
    writeln!(out, "- ptelab:  {}, machine {}", tool_line(e), e.machine_id)?;
    writeln!(out, "- command: `{}`", r.command)?;
    if !r.tags.is_empty() {
        writeln!(out, "- tags:    {}", r.tags.join(", "))?;
    }
    out.push('\n');
    Ok(())
}

fn comparison(out: &mut String, c: &ComparisonInfo) -> anyhow::Result<()> {
    writeln!(out, "## Comparison\n")?;
    let text = format!(
        "Ratio = {} of run {} / baseline run {}, with its {:.0}% bootstrap CI ({} resamples, \
         seed {}). Verdict: {} with {} correction at alpha {}, noise threshold {}%. {} cells: {} \
         regressions, {} improvements, {} no change, {} not comparable.",
        c.statistic,
        c.b,
        c.a,
        c.confidence * 100.0,
        c.resamples,
        c.seed,
        c.test,
        c.correction,
        c.alpha,
        crate::report::compare::noise_pct(c.noise),
        c.cells,
        c.regressions,
        c.improvements,
        c.no_change,
        c.not_comparable
    );
    for paragraph in std::iter::once(&text).chain(&c.noise_line).chain(&c.drift) {
        writeln!(out, "{}\n", wrap_sep("", &words(paragraph), "", 78))?;
    }
    Ok(())
}

/// `- text` wrapped at 78 columns, continuation lines indented.
fn bullet(out: &mut String, text: &str) {
    let words: Vec<String> = text.split(' ').map(str::to_string).collect();
    out.push_str(&wrap_sep("- ", &words, "", 78));
    out.push('\n');
}

fn workload(out: &mut String, w: &WorkloadSection) -> anyhow::Result<()> {
    writeln!(out, "## {} (seed {}), run {}\n", w.workload, w.seed, w.run)?;
    writeln!(
        out,
        "Median nsec per call with the 95% CI of the median; flushes per call\n\
         from the tlb:tlb_flush tracepoint; layout observed from pagemap and\n\
         kpageflags before the timed phase.\n"
    )?;
    out.push_str("```\n");
    for s in &w.series {
        writeln!(out, "folio {}", s.label)?;
        writeln!(out, "size_kib | nsec_per_call")?;
        for r in &s.rows {
            writeln!(out, "{} | {}", r.size_bytes >> 10, ns(r.median_ns))?;
        }
    }
    out.push_str("```\n\n");

    // VMAs only when some cell's VMA count is not the plain 1 -> 1.
    let show_vmas = w
        .series
        .iter()
        .flat_map(|s| &s.rows)
        .any(|r| r.vmas_before != 1 || r.vmas_after != 1);
    for s in &w.series {
        writeln!(out, "#### folio {}\n", s.label)?;
        let rows: Vec<Vec<String>> = s
            .rows
            .iter()
            .map(|r| {
                let mut row = vec![
                    (r.size_bytes >> 10).to_string(),
                    ns(r.median_ns),
                    ci(r),
                    format!("{:.1}", r.ns_per_page),
                    flushes(r),
                ];
                if show_vmas {
                    row.push(vmas(r));
                }
                row.push(layout_text(&r.layout));
                row
            })
            .collect();
        let mut header = vec!["size_kib", "nsec_per_call", "95% CI", "ns/page", "flushes"];
        let mut right = vec![true; 5];
        if show_vmas {
            header.push("VMAs");
            right.push(true);
        }
        header.push("layout");
        right.push(false);
        out.push_str(&table(&header, &right, &rows));
        out.push('\n');
    }

    if !w.comparison.is_empty() {
        writeln!(out, "### Ratio to the baseline\n")?;
        let mut reasons = Vec::new();
        for s in &w.comparison {
            writeln!(out, "#### folio {}\n", s.label)?;
            let rows: Vec<Vec<String>> = s
                .rows
                .iter()
                .map(|r| {
                    let (ratio, ci) = ratio_ci(r, "-");
                    if let Some(why) = &r.reason {
                        reasons.push(format!("{} {} KiB: {why}", s.label, r.size_bytes >> 10));
                    }
                    vec![
                        (r.size_bytes >> 10).to_string(),
                        opt_ns(r.baseline_ns),
                        opt_ns(r.run_ns),
                        ratio,
                        ci,
                        r.verdict.text().to_string(),
                    ]
                })
                .collect();
            out.push_str(&table(
                &[
                    "size_kib",
                    "base nsec",
                    "run nsec",
                    "ratio",
                    "95% CI",
                    "verdict",
                ],
                &[true, true, true, true, true, false],
                &rows,
            ));
            out.push('\n');
        }
        if !reasons.is_empty() {
            writeln!(out, "Not comparable:\n")?;
            for r in reasons {
                bullet(out, &r);
            }
            out.push('\n');
        }
    }

    writeln!(out, "### Layout evidence\n")?;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for s in &w.series {
        for r in &s.rows {
            let l = &r.layout;
            let ok = match (l.verified, l.matches) {
                (false, _) => "unverified",
                (true, true) => "yes",
                (true, false) => "NO",
            };
            if let Some(m) = &l.mismatch {
                notes.push(format!("{} {} KiB: {m}", s.label, r.size_bytes >> 10));
            }
            if let Some(a) = &l.after {
                notes.push(format!(
                    "{} {} KiB: after the timed phase {a}",
                    s.label,
                    r.size_bytes >> 10
                ));
            }
            rows.push(vec![
                s.label.clone(),
                (r.size_bytes >> 10).to_string(),
                histogram_text(l),
                format!("{}/{}", l.pages_present, l.pages_total),
                format_size(l.pmd_mapped_bytes),
                ok.to_string(),
            ]);
        }
    }
    out.push_str(&table(
        &["folio", "size_kib", "folios seen", "pages", "PMD", "match"],
        &[false, true, false, true, true, false],
        &rows,
    ));
    out.push('\n');
    for n in &notes {
        bullet(out, n);
    }
    if !notes.is_empty() {
        out.push('\n');
    }
    if !w.warnings.is_empty() {
        writeln!(out, "Warnings:\n")?;
        for x in &w.warnings {
            bullet(out, x);
        }
        out.push('\n');
    }
    Ok(())
}

fn model_table(out: &mut String, t: &ModelTable) -> anyhow::Result<()> {
    let params = params_suffix(t);
    writeln!(
        out,
        "## Model: {}, {}{params}, run {}\n",
        t.workload, t.arch, t.run
    )?;
    writeln!(
        out,
        "Primitive counts per mm call for each strategy; only the counters that\n\
         differ between strategies are tabulated.\n"
    )?;
    for c in &t.cells {
        writeln!(out, "#### {} KiB, folio {}\n", c.size_bytes >> 10, c.folio)?;
        for m in &c.measured {
            let phase = phase_suffix(m);
            writeln!(
                out,
                "- measured{phase}: {} ns/call, {:.1} ns/page (run {})",
                ns(m.median_ns),
                m.ns_per_page,
                m.run
            )?;
        }
        let differ: Vec<Vec<String>> = c
            .counters
            .iter()
            .filter(|r| r.differs)
            .map(|r| {
                let mut row = vec![r.name.clone()];
                row.extend(r.values.iter().map(|v| counter(*v)));
                row
            })
            .collect();
        let same: Vec<String> = c
            .counters
            .iter()
            .filter(|r| !r.differs)
            .map(|r| {
                format!(
                    "{} {}",
                    r.name,
                    counter(r.values.iter().flatten().next().copied())
                )
            })
            .collect();
        if !same.is_empty() {
            writeln!(out, "{}", wrap("- same for all: ", &same, 78))?;
        }
        if !c.measured.is_empty() || !same.is_empty() {
            out.push('\n');
        }
        if differ.is_empty() {
            writeln!(out, "No counter differs between strategies.\n")?;
        } else {
            let mut header = vec!["counter"];
            header.extend(t.strategies.iter().map(String::as_str));
            let mut right = vec![false];
            right.extend(t.strategies.iter().map(|_| true));
            out.push_str(&table(&header, &right, &differ));
            out.push('\n');
        }
    }
    Ok(())
}

/// One bullet per claim (a table would not fit 80 columns): the claim and
/// its verdict, then the published, measured and modelled figures.
fn claims(out: &mut String, claims: &[ClaimRow]) -> anyhow::Result<()> {
    writeln!(out, "## Claims\n")?;
    for c in claims {
        let mut text = format!("[{}] {}: {}.", c.seed, c.claim, c.verdict.to_uppercase());
        for (what, v) in [
            ("published", &c.published),
            ("measured here", &c.measured),
            ("model", &c.model),
        ] {
            if let Some(v) = v {
                text.push_str(&format!(" {what}: {v};"));
            }
        }
        bullet(out, text.trim_end_matches(';'));
    }
    out.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_and_align() {
        let t = table(
            &["size_kib", "layout"],
            &[true, false],
            &[vec!["4".into(), "100% 4K".into()]],
        );
        assert_eq!(
            t,
            "| size_kib | layout  |\n|---------:|:--------|\n|        4 | 100% 4K |\n"
        );
    }

    #[test]
    fn wrapping_keeps_lines_short() {
        let items: Vec<String> = (0..30).map(|i| format!("counter_{i} {i}")).collect();
        let s = wrap("- same: ", &items, 78);
        assert!(s.lines().all(|l| l.chars().count() <= 78), "{s}");
        assert!(s.lines().skip(1).all(|l| l.starts_with("        ")));
    }

    #[test]
    fn counters_print_plainly() {
        assert_eq!(counter(Some(100.0)), "100");
        assert_eq!(counter(Some(0.5)), "0.5");
        assert_eq!(counter(Some(5.126)), "5.13");
        assert_eq!(counter(None), "-");
    }
}
