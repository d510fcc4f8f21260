//! Bisect over released kernels: the versions Debian offers between two
//! endpoints (same flavour and arch), each fetched through the kernel
//! cache when the search reaches it. No build: the time is the guests'.

use std::collections::BTreeSet;

use crate::error::bail_usage;
use crate::fleet::Kernel;
use crate::guest::source::debian::{Apt, Offer, INDEX_MAX_AGE};
use crate::guest::source::fetch;
use crate::guest::source::spec::{Flavour, Version};
use crate::guest::KernelSpec;
use crate::workload::Arch;

use super::{bisect_id, endpoints, probe_step, search, Found, Prober, Report, Setup};

/// The exact Debian version, flavour and arch a `--good`/`--bad` spec names.
fn exact(
    flag: &str,
    spec: &KernelSpec,
    arch: Option<Arch>,
) -> anyhow::Result<(Version, Flavour, Arch)> {
    let KernelSpec::Debian {
        version, flavour, ..
    } = spec
    else {
        bail_usage!(
            "{flag} {spec} is an image: without --repo, bisect walks Debian's versions \
             (e.g. --good debian:6.16.12 --bad debian:6.17.13); with --repo it takes commits"
        );
    };
    if version.patch.is_none() {
        bail_usage!("{flag} {spec} names no exact version: pass one with its patch level, e.g. debian:6.16.12");
    }
    Ok((*version, *flavour, spec.debian_arch(arch)?))
}

/// Check the endpoints: exact Debian versions of one flavour and arch,
/// good older than bad.
pub fn check(
    good: &KernelSpec,
    bad: &KernelSpec,
    arch: Option<Arch>,
) -> anyhow::Result<(Version, Version, Flavour, Arch)> {
    let (g, gf, ga) = exact("--good", good, arch)?;
    let (b, bf, ba) = exact("--bad", bad, arch)?;
    if (gf, ga) != (bf, ba) {
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
    Ok((g, b, gf, ga))
}

/// The offered versions from `good` to `bad`, both included, oldest first.
pub fn between(
    offers: &[Offer],
    good: Version,
    bad: Version,
    flavour: Flavour,
    arch: Arch,
) -> anyhow::Result<Vec<Version>> {
    let all: BTreeSet<Version> = offers
        .iter()
        .filter(|o| o.flavour == flavour && o.arch == arch)
        .map(|o| o.version)
        .collect();
    for v in [good, bad] {
        if !all.contains(&v) {
            return Err(fetch::not_offered(offers, v, flavour, arch));
        }
    }
    Ok(all
        .into_iter()
        .filter(|v| *v >= good && *v <= bad)
        .collect())
}

/// What Debian offers: the cached index when it is fresh, else updated.
fn offers(setup: &Setup, arch: Arch, mirror: Option<&str>) -> anyhow::Result<Vec<Offer>> {
    let m = fetch::mirror(mirror)?;
    let apt = Apt::new(&setup.cache.apt(), &m, arch);
    if apt.index_age().is_some_and(|a| a < INDEX_MAX_AGE) {
        let _lock = setup.cache.lock()?;
        return apt.offers();
    }
    Ok(fetch::available(setup.cache, arch, mirror)?.0)
}

/// Bisect the Debian versions from `good` to `bad`.
pub fn run(
    setup: &Setup,
    good: &KernelSpec,
    bad: &KernelSpec,
    arch_flag: Option<Arch>,
    mirror: Option<&str>,
) -> anyhow::Result<Report> {
    let (g, b, flavour, arch) = check(good, bad, arch_flag)?;
    let list = between(&offers(setup, arch, mirror)?, g, b, flavour, arch)?;
    eprintln!(
        "ptelab: Debian offers {} versions from {g} to {b} ({flavour}, {arch}): {}",
        list.len(),
        list.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let spec_arch = match good {
        KernelSpec::Debian { arch, .. } => *arch,
        KernelSpec::Image(_) => None,
    };
    let opts = fetch::Options {
        arch: Some(arch),
        mirror: mirror.map(String::from),
        interrupted: crate::kernel::signals::interrupted(),
    };
    let kernel = |v: Version| {
        eprintln!("ptelab: kernel debian:{v} …");
        Kernel::resolve(
            setup.cache,
            KernelSpec::Debian {
                version: v,
                flavour,
                arch: spec_arch,
            },
            &opts,
        )
    };
    let id = bisect_id(&[
        "versions",
        &g.to_string(),
        &b.to_string(),
        flavour.name(),
        arch.name(),
        &setup.args.join(" "),
        &format!("{:?}", setup.settings.accel),
        &setup.replicates.map_or(String::new(), |r| r.to_string()),
    ]);
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
        let list = between(
            &offers,
            v("6.16.12"),
            v("6.17.13"),
            Flavour::Cloud,
            Arch::X86_64,
        )
        .unwrap();
        assert_eq!(list, [v("6.16.12"), v("6.17.8"), v("6.17.13")]);
        let e = between(
            &offers,
            v("6.16.11"),
            v("6.17.13"),
            Flavour::Cloud,
            Arch::X86_64,
        )
        .unwrap_err();
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
            let e = check(&s(g), &s(b), a).unwrap_err();
            assert!(crate::error::is_usage(&e), "{g} {b}");
            assert!(e.to_string().contains(needle), "{g} {b}: {e}");
        }
    }
}
