//! Bisect over released kernels: the versions Debian offers between two
//! endpoints (same flavour and arch), each fetched through the kernel
//! cache when the search reaches it. No build: the time is the guests'.

use crate::error::bail_usage;
use crate::guest::source::{self, KernelSpec, Offered, Version, Versions};
use crate::workload::Arch;

use super::{bisect_id, endpoints, probe_step, search, Found, Prober, Report, Setup};

/// The source, exact version, line and arch a `--good`/`--bad` spec names.
fn exact(
    flag: &str,
    spec: &KernelSpec,
    arch: Option<Arch>,
) -> anyhow::Result<(&'static dyn Versions, Version, String, Arch)> {
    let Some(src) = spec.versions() else {
        bail_usage!(
            "{flag} {spec} is an image: without --repo, bisect walks Debian's versions \
             (e.g. --good debian:6.16.12 --bad debian:6.17.13); with --repo it takes commits"
        );
    };
    let version = src.version(spec);
    if version.patch.is_none() {
        bail_usage!("{flag} {spec} names no exact version: pass one with its patch level, e.g. debian:6.16.12");
    }
    let (line, arch) = src.line(spec, arch)?;
    Ok((src, version, line, arch))
}

/// The endpoints, checked: exact versions of one source, line and arch,
/// good older than bad.
pub struct Endpoints {
    pub source: &'static dyn Versions,
    pub good: Version,
    pub bad: Version,
    /// Debian: the flavour.
    pub line: String,
    pub arch: Arch,
}

/// Check the endpoints: exact versions of one source, line (Debian: flavour)
/// and arch, good older than bad.
pub fn check(good: &KernelSpec, bad: &KernelSpec, arch: Option<Arch>) -> anyhow::Result<Endpoints> {
    let (src, g, gf, ga) = exact("--good", good, arch)?;
    let (bsrc, b, bf, ba) = exact("--bad", bad, arch)?;
    if src.title() != bsrc.title() || (&gf, ga) != (&bf, ba) {
        bail_usage!(
            "--good {good} ({gf}, {ga}) and --bad {bad} ({bf}, {ba}) differ in flavour or arch: \
             bisect between kernels of one flavour and arch"
        );
    }
    if g == b {
        bail_usage!("--good and --bad are the same version {g}: nothing to bisect");
    }
    if g > b {
        bail_usage!(
            "--good {g} is newer than --bad {b}: the endpoints are in the wrong order; \
             pass the older, good version as --good"
        );
    }
    Ok(Endpoints {
        source: src,
        good: g,
        bad: b,
        line: gf,
        arch: ga,
    })
}

/// The offered versions of `line` from `good` to `bad`, both included,
/// oldest first.
pub fn between(
    src: &dyn Versions,
    offered: &Offered,
    good: Version,
    bad: Version,
    line: &str,
) -> anyhow::Result<Vec<Version>> {
    let all = offered.line(line);
    for v in [good, bad] {
        if !all.contains(&v) {
            return Err(src.not_offered(offered, v, line));
        }
    }
    Ok(all
        .iter()
        .copied()
        .filter(|v| *v >= good && *v <= bad)
        .collect())
}

/// Bisect the versions a source offers from `good` to `bad`.
pub fn run(
    setup: &Setup,
    good: &KernelSpec,
    bad: &KernelSpec,
    arch_flag: Option<Arch>,
    mirror: Option<&str>,
) -> anyhow::Result<Report> {
    let Endpoints {
        source: src,
        good: g,
        bad: b,
        line: flavour,
        arch,
    } = check(good, bad, arch_flag)?;
    let opts = source::Options {
        arch: Some(arch),
        mirror: mirror.map(String::from),
        interrupted: crate::kernel::signals::interrupted(),
        config: crate::guest::build::Config::Ptelab,
        needs: Default::default(),
    };
    let offered = src.offered(setup.cache, arch, &opts, true)?;
    let list = between(src, &offered, g, b, &flavour)?;
    eprintln!(
        "ptelab: {} offers {} versions from {g} to {b} ({flavour}, {arch}): {}",
        src.title(),
        list.len(),
        list.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let kernel = |v: Version| {
        eprintln!("ptelab: kernel {}:{v} …", good.source().name());
        src.at(good, v).resolve(setup.cache, &opts)
    };
    let id = bisect_id(
        &[
            "versions",
            &g.to_string(),
            &b.to_string(),
            &flavour,
            arch.name(),
            &setup.args.join(" "),
            &format!("{:?}", setup.settings.accel),
            &setup.replicates.map_or(String::new(), |r| r.to_string()),
        ],
        setup.counter.as_ref(),
        setup.phase.as_deref(),
    );
    let (kg, kb) = (kernel(g)?, kernel(b)?);
    let mut prober = Prober::new(
        setup,
        &kg,
        &id,
        &format!("{good}..{bad} -- {}", setup.words.join(" ")),
    )?;
    let (classifier, mut steps) = endpoints(
        &mut prober,
        (&g.to_string(), &kg, None),
        (&b.to_string(), &kb, None),
        "",
    )?;
    let outcome = search::bisect(list.len(), |i| {
        let v = list[i];
        let step = probe_step(&mut prober, &classifier, &v.to_string(), None, &kernel(v)?)?;
        let verdict = step.verdict.clone();
        steps.push(step);
        Ok(verdict)
    })?;
    Ok(Report {
        id,
        kind: "versions",
        repo: None,
        good: good.to_string(),
        bad: bad.to_string(),
        arch,
        command: setup.words.clone(),
        phase: setup.phase.clone(),
        invocation: setup.invocation.clone(),
        classifier,
        steps,
        first_bad: (outcome.last_good + 1..=outcome.first_bad)
            .map(|i| Found {
                id: list[i].to_string(),
                subject: None,
            })
            .collect(),
        last_good: list[outcome.last_good].to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::source::debian::Offer;
    use crate::guest::source::fetch;

    fn offer(v: &str, flavour: &str) -> Offer {
        Offer::from_release(&format!("{v}+deb13-{flavour}")).unwrap()
    }

    #[test]
    fn the_versions_between_are_listed_oldest_first() {
        let offers: Vec<Offer> = ["6.16.3", "6.16.12", "6.17.8", "6.17.13", "6.18.1"]
            .iter()
            .flat_map(|v| [offer(v, "cloud-amd64"), offer(v, "cloud-arm64")])
            .chain([offer("6.17.10", "amd64")])
            .collect();
        let v = |s: &str| Version::parse(s).unwrap();
        let offered = fetch::offered(&offers, Arch::X86_64, "m".into());
        let between = |g, b| between(&fetch::Debian, &offered, g, b, "cloud");
        let list = between(v("6.16.12"), v("6.17.13")).unwrap();
        assert_eq!(list, [v("6.16.12"), v("6.17.8"), v("6.17.13")]);
        let e = between(v("6.16.11"), v("6.17.13")).unwrap_err();
        assert!(e.to_string().contains("nearest offered"), "{e}");
    }

    #[test]
    fn endpoints_must_be_exact_ordered_and_alike() {
        let s = |x: &str| KernelSpec::parse(x).unwrap();
        let a = Some(Arch::X86_64);
        assert!(check(&s("debian:6.16.12"), &s("debian:6.17.13"), a).is_ok());
        for (g, b, needle) in [
            ("debian:6.17.13", "debian:6.16.12", "wrong order"),
            ("debian:6.17.13", "debian:6.17.13", "same version"),
            ("debian:6.16", "debian:6.17.13", "no exact version"),
            (
                "debian:6.16.12",
                "debian:6.17.13-generic",
                "differ in flavour",
            ),
            ("/boot/vmlinuz", "debian:6.17.13", "is an image"),
        ] {
            let Err(e) = check(&s(g), &s(b), a) else {
                panic!("{g} {b} passed")
            };
            assert!(crate::error::is_usage(&e), "{g} {b}");
            assert!(e.to_string().contains(needle), "{g} {b}: {e}");
        }
    }
}
