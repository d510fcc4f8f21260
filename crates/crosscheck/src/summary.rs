//! What a crosscheck found, in a few numbers: read from its JSON document
//! (`ptelab crosscheck --json`, schema [`super::SCHEMA`]), on this machine or
//! brought back from a guest (`ptelab vm -- crosscheck` always asks the guest
//! for it; with `vm --json` each `guests[].output` is one).

use std::fmt::Write as _;

use anyhow::{bail, Context};
use serde::Deserialize;
use serde_json::Value;

use super::Row;

/// The fields of a crosscheck document a summary needs.
#[derive(Deserialize)]
struct Doc {
    schema: String,
    kernel: String,
    arch: String,
    strategy: String,
    #[serde(default)]
    strategy_kernel: String,
    #[serde(default)]
    strategy_reason: String,
    #[serde(default)]
    skipped: Vec<String>,
    rows: Vec<Row>,
}

/// One row that did not match, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// `workload size folio / scenario / observable`.
    pub what: String,
    pub kernel: String,
    pub model: String,
    pub note: Option<String>,
}

/// The counts of one crosscheck.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The kernel's release (`uname -r`).
    pub kernel: String,
    pub arch: String,
    /// The model strategy it was held to, and why.
    pub strategy: String,
    pub strategy_reason: String,
    /// Rows compared or shown.
    pub rows: usize,
    /// Rows where kernel and model agree.
    pub matched: usize,
    /// Rows the kernel gives no way to observe (neither match nor mismatch).
    pub unobservable: usize,
    /// Observables of the unobservable rows, each once (e.g. `tlb flushes`).
    pub unobservable_kinds: Vec<String>,
    pub mismatched: Vec<Mismatch>,
    /// Cells and scenarios not run, with why.
    pub skipped: Vec<String>,
}

impl Summary {
    /// Summarize one crosscheck document.
    pub fn from_json(doc: &Value) -> anyhow::Result<Summary> {
        let d: Doc =
            serde_json::from_value(doc.clone()).context("not a crosscheck result document")?;
        if d.schema != super::SCHEMA {
            bail!(
                "the document has schema '{}', not {}",
                d.schema,
                super::SCHEMA
            );
        }
        let mut s = Summary {
            kernel: d.kernel,
            arch: d.arch,
            strategy: d.strategy,
            strategy_reason: d.strategy_reason,
            rows: d.rows.len(),
            matched: 0,
            unobservable: 0,
            unobservable_kinds: Vec::new(),
            mismatched: Vec::new(),
            skipped: d.skipped,
        };
        for r in &d.rows {
            if r.unobservable {
                s.unobservable += 1;
                if !s.unobservable_kinds.contains(&r.observable) {
                    s.unobservable_kinds.push(r.observable.clone());
                }
            } else if r.matches {
                s.matched += 1;
            } else {
                s.mismatched.push(Mismatch {
                    what: format!(
                        "{} {} {} / {} / {}",
                        r.workload,
                        crate::text::format::size(r.size_bytes),
                        r.folio,
                        r.scenario,
                        r.observable
                    ),
                    kernel: r.kernel.clone(),
                    model: r.model.clone(),
                    note: r.note.clone(),
                });
            }
        }
        Ok(s)
    }

    /// Rows that could be compared (matched or not).
    pub fn observable(&self) -> usize {
        self.rows - self.unobservable
    }

    /// Every observable row matched (and there was at least one).
    pub fn all_match(&self) -> bool {
        self.mismatched.is_empty() && self.matched > 0
    }

    /// One line: `470/470 rows match on x86_64 6.17.13+deb13-cloud-amd64
    /// (model strategy batched)`, plus what was not observable.
    pub fn line(&self) -> String {
        let mut out = format!(
            "{}/{} rows match on {} {} (model strategy {})",
            self.matched,
            self.observable(),
            self.arch,
            self.kernel,
            self.strategy
        );
        if self.unobservable > 0 {
            let _ = write!(
                out,
                "; {} not observable on this kernel ({})",
                self.unobservable,
                self.unobservable_kinds.join(", ")
            );
        }
        if !self.mismatched.is_empty() {
            let _ = write!(out, "; {} mismatch", self.mismatched.len());
        }
        out
    }
}

/// The text `ptelab crosscheck` prints for its document: a header naming
/// kernel, arch and strategy, the rows, the findings, what was skipped, and
/// the document's [`Summary`] (for the caller's summary line).
pub fn render_document(doc: &Value) -> anyhow::Result<(String, Summary)> {
    let summary = Summary::from_json(doc)?;
    let d: Doc = serde_json::from_value(doc.clone()).context("not a crosscheck result document")?;
    let header = format!(
        "crosscheck: kernel {} ({}) vs model strategy {} ({})",
        d.kernel, d.arch, d.strategy, d.strategy_kernel
    );
    let mut out = String::new();
    if !d.strategy_reason.is_empty() {
        let _ = writeln!(out, "strategy: {}", d.strategy_reason);
    }
    out.push_str(&super::render_table(&header, &d.rows));
    for s in &d.skipped {
        let _ = writeln!(out, "skipped: {s}");
    }
    Ok((out, summary))
}

/// `N/M rows match on x86_64 6.16.12… and 6.17.13…`: the totals over several
/// crosschecks (observable rows only), naming every kernel.
pub fn headline(summaries: &[Summary]) -> String {
    let matched: usize = summaries.iter().map(|s| s.matched).sum();
    let observable: usize = summaries.iter().map(Summary::observable).sum();
    let kernels: Vec<String> = summaries
        .iter()
        .map(|s| format!("{} {}", s.arch, s.kernel))
        .collect();
    let unobservable: usize = summaries.iter().map(|s| s.unobservable).sum();
    let mut out = format!(
        "{matched}/{observable} rows match on {}",
        match kernels.as_slice() {
            [] => "no kernel".to_string(),
            [one] => one.clone(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
        }
    );
    if unobservable > 0 {
        let _ = write!(out, " ({unobservable} rows not observable there)");
    }
    let bad: Vec<String> = summaries
        .iter()
        .filter(|s| !s.all_match())
        .map(|s| format!("{} {}", s.arch, s.kernel))
        .collect();
    if !bad.is_empty() {
        let _ = write!(out, "; not all matched on {}", bad.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(observable: &str, matches: bool, unobservable: bool) -> Value {
        let mut r = json!({"workload": "mprotect-toggle", "size_bytes": 65536, "folio": "64K",
            "scenario": "mprotect(PROT_NONE)", "observable": observable,
            "kernel": if unobservable { "not observable" } else { "16 pages x1" },
            "model": "16 pages x1", "match": matches});
        if unobservable {
            r["unobservable"] = json!(true);
            r["note"] = json!("no tlb:tlb_flush tracepoint on this arch");
        }
        r
    }

    fn doc(arch: &str, kernel: &str, rows: Vec<Value>) -> Value {
        json!({"schema": crate::SCHEMA, "kernel": kernel, "arch": arch,
            "strategy": "batched", "strategy_kernel": "v6.17, v6.18",
            "strategy_reason": "Linux 6.17 …", "skipped": ["x"],
            "rows": rows, "all_match": true})
    }

    #[test]
    fn counts_matches_unobservables_and_mismatches_apart() {
        let d = doc(
            "arm64",
            "6.17.13+deb13-cloud-arm64",
            vec![
                row("write faults", true, false),
                row("tlb flushes", false, true),
                row("tlb flushes", false, true),
                row("pagemap present", false, false),
            ],
        );
        let s = Summary::from_json(&d).unwrap();
        assert_eq!((s.rows, s.matched, s.unobservable), (4, 1, 2));
        assert_eq!(s.observable(), 2);
        assert_eq!(s.unobservable_kinds, ["tlb flushes"]);
        assert_eq!(s.mismatched.len(), 1);
        assert_eq!(
            s.mismatched[0].what,
            "mprotect-toggle 64K 64K / mprotect(PROT_NONE) / pagemap present"
        );
        assert!(!s.all_match());
        assert_eq!(
            s.line(),
            "1/2 rows match on arm64 6.17.13+deb13-cloud-arm64 (model strategy batched); \
             2 not observable on this kernel (tlb flushes); 1 mismatch"
        );
        assert_eq!(s.skipped, ["x"]);
    }

    #[test]
    fn a_clean_run_and_the_headline_over_kernels() {
        let a = Summary::from_json(&doc(
            "x86_64",
            "6.16.12",
            vec![row("tlb flushes", true, false); 3],
        ))
        .unwrap();
        let b = Summary::from_json(&doc(
            "x86_64",
            "6.17.13",
            vec![row("tlb flushes", true, false); 2],
        ))
        .unwrap();
        assert!(a.all_match());
        assert_eq!(
            a.line(),
            "3/3 rows match on x86_64 6.16.12 (model strategy batched)"
        );
        assert_eq!(
            headline(&[a.clone(), b]),
            "5/5 rows match on x86_64 6.16.12 and x86_64 6.17.13"
        );
        assert_eq!(headline(&[]), "0/0 rows match on no kernel");
        let mut c = a.clone();
        c.mismatched.push(Mismatch {
            what: "w".into(),
            kernel: "k".into(),
            model: "m".into(),
            note: None,
        });
        c.rows += 1;
        c.kernel = "6.18.1".into();
        assert_eq!(
            headline(&[a.clone(), c]),
            "6/7 rows match on x86_64 6.16.12 and x86_64 6.18.1; not all matched on x86_64 6.18.1"
        );
        // No rows at all is not "all match".
        let empty = Summary::from_json(&doc("x86_64", "6.17.13", vec![])).unwrap();
        assert!(!empty.all_match());
    }

    #[test]
    fn the_document_renders_as_the_command_prints_it() {
        let d = doc(
            "x86_64",
            "6.17.13",
            vec![
                row("tlb flushes", true, false),
                row("write faults", false, false),
            ],
        );
        let (text, s) = render_document(&d).unwrap();
        assert!(text.starts_with(
            "strategy: Linux 6.17 …\ncrosscheck: kernel 6.17.13 (x86_64) vs model strategy \
             batched (v6.17, v6.18)\n"
        ));
        assert!(text.contains("2 rows: 1 match, 1 mismatch\n"), "{text}");
        assert!(text.contains("FINDING: mprotect-toggle 64K 64K"), "{text}");
        assert!(text.ends_with("skipped: x\n"), "{text}");
        assert_eq!(s.mismatched.len(), 1);
    }

    /// What `vm -- crosscheck` prints per arm64 guest: the reason, the rows
    /// (an unobservable flush row among them), the count line, a finding.
    #[test]
    fn arm64_guest_text_snapshot() {
        let mut d = doc(
            "arm64",
            "6.17.13+deb13-cloud-arm64",
            vec![
                row("tlb flushes", false, true),
                row("write faults", true, false),
                row("pagemap present", false, false),
            ],
        );
        let rows = d["rows"].as_array_mut().unwrap();
        rows[0]["scenario"] = json!("mprotect(PROT_READ|PROT_WRITE)");
        rows[0]["model"] = json!("1 pages x1");
        rows[1]["scenario"] = json!("re-touch after RW");
        (rows[1]["kernel"], rows[1]["model"]) = (json!("none of 16"), json!("none of 16"));
        rows[2]["scenario"] = json!("mprotect(PROT_READ|PROT_WRITE)");
        (rows[2]["kernel"], rows[2]["model"]) = (json!("0-14 (15 of 16)"), json!("all 16"));
        rows[2]["note"] = json!("first difference at page 15: kernel false, model true");
        d["strategy_reason"] = json!(
            "Linux 6.17 on arm64 -> model strategy batched (v6.17, v6.18): 6.17 or 6.18: \
             mprotect and mremap batch PTEs per folio (v6.17-rc1)"
        );
        let (text, s) = render_document(&d).unwrap();
        insta::assert_snapshot!(text);
        insta::assert_snapshot!("arm64_guest_line", s.line());
    }

    #[test]
    fn other_documents_are_refused() {
        assert!(Summary::from_json(&json!({"schema": "ptelab/doctor/v1"})).is_err());
        let mut d = doc("x86_64", "6.17.13", vec![]);
        d["schema"] = json!("ptelab/crosscheck/v0");
        let e = Summary::from_json(&d).unwrap_err();
        assert!(e.to_string().contains("not ptelab/crosscheck/v1"), "{e}");
    }
}
