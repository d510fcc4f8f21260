//! The mechanism counters (`vm --profile`) as a person reads them: a cell's
//! TLB invalidations and top functions (`show`), and the per-function
//! changes between two runs (`compare --functions`) as text, Markdown for a
//! mail, or JSON.

use std::fmt::Write as _;

use super::compare::Format;
use crate::analysis::functions::{FunctionRow, FunctionsView};
use crate::record::Profile;
use crate::text::format::counter;
use crate::text::table::Table;

/// Functions a report lists and draws per cell.
pub const REPORT_TOP: usize = 12;

/// A horizontal bar per function: its change in instructions per call,
/// right of the zero line for more, left for fewer (self-contained SVG).
pub fn bars_svg(rows: &[FunctionRow], top: usize) -> String {
    use crate::text::table::html_escape;
    let rows: Vec<&FunctionRow> = rows.iter().take(top).collect();
    let (label_w, plot_w, row_h, pad) = (260.0, 420.0, 22.0, 8.0);
    let max = rows
        .iter()
        .map(|r| r.instructions_change.abs())
        .fold(0.0, f64::max)
        .max(1.0);
    let zero = label_w + plot_w / 2.0;
    let scale = (plot_w / 2.0 - 60.0) / max;
    let height = pad * 2.0 + row_h * rows.len() as f64 + 18.0;
    let width = label_w + plot_w + pad;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bars\" width=\"{width}\" \
         height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"change in instructions per call, per kernel function\" \
         font-family=\"sans-serif\" font-size=\"12\">"
    );
    for (i, r) in rows.iter().enumerate() {
        let y = pad + row_h * i as f64;
        let d = r.instructions_change;
        let w = (d.abs() * scale).max(1.0);
        let (x, colour, anchor, tx) = if d >= 0.0 {
            (zero, "#c0392b", "start", zero + w + 4.0)
        } else {
            (zero - w, "#1e8449", "end", zero - w - 4.0)
        };
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>\
             <text x=\"{tx:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            label_w - 6.0,
            y + 15.0,
            html_escape(&r.name),
            y + 4.0,
            row_h - 8.0,
            y + 15.0,
            signed(d)
        ));
    }
    let bottom = pad + row_h * rows.len() as f64;
    svg.push_str(&format!(
        "<line x1=\"{zero}\" y1=\"{pad}\" x2=\"{zero}\" y2=\"{bottom}\" stroke=\"#333\"/>\
         <text x=\"{zero}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">\
         change in guest instructions per call (B - A)</text></svg>",
        bottom + 15.0
    ));
    svg
}

/// What a column says for a cell nothing was counted for (a host or KVM
/// run, or a guest run without `--profile`): never 0.
pub const NOT_COUNTED: &str = "not counted";

/// Two decimals are all a per-call count needs.
fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| counter(Some(round(v))))
}

/// `cr3-write 0.5, dsb 2` (kinds seen, per call), or `none`.
fn tlb_line(p: &Profile) -> String {
    if p.tlb.is_empty() {
        return "none".into();
    }
    p.tlb
        .iter()
        .map(|(k, v)| format!("{k} {}", counter(Some(round(*v)))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A cell's counters: a summary line, then its `top` functions.
pub fn cell_text(label: &str, p: &Profile, top: usize) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "{label}: kernel {} + user {} instructions per call; TLB per call: {} \
         (invalidations {}); median of {} windows (largest window off by {:.1}%)",
        counter(Some(round(p.kernel_instructions))),
        counter(Some(round(p.user_instructions))),
        tlb_line(p),
        counter(Some(round(p.tlb_invalidations()))),
        p.windows,
        p.max_window_deviation * 100.0
    )
    .unwrap();
    for part in &p.parts {
        writeln!(
            out,
            "  {} calls: kernel {} + user {} instructions per call; TLB invalidations {}",
            part.phase,
            counter(Some(round(part.kernel_instructions))),
            counter(Some(round(part.user_instructions))),
            counter(Some(round(part.tlb_invalidations()))),
        )
        .unwrap();
    }
    let mut t = Table::new()
        .left("function")
        .right("entries/call")
        .right("instr/call");
    for f in p.functions.iter().take(top) {
        t.row([
            f.name.clone(),
            counter(Some(round(f.entries))),
            counter(Some(round(f.instructions))),
        ]);
    }
    for line in t.text("  ").lines() {
        writeln!(out, "  {line}").unwrap();
    }
    if p.functions.len() > top {
        writeln!(out, "{}", more(p.functions.len() - top, "")).unwrap();
    }
    out
}

/// A change with its sign: `+1650`, `-9000`, `0`.
fn signed(v: f64) -> String {
    let v = round(v);
    let s = counter(Some(v.abs()));
    match v {
        v if v > 0.0 => format!("+{s}"),
        v if v < 0.0 => format!("-{s}"),
        _ => s,
    }
}

/// `1 more function`, `3 more functions`.
fn more(n: usize, hint: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("  … {n} more function{s}{hint}")
}

fn change_pct(r: &FunctionRow) -> String {
    match r.instructions_a {
        Some(a) if a > 0.0 => crate::text::format::signed_pct(100.0 * r.instructions_change / a, 1),
        _ => "new".into(),
    }
}

/// Per function: entries and instructions per call on each side, the change.
pub fn diff_table(rows: &[FunctionRow], top: usize) -> Table {
    let mut t = Table::new()
        .left("function")
        .right("entries A")
        .right("entries B")
        .right("instr A")
        .right("instr B")
        .right("Δ instr")
        .right("change");
    for r in rows.iter().take(top) {
        let gone = r.instructions_b.is_none();
        t.row([
            r.name.clone(),
            opt(r.entries_a),
            opt(r.entries_b),
            opt(r.instructions_a),
            opt(r.instructions_b),
            signed(r.instructions_change),
            if gone { "gone".into() } else { change_pct(r) },
        ]);
    }
    t
}

/// `compare A B --functions` in `format`; `top` functions per cell.
pub fn render_functions(view: &FunctionsView, format: Format, top: usize) -> String {
    if let Format::Json = format {
        let doc = serde_json::json!({
            "schema": "ptelab/compare-functions/v1",
            "unit": "guest instructions per call (QEMU TCG plugin, exact counts)",
            "comparison": view,
        });
        return serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n";
    }
    let md = matches!(format, Format::Markdown);
    let mut out = String::new();
    let unit = "per mm call, counted exactly by ptelab's QEMU plugin in TCG guests \
                (median over sample windows); instructions are guest instructions, not time";
    if md {
        writeln!(
            out,
            "### Kernel functions: {} (A) vs {} (B)\n\n{unit}.\n",
            view.a, view.b
        )
        .unwrap();
    } else {
        writeln!(
            out,
            "kernel functions: {} (A) vs {} (B)\n{unit}\n",
            view.a, view.b
        )
        .unwrap();
    }
    for c in &view.cells {
        let tlb = c
            .tlb
            .iter()
            .map(|t| {
                format!(
                    "{} {} -> {}",
                    t.kind,
                    counter(Some(round(t.a))),
                    counter(Some(round(t.b)))
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let head = format!(
            "{}: kernel instructions {} -> {}; TLB per call: {}",
            c.cell,
            counter(Some(round(c.kernel_instructions_a))),
            counter(Some(round(c.kernel_instructions_b))),
            if tlb.is_empty() { "none".into() } else { tlb }
        );
        let t = diff_table(&c.functions, top);
        if md {
            writeln!(out, "**{head}**\n\n{}", t.markdown()).unwrap();
        } else {
            writeln!(out, "{head}").unwrap();
            for line in t.text("  ").lines() {
                writeln!(out, "  {line}").unwrap();
            }
        }
        if c.functions.len() > top {
            writeln!(out, "{}", more(c.functions.len() - top, " (--top)")).unwrap();
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::functions::{diff, CellFunctions, TlbRow};
    use crate::record::FunctionCount;

    fn profile(fs: &[(&str, f64, f64)], tlb: &[(&str, f64)]) -> Profile {
        Profile {
            windows: 37,
            kernel_instructions: fs.iter().map(|f| f.2).sum(),
            user_instructions: 42.07,
            tlb: tlb.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            functions: fs
                .iter()
                .map(|&(n, e, i)| FunctionCount {
                    name: n.into(),
                    entries: e,
                    instructions: i,
                })
                .collect(),
            symbols: "the guest's /proc/kallsyms (130781 text symbols)".into(),
            max_window_deviation: 0.0041,
            parts: Vec::new(),
        }
    }

    fn view() -> FunctionsView {
        let a = profile(
            &[
                ("change_protection", 1.0, 9000.0),
                ("vm_normal_page", 50.0, 1650.0),
            ],
            &[("cr3-write", 0.5)],
        );
        let b = profile(
            &[
                ("change_pte_range", 1.0, 15059.0),
                ("prot_commit_flush_ptes", 100.0, 14400.0),
                ("vm_normal_page", 100.0, 3300.0),
            ],
            &[("cr3-write", 0.5)],
        );
        FunctionsView {
            a: "debian:6.16.12".into(),
            b: "debian:6.17.8".into(),
            cells: vec![CellFunctions {
                cell: "mprotect-toggle 400K 4K".into(),
                kernel_instructions_a: a.kernel_instructions,
                kernel_instructions_b: b.kernel_instructions,
                tlb: vec![TlbRow {
                    kind: "cr3-write".into(),
                    a: 0.5,
                    b: 0.5,
                }],
                functions: diff(&a, &b),
            }],
        }
    }

    #[test]
    fn the_function_diff_reads_well() {
        insta::assert_snapshot!(
            "functions_text",
            render_functions(&view(), Format::Text, 10)
        );
        insta::assert_snapshot!(
            "functions_markdown",
            render_functions(&view(), Format::Markdown, 3)
        );
        let json: serde_json::Value =
            serde_json::from_str(&render_functions(&view(), Format::Json, 10)).unwrap();
        assert_eq!(json["schema"], "ptelab/compare-functions/v1");
        assert_eq!(
            json["comparison"]["cells"][0]["functions"][0]["name"],
            "change_pte_range"
        );
    }

    #[test]
    fn bars_go_right_for_more_and_left_for_fewer() {
        let v = view();
        let svg = bars_svg(&v.cells[0].functions, 10);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert!(svg.contains(">change_pte_range</text>") && svg.contains(">+15059</text>"));
        assert!(svg.contains(">-9000</text>"), "{svg}");
        // Red bars start at the zero line; the green one ends there.
        assert_eq!(svg.matches("fill=\"#c0392b\"").count(), 3);
        assert_eq!(svg.matches("fill=\"#1e8449\"").count(), 1);
        let bad = bars_svg(
            &[FunctionRow {
                name: "<b>".into(),
                entries_a: None,
                entries_b: None,
                instructions_a: None,
                instructions_b: Some(1.0),
                instructions_change: 1.0,
            }],
            1,
        );
        assert!(bad.contains("&lt;b&gt;") && !bad.contains("<b>"), "{bad}");
        // The report's HTML has the section when the view is set.
        let mut model = crate::view::ReportBuilder::new("t").build();
        model.functions = Some(v);
        let html = String::from_utf8(crate::html::render_html(&model).unwrap()).unwrap();
        assert!(html.contains("<section id=\"functions\">") && html.contains("class=\"bars\""));
        let md = String::from_utf8(crate::markdown::render_markdown(&model).unwrap()).unwrap();
        assert!(md.contains("### Kernel functions"), "{md}");
    }

    #[test]
    fn a_cell_profile_reads_well() {
        let p = profile(
            &[
                ("change_pte_range", 1.0, 15059.0),
                ("vm_normal_page", 100.0, 3300.0),
            ],
            &[("cr3-write", 0.5), ("dsb", 2.0)],
        );
        insta::assert_snapshot!("cell_profile", cell_text("mprotect-toggle 400K 4K", &p, 1));
    }

    /// A toggle cell counted by direction shows each direction's line.
    #[test]
    fn a_cell_profile_with_directions_reads_well() {
        let mut p = profile(&[("change_pte_range", 1.0, 15059.0)], &[("invlpg", 0.5)]);
        p.parts = [("none-to-rw", 14000.0, 0.0), ("rw-to-none", 16118.0, 1.0)]
            .map(|(phase, kernel, invlpg)| crate::record::ProfilePart {
                phase: phase.into(),
                kernel_instructions: kernel,
                user_instructions: 42.07,
                tlb: [("invlpg".to_string(), invlpg)].into(),
                functions: Vec::new(),
            })
            .to_vec();
        insta::assert_snapshot!(
            "cell_profile_directions",
            cell_text("mprotect-toggle 400K 4K", &p, 1)
        );
    }
}
