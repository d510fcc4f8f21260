//! `ptelab kernel fetch|list`: guest kernels in the user's cache
//! (docs/guests.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::{json, Value};

use super::{print_json, print_text};
use crate::cli::kernels::{KernelArgs, KernelCommand, KernelFetchArgs, KernelListArgs};
use crate::guest::source::cache::{Cache, Cached};
use crate::guest::source::{self, Offered};
use crate::workload::Arch;

pub fn run(args: &KernelArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        KernelCommand::Fetch(a) => fetch_cmd(a),
        KernelCommand::List(a) if a.available => available_cmd(a),
        KernelCommand::List(a) => list_cmd(a),
    }
}

fn fetch_cmd(a: &KernelFetchArgs) -> anyhow::Result<ExitCode> {
    let arch = a.guest_arch()?;
    // Every spec is checked before anything is downloaded.
    let specs = a.kernel_specs()?;
    let config = crate::cli::vm::build_config(
        a.config.as_deref(),
        a.defconfig,
        specs.iter().any(|s| s.source().builds()),
    )?;
    let opts = source::Options {
        arch,
        mirror: a.mirror.clone(),
        interrupted: crate::kernel::thp::interrupted(),
        config,
        needs: Default::default(),
    };
    for src in source::SOURCES {
        src.check(&opts)?;
    }
    let cache = Cache::from_env()?;
    let mut docs = Vec::new();
    let mut text = String::new();
    for spec in &specs {
        let k = spec.resolve(&cache, &opts)?;
        docs.push(k.json);
        text.push_str(&k.line);
    }
    if a.json {
        print_json(&docs)?;
    } else {
        print_text(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn list_cmd(a: &KernelListArgs) -> anyhow::Result<ExitCode> {
    let arch = a.guest_arch()?;
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
    let arch = match a.guest_arch()? {
        Some(a) => a,
        None => Arch::host().ok_or_else(|| {
            crate::error::usage("this host is neither x86_64 nor arm64: pass --arch x86_64|arm64")
        })?,
    };
    let cache = Cache::from_env()?;
    let opts = source::Options {
        arch: Some(arch),
        mirror: a.mirror.clone(),
        interrupted: crate::kernel::thp::interrupted(),
        config: crate::guest::build::Config::Ptelab,
        needs: Default::default(),
    };
    let offered = source::listing().offered(&cache, arch, &opts, false)?;
    if a.json {
        print_json(&available_json(&offered))?;
    } else {
        print_text(&render_available(&offered))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn available_json(offered: &Offered) -> Value {
    let flavours: BTreeMap<&str, Vec<String>> = offered
        .lines
        .iter()
        .map(|(f, vs)| (f.as_str(), vs.iter().map(|v| v.to_string()).collect()))
        .collect();
    let mut doc = offered.json.clone();
    doc.insert("arch".into(), json!(offered.arch));
    doc.insert("mirror".into(), json!(offered.from));
    doc.insert("flavours".into(), json!(flavours));
    Value::Object(doc)
}

fn render_available(offered: &Offered) -> String {
    let mut out = format!("{}:\n", offered.heading);
    if offered.lines.is_empty() {
        out.push_str("  none\n");
    }
    for (f, vs) in &offered.lines {
        let vs: Vec<String> = vs.iter().map(|v| v.to_string()).collect();
        let _ = writeln!(out, "  {f:<8} {}", vs.join(" "));
    }
    out.push_str(&offered.hint);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::source::debian::Offer;
    use crate::guest::source::fetch;
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
        insta::assert_snapshot!(render_available(&fetch::offered(
            &offers,
            Arch::X86_64,
            "http://deb.debian.org/debian".into()
        )));
        let j = available_json(&fetch::offered(&offers, Arch::Arm64, "m".into()));
        assert_eq!(j["flavours"][Flavour::Cloud.name()], json!(["6.17.13"]));
    }
}
