//! Bisect over a git tree: `git bisect` in the user's tree picks each
//! commit; ptelab builds it (`build`; with `--executor slurm` as Slurm
//! tasks, `fleet::builds`, the endpoints together), boots it through the
//! fleet, measures and marks it good or bad, or skips it when it does not
//! build, boot or classify. The tree is put back as found on every exit
//! (`git::Bisecting`).

use std::path::PathBuf;

use crate::error::bail_usage;
use crate::fleet::slurm::Request;
use crate::guest::source::{self, Kernel, KernelSpec};

use super::classify::Verdict;
use super::git::{Bisecting, Next, Repo};
use super::{bisect_id, endpoints, probe_step, Found, Prober, Report, Role, Setup, Step};
use crate::fleet::builds;
use crate::guest::build::{path_hash, short, Builder, Checkout};

/// The tree and endpoints, checked before anything is checked out.
pub struct Plan {
    pub repo: Repo,
    pub good: String,
    pub bad: String,
    pub good_name: String,
    pub bad_name: String,
    pub builder: Builder,
}

impl Plan {
    pub fn check(
        repo: &std::path::Path,
        good: &str,
        bad: &str,
        mut builder: Builder,
    ) -> anyhow::Result<Plan> {
        let repo = Repo::open(repo, "--repo")?;
        repo.check_usable()?;
        let (g, b) = (repo.commit("--good", good)?, repo.commit("--bad", bad)?);
        repo.check_order(&g, &b, (good, bad))?;
        builder.repo = repo.dir.clone();
        builder.check()?;
        Ok(Plan {
            repo,
            good: g,
            bad: b,
            good_name: good.to_string(),
            bad_name: bad.to_string(),
            builder,
        })
    }
}

/// An image (or why there is none) resolved as a guest kernel.
fn kernel(
    setup: &Setup,
    plan: &Plan,
    image: Result<PathBuf, String>,
) -> anyhow::Result<Result<Kernel, String>> {
    let image = match image {
        Ok(i) => i,
        Err(why) => return Ok(Err(why)),
    };
    let opts = source::Options {
        arch: Some(plan.builder.arch),
        mirror: None,
        interrupted: crate::kernel::signals::interrupted(),
        config: plan.builder.config.clone(),
        needs: plan.builder.needs.clone(),
    };
    match KernelSpec::parse(&image.display().to_string())?.resolve(setup.cache, &opts) {
        Ok(k) => Ok(Ok(k)),
        Err(e) => Ok(Err(format!("the build's image was refused: {e:#}"))),
    }
}

/// With `--executor slurm`: the images of `commits`, cached or built by the
/// tasks of one job array. The first to build does so in the tree (checked
/// out there), in the build directory a local bisect keeps, so later steps
/// build incrementally on it as they do locally; each other one in a work
/// tree of its own under the cache (`builds/trees/`), since one tree holds
/// one commit and one build directory serves one build at a time.
fn slurm_images(
    setup: &Setup,
    req: &Request,
    plan: &Plan,
    bisecting: &Bisecting,
    commits: &[&str],
) -> anyhow::Result<Vec<Result<PathBuf, String>>> {
    let mut images: Vec<Option<Result<PathBuf, String>>> = Vec::new();
    let mut builds = Vec::new();
    for &c in commits {
        let cached = plan.builder.cached(c)?;
        if cached.is_none() {
            let builder = if builds.is_empty() {
                bisecting.checkout(c)?;
                plan.builder.clone()
            } else {
                let dir = plan.builder.root.join("trees").join(format!(
                    "{}-{}",
                    path_hash(&plan.repo.dir),
                    builds.len()
                ));
                plan.builder.in_tree(&plan.repo.worktree(&dir, c)?.dir)
            };
            builds.push(Checkout::new(c.to_string(), c.to_string(), builder));
        }
        images.push(cached.map(Ok));
    }
    let mut built = if builds.is_empty() {
        Vec::new()
    } else {
        builds::build(&setup.cache.root, req, &builds)?
    }
    .into_iter();
    Ok(images
        .into_iter()
        .map(|i| i.unwrap_or_else(|| built.next().expect("one per build")))
        .collect())
}

/// Bisect `plan`'s commits.
pub fn run(setup: &Setup, plan: &Plan) -> anyhow::Result<Report> {
    let repo = &plan.repo;
    let n = repo.candidates(&plan.good, &plan.bad)?;
    let id = bisect_id(
        &[
            "git",
            &repo.dir.display().to_string(),
            &plan.good,
            &plan.bad,
            &plan.builder.key()?,
            &setup.args.join(" "),
            &format!("{:?}", setup.settings.accel),
            &setup.replicates.map_or(String::new(), |r| r.to_string()),
        ],
        setup.counter.as_ref(),
        setup.phase.as_deref(),
    );
    eprintln!(
        "ptelab: bisecting {} commits from {} to {} in {} (about {} steps after the endpoints)",
        n,
        plan.good_name,
        plan.bad_name,
        repo.dir.display(),
        (n as f64).log2().ceil()
    );
    let bisecting = Bisecting::start(repo)?;
    let subject = |c: &str| repo.subject(c).ok();
    // Through Slurm the endpoints build together; locally each in turn.
    let mut ends = match &setup.slurm {
        Some(req) => slurm_images(setup, req, plan, &bisecting, &[&plan.good, &plan.bad])?,
        None => Vec::new(),
    }
    .into_iter();
    let mut endpoint = |c: &str, name: &str| -> anyhow::Result<Kernel> {
        let image = match ends.next() {
            Some(image) => image,
            None => {
                bisecting.checkout(c)?;
                plan.builder
                    .build(c, crate::kernel::signals::interrupted())?
            }
        };
        match kernel(setup, plan, image)? {
            Ok(k) => Ok(k),
            Err(why) => bail_usage!("{name} ({}) gave no kernel to measure: {why}", short(c)),
        }
    };
    let kg = endpoint(&plan.good, &format!("--good {}", plan.good_name))?;
    let kb = endpoint(&plan.bad, &format!("--bad {}", plan.bad_name))?;
    let about = format!(
        "{} {}..{} -- {}",
        repo.dir.display(),
        plan.good_name,
        plan.bad_name,
        setup.words.join(" ")
    );
    let mut prober = Prober::new(setup, &kg, &id, &about)?;
    let (classifier, mut steps) = endpoints(
        &mut prober,
        (&plan.good, &kg, subject(&plan.good)),
        (&plan.bad, &kb, subject(&plan.bad)),
        " (does the config boot in a QEMU guest? it needs a serial console and initramfs support)",
    )?;
    bisecting.mark("bad", &plan.bad)?;
    let mut next = bisecting.mark("good", &plan.good)?;
    let first_bad = loop {
        let commit = match next {
            Next::Test(c) => c,
            Next::Found(c) => break vec![c],
            Next::OnlySkipped(cs) => break cs,
        };
        // Checked out by `git bisect`.
        let image = match &setup.slurm {
            Some(req) => slurm_images(setup, req, plan, &bisecting, &[&commit])?
                .pop()
                .expect("one commit"),
            None => plan
                .builder
                .build(&commit, crate::kernel::signals::interrupted())?,
        };
        let step = match kernel(setup, plan, image)? {
            Ok(k) => probe_step(&mut prober, &classifier, &commit, subject(&commit), &k)?,
            Err(why) => {
                eprintln!("ptelab: {}: skip ({why})", short(&commit));
                Step {
                    role: Role::Step,
                    id: commit.clone(),
                    subject: subject(&commit),
                    measurement: None,
                    verdict: Verdict::Skip(why),
                    resumed: false,
                }
            }
        };
        next = bisecting.mark(step.verdict.word(), &commit)?;
        steps.push(step);
    };
    let last_good = steps
        .iter()
        .rev()
        .filter(|s| s.verdict == Verdict::Good)
        .map(|s| s.id.clone())
        .find(|c| {
            repo.git(&["merge-base", "--is-ancestor", c, &first_bad[0]])
                .is_ok()
        })
        .unwrap_or_else(|| plan.good.clone());
    drop(bisecting);
    Ok(Report {
        id,
        kind: "git",
        repo: Some(repo.dir.clone()),
        good: plan.good_name.clone(),
        bad: plan.bad_name.clone(),
        arch: plan.builder.arch,
        command: setup.words.clone(),
        phase: setup.phase.clone(),
        invocation: setup.invocation.clone(),
        classifier,
        steps,
        first_bad: first_bad
            .iter()
            .map(|c| Found {
                id: c.clone(),
                subject: subject(c),
            })
            .collect(),
        last_good,
    })
}
