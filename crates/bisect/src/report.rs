//! A bisect's result for a person: the step table on the terminal, and a
//! Markdown report in the shape of a linux-mm regression mail (seed 001's):
//! test description, "bisected to", the figures before and after, every
//! step, how to reproduce it with ptelab. Figures are in the run's metric:
//! instructions per call under TCG, never called time, or the mechanism
//! counter followed, in its own unit.

use crate::text::table::Table;

use super::classify::Verdict;
use super::{Found, Report, Role, Step};
use crate::guest::build::short;

fn label(r: &Report, id: &str) -> String {
    if r.kind == "git" {
        short(id).to_string()
    } else {
        id.to_string()
    }
}

fn cell(s: &Step) -> String {
    s.measurement.as_ref().map_or("-".into(), |m| {
        m.figures
            .iter()
            .map(|&f| m.quantity.number(f))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The measurement: the bench command, and the phase followed of one that
/// measures several.
fn measured(r: &Report) -> String {
    match &r.phase {
        Some(p) => format!("`{}`, phase {p},", r.command.join(" ")),
        None => format!("`{}`", r.command.join(" ")),
    }
}

fn what(r: &Report) -> &'static str {
    if r.kind == "git" {
        "commit"
    } else {
        "version"
    }
}

/// Every step: endpoints first, then in the order measured.
pub fn steps_table(r: &Report) -> Table {
    let mut t = Table::new().left("step").left(what(r));
    if r.kind == "git" {
        t = t.left("subject").max_width(48);
    }
    t = t.right(r.quantity().column()).left("verdict");
    let mut n = 0;
    for s in &r.steps {
        let step = match s.role {
            Role::Good => "good".to_string(),
            Role::Bad => "bad".to_string(),
            Role::Step => {
                n += 1;
                n.to_string()
            }
        };
        let mut row = vec![step, label(r, &s.id)];
        if r.kind == "git" {
            row.push(s.subject.clone().unwrap_or_default());
        }
        row.push(cell(s));
        row.push(format!(
            "{}{}",
            s.verdict.word(),
            if s.resumed { " (resumed)" } else { "" }
        ));
        t.row(row);
    }
    t
}

fn skips(r: &Report) -> String {
    r.steps
        .iter()
        .filter_map(|s| match &s.verdict {
            Verdict::Skip(why) => Some(format!("skipped {}: {why}\n", label(r, &s.id))),
            _ => None,
        })
        .collect()
}

fn found(r: &Report) -> String {
    let name = |f: &Found| match &f.subject {
        Some(s) => format!("{} (\"{s}\")", label(r, &f.id)),
        None => label(r, &f.id),
    };
    match r.first_bad.as_slice() {
        [one] => format!("first bad {}: {}", what(r), name(one)),
        many => format!(
            "the first bad {} is one of (skipped steps left them undecided): {}",
            what(r),
            many.iter().map(name).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The terminal report.
pub fn text(r: &Report) -> String {
    let c = &r.classifier;
    let q = r.quantity();
    let mut out = format!(
        "bisect {}: {} in {} guests, {}\nthreshold {} between good {} and bad {}\n\n",
        r.id,
        measured(r),
        r.arch,
        q.how(),
        q.with_unit(c.threshold),
        q.number(c.good),
        q.number(c.bad)
    );
    out.push_str(&steps_table(r).text("  "));
    out.push_str(&skips(r));
    out.push('\n');
    out.push_str(&found(r));
    out.push_str(&format!(
        "\nlast good {}: {}\n",
        what(r),
        label(r, &r.last_good)
    ));
    out
}

fn before_after(r: &Report, id: &str) -> Option<String> {
    let s = r.step(id)?;
    let m = s.measurement.as_ref()?;
    let mut t = Table::new().right("size_kib").right(r.quantity().column());
    t.row([
        (m.size_bytes / 1024).to_string(),
        m.quantity.number(super::classify::median(&m.figures)),
    ]);
    let title = match (&s.subject, r.kind) {
        (Some(sub), "git") => format!("{} (\"{sub}\"), Linux {}", short(id), m.release),
        _ => format!("{id}, Linux {}", m.release),
    };
    Some(format!("{title}\n\n{}", t.text(" | ")))
}

/// The Markdown report (`--markdown FILE`).
pub fn markdown(r: &Report) -> String {
    let q = r.quantity();
    let mut out = String::new();
    let range = match &r.repo {
        Some(repo) => format!(
            "{} ({}) and {} ({}) of the tree {}",
            r.good,
            short(&r.steps[0].id),
            r.bad,
            short(&r.steps[1].id),
            repo.display()
        ),
        None => format!("Debian's kernels {} and {}", r.good, r.bad),
    };
    out.push_str(&format!(
        "## Test description\n\n`ptelab {}`{} measured in QEMU {} guests, \
        one bench cell per guest run: {}.\n\nWe bisected between {range}.\n\n",
        r.command.join(" "),
        r.phase
            .as_ref()
            .map_or(String::new(), |p| format!(" (its {p} phase)")),
        r.arch,
        q.how()
    ));
    out.push_str(&format!("## Bisected to\n\n{}\n\n", found(r)));
    out.push_str(&format!("## Results ({})\n\n", q.words()));
    for id in std::iter::once(&r.last_good).chain(r.first_bad.iter().map(|f| &f.id).take(1)) {
        if let Some(t) = before_after(r, id) {
            out.push_str(&format!("{t}\n"));
        }
    }
    out.push_str(&format!(
        "## Steps\n\nThreshold {} (good {}, bad {}); endpoints first, then in the order measured.\n\n",
        q.with_unit(r.classifier.threshold),
        q.number(r.classifier.good),
        q.number(r.classifier.bad)
    ));
    out.push_str(&steps_table(r).markdown());
    let sk = skips(r);
    if !sk.is_empty() {
        out.push_str(&format!("\n{sk}"));
    }
    out.push_str(&format!(
        "\n## How to reproduce\n\n```\n{}\n```\n",
        r.invocation
    ));
    let stored = r.steps.iter().any(|s| {
        s.measurement
            .as_ref()
            .is_some_and(|m| !m.run_ids.is_empty())
    });
    if stored {
        out.push_str(&format!(
            "\nEvery guest run is stored in ptelab's database with the tag `bisect:{}` \
             (`ptelab runs`, `ptelab show`).\n",
            r.id
        ));
    }
    out
}

#[cfg(test)]
pub mod tests {
    use super::super::classify::{Classifier, Quantity};
    use super::super::state::Measurement;
    use super::*;
    use crate::record::{Counter, Metric};
    use crate::workload::Arch;

    fn step(role: Role, id: &str, subject: Option<&str>, f: Option<f64>, v: Verdict) -> Step {
        Step {
            role,
            id: id.into(),
            subject: subject.map(String::from),
            measurement: f.map(|f| Measurement {
                figures: vec![f],
                quantity: Quantity::figure(Metric::Instructions),
                release: format!("{}+test", &id[..id.len().min(7)]),
                size_bytes: 4 << 20,
                run_ids: vec![1],
            }),
            verdict: v,
            resumed: false,
        }
    }

    pub fn fixture(kind: &'static str) -> Report {
        let git = kind == "git";
        let id = |v: &str, c: &str| {
            if git {
                c.repeat(40 / c.len())
            } else {
                v.to_string()
            }
        };
        let subj = |s: &'static str| git.then_some(s);
        let (good, bad, mid, skip) = (
            id("6.16.12", "aa"),
            id("6.17.13", "bb"),
            id("6.17.8", "cc"),
            id("6.17.1", "dd"),
        );
        Report {
            id: "0123456789ab".into(),
            kind,
            repo: git.then(|| "/src/linux".into()),
            good: if git { "v6.16" } else { "debian:6.16.12" }.into(),
            bad: if git { "v6.17-rc1" } else { "debian:6.17.13" }.into(),
            arch: Arch::X86_64,
            command: "bench mprotect-toggle --size 4M --folio 4K".split(' ').map(String::from).collect(),
            phase: None,
            invocation: "ptelab bisect --good debian:6.16.12 --bad debian:6.17.13 -- bench mprotect-toggle --size 4M --folio 4K".into(),
            classifier: Classifier { good: 370_670.0, bad: 880_412.0, threshold: 625_541.0, quantity: Quantity::figure(Metric::Instructions) },
            steps: vec![
                step(Role::Good, &good, subj("v6.16"), Some(370_670.0), Verdict::Good),
                step(Role::Bad, &bad, subj("v6.17-rc1"), Some(880_412.0), Verdict::Bad),
                step(Role::Step, &skip, subj("mm: something that does not build"), None, Verdict::Skip("the build failed; log /c/build.log".into())),
                step(Role::Step, &mid, subj("mm: optimize mprotect() by PTE batching"), Some(880_401.0), Verdict::Bad),
            ],
            first_bad: vec![Found {
                id: mid.clone(),
                subject: subj("mm: optimize mprotect() by PTE batching").map(String::from),
            }],
            last_good: good,
        }
    }

    #[test]
    fn the_step_table_and_report_read_right() {
        for kind in ["versions", "git"] {
            let r = fixture(kind);
            let t = text(&r);
            assert!(t.contains("instr_per_call") && !t.contains("nsec"), "{t}");
            insta::assert_snapshot!(format!("text_{kind}"), t);
            insta::assert_snapshot!(format!("markdown_{kind}"), markdown(&r));
        }
    }

    /// A Debian bisect of `calls:vm_normal_page` (seed 001's folio lookup
    /// per PTE, 100 PTEs a call): 6.17.1 left in between.
    fn counter_fixture() -> Report {
        let q = Quantity {
            metric: Metric::Instructions,
            counter: Some(Counter::parse("calls:vm_normal_page").unwrap()),
        };
        let mut r = fixture("versions");
        r.command = "bench mprotect-toggle --size 400K --folio 4K"
            .split(' ')
            .map(String::from)
            .collect();
        r.invocation = "ptelab bisect --good debian:6.16.12 --bad debian:6.17.13 --metric \
             calls:vm_normal_page -- bench mprotect-toggle --size 400K --folio 4K"
            .into();
        r.classifier = Classifier::new(&[0.0], &[100.0], q.clone(), 0.02, None).unwrap();
        for (s, f) in r.steps.iter_mut().zip([0.0, 100.0, 0.0, 100.0]) {
            if let Some(m) = &mut s.measurement {
                m.figures = vec![f];
                m.quantity = q.clone();
                m.size_bytes = 400 << 10;
            }
        }
        r
    }

    /// Seed 003's arm64 change: the TLBIs of a NONE->RW call, one phase
    /// of prot-transition's two.
    #[test]
    fn the_phase_followed_is_named() {
        let mut r = fixture("versions");
        r.command = "bench prot-transition --size 4K --folio 4K"
            .split(' ')
            .map(String::from)
            .collect();
        r.phase = Some("none-to-rw".into());
        let t = text(&r);
        assert!(
            t.contains(
                "`bench prot-transition --size 4K --folio 4K`, phase none-to-rw, in x86_64 guests"
            ),
            "{t}"
        );
        let md = markdown(&r);
        assert!(
            md.contains("--folio 4K` (its none-to-rw phase) measured"),
            "{md}"
        );
        assert_eq!(serde_json::to_value(&r).unwrap()["phase"], "none-to-rw");
        assert!(serde_json::to_value(fixture("versions"))
            .unwrap()
            .get("phase")
            .is_none());
    }

    #[test]
    fn a_counter_reads_in_its_own_unit() {
        let r = counter_fixture();
        let t = text(&r);
        assert!(
            t.contains("vm_normal_page calls/call") && !t.contains("instr_per_call"),
            "{t}"
        );
        insta::assert_snapshot!("text_versions_counter", t);
        let md = markdown(&r);
        assert!(
            md.contains("## Results (entries into vm_normal_page per call)"),
            "{md}"
        );
        insta::assert_snapshot!("markdown_versions_counter", md);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["classifier"]["counter"], "calls:vm_normal_page");
        assert_eq!(
            json["steps"][1]["measurement"]["counter"],
            "calls:vm_normal_page"
        );
    }
}
