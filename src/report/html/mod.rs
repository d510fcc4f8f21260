//! The report as one self-contained HTML file: the page template and style
//! sheet are compiled in (`include_str!`), plots are inline SVG drawn by a
//! [`Plotter`], and there is no script, web font or external resource, so
//! the file opens the same offline, attached to a bug or on a web server.

use std::fmt::Write;

use crate::report::phrase::{
    ci, cpu_line, flushes, histogram_text, kernel_line, layout_text, params_suffix, phase_suffix,
    ratio_ci, run_title, thp_brief, tool_line, vmas,
};
use crate::report::plot::{color, escape, Plotter, SvgPlotter};
use crate::report::view::{
    ClaimRow, ComparisonInfo, LayoutEvidence, ModelTable, ReportModel, RunInfo, Verdict,
    WorkloadSection,
};
use crate::text::format::{counter, ns, opt_ns};
use crate::workload::size::format_size;

const TEMPLATE: &str = include_str!("template.html");
const STYLE: &str = include_str!("style.css");

/// Render `model` as HTML with the default SVG plotter.
pub fn render_html(model: &ReportModel) -> anyhow::Result<Vec<u8>> {
    render_with(model, &SvgPlotter::default())
}

/// Render `model` as HTML, drawing plots with `plotter`.
pub fn render_with(model: &ReportModel, plotter: &dyn Plotter) -> anyhow::Result<Vec<u8>> {
    let mut nav = String::new();
    let mut body = String::new();

    writeln!(nav, r##"<a href="#env">Environment</a>"##)?;
    body.push_str("<section id=\"env\">\n<h2>Environment</h2>\n");
    for (i, r) in model.runs.iter().enumerate() {
        let same = model.runs[..i].iter().find(|p| p.env == r.env);
        environment(&mut body, r, same)?;
    }
    body.push_str("</section>\n");

    if let Some(c) = &model.comparison {
        writeln!(nav, r##"<a href="#comparison">Comparison</a>"##)?;
        comparison(&mut body, c)?;
    }
    for w in &model.workloads {
        let id = format!("run{}-{}", w.run, w.workload);
        writeln!(
            nav,
            r##"<a href="#{}">{} (run {})</a>"##,
            escape(&id),
            escape(&w.workload),
            w.run
        )?;
        workload(&mut body, &id, w, plotter)?;
    }
    if !model.models.is_empty() {
        writeln!(nav, r##"<a href="#model">Model</a>"##)?;
        body.push_str("<section id=\"model\">\n<h2>Model counters</h2>\n");
        body.push_str(
            "<p>Primitive counts per mm call of the executable kernel model, one column per \
             strategy; rows where the strategies differ are highlighted. Measured times of the \
             same workload, size and folio are shown beside them.</p>\n",
        );
        for t in &model.models {
            model_table(&mut body, t)?;
        }
        body.push_str("</section>\n");
    }
    if !model.claims.is_empty() {
        writeln!(nav, r##"<a href="#claims">Claims</a>"##)?;
        claims(&mut body, &model.claims)?;
    }

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
    let html = TEMPLATE
        .replace("{{style}}", STYLE.trim_end())
        .replace("{{title}}", &escape(&model.title))
        .replace("{{subtitle}}", &escape(&subtitle))
        .replace("{{generator}}", &escape(&generator))
        .replace("{{nav}}", nav.trim_end())
        .replace("{{body}}", body.trim_end());
    Ok(html.into_bytes())
}

fn kv(out: &mut String, key: &str, value: &str) -> std::fmt::Result {
    writeln!(out, "<tr><th>{}</th><td>{value}</td></tr>", escape(key))
}

/// A run's environment; `same` is an earlier run recorded on the identical
/// environment, whose table is not repeated.
/// A command line, escaped, in `<code class="cmdline">`.
fn cmdline(text: &str) -> String {
    format!("<code class=\"cmdline\">{}</code>", escape(text))
}

fn environment(out: &mut String, r: &RunInfo, same: Option<&RunInfo>) -> anyhow::Result<()> {
    let e = &r.env;
    writeln!(out, "<h3>{}</h3>", escape(&run_title(r)))?;
    out.push_str("<table class=\"kv\">\n");
    if let Some(p) = same {
        kv(
            out,
            "run",
            &escape(&format!("{}, {}, {} cells", r.kind, r.status, r.cells)),
        )?;
        kv(out, "when (UTC)", &escape(&r.started_at))?;
        kv(
            out,
            "environment",
            &escape(&format!(
                "the same as {} (kernel, CPU, THP knobs, ptelab)",
                run_title(p)
            )),
        )?;
        kv(out, "command", &cmdline(&r.command))?;
        out.push_str("</table>\n");
        return Ok(());
    }
    kv(
        out,
        "run",
        &escape(&format!("{}, {}, {} cells", r.kind, r.status, r.cells)),
    )?;
    let when = match &r.finished_at {
        Some(f) => format!("{} to {f}", r.started_at),
        None => r.started_at.clone(),
    };
    kv(out, "when (UTC)", &escape(&when))?;
    kv(out, "kernel", &escape(&kernel_line(e)))?;
    kv(out, "CPU", &escape(&cpu_line(e)))?;
    if let Some(pv) = &e.paravirt {
        kv(out, "virtualization", &escape(pv))?;
    }
    if let Some(c) = &e.kernel_cmdline {
        kv(out, "kernel cmdline", &cmdline(c))?;
    }
    if !e.thp_knobs.is_empty() {
        kv(out, "THP", &escape(&thp_brief(&e.thp_knobs).join(", ")))?;
    }
    kv(out, "ptelab", &escape(&tool_line(e)))?;
    kv(
        out,
        "machine id",
        &format!("<code>{}</code>", escape(&e.machine_id)),
    )?;
    kv(out, "command", &cmdline(&r.command))?;
    if !r.tags.is_empty() {
        kv(out, "tags", &escape(&r.tags.join(", ")))?;
    }
    out.push_str("</table>\n");
    if !e.thp_knobs.is_empty() {
        writeln!(
            out,
            "<details><summary>All {} THP/mTHP knobs (/sys/kernel/mm/transparent_hugepage)</summary>\n<table>",
            e.thp_knobs.len()
        )?;
        for k in &e.thp_knobs {
            writeln!(
                out,
                "<tr><td><code>{}</code></td><td><code>{}</code></td></tr>",
                escape(&k.name),
                escape(&k.value)
            )?;
        }
        out.push_str("</table></details>\n");
    }
    Ok(())
}

fn comparison(out: &mut String, c: &ComparisonInfo) -> anyhow::Result<()> {
    out.push_str("<section id=\"comparison\">\n<h2>Comparison</h2>\n");
    writeln!(
        out,
        "<p>Ratio = {} of run {} / baseline run {}, with its {:.0}% bootstrap confidence \
         interval ({} resamples, seed <code>{}</code>). Verdict: {} with {} correction across \
         the grid at alpha {}, noise threshold {}%: a regression needs both a significant test \
         and the whole interval above 1 + noise.</p>",
        escape(&c.statistic),
        c.b,
        c.a,
        c.confidence * 100.0,
        c.resamples,
        escape(&c.seed),
        escape(&c.test),
        escape(&c.correction),
        c.alpha,
        crate::report::compare::noise_pct(c.noise)
    )?;
    for d in c.noise_line.iter().chain(&c.drift) {
        writeln!(out, "<p>{}</p>", escape(d))?;
    }
    writeln!(
        out,
        "<p>{} cells: <span class=\"{}\">{} regressions</span>, <span class=\"{}\">{} improvements</span>, {} no change, {} not comparable.</p>",
        c.cells,
        if c.regressions > 0 { "bad" } else { "muted" },
        c.regressions,
        if c.improvements > 0 { "good" } else { "muted" },
        c.improvements,
        c.no_change,
        c.not_comparable
    )?;
    out.push_str("</section>\n");
    Ok(())
}

/// A p-value: three decimals, or scientific notation below 0.001.
fn p_text(p: f64) -> String {
    if p >= 0.001 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

fn verdict_cell(v: Verdict) -> String {
    let class = match v {
        Verdict::Regression => "bad",
        Verdict::Improvement => "good",
        Verdict::NoChange | Verdict::NotComparable => "muted",
    };
    format!("<td class=\"{class}\">{}</td>", v.text())
}

/// A stacked bar of the folio sizes seen, largest first.
/// A table cell (`<td ...>...</td>`) with `note`, escaped and muted, added
/// at its end after `sep` (HTML, not escaped).
fn cell_note(cell: &str, sep: &str, note: &str) -> String {
    cell.replace(
        "</td>",
        &format!("{sep}<span class=\"muted\">{}</span></td>", escape(note)),
    )
}

fn histogram_bar(l: &LayoutEvidence) -> String {
    let mut s = String::from("<span class=\"hbar\">");
    for (i, b) in l.histogram.iter().enumerate() {
        write!(
            s,
            "<span style=\"width:{:.1}%;background:{}\" title=\"{}\"></span>",
            b.share * 100.0,
            color(i + 2),
            escape(&format!(
                "{} x {} ({:.0}%)",
                b.count,
                b.folio,
                b.share * 100.0
            ))
        )
        .unwrap();
    }
    s.push_str("</span>");
    s
}

fn workload(
    out: &mut String,
    id: &str,
    w: &WorkloadSection,
    plotter: &dyn Plotter,
) -> anyhow::Result<()> {
    writeln!(
        out,
        "<section id=\"{}\">\n<h2>{} (seed {}), run {}</h2>",
        escape(id),
        escape(&w.workload),
        escape(&w.seed),
        w.run
    )?;
    out.push_str("<div class=\"plots\">\n");
    for p in &w.plots {
        out.push_str(&plotter.plot(p));
    }
    out.push_str("</div>\n");

    out.push_str(
        "<h3>Measured</h3>\n<p>Median nsec per call with the 95% confidence interval of the \
         median; TLB flushes per call counted from the <code>tlb:tlb_flush</code> tracepoint in \
         a separate pass; layout observed from pagemap and kpageflags.</p>\n<div class=\"series\">\n",
    );
    for s in &w.series {
        writeln!(out, "<div><h4>folio {}</h4>", escape(&s.label))?;
        out.push_str(
            "<table class=\"cells\"><tr><th class=\"n\">size_kib</th><th class=\"n\">nsec_per_call</th>\
             <th class=\"n\">95% CI</th><th class=\"n\">ns/page</th><th class=\"n\">flushes/call</th>\
             <th class=\"n\">VMAs</th><th class=\"n\">samples</th><th>layout</th></tr>\n",
        );
        for r in &s.rows {
            let lay = escape(&layout_text(&r.layout));
            let lay = if r.layout.matches || !r.layout.verified {
                lay
            } else {
                format!("<span class=\"bad\">{lay}</span>")
            };
            writeln!(
                out,
                "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{lay}</td></tr>",
                r.size_bytes >> 10,
                ns(r.median_ns),
                escape(&ci(r)),
                r.ns_per_page,
                flushes(r),
                escape(&vmas(r)),
                r.samples
            )?;
        }
        out.push_str("</table></div>\n");
    }
    out.push_str("</div>\n");

    if !w.comparison.is_empty() {
        out.push_str("<h3>Ratio to the baseline</h3>\n<div class=\"series\">\n");
        for s in &w.comparison {
            writeln!(out, "<div><h4>folio {}</h4>", escape(&s.label))?;
            out.push_str(
                "<table><tr><th class=\"n\">size_kib</th><th class=\"n\">baseline nsec</th>\
                 <th class=\"n\">run nsec</th><th class=\"n\">ratio</th><th class=\"n\">95% CI</th>\
                 <th class=\"n\">p (Holm)</th><th>verdict</th></tr>\n",
            );
            for r in &s.rows {
                let (ratio, ci) = ratio_ci(r, " to ");
                let mut verdict = verdict_cell(r.verdict);
                if let Some(why) = &r.reason {
                    verdict = cell_note(&verdict, ": ", why);
                }
                writeln!(
                    out,
                    "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{ci}</td><td class=\"n\">{}</td>{verdict}</tr>",
                    r.size_bytes >> 10,
                    opt_ns(r.baseline_ns),
                    opt_ns(r.run_ns),
                    ratio,
                    r.p_holm.map_or("-".into(), p_text),
                )?;
            }
            out.push_str("</table></div>\n");
        }
        out.push_str("</div>\n");
    }

    out.push_str(
        "<h3>Layout evidence</h3>\n<table><tr><th>folio</th><th class=\"n\">size_kib</th>\
         <th>folios seen (before the timed phase)</th><th class=\"n\">pages present</th>\
         <th class=\"n\">PMD-mapped</th><th class=\"n\">misaligned</th><th>matches</th></tr>\n",
    );
    for s in &w.series {
        for r in &s.rows {
            let l = &r.layout;
            let mut matches = match (l.verified, l.matches) {
                (false, _) => "<td class=\"muted\">unverified</td>".to_string(),
                (true, true) => "<td class=\"good\">yes</td>".to_string(),
                (true, false) => format!(
                    "<td class=\"bad\">no: {}</td>",
                    escape(l.mismatch.as_deref().unwrap_or(""))
                ),
            };
            if let Some(a) = &l.after {
                matches = cell_note(&matches, "<br>", &format!("after: {a}"));
            }
            writeln!(
                out,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}{} <span class=\"muted\">({})</span></td><td class=\"n\">{}/{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>{matches}</tr>",
                escape(&s.label),
                r.size_bytes >> 10,
                histogram_bar(l),
                escape(&histogram_text(l)),
                escape(&l.summary),
                l.pages_present,
                l.pages_total,
                format_size(l.pmd_mapped_bytes),
                l.misaligned_folios
            )?;
        }
    }
    out.push_str("</table>\n");
    if !w.warnings.is_empty() {
        writeln!(
            out,
            "<details><summary>{} warnings raised while measuring</summary><ul class=\"warnings\">",
            w.warnings.len()
        )?;
        for x in &w.warnings {
            writeln!(out, "<li>{}</li>", escape(x))?;
        }
        out.push_str("</ul></details>\n");
    }
    out.push_str("</section>\n");
    Ok(())
}

fn model_table(out: &mut String, t: &ModelTable) -> anyhow::Result<()> {
    let params = params_suffix(t);
    writeln!(
        out,
        "<h3>{}, {}{}, run {}</h3>",
        escape(&t.workload),
        escape(&t.arch),
        escape(&params),
        t.run
    )?;
    out.push_str("<div class=\"series\">\n");
    for c in &t.cells {
        writeln!(
            out,
            "<div><h4>{} KiB, folio {}</h4>",
            c.size_bytes >> 10,
            escape(&c.folio)
        )?;
        for m in &c.measured {
            let phase = phase_suffix(m);
            writeln!(
                out,
                "<p class=\"muted\">measured{}: {} ns/call, {:.1} ns/page (run {})</p>",
                escape(&phase),
                ns(m.median_ns),
                m.ns_per_page,
                m.run
            )?;
        }
        out.push_str("<table><tr><th>counter per call</th>");
        for s in &t.strategies {
            write!(out, "<th class=\"n\">{}</th>", escape(s))?;
        }
        out.push_str("</tr>\n");
        for r in &c.counters {
            write!(
                out,
                "<tr{}><td><code>{}</code></td>",
                if r.differs { " class=\"differs\"" } else { "" },
                escape(&r.name)
            )?;
            for v in &r.values {
                write!(out, "<td class=\"n\">{}</td>", counter(*v))?;
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table></div>\n");
    }
    out.push_str("</div>\n");
    Ok(())
}

fn claims(out: &mut String, claims: &[ClaimRow]) -> anyhow::Result<()> {
    out.push_str(
        "<section id=\"claims\">\n<h2>Claims</h2>\n<table><tr><th>seed</th><th>claim</th>\
         <th>published</th><th>measured here</th><th>model</th><th>verdict</th></tr>\n",
    );
    let dash = |v: &Option<String>| escape(v.as_deref().unwrap_or("-"));
    for c in claims {
        writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&c.seed),
            escape(&c.claim),
            dash(&c.published),
            dash(&c.measured),
            dash(&c.model),
            escape(&c.verdict)
        )?;
    }
    out.push_str("</table>\n</section>\n");
    Ok(())
}
