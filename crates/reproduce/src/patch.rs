//! `ptelab patch`: a patch's figures for its cover letter, base against
//! head. The seeds whose code the patch touches (or those asked for) run
//! their guest cells on both kernels of each arch, counting the mechanism
//! under TCG; each pair of runs is stored and compared as `compare` does
//! (verdicts against each cell's guest bias, per-function and TLB changes),
//! and the tables come out in the seeds' own shape: sizes × folio sizes,
//! base, head and change, as text or Markdown for the list.

use serde::Serialize;

use super::in_guests::sweep_job;
use super::Seed;
use crate::analysis::functions::{compare_functions, FunctionsView};
use crate::analysis::{compare_runs_paired, CompareView, Normalize, Rules, VerdictKind};
use crate::error::bail_usage;
use crate::fleet::{Fleet, Job, Measured, Settings};
use crate::guest::source::cache::Cache;
use crate::guest::source::Kernel;
use crate::record::Metric;
use crate::report::view::{Axis, Plot, Point, Scale, Series, Unit};
use crate::store::Store;
use crate::text::format::{counter, signed_pct, size};
use crate::workload::{Arch, WorkloadKind};

/// Which seeds a patch runs.
#[derive(Clone, Debug, PartialEq)]
pub enum SeedChoice {
    /// Those whose code the patch touches (all, when its files are unknown).
    Auto,
    All,
    These(Vec<String>),
}

impl SeedChoice {
    /// `auto`, `all` or seed ids (`000,003`), checked against `seeds`.
    pub fn parse(words: &[String], seeds: &[Seed]) -> anyhow::Result<SeedChoice> {
        match words {
            [] => Ok(SeedChoice::Auto),
            [w] if w == "auto" => Ok(SeedChoice::Auto),
            [w] if w == "all" => Ok(SeedChoice::All),
            ids => {
                let known: Vec<&str> = seeds.iter().map(|s| s.id).collect();
                if let Some(bad) = ids.iter().find(|i| !known.contains(&i.as_str())) {
                    bail_usage!(
                        "unknown seed '{bad}' for --seeds: auto, all, or ids among {}",
                        known.join(", ")
                    );
                }
                Ok(SeedChoice::These(ids.to_vec()))
            }
        }
    }
}

/// The seeds `choice` picks, and one line saying why.
pub fn choose<'a>(
    seeds: &'a [Seed],
    choice: &SeedChoice,
    files: Option<&[String]>,
) -> (Vec<&'a Seed>, String) {
    match (choice, files) {
        (SeedChoice::These(ids), _) => (
            seeds
                .iter()
                .filter(|s| ids.iter().any(|i| i == s.id))
                .collect(),
            "the seeds asked for (--seeds)".into(),
        ),
        (SeedChoice::All, _) => (seeds.iter().collect(), "every seed (--seeds all)".into()),
        (SeedChoice::Auto, None) => (
            seeds.iter().collect(),
            "every seed: the kernels' sources do not say which files differ".into(),
        ),
        (SeedChoice::Auto, Some(files)) => {
            let chosen: Vec<&Seed> = seeds.iter().filter(|s| s.touched_by(files)).collect();
            let shown: Vec<&str> = files.iter().take(6).map(String::as_str).collect();
            let more = files.len().saturating_sub(shown.len());
            let why = format!(
                "the seeds whose code the patch touches ({} file{}: {}{})",
                files.len(),
                if files.len() == 1 { "" } else { "s" },
                shown.join(", "),
                if more > 0 {
                    format!(", and {more} more")
                } else {
                    String::new()
                }
            );
            (chosen, why)
        }
    }
}

/// One arch's base and head kernels.
pub struct Pair {
    pub arch: Arch,
    pub base: Kernel,
    pub head: Kernel,
}

/// One seed's cells of one workload on one arch: the runs stored for the
/// base and the head, or why there is none.
#[derive(Clone, Debug)]
pub struct Runs {
    pub arch: Arch,
    pub seed: &'static str,
    pub title: &'static str,
    pub workload: WorkloadKind,
    pub base: Result<i64, String>,
    pub head: Result<i64, String>,
}

/// Boot each pair's base and head once per kernel, running every chosen
/// seed's guest cells there, and store each run (command `patch`, tagged
/// with `tags` and the kernel). An arch that cannot run guests is a usage
/// error naming why, before any boot.
pub fn measure(
    seeds: &[&Seed],
    pairs: &[Pair],
    settings: &Settings,
    cache: &Cache,
    store: &Store,
    tags: &[String],
    quick: bool,
) -> anyhow::Result<Vec<Runs>> {
    let kernels: Vec<Kernel> = pairs
        .iter()
        .flat_map(|p| [p.base.clone(), p.head.clone()])
        .collect();
    let fleet = Fleet::prepare(cache, settings.clone(), &kernels)?;
    let mut planned: Vec<(usize, &Seed, WorkloadKind)> = Vec::new();
    let mut jobs: Vec<Job> = Vec::new();
    for (i, pair) in pairs.iter().enumerate() {
        let accel = fleet.accel(pair.arch).expect("prepared for every arch");
        for seed in seeds {
            for cells in &seed.guest {
                planned.push((i, seed, cells.workload));
                jobs.push(sweep_job(&kernels[2 * i], cells, accel, quick));
                jobs.push(sweep_job(&kernels[2 * i + 1], cells, accel, quick));
            }
        }
    }
    let finished = fleet.run_per_kernel(&jobs)?;
    let mut stored = finished.into_iter().zip(&jobs).map(|(done, job)| {
        let out = done
            .answer
            .map_err(|e| format!("guest {}: {e:#}", job.kernel.spec))?;
        let m = Measured::parse(&out.stdout, job.kernel, &out).map_err(|e| {
            format!(
                "guest {} exited {}: {e:#}; console log: {}",
                job.kernel.spec,
                out.exit_code,
                done.log.display()
            )
        })?;
        let id = m
            .store(store, "patch", job.kernel, tags)
            .map_err(|e| format!("storing the run of {}: {e:#}", job.kernel.spec))?;
        crate::fleet::Finished::mark_stored(&done.mark);
        Ok(id)
    });
    Ok(planned
        .into_iter()
        .map(|(i, seed, workload)| Runs {
            arch: pairs[i].arch,
            seed: seed.id,
            title: seed.title,
            workload,
            base: stored.next().expect("one per job"),
            head: stored.next().expect("one per job"),
        })
        .collect())
}

/// One seed's cells, judged: the comparison and the mechanism's changes.
#[derive(Debug, Serialize)]
pub struct Judged {
    pub arch: Arch,
    pub seed: &'static str,
    pub title: &'static str,
    pub workload: WorkloadKind,
    pub base_run: Option<i64>,
    pub head_run: Option<i64>,
    pub compare: Option<CompareView>,
    /// Per function and TLB-maintenance kind, when both runs counted the
    /// mechanism (TCG).
    pub functions: Option<FunctionsView>,
    /// Why there is no comparison, or what it lacks.
    pub notes: Vec<String>,
}

/// Compare each seed's base and head runs as `compare` does.
pub fn judge(store: &Store, runs: Vec<Runs>, labels: (&str, &str)) -> anyhow::Result<Vec<Judged>> {
    let mut out = Vec::new();
    for r in runs {
        let mut j = Judged {
            arch: r.arch,
            seed: r.seed,
            title: r.title,
            workload: r.workload,
            base_run: r.base.as_ref().ok().copied(),
            head_run: r.head.as_ref().ok().copied(),
            compare: None,
            functions: None,
            notes: Vec::new(),
        };
        let (a, b) = match (r.base, r.head) {
            (Ok(a), Ok(b)) => (store.load(a)?, store.load(b)?),
            (a, b) => {
                j.notes.extend(a.err());
                j.notes.extend(b.err());
                out.push(j);
                continue;
            }
        };
        let rules = Rules::stored(store, (&a, &b), false, Normalize::Auto, false)?;
        match compare_runs_paired(labels.0, &a, labels.1, &b, &Default::default(), &rules) {
            Ok(view) => j.compare = Some(view),
            Err(e) => j.notes.push(format!("{e:#}")),
        }
        match compare_functions((labels.0, &a), (labels.1, &b)) {
            Ok(f) if !f.cells.is_empty() => j.functions = Some(f),
            Ok(_) => {}
            Err(e) => j.notes.push(format!("mechanism: {e:#}")),
        }
        out.push(j);
    }
    Ok(out)
}

/// What the tables print: text for a terminal or plain-text mail, Markdown
/// for a web view of the list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Text,
    Markdown,
}

/// What the report says about the run as a whole.
pub struct About<'a> {
    /// Where the plots were written, as the Markdown links them (None: no
    /// plots).
    pub plots: Option<&'a str>,
    pub base: &'a str,
    pub head: &'a str,
    /// Per arch, the kernels' descriptions (`kernel fetch`'s lines).
    pub kernels: Vec<String>,
    pub chosen: &'a str,
    /// The command line that made it.
    pub command: &'a str,
    /// Mechanism functions shown per cell.
    pub top: usize,
}

fn unit(metric: Metric) -> &'static str {
    match metric {
        Metric::Instructions => "guest instructions per call (QEMU TCG, icount: a count, not time)",
        Metric::Time => "ns per call (guest under KVM)",
    }
}

/// A per-call figure as the seeds' tables print it: a whole number.
fn figure(x: f64) -> String {
    counter(Some(x.round()))
}

fn verdict_word(v: &VerdictKind) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
        .unwrap_or_else(|| format!("{v:?}"))
}

/// Rows as a table: Markdown's pipes, or columns aligned for plain text.
fn table(style: Style, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    match style {
        Style::Markdown => {
            out.push_str(&format!("| {} |\n", head.join(" | ")));
            out.push_str(&format!("|{}\n", "---|".repeat(head.len())));
            for r in rows {
                out.push_str(&format!("| {} |\n", r.join(" | ")));
            }
        }
        Style::Text => {
            let widths: Vec<usize> = (0..head.len())
                .map(|i| {
                    rows.iter()
                        .map(|r| r[i].len())
                        .chain([head[i].len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let line = |cells: Vec<&str>| {
                let padded: Vec<String> = cells
                    .iter()
                    .zip(&widths)
                    .enumerate()
                    .map(|(i, (c, w))| {
                        if i < 2 {
                            format!("{c:<w$}")
                        } else {
                            format!("{c:>w$}")
                        }
                    })
                    .collect();
                format!("  {}\n", padded.join("  ").trim_end())
            };
            out.push_str(&line(head.to_vec()));
            for r in rows {
                out.push_str(&line(r.iter().map(String::as_str).collect()));
            }
        }
    }
    out
}

/// The seed's cells as its thread shows them: one row per size and folio
/// (and phase), base, head, change and verdict.
fn cells_table(style: Style, view: &CompareView) -> String {
    let rows: Vec<Vec<String>> = view
        .rows
        .iter()
        .map(|r| {
            let side = |s: &Option<crate::analysis::SideView>| {
                s.as_ref().map_or("-".into(), |s| figure(s.median_ns))
            };
            let mut cell = size(r.size_bytes);
            if let Some(p) = &r.phase {
                cell.push_str(&format!(" {p}"));
            }
            vec![
                cell,
                r.folio.clone(),
                side(&r.a),
                side(&r.b),
                r.ratio.map_or("-".into(), |x| change(1.0, x)),
                match &r.reason {
                    Some(why) if r.ratio.is_none() => why.clone(),
                    _ => verdict_word(&r.verdict),
                },
            ]
        })
        .collect();
    table(
        style,
        &["size", "folio", "base", "head", "change", "verdict"],
        &rows,
    )
}

/// The mechanism's changes per cell: kernel instructions, TLB maintenance
/// by kind, and the functions whose instructions per call changed most,
/// each on a line of its own.
fn mechanism(style: Style, f: &FunctionsView, top: usize) -> String {
    let (bullet, sub) = match style {
        Style::Markdown => ("- ", "  - "),
        Style::Text => ("  ", "      "),
    };
    let mut out = String::new();
    for c in &f.cells {
        out.push_str(&format!(
            "{bullet}{}: kernel instructions {} → {} ({})\n",
            c.cell,
            figure(c.kernel_instructions_a),
            figure(c.kernel_instructions_b),
            change(c.kernel_instructions_a, c.kernel_instructions_b)
        ));
        let tlb: Vec<String> = c
            .tlb
            .iter()
            .filter(|t| t.a != 0.0 || t.b != 0.0)
            .map(|t| format!("{} {} → {}", t.kind, trim(t.a), trim(t.b)))
            .collect();
        out.push_str(&format!(
            "{sub}TLB maintenance: {}\n",
            if tlb.is_empty() {
                "none".into()
            } else {
                tlb.join(", ")
            }
        ));
        // A function whose change is below 0.2% of the cell's kernel
        // instructions is what a timer interrupt in a sample window moves.
        let floor = (c.kernel_instructions_a.max(c.kernel_instructions_b) * 0.002).max(1.0);
        for r in c
            .functions
            .iter()
            .filter(|r| r.instructions_change.abs() >= floor)
            .take(top)
        {
            out.push_str(&format!(
                "{sub}{}: {} → {} calls, {} instructions\n",
                r.name,
                r.entries_a.map_or("0".into(), trim),
                r.entries_b.map_or("0".into(), trim),
                signed(r.instructions_change)
            ));
        }
    }
    out
}

/// B against A as a percentage (`+83.6%`).
fn change(a: f64, b: f64) -> String {
    if a == 0.0 {
        return "new".into();
    }
    signed_pct((b / a - 1.0) * 100.0, 1)
}

/// A whole count with its sign (`+15059`).
fn signed(x: f64) -> String {
    match x >= 0.0 {
        true => format!("+{}", figure(x)),
        false => figure(x),
    }
}

/// A per-call count: whole when it is whole, else two decimals.
fn trim(x: f64) -> String {
    counter(Some(x))
}

/// The file name of a seed's plot on an arch (`003-arm64-prot-transition.svg`).
pub fn plot_name(j: &Judged) -> String {
    format!("{}-{}-{}.svg", j.seed, j.arch.name(), j.workload.name())
}

/// A seed's figures on one arch as a plot: per call against region size,
/// one colour per folio size (and phase), the base dashed, the head solid,
/// each point marked with its cell's verdict. None without a comparison.
pub fn plot(j: &Judged) -> Option<Plot> {
    let view = j.compare.as_ref()?;
    let mut keys: Vec<(String, Option<String>)> = Vec::new();
    for r in &view.rows {
        let k = (r.folio.clone(), r.phase.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut series = Vec::new();
    for (i, (folio, phase)) in keys.iter().enumerate() {
        let rows: Vec<_> = view
            .rows
            .iter()
            .filter(|r| (&r.folio, &r.phase) == (folio, phase))
            .collect();
        let label = match phase {
            Some(p) => format!("{folio} {p}"),
            None => folio.clone(),
        };
        for (side, dashed) in [("base", true), ("head", false)] {
            let points = rows
                .iter()
                .filter_map(|r| {
                    let s = if dashed { r.a.as_ref() } else { r.b.as_ref() }?;
                    Some(Point {
                        x: r.size_bytes as f64,
                        y: s.median_ns,
                        lo: None,
                        hi: None,
                        marker: (!dashed).then_some(r.verdict),
                    })
                })
                .collect();
            series.push(Series {
                label: format!("{label} ({side})"),
                color: i,
                dashed,
                points,
                gaps: Vec::new(),
            });
        }
    }
    Some(Plot {
        id: plot_name(j).trim_end_matches(".svg").to_string(),
        title: format!(
            "seed {} on {}: base (dashed) and head (solid)",
            j.seed,
            j.arch.name()
        ),
        x: Axis::sizes(),
        y: Axis {
            label: format!("{} (log10)", view.metric.per_call_words()),
            scale: Scale::Log10,
            unit: match view.metric {
                Metric::Instructions => Unit::Instructions,
                Metric::Time => Unit::Nanoseconds,
            },
        },
        series,
        reference: None,
    })
}

/// The report: what was compared, then per seed and arch the table and
/// the mechanism, then the commands that made it.
pub fn render(style: Style, about: &About, judged: &[Judged]) -> String {
    let md = style == Style::Markdown;
    let h = |level: usize, t: &str| match md {
        true => format!("{} {t}\n\n", "#".repeat(level)),
        false => format!(
            "{t}\n{}\n\n",
            if level == 1 { "=" } else { "-" }.repeat(t.chars().count())
        ),
    };
    let mut out = h(1, &format!("{} vs {}", about.base, about.head));
    out.push_str(&format!("Base: {}\nHead: {}\n", about.base, about.head));
    for k in &about.kernels {
        out.push_str(&format!("  {}\n", k.trim_end()));
    }
    out.push_str(&format!("Seeds: {}.\n\n", about.chosen));
    for j in judged {
        out.push_str(&h(
            2,
            &format!(
                "{} {} ({}, {})",
                j.seed,
                j.title,
                j.workload.name(),
                j.arch.name()
            ),
        ));
        if let Some(view) = &j.compare {
            out.push_str(&format!(
                "Figures: {}, median of each cell.\n\n",
                unit(view.metric)
            ));
            out.push_str(&cells_table(style, view));
            out.push('\n');
            if let Some(bias) = view.rows.iter().find_map(|r| r.guest_bias.as_ref()) {
                out.push_str(&format!("Judged against the guest bias ({bias}).\n\n"));
            } else if view.metric == Metric::Instructions {
                out.push_str(&format!(
                    "No guest bias is calibrated for these kernels (`ptelab calibrate --guest`): \
                     each change is judged against a noise threshold of {:.1}%.\n\n",
                    view.method.noise * 100.0
                ));
            }
        }
        if let (true, Some(dir), Some(_)) = (md, about.plots, &j.compare) {
            out.push_str(&format!(
                "![seed {} on {}]({dir}/{})\n\n",
                j.seed,
                j.arch.name(),
                plot_name(j)
            ));
        }
        if let Some(f) = &j.functions {
            out.push_str("Mechanism per call, base → head (exact counts, QEMU TCG plugin):\n\n");
            out.push_str(&mechanism(style, f, about.top));
            out.push('\n');
        }
        for n in &j.notes {
            out.push_str(&format!("Not measured: {n}\n"));
        }
        if !j.notes.is_empty() {
            out.push('\n');
        }
    }
    out.push_str(&h(2, "How these were made"));
    let fence = if md { "```\n" } else { "" };
    out.push_str(&format!("{fence}{}\n{fence}", about.command));
    out.push_str(&format!(
        "\nptelab {}; stored runs: {}.\n",
        env!("CARGO_PKG_VERSION"),
        judged
            .iter()
            .flat_map(|j| [j.base_run, j.head_run])
            .flatten()
            .map(|id| id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::functions::{CellFunctions, FunctionRow, TlbRow};
    use crate::analysis::tests::{exact_cell, guest_run, opts};
    use crate::record::Accel;
    use crate::workload::FolioSpec;

    /// Seed 003's cells on arm64, base without the change and head with
    /// it: the NONE→RW call loses its TLB invalidation.
    fn judged() -> Vec<Judged> {
        let run = |id: i64, scale: f64| {
            let cells = [(4, 1_210.0), (400, 13_785.0)]
                .map(|(kib, count)| exact_cell(kib, FolioSpec::Base, count * scale));
            guest_run(id, Accel::Tcg, cells.into())
        };
        let (a, b) = (run(1, 1.0), run(2, 0.9));
        let view = compare_runs_paired("base", &a, "head", &b, &opts(), &Rules::default()).unwrap();
        let functions = FunctionsView {
            a: "base".into(),
            b: "head".into(),
            cells: vec![CellFunctions {
                cell: "prot-transition 400K 4K (none-to-rw)".into(),
                kernel_instructions_a: 13_700.0,
                kernel_instructions_b: 12_330.0,
                tlb: vec![
                    TlbRow {
                        kind: "range".into(),
                        a: 1.0,
                        b: 0.0,
                    },
                    TlbRow {
                        kind: "dsb".into(),
                        a: 1.0,
                        b: 0.0,
                    },
                    TlbRow {
                        kind: "page".into(),
                        a: 0.0,
                        b: 0.0,
                    },
                ],
                functions: vec![
                    FunctionRow {
                        name: "__flush_tlb_range".into(),
                        entries_a: Some(1.0),
                        entries_b: None,
                        instructions_a: Some(1_370.0),
                        instructions_b: None,
                        instructions_change: -1_370.0,
                    },
                    FunctionRow {
                        name: "change_pte_range".into(),
                        entries_a: Some(1.0),
                        entries_b: Some(1.0),
                        instructions_a: Some(9_000.0),
                        instructions_b: Some(9_000.0),
                        instructions_change: 0.0,
                    },
                ],
            }],
        };
        vec![
            Judged {
                arch: Arch::Arm64,
                seed: "003",
                title:
                    "arm64/mm: Elide TLB flush in certain pte protection transitions (Dev Jain, v2)",
                workload: WorkloadKind::ProtTransition,
                base_run: Some(1),
                head_run: Some(2),
                compare: Some(view),
                functions: Some(functions),
                notes: vec![],
            },
            Judged {
                arch: Arch::X86_64,
                seed: "003",
                title:
                    "arm64/mm: Elide TLB flush in certain pte protection transitions (Dev Jain, v2)",
                workload: WorkloadKind::ProtTransition,
                base_run: Some(3),
                head_run: None,
                compare: None,
                functions: None,
                notes: vec!["guest tree:/src/linux@HEAD: QEMU exited 1".into()],
            },
        ]
    }

    fn about() -> About<'static> {
        About {
            base: "tree:/src/linux@v7.3",
            head: "tree:/src/linux@v7.3+/src/v2.mbox",
            kernels: vec!["tree:/src/linux@v7.3: …/Image (arm64, 9439877d6f08 \"base\", ptelab's config, built)".into()],
            chosen: "003, the seeds whose code the patch touches (1 file: arch/arm64/include/asm/tlbflush.h)",
            command: "ptelab patch --base tree:/src/linux@v7.3 --series /src/v2.mbox --seeds auto",
            top: 4,
            plots: Some("cover-plots"),
        }
    }

    #[test]
    fn the_cover_letter_tables_as_text_and_markdown() {
        let j = judged();
        insta::assert_snapshot!("patch_text", render(Style::Text, &about(), &j));
        insta::assert_snapshot!("patch_markdown", render(Style::Markdown, &about(), &j));
    }

    /// The plot of a judged seed: a base and a head series per folio size
    /// and phase, the head's points marked with their verdicts; drawn as
    /// one self-contained SVG.
    #[test]
    fn a_seed_plots_its_base_dashed_and_its_head_solid() {
        use crate::report::plot::{Plotter, SvgPlotter};
        let j = judged();
        let p = plot(&j[0]).unwrap();
        let labels: Vec<&str> = p.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels.len() % 2, 0, "{labels:?}");
        assert!(labels.iter().any(|l| l.ends_with("(base)")), "{labels:?}");
        assert!(p
            .series
            .iter()
            .all(|s| s.dashed == s.label.ends_with("(base)")));
        assert!(p
            .series
            .iter()
            .filter(|s| !s.dashed)
            .all(|s| s.points.iter().all(|pt| pt.marker.is_some())));
        assert_eq!(p.x.unit, Unit::Bytes);
        assert_eq!(plot_name(&j[0]), "003-arm64-prot-transition.svg");
        let svg = SvgPlotter::default().plot(&p);
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        assert!(plot(&j[1]).is_none());
    }

    #[test]
    fn auto_picks_the_seeds_whose_code_a_patch_touches() {
        let seeds = crate::seeds(true);
        let files = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ids = |f: &[&str]| {
            let files = files(f);
            let (chosen, why) = choose(&seeds, &SeedChoice::Auto, Some(&files));
            (chosen.iter().map(|s| s.id).collect::<Vec<_>>(), why)
        };
        assert_eq!(ids(&["mm/mremap.c"]).0, ["002"]);
        assert_eq!(ids(&["mm/vmscan.c", "Documentation/x.rst"]).0, ["004"]);
        // The PTE helpers every seed's path runs through.
        assert_eq!(ids(&["include/linux/pgtable.h"]).0.len(), seeds.len());
        let (none, why) = ids(&["README"]);
        assert!(none.is_empty() && why.contains("1 file: README"), "{why}");
        // Unknown files: all; asked for: those.
        assert_eq!(choose(&seeds, &SeedChoice::Auto, None).0.len(), seeds.len());
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let these = SeedChoice::parse(&words(&["003", "000"]), &seeds).unwrap();
        assert_eq!(
            choose(&seeds, &these, None)
                .0
                .iter()
                .map(|s| s.id)
                .collect::<Vec<_>>(),
            ["000", "003"]
        );
        let e = SeedChoice::parse(&words(&["007"]), &seeds).unwrap_err();
        assert!(
            crate::error::is_usage(&e) && e.to_string().contains("000, 001"),
            "{e}"
        );
        assert_eq!(
            SeedChoice::parse(&words(&["all"]), &seeds).unwrap(),
            SeedChoice::All
        );
    }
}
