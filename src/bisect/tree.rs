//! Bisect over a git tree: `git bisect` in the user's tree picks each
//! commit; ptelab builds it (`build`), boots it through the fleet,
//! measures and marks it good or bad, or skips it when it does not build,
//! boot or classify. The tree is put back as found on every exit
//! (`git::Bisecting`).

use crate::error::bail_usage;
use crate::guest::source::{self, Kernel, KernelSpec};

use super::build::{short, Builder};
use super::classify::Verdict;
use super::git::{Bisecting, Next, Repo};
use super::{bisect_id, endpoints, probe_step, Found, Prober, Report, Role, Setup, Step};

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
        let repo = Repo::open(repo)?;
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

/// Build the commit checked out, resolved as a guest kernel.
fn kernel(setup: &Setup, plan: &Plan, commit: &str) -> anyhow::Result<Result<Kernel, String>> {
    let image = match plan.builder.build(commit)? {
        Ok(i) => i,
        Err(why) => return Ok(Err(why)),
    };
    let opts = source::Options {
        arch: Some(plan.builder.arch),
        mirror: None,
        interrupted: crate::kernel::signals::interrupted(),
    };
    match KernelSpec::parse(&image.display().to_string())?.resolve(setup.cache, &opts) {
        Ok(k) => Ok(Ok(k)),
        Err(e) => Ok(Err(format!("the build's image was refused: {e:#}"))),
    }
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
    let endpoint = |c: &str, name: &str| -> anyhow::Result<Kernel> {
        bisecting.checkout(c)?;
        match kernel(setup, plan, c)? {
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
        let step = match kernel(setup, plan, &commit)? {
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
