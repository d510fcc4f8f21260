//! `ptelab patch --base SPEC (--head SPEC | --series FILE.mbox)`: build or
//! fetch both kernels for every arch asked, measure the seeds the patch
//! touches on both in guests (`reproduce::patch`), store each run, compare
//! them, and print the cover letter's tables (text; `--markdown FILE` too;
//! `--json` the judged document). docs/trees.md, "A patch's tables".

use std::process::ExitCode;

use serde_json::json;

use crate::cli::patch::PatchArgs;
use crate::error::bail_usage;
use crate::fleet::{self, ProfileRequest};
use crate::guest::build::kconfig::Need;
use crate::guest::source;
use crate::report::plot::{Plotter, SvgPlotter};
use crate::reproduce::patch::{self, About, Pair, SeedChoice, Style};
use crate::reproduce::seeds;
use crate::store::Store;

pub fn run(args: &PatchArgs) -> anyhow::Result<ExitCode> {
    let (base, head) = args.specs()?;
    let arches = args.arches()?;
    let catalogue = seeds(args.quick);
    let choice = SeedChoice::parse(&args.seeds, &catalogue)?;
    let builds = base.source().builds() || head.source().builds();
    let config = args.guest.build_config(builds)?;
    if let Some(md) = &args.markdown {
        if !md
            .parent()
            .is_none_or(|d| d.as_os_str().is_empty() || d.is_dir())
        {
            bail_usage!("--markdown {}: its directory does not exist", md.display());
        }
    }
    args.cluster.check()?;
    if args.out.no_store {
        bail_usage!(
            "patch compares the runs it stores: drop --no-store (or pass --db FILE for a database of its own)"
        );
    }
    let files = base.changed_files(&head)?;
    let (chosen, why) = patch::choose(&catalogue, &choice, files.as_deref());
    if chosen.is_empty() {
        let files = files.unwrap_or_default();
        bail_usage!(
            "the patch touches none of the seeds' code ({}): pass --seeds all (or ids) to measure them anyway",
            files.join(", ")
        );
    }
    eprintln!(
        "ptelab: measuring {}: {why}",
        chosen.iter().map(|s| s.id).collect::<Vec<_>>().join(", ")
    );

    // Both kernels of every arch, built or fetched before the first boot.
    let cache = super::guest_cache(&args.cluster.exec)?;
    let need = chosen
        .iter()
        .flat_map(|s| s.guest.iter().flat_map(|g| g.sizes.iter().copied()))
        .max()
        .unwrap_or(0);
    let mut settings = super::fleet_settings(
        &args.guest,
        fleet::memory_for(need).max(1 << 30),
        crate::kernel::procfs::online_cpus() as u32,
        Vec::new(),
        Vec::new(),
    );
    settings.executing = super::executing(&args.cluster);
    if settings.profile == ProfileRequest::Off {
        settings.profile = ProfileRequest::WhereTcg;
    }
    // The seeds' cells, with the mechanism counted (kernel functions named).
    let needs: std::collections::BTreeSet<_> = chosen
        .iter()
        .flat_map(|s| &s.guest)
        .flat_map(|g| Need::of(g.workload, &g.folios, true))
        .collect();
    let mut pairs = Vec::new();
    let mut kernels = Vec::new();
    for &arch in &arches {
        let opts = source::Options {
            arch: Some(arch),
            mirror: args.guest.mirror.clone(),
            interrupted: crate::kernel::signals::interrupted(),
            config: config.clone(),
            needs: needs.clone(),
        };
        let both = fleet::builds::resolve(
            &cache,
            &[base.clone(), head.clone()],
            &opts,
            &settings.executing,
        )?;
        kernels.extend(both.iter().map(|k| k.line.clone()));
        let [b, h]: [_; 2] = both.try_into().expect("two kernels");
        pairs.push(Pair {
            arch,
            base: b,
            head: h,
        });
    }
    if chosen.iter().any(|s| {
        s.guest
            .iter()
            .any(|g| g.workload == crate::workload::WorkloadKind::Reclaim)
    }) {
        crate::guest::boot::disk::find_mkfs()?;
    }
    let store = Store::open(&args.out.db)?;
    let mut tags = args.out.tags.clone();
    tags.push("patch".into());
    let runs = patch::measure(
        &chosen, &pairs, &settings, &cache, &store, &tags, args.quick,
    )?;
    let (base_label, head_label) = (base.to_string(), head.to_string());
    let judged = patch::judge(&store, runs, (&base_label, &head_label))?;

    // The plots go beside the Markdown that links them: cover.md's in
    // cover-plots/.
    let plots = args.markdown.as_ref().map(|md| {
        let stem = md
            .file_stem()
            .map_or("patch".into(), |s| s.to_string_lossy().to_string());
        (
            md.with_file_name(format!("{stem}-plots")),
            format!("{stem}-plots"),
        )
    });
    let command: Vec<String> = std::env::args().collect();
    let about = About {
        base: &base_label,
        head: &head_label,
        kernels,
        chosen: &format!(
            "{}, {why}",
            chosen.iter().map(|s| s.id).collect::<Vec<_>>().join(", ")
        ),
        command: &shell_words(&command),
        top: args.top,
        plots: plots.as_ref().map(|(_, link)| link.as_str()),
    };
    if let Some((dir, _)) = &plots {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        for j in &judged {
            if let Some(p) = patch::plot(j) {
                let file = dir.join(patch::plot_name(j));
                std::fs::write(&file, SvgPlotter::default().plot(&p))
                    .map_err(|e| anyhow::anyhow!("writing {}: {e}", file.display()))?;
            }
        }
    }
    if let Some(md) = &args.markdown {
        std::fs::write(md, patch::render(Style::Markdown, &about, &judged))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", md.display()))?;
        eprintln!("ptelab: wrote {}", md.display());
    }
    if args.out.json {
        super::print_json(&json!({
            "schema": "ptelab/patch/v1",
            "base": base_label,
            "head": head_label,
            "seeds": about.chosen,
            "judged": judged,
        }))?;
    } else {
        super::print_text(&patch::render(Style::Text, &about, &judged))?;
    }
    let measured = judged.iter().filter(|j| j.compare.is_some()).count();
    Ok(if measured == judged.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The command line as a shell would take it back, with any password of a
/// database URL masked: words with anything but `[A-Za-z0-9_./:@,+=-]`
/// single-quoted.
fn shell_words(words: &[String]) -> String {
    let safe = |w: &str| {
        !w.is_empty()
            && w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./:@,+=-".contains(c))
    };
    let mut out: Vec<String> = words
        .iter()
        .map(|w| crate::text::redact::redact(w))
        .map(|w| match safe(&w) {
            true => w,
            false => format!("'{}'", w.replace('\'', r"'\''")),
        })
        .collect();
    if let Some(first) = out.first_mut() {
        *first = "ptelab".into();
    }
    out.join(" ")
}
