//! `ptelab kernel fetch|list`: guest kernels in the user's cache
//! (docs/guests.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::{json, Value};

use super::{print_json, print_text};
use crate::cli::kernel::{KernelArgs, KernelCommand, KernelFetchArgs, KernelListArgs};
use crate::guest::source::cache::{Cache, Cached};
use crate::guest::source::debian::{self, Offer};
use crate::guest::source::fetch::{self, Resolved};
use crate::guest::KernelSpec;
use crate::workload::Arch;

pub fn run(args: &KernelArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        KernelCommand::Fetch(a) => fetch_cmd(a),
        KernelCommand::List(a) if a.available => available_cmd(a),
        KernelCommand::List(a) => list_cmd(a),
    }
}

fn arch_flag(raw: &Option<String>) -> anyhow::Result<Option<Arch>> {
    raw.as_deref().map(Arch::parse_flag).transpose()
}

fn fetch_cmd(a: &KernelFetchArgs) -> anyhow::Result<ExitCode> {
    let arch = arch_flag(&a.arch)?;
    // Every spec is checked before anything is downloaded.
    let specs = a
        .specs
        .iter()
        .map(|s| KernelSpec::parse(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(m) = &a.mirror {
        fetch::mirror(Some(m))?;
    }
    let cache = Cache::from_env()?;
    let opts = fetch::Options {
        arch,
        mirror: a.mirror.clone(),
        interrupted: crate::kernel::thp::interrupted(),
    };
    let mut docs = Vec::new();
    let mut text = String::new();
    for spec in &specs {
        let r = fetch::resolve(&cache, spec, &opts)?;
        docs.push(resolved_json(spec, &r));
        text.push_str(&resolved_line(spec, &r));
    }
    if a.json {
        print_json(&docs)?;
    } else {
        print_text(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn resolved_json(spec: &KernelSpec, r: &Resolved) -> Value {
    match r {
        Resolved::Debian { entry, fetched } => json!({
            "spec": spec.to_string(),
            "source": "debian",
            "fetched": fetched,
            "image": entry.image(),
            "config": entry.config(),
            "modules": entry.modules(),
            "manifest": entry.manifest,
        }),
        Resolved::Image(img) => json!({
            "spec": spec.to_string(),
            "source": "image",
            "image": img.image,
            "arch": img.arch,
            "sha256": img.sha256,
            "config": img.config,
        }),
    }
}

fn resolved_line(spec: &KernelSpec, r: &Resolved) -> String {
    match r {
        Resolved::Debian { entry, fetched } => {
            let m = &entry.manifest;
            format!(
                "{spec}: {} ({}, {} {}, sha256 {}, {})\n",
                entry.image().display(),
                m.arch,
                m.package.name,
                m.package.version,
                m.sha256,
                if *fetched { "fetched" } else { "cached" }
            )
        }
        Resolved::Image(img) => format!(
            "{spec}: {} ({}, own build, sha256 {}, config {})\n",
            img.image.display(),
            img.arch,
            img.sha256,
            img.config
                .as_ref()
                .map_or("none".to_string(), |c| c.display().to_string())
        ),
    }
}

fn list_cmd(a: &KernelListArgs) -> anyhow::Result<ExitCode> {
    let arch = arch_flag(&a.arch)?;
    let cache = Cache::from_env()?;
    let entries: Vec<Cached> = cache
        .entries()?
        .into_iter()
        .filter(|c| arch.is_none_or(|a| c.manifest.arch == a))
        .collect();
    if a.json {
        let docs: Vec<Value> = entries
            .iter()
            .map(|c| json!({ "image": c.image(), "intact": c.intact(), "manifest": c.manifest }))
            .collect();
        print_json(&docs)?;
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        print_text(&format!(
            "no cached kernels in {} (fetch one: ptelab kernel fetch debian:6.17.13)\n",
            cache.kernels().display()
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Row> = entries
        .iter()
        .map(|c| Row {
            cached: c.clone(),
            intact: c.intact(),
        })
        .collect();
    print_text(&render_cached(&rows))?;
    Ok(ExitCode::SUCCESS)
}

struct Row {
    cached: Cached,
    intact: bool,
}

/// The cache as a table (one row per kernel; a changed image is marked).
fn render_cached(rows: &[Row]) -> String {
    let header = [
        "version",
        "arch",
        "flavour",
        "package",
        "package version",
        "sha256",
        "path",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            let m = &r.cached.manifest;
            [
                m.version.clone(),
                m.arch.to_string(),
                m.flavour.to_string(),
                m.package.name.clone(),
                m.package.version.clone(),
                if r.intact {
                    m.sha256.clone()
                } else {
                    format!("{} (image changed: refetched on use)", m.sha256)
                },
                r.cached.image().display().to_string(),
            ]
        })
        .collect();
    let mut width = header.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let mut line = |cols: &[&str]| {
        let mut l = String::new();
        for (i, c) in cols.iter().enumerate() {
            if i + 1 == cols.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = width[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &cells {
        line(&row.iter().map(String::as_str).collect::<Vec<_>>());
    }
    out
}

fn available_cmd(a: &KernelListArgs) -> anyhow::Result<ExitCode> {
    let arch = match arch_flag(&a.arch)? {
        Some(a) => a,
        None => Arch::host().ok_or_else(|| {
            crate::error::usage("this host is neither x86_64 nor arm64: pass --arch x86_64|arm64")
        })?,
    };
    let cache = Cache::from_env()?;
    let (offers, mirror) = fetch::available(&cache, arch, a.mirror.as_deref())?;
    if a.json {
        print_json(&available_json(&offers, arch, &mirror))?;
    } else {
        print_text(&render_available(&offers, arch, &mirror))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn available_json(offers: &[Offer], arch: Arch, mirror: &str) -> Value {
    let flavours: BTreeMap<String, Vec<String>> = debian::by_flavour(offers, arch)
        .into_iter()
        .map(|(f, vs)| (f.to_string(), vs.iter().map(|v| v.to_string()).collect()))
        .collect();
    json!({
        "arch": arch,
        "mirror": mirror,
        "suites": debian::SUITES,
        "flavours": flavours,
    })
}

fn render_available(offers: &[Offer], arch: Arch, mirror: &str) -> String {
    let mut out = format!(
        "Debian kernels for {arch} at {mirror} ({}):\n",
        debian::SUITES.join(", ")
    );
    let by = debian::by_flavour(offers, arch);
    if by.is_empty() {
        out.push_str("  none\n");
    }
    for (f, vs) in by {
        let vs: Vec<String> = vs.iter().map(|v| v.to_string()).collect();
        let _ = writeln!(out, "  {:<8} {}", f.to_string(), vs.join(" "));
    }
    out.push_str("fetch one: ptelab kernel fetch debian:VERSION[-FLAVOUR] --arch ARCH\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::source::spec::Flavour;

    fn row(release: &str, intact: bool) -> Row {
        let mut manifest = crate::guest::source::cache::tests::manifest(release);
        manifest.package.version = format!("{}-1~bpo13+1", manifest.version);
        manifest.packages = vec![manifest.package.clone()];
        manifest.mirror = "http://deb.debian.org/debian".into();
        manifest.config = Some("config".into());
        manifest.modules = Some("modules".into());
        manifest.sha256 = format!(
            "{:064x}",
            Offer::from_release(release).unwrap().version.patch.unwrap()
        );
        manifest.size = 1;
        manifest.fetched_at = "2026-11-23T13:00:00Z".into();
        Row {
            cached: Cached {
                dir: format!("/home/u/.cache/ptelab/kernels/{release}").into(),
                manifest,
            },
            intact,
        }
    }

    #[test]
    fn the_cache_table() {
        insta::assert_snapshot!(render_cached(&[
            row("6.16.12+deb13-cloud-amd64", true),
            row("6.17.13+deb13-cloud-arm64", false),
        ]));
    }

    #[test]
    fn the_offers_list() {
        let offers: Vec<Offer> = [
            "6.16.12+deb13-cloud-amd64",
            "6.17.13+deb13-cloud-amd64",
            "6.17.13+deb13-amd64",
            "6.17.13+deb13-cloud-arm64",
        ]
        .iter()
        .filter_map(|r| Offer::from_release(r))
        .collect();
        insta::assert_snapshot!(render_available(
            &offers,
            Arch::X86_64,
            "http://deb.debian.org/debian"
        ));
        let j = available_json(&offers, Arch::Arm64, "m");
        assert_eq!(j["flavours"][Flavour::Cloud.name()], json!(["6.17.13"]));
    }
}
