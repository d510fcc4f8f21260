//! The report as Markdown for a mailing-list reply: the same content as the
//! HTML report without images. Tables are padded so that they read as plain
//! text, lines stay within 80 columns where the data allows (a kernel
//! command line does not), and every measured series is also printed as the
//! seeds' `size_kib | nsec_per_call` block.
//!
//! Every piece of text that is not markup written here (a run name, a tag,
//! a command, a note) goes through [`md`] or [`markdown_code`], so a tag
//! such as `<img onerror=...>` shows as text and never as HTML.

use std::fmt::Write;

use crate::phrase::{
    ci, cpu_line, flush_notes, flushes, guest_line, histogram_text, kernel_line, layout_text,
    params_suffix, phase_suffix, ratio_ci, run_title, thp_brief, tool_line, vmas,
};
use crate::record::Metric;
use crate::text::format::{counter, ns, opt_ns, size};
use crate::text::table::{markdown_code, markdown_escape as md, Table};
use crate::view::{
    ClaimRow, ComparisonInfo, KernelSection, ModelTable, ReportModel, RunInfo, WorkloadSection,
};

/// Render `model` as Markdown (UTF-8).
pub fn render_markdown(model: &ReportModel) -> anyhow::Result<Vec<u8>> {
    let mut out = String::new();
    writeln!(out, "# {}\n", md(&model.title))?;
    // What a reader came for first: every claim, then the cells across
    // kernels, then the detail.
    if !model.claims.is_empty() {
        claims(&mut out, &model.claims)?;
    }
    for k in &model.kernels {
        kernel_section(&mut out, k)?;
    }
    for (i, r) in model.runs.iter().enumerate() {
        let same = model.runs[..i]
            .iter()
            .find(|p| p.env == r.env && p.guest == r.guest);
        environment(&mut out, r, same)?;
    }
    if let Some(note) = &model.metric_note {
        writeln!(out, "{}\n", wrap_sep("", &words(&md(note)), "", 78))?;
    }
    if let Some(c) = &model.comparison {
        comparison(&mut out, c)?;
    }
    if let Some(f) = &model.functions {
        out.push_str(&super::mechanism::render_functions(
            f,
            super::compare::Format::Markdown,
            super::mechanism::REPORT_TOP,
        ));
    }
    for w in &model.workloads {
        workload(&mut out, w)?;
    }
    for t in &model.models {
        model_table(&mut out, t)?;
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    Ok(out.into_bytes())
}

/// Greedy word wrap of `items` joined by ", " after `lead`, at `width`.
fn wrap(lead: &str, items: &[String], width: usize) -> String {
    wrap_sep(lead, items, ",", width)
}

/// The words of `text`, for [`wrap_sep`].
pub fn words(text: &str) -> Vec<String> {
    text.split(' ').map(str::to_string).collect()
}

/// Greedy wrap of `items`, each but the last followed by `sep` and a space,
/// after `lead`; continuation lines are indented under the first item.
pub fn wrap_sep(lead: &str, items: &[String], sep: &str, width: usize) -> String {
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

/// A run's environment; `same` is an earlier run recorded on the identical
/// environment, which is not repeated.
fn environment(out: &mut String, r: &RunInfo, same: Option<&RunInfo>) -> anyhow::Result<()> {
    let e = &r.env;
    writeln!(out, "## Environment of {}\n", md(&run_title(r)))?;
    writeln!(
        out,
        "- what:    {}, {}, {} cells",
        md(&r.kind),
        md(&r.status),
        r.cells
    )?;
    if let Some(g) = &r.guest {
        writeln!(
            out,
            "{}",
            wrap_sep("- guest:   ", &words(&md(&guest_line(g))), "", 78)
        )?;
    }
    if let Some(p) = same {
        writeln!(out, "- when:    {}", md(&r.started_at))?;
        writeln!(
            out,
            "- same kernel, CPU, THP knobs and ptelab as {}",
            md(&run_title(p))
        )?;
        writeln!(out, "- command: {}\n", markdown_code(&r.command))?;
        return Ok(());
    }
    let finished = r
        .finished_at
        .as_deref()
        .map_or(String::new(), |f| format!(" to {}", md(f)));
    writeln!(out, "- when:    {}{finished}", md(&r.started_at))?;
    writeln!(out, "- kernel:  {}", md(&kernel_line(e)))?;
    writeln!(out, "- CPU:     {}", md(&cpu_line(e)))?;
    if let Some(pv) = &e.paravirt {
        writeln!(out, "{}", wrap_sep("- virt:    ", &words(&md(pv)), "", 78))?;
    }
    if let Some(c) = &e.kernel_cmdline {
        writeln!(out, "- cmdline: {}", markdown_code(c))?;
    }
    if !e.thp_knobs.is_empty() {
        let knobs: Vec<String> = thp_brief(&e.thp_knobs).iter().map(|k| md(k)).collect();
        writeln!(out, "{}", wrap("- THP:     ", &knobs, 78))?;
    }
    writeln!(
        out,
        "- ptelab:  {}, machine {}",
        md(&tool_line(e)),
        md(&e.machine_id)
    )?;
    writeln!(out, "- command: {}", markdown_code(&r.command))?;
    if !r.tags.is_empty() {
        writeln!(out, "- tags:    {}", md(&r.tags.join(", ")))?;
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
        crate::compare::noise_pct(c.noise),
        c.cells,
        c.regressions,
        c.improvements,
        c.no_change,
        c.not_comparable
    );
    for paragraph in std::iter::once(&text)
        .chain(&c.noise_line)
        .chain(&c.drift)
        .chain(&c.qemu)
    {
        writeln!(out, "{}\n", wrap_sep("", &words(&md(paragraph)), "", 78))?;
    }
    Ok(())
}

/// `- text` wrapped at 78 columns, continuation lines indented; `text` is
/// Markdown (escaped by the caller).
fn bullet(out: &mut String, text: &str) {
    out.push_str(&wrap_sep("- ", &words(text), "", 78));
    out.push('\n');
}

fn workload(out: &mut String, w: &WorkloadSection) -> anyhow::Result<()> {
    writeln!(
        out,
        "## {} (seed {}), run {}\n",
        md(&w.workload),
        md(&w.seed),
        w.run
    )?;
    match w.metric {
        Metric::Time => writeln!(
            out,
            "Median nsec per call with the 95% CI of the median; flushes per call\n\
             from the tlb:tlb_flush tracepoint; layout observed from pagemap and\n\
             kpageflags before the timed phase.\n"
        )?,
        Metric::Instructions => writeln!(
            out,
            "Median guest instructions per call (QEMU TCG with icount: executed\n\
             instructions, not time; blind to cycles, cache and TLB misses) with\n\
             the 95% CI of the median; flushes per call from the tlb:tlb_flush\n\
             tracepoint; layout observed from pagemap and kpageflags before the\n\
             timed phase.\n"
        )?,
    }
    seed_block(out, w)?;
    measured_tables(out, w)?;
    for note in flush_notes(w.series.iter().flat_map(|s| &s.rows)) {
        writeln!(out, "{}\n", wrap_sep("", &words(&md(&note)), "", 78))?;
    }
    ratio_tables(out, w)?;
    layout_evidence(out, w)?;
    if !w.warnings.is_empty() {
        writeln!(out, "Warnings:\n")?;
        for x in &w.warnings {
            bullet(out, &md(x));
        }
        out.push('\n');
    }
    Ok(())
}

/// Every series as the seeds print it, `size_kib | nsec_per_call`.
fn seed_block(out: &mut String, w: &WorkloadSection) -> anyhow::Result<()> {
    out.push_str("```\n");
    for s in &w.series {
        writeln!(out, "folio {}", s.label)?;
        writeln!(out, "size_kib | {}", w.metric.per_call_column())?;
        for r in &s.rows {
            writeln!(out, "{} | {}", r.size_bytes >> 10, ns(r.median_ns))?;
        }
    }
    out.push_str("```\n\n");

    Ok(())
}

/// One table per series: the medians with CI, ns/page, flushes, layout.
fn measured_tables(out: &mut String, w: &WorkloadSection) -> anyhow::Result<()> {
    // VMAs only when some cell's VMA count is not the plain 1 -> 1.
    let show_vmas = w
        .series
        .iter()
        .flat_map(|s| &s.rows)
        .any(|r| r.vmas_before != 1 || r.vmas_after != 1);
    for s in &w.series {
        writeln!(out, "#### folio {}\n", md(&s.label))?;
        let mut t = Table::new()
            .right("size_kib")
            .right(w.metric.per_call_column())
            .right("95% CI")
            .right(w.metric.per_page_column())
            .right("flushes");
        if show_vmas {
            t = t.right("VMAs");
        }
        t = t.left("layout");
        for r in &s.rows {
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
            t.row(row);
        }
        out.push_str(&t.markdown());
        out.push('\n');
    }

    Ok(())
}

/// Ratio to the baseline per series, then why cells are not comparable.
fn ratio_tables(out: &mut String, w: &WorkloadSection) -> anyhow::Result<()> {
    if w.comparison.is_empty() {
        return Ok(());
    }
    writeln!(out, "### Ratio to the baseline\n")?;
    let mut reasons = Vec::new();
    for s in &w.comparison {
        writeln!(out, "#### folio {}\n", md(&s.label))?;
        let mut t = Table::new()
            .right("size_kib")
            .right(format!("base {}", w.metric.side_column()))
            .right(format!("run {}", w.metric.side_column()))
            .right("ratio")
            .right("95% CI")
            .left("verdict");
        for r in &s.rows {
            let (ratio, ci) = ratio_ci(r, "-");
            if let Some(why) = &r.reason {
                reasons.push(md(&format!(
                    "{} {} KiB: {why}",
                    s.label,
                    r.size_bytes >> 10
                )));
            }
            t.row([
                (r.size_bytes >> 10).to_string(),
                opt_ns(r.baseline_ns),
                opt_ns(r.run_ns),
                ratio,
                ci,
                r.verdict.text().to_string(),
            ]);
        }
        out.push_str(&t.markdown());
        out.push('\n');
    }
    if !reasons.is_empty() {
        writeln!(out, "Not comparable:\n")?;
        for r in reasons {
            bullet(out, &r);
        }
        out.push('\n');
    }
    Ok(())
}

/// The folios seen per cell, with the mismatches and after-phase changes
/// as notes below.
fn layout_evidence(out: &mut String, w: &WorkloadSection) -> anyhow::Result<()> {
    writeln!(out, "### Layout evidence\n")?;
    let mut t = Table::new()
        .left("folio")
        .right("size_kib")
        .left("folios seen")
        .right("pages")
        .right("PMD")
        .left("match");
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
                notes.push(md(&format!("{} {} KiB: {m}", s.label, r.size_bytes >> 10)));
            }
            if let Some(a) = &l.after {
                notes.push(md(&format!(
                    "{} {} KiB: after the timed phase {a}",
                    s.label,
                    r.size_bytes >> 10
                )));
            }
            t.row([
                s.label.clone(),
                (r.size_bytes >> 10).to_string(),
                histogram_text(l),
                format!("{}/{}", l.pages_present, l.pages_total),
                size(l.pmd_mapped_bytes),
                ok.to_string(),
            ]);
        }
    }
    out.push_str(&t.markdown());
    out.push('\n');
    for n in &notes {
        bullet(out, n);
    }
    if !notes.is_empty() {
        out.push('\n');
    }
    Ok(())
}

fn model_table(out: &mut String, t: &ModelTable) -> anyhow::Result<()> {
    let params = params_suffix(t);
    writeln!(
        out,
        "## Model: {}, {}{}, run {}\n",
        md(&t.workload),
        md(&t.arch),
        md(&params),
        t.run
    )?;
    writeln!(
        out,
        "Primitive counts per mm call for each strategy; only the counters that\n\
         differ between strategies are tabulated.\n"
    )?;
    for c in &t.cells {
        writeln!(
            out,
            "#### {} KiB, folio {}\n",
            c.size_bytes >> 10,
            md(&c.folio)
        )?;
        for m in &c.measured {
            let phase = phase_suffix(m);
            writeln!(
                out,
                "- measured{}: {} {}, {:.1} {} (run {})",
                md(&phase),
                ns(m.median_ns),
                m.metric.per_call_unit(),
                m.ns_per_page,
                m.metric.per_page_column(),
                m.run
            )?;
        }
        let mut differ = Table::new().left("counter");
        for s in &t.strategies {
            differ = differ.right(s.as_str());
        }
        let mut differs = false;
        for r in c.counters.iter().filter(|r| r.differs) {
            let mut row = vec![r.name.clone()];
            row.extend(r.values.iter().map(|v| counter(*v)));
            differ.row(row);
            differs = true;
        }
        let same: Vec<String> = c
            .counters
            .iter()
            .filter(|r| !r.differs)
            .map(|r| {
                md(&format!(
                    "{} {}",
                    r.name,
                    counter(r.values.iter().flatten().next().copied())
                ))
            })
            .collect();
        if !same.is_empty() {
            writeln!(out, "{}", wrap("- same for all: ", &same, 78))?;
        }
        if !c.measured.is_empty() || !same.is_empty() {
            out.push('\n');
        }
        if differs {
            out.push_str(&differ.markdown());
            out.push('\n');
        } else {
            writeln!(out, "No counter differs between strategies.\n")?;
        }
    }
    Ok(())
}

/// A seed's cells across kernels: the table, ready to paste in a reply.
fn kernel_section(out: &mut String, k: &KernelSection) -> anyhow::Result<()> {
    writeln!(out, "## Seed {}: {}\n", md(&k.seed), md(&k.heading))?;
    if let Some(b) = &k.baseline {
        let text = format!(
            "Ratios (`KERNEL/BASELINE` columns): each kernel's figure over that of {}.",
            md(b)
        );
        writeln!(out, "{}\n", wrap_sep("", &words(&text), "", 78))?;
    }
    writeln!(out, "{}", k.table().markdown())?;
    Ok(())
}

/// The claims as `reproduce` closes: one table row per claim (seed, claim,
/// arch, verdict, measured vs published), then one bullet per claim with
/// its full text (a table of those would not fit 80 columns), each
/// repeated sentence said once.
fn claims(out: &mut String, claims: &[ClaimRow]) -> anyhow::Result<()> {
    use crate::view::claims::{dedup_sentences, verdict_counts, verdict_table};
    writeln!(out, "## Claims\n")?;
    writeln!(out, "{}", verdict_table(claims).markdown())?;
    writeln!(out, "{}\n", md(&verdict_counts(claims)))?;
    writeln!(out, "### Details of the claims\n")?;
    for c in claims {
        let verdict = dedup_sentences(&c.verdict);
        let why = verdict.split_once(": ").map_or("", |(_, why)| why);
        let mut text = format!(
            "[{}] {}: {}{}.",
            md(&c.seed),
            md(&c.claim),
            md(&c.word().to_uppercase()),
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", md(why))
            }
        );
        for (what, v) in [
            ("published", &c.published),
            ("measured", &c.measured),
            ("model", &c.model),
            ("predicted", &c.predicted),
        ] {
            if let Some(v) = v {
                text.push_str(&format!(" {what}: {};", md(&dedup_sentences(v))));
            }
        }
        for u in &c.uncalibrated {
            text.push_str(&format!(" {};", md(u)));
        }
        bullet(out, text.trim_end_matches(';'));
    }
    out.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::tests::fixture_model;

    #[test]
    fn the_claims_table_reads_like_the_closing_table() {
        let rows = crate::view::claims::tests::sample_claims();
        let mut out = String::new();
        claims(&mut out, &rows).unwrap();
        let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(words.matches("no kernel offered").count(), 1, "{out}");
        insta::assert_snapshot!(out);
    }

    #[test]
    fn wrapping_keeps_lines_short() {
        let items: Vec<String> = (0..30).map(|i| format!("counter_{i} {i}")).collect();
        let s = wrap("- same: ", &items, 78);
        assert!(s.lines().all(|l| l.chars().count() <= 78), "{s}");
        assert!(s.lines().skip(1).all(|l| l.starts_with("        ")));
    }

    #[test]
    fn user_text_is_escaped() {
        let mut m = fixture_model();
        let evil = "<img src=x onerror=alert(1)>";
        m.title = format!("report {evil}");
        m.runs[0].tags = vec![evil.into(), "*bold* [link](http://x)".into()];
        m.runs[0].name = evil.into();
        m.runs[0].command = "ptelab bench `rm -rf` <b>".into();
        m.workloads[0].warnings = vec![format!("note {evil}")];
        let md = String::from_utf8(render_markdown(&m).unwrap()).unwrap();
        // The only `<` outside a code span is escaped; the command keeps its
        // text inside a code span that its own backticks cannot close.
        for line in md.lines().filter(|l| !l.starts_with("- command:")) {
            for (i, _) in line.match_indices('<') {
                assert!(i > 0 && line.as_bytes()[i - 1] == b'\\', "raw tag: {line}");
            }
        }
        assert!(
            md.contains("# report \\<img src=x onerror=alert(1)>"),
            "{md}"
        );
        assert!(md.contains(
            "- tags:    \\<img src=x onerror=alert(1)>, \\*bold\\* \\[link\\](http://x)"
        ));
        assert!(md.contains("- command: `` ptelab bench `rm -rf` <b> ``"));
        assert!(md.contains("## Environment of run 2 ('\\<img src=x onerror=alert(1)>')"));
        assert!(md.contains("- note \\<img src=x"), "{md}");
    }
}
