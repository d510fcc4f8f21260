//! `ptelab doctor [--json]`: what this machine and kernel offer, and what each
//! missing piece costs the user.
//!
//! Every check is one [`Check`]: a name, a status (`ok`, `missing`, `warn`,
//! `info`), the value found, and its impact in words ("no root: layout control
//! and verification unavailable; bench needs --allow-unverified"). Doctor is a
//! report: it exits 0 whatever it finds.
//!
//! # JSON (`--json`)
//!
//! ```json
//! {"schema": "ptelab/doctor/v1",
//!  "checks": [{"name": "root", "status": "ok", "value": "uid 0", "impact": ""}, ...],
//!  "host": { ...kernel::host::Host... }}
//! ```
//!
//! Every check calls the kernel-layer function bench itself uses (pagemap and
//! kpageflags from `kernel::layout`, the tracepoint counter from
//! `kernel::tlbtrace`, the memory cgroup from `kernel::cgroup`, regions from
//! `kernel::region`), so "ok" here means bench gets it too. This file holds
//! only what to check, the wording and the rendering.
//!
//! Side effects, all undone: one 16 MiB region (the page-table cost probe), a
//! page of probe memory (pagemap), tracefs mounted at /sys/kernel/tracing for
//! the tracepoint check when it was not mounted (unmounted again), the perf
//! events opened and closed, /dev/kvm opened and closed. No THP knob is
//! written.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use serde::Serialize;

use crate::cli::flags::DoctorArgs;
use crate::kernel::cgroup::{self, Memcg};
use crate::kernel::host::{self, Host, Virt};
use crate::kernel::region::Region;
use crate::kernel::{layout, mmenv, thp, tlbtrace};
use crate::measure::reclaim;
use crate::text::format::gib;
use crate::text::table::Table;
use crate::workload::FolioSpec;

/// Schema tag of the JSON document.
pub const SCHEMA: &str = "ptelab/doctor/v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Missing,
    Warn,
    Info,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Missing => "missing",
            Status::Warn => "warn",
            Status::Info => "info",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub value: String,
    /// What this means for the user; empty when nothing.
    pub impact: String,
}

fn check(
    name: impl Into<String>,
    status: Status,
    value: impl Into<String>,
    impact: impl Into<String>,
) -> Check {
    Check {
        name: name.into(),
        status,
        value: value.into(),
        impact: impact.into(),
    }
}

#[derive(Debug, Serialize)]
struct Report {
    schema: &'static str,
    checks: Vec<Check>,
    host: Host,
}

pub fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let host = host::capture()?;
    let virt = host::detect_virt();
    let checks = checks(&host, &virt);
    let mut out = std::io::stdout().lock();
    if args.json {
        // Serialize first: a closed stdout is then an io::Error main.rs recognizes.
        let report = Report {
            schema: SCHEMA,
            checks,
            host,
        };
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        out.write_all(render_table(&checks).as_bytes())?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The table: `name  status  value`, the impact indented below when there is one.
pub fn render_table(checks: &[Check]) -> String {
    let mut table = Table::new()
        .left("check")
        .min_width(5)
        .left("status")
        .min_width(7)
        .left("value");
    for c in checks {
        table.row([c.name.as_str(), c.status.as_str(), c.value.as_str()]);
        if !c.impact.is_empty() {
            table.row(["", "", &format!("-> {}", c.impact)]);
        }
    }
    table.text("  ")
}

fn checks(host: &Host, virt: &Virt) -> Vec<Check> {
    let mut v = Vec::new();
    v.push(check(
        "kernel",
        Status::Info,
        format!("{} ({})", host.kernel_release, host.kernel_version),
        "",
    ));
    v.push(check("arch", Status::Info, host.arch.clone(), ""));
    v.push(if host.page_size == 4096 {
        check("page_size", Status::Ok, "4096", "")
    } else {
        check(
            "page_size",
            Status::Warn,
            host.page_size.to_string(),
            "folio specs and the seeds assume 4K base pages; other granules only in `ptelab model --granule`",
        )
    });
    v.extend(thp_checks(host));
    v.push(root_check(host.is_root));
    v.extend(pagemap_checks());
    v.push(tracepoint_check());
    v.push(kvm_check(virt));
    v.push(check("cpu", Status::Info, host.cpu_model.clone(), ""));
    v.push(check(
        "cores",
        Status::Info,
        host.cores.to_string(),
        if host.cores < 2 {
            "one CPU: the measuring thread shares it with everything else"
        } else {
            ""
        },
    ));
    v.push(check(
        "memory",
        Status::Info,
        format!(
            "{} total, {} available",
            gib(host.mem_total_bytes),
            gib(host.mem_available_bytes)
        ),
        "bench/sweep refuse region sizes above 90% of MemAvailable",
    ));
    v.push(swap_check());
    v.push(memcg_check(host.is_root));
    v.push(damon_check());
    v.push(mglru_check());
    v.push(virt_check(virt));
    v
}

// ---------------------------------------------------------------------------
// THP

fn thp_checks(host: &Host) -> Vec<Check> {
    let mut v = Vec::new();
    if !thp::thp_available() {
        v.push(check(
            "thp",
            Status::Missing,
            format!("no {}", thp::THP_ROOT),
            "no transparent hugepages: only the 4K folio spec can be measured (CONFIG_TRANSPARENT_HUGEPAGE)",
        ));
        return v;
    }
    let offered = thp::offered_mthp_sizes();
    let names: Vec<String> = offered
        .iter()
        .map(|&b| FolioSpec::Mthp(b).to_string())
        .collect();
    v.push(if offered.is_empty() {
        check(
            "mthp_sizes",
            Status::Missing,
            "none",
            "no anonymous mTHP (Linux 6.8+): folio specs 16K..1M unavailable; 4K, 2M, 2M-pte still work",
        )
    } else {
        check("mthp_sizes", Status::Ok, names.join(", "), "")
    });
    // Knobs in a human order: top level, khugepaged, then per size by size.
    let mut keys: Vec<&String> = host.thp_knobs.keys().collect();
    keys.sort_by_key(|k| knob_order(k));
    let writable = host.is_root;
    for k in keys {
        let value = &host.thp_knobs[k];
        let impact = match (k.as_str(), value.as_str()) {
            ("enabled", "never") => "PMD THP off system-wide; ptelab enables hugepages-2048kB for madvised regions during 2M runs",
            ("defrag", "never" | "defer") => "MADV_HUGEPAGE faults do not compact: 2M/mTHP faults may fall back (ptelab sets madvise during runs)",
            _ => "",
        };
        v.push(check(
            format!("thp:{k}"),
            Status::Info,
            value.clone(),
            impact,
        ));
    }
    if !writable {
        v.push(check("thp_knobs_writable", Status::Missing, "no (not root)", "cannot enable the requested mTHP size for a run: only the current knob settings are usable"));
    }
    v
}

fn knob_order(k: &str) -> (u8, u64, String) {
    if let Some(rest) = k.strip_prefix("hugepages-") {
        let kib = rest
            .split("kB")
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX);
        (2, kib, k.to_owned())
    } else if k.starts_with("khugepaged/") {
        (1, 0, k.to_owned())
    } else {
        (0, 0, k.to_owned())
    }
}

fn root_check(is_root: bool) -> Check {
    if is_root {
        check("root", Status::Ok, "uid 0", "")
    } else {
        check(
            "root",
            Status::Missing,
            "not root",
            "no root: layout control and verification unavailable; bench needs --allow-unverified",
        )
    }
}

// ---------------------------------------------------------------------------
// pagemap / kpageflags (what layout verification reads)

fn pagemap_checks() -> Vec<Check> {
    vec![
        match layout::pagemap_pfns_visible() {
            Ok(()) => check("pagemap_pfn", Status::Ok, "PFNs readable", ""),
            Err(why) => check(
                "pagemap_pfn",
                Status::Missing,
                why,
                "PFNs need CAP_SYS_ADMIN: folio layout cannot be verified (bench needs --allow-unverified)",
            ),
        },
        match layout::kpageflags_readable() {
            Ok(()) => check("kpageflags", Status::Ok, "readable", ""),
            Err(why) => check(
                "kpageflags",
                Status::Missing,
                why,
                "compound/THP page flags unreadable: folio sizes cannot be verified (needs root, CONFIG_PROC_PAGE_MONITOR)",
            ),
        },
    ]
}

// ---------------------------------------------------------------------------
// tlb:tlb_flush through perf_event_open, opened as bench opens it

fn tracepoint_check() -> Check {
    const NAME: &str = "tlb_flush_tracepoint";
    match tlbtrace::availability() {
        Ok(a) => {
            let note = if a.tracefs_mounted_for_read {
                " (tracefs mounted for the check and unmounted)"
            } else {
                ""
            };
            let value = format!("perf_event_open ok (id {}){note}", a.id);
            match a.no_breakdown {
                None => check(NAME, Status::Ok, value, ""),
                Some(why) => check(
                    NAME,
                    Status::Warn,
                    value,
                    format!(
                        "flushes are counted, but not broken down by reason and pages ({})",
                        why.reason
                    ),
                ),
            }
        }
        Err(e) => check(
            NAME,
            Status::Missing,
            e.reason,
            "TLB flushes per call are not counted (bench runs without --no-flush-count fail or skip the column)",
        ),
    }
}

// ---------------------------------------------------------------------------
// KVM

fn kvm_check(virt: &Virt) -> Check {
    const NO_KVM: &str = "no KVM: `ptelab vm` falls back to QEMU TCG (slow, not a hardware proxy)";
    match host::kvm_api_version() {
        Ok(v) if virt.pvm_host => check(
            "kvm",
            Status::Warn,
            format!("/dev/kvm API version {v} (kvm-pvm)"),
            "kvm-pvm: software virtualization (PVM) that may not boot stock kernels; `ptelab vm` uses QEMU TCG",
        ),
        Ok(v) => check("kvm", Status::Ok, format!("/dev/kvm API version {v}"), ""),
        Err(why) => check("kvm", Status::Missing, why, NO_KVM),
    }
}

// ---------------------------------------------------------------------------
// Memory management environment

fn swap_check() -> Check {
    let swap = host::swap_total_bytes();
    if swap == 0 {
        check("swap", Status::Warn, "none", "no swap: anonymous folios cannot be paged out, so the reclaim workload (seed 004) only ages them")
    } else {
        check("swap", Status::Ok, gib(swap), "")
    }
}

/// The memory cgroup bench's reclaim workload finds, and the method it picks.
fn memcg_check(is_root: bool) -> Check {
    let memcg = cgroup::detect();
    let method = reclaim::choose(memcg.as_ref(), is_root, None)
        .map(|m| m.name())
        .unwrap_or("none");
    let Some(memcg) = memcg else {
        return check(
            "memcg",
            Status::Missing,
            "no memory controller",
            format!("the reclaim workload uses MADV_PAGEOUT ({method}), which skips folio_referenced: not the seed's reclaim path"),
        );
    };
    let at = memcg.root().display();
    let not_root = format!(
        "not root: the reclaim workload uses MADV_PAGEOUT ({method}) instead of the memory cgroup"
    );
    match memcg {
        Memcg::V2(_) if !memcg.has_reclaim() => check(
            "memcg",
            Status::Warn,
            format!("v2 at {at} without memory.reclaim"),
            if is_root {
                format!("the reclaim workload's {method} method writes memory.reclaim (Linux 5.19+) and fails here; PTELAB_RECLAIM_METHOD=pageout uses MADV_PAGEOUT")
            } else {
                not_root
            },
        ),
        Memcg::V2(_) if is_root => check(
            "memcg",
            Status::Ok,
            format!("v2 at {at} with memory.reclaim"),
            "",
        ),
        Memcg::V2(_) => check(
            "memcg",
            Status::Warn,
            format!("v2 at {at} with memory.reclaim"),
            not_root,
        ),
        Memcg::V1(_) => check(
            "memcg",
            Status::Warn,
            format!("v1 at {at} (no memory.reclaim)"),
            if is_root {
                format!("memory controller only on cgroup v1: the reclaim workload lowers memory.limit_in_bytes ({method}) instead of writing memory.reclaim")
            } else {
                not_root
            },
        ),
    }
}

/// DAMON: kdamonds that are on, with their schemes' actions.
fn damon_check() -> Check {
    let running = match mmenv::running_kdamonds() {
        None => return check("damon", Status::Info, "not available (no DAMON sysfs)", ""),
        Some(Err(why)) => return check(
            "damon",
            Status::Warn,
            format!("unknown ({why})"),
            "cannot tell whether a DAMON scheme acts on a run's memory (DAMON sysfs is root-only)",
        ),
        Some(Ok(running)) => running,
    };
    if running.is_empty() {
        return check("damon", Status::Ok, "no kdamond running", "");
    }
    let running: Vec<String> = running
        .iter()
        .map(|k| {
            format!(
                "kdamond {}: {}",
                k.name,
                if k.actions.is_empty() {
                    "no schemes".into()
                } else {
                    k.actions.join(", ")
                }
            )
        })
        .collect();
    check(
        "damon",
        Status::Warn,
        running.join("; "),
        "a running DAMON scheme may page out or change memory during a run: results can vary; check its target",
    )
}

fn mglru_check() -> Check {
    match mmenv::mglru() {
        Some((v, on)) => check(
            "mglru",
            Status::Info,
            format!("{v} ({})", if on { "on" } else { "off" }),
            "",
        ),
        None => check(
            "mglru",
            Status::Info,
            "not built (CONFIG_LRU_GEN off)",
            "reclaim uses the classic active/inactive LRU",
        ),
    }
}

// ---------------------------------------------------------------------------
// Virtualization and what page-table updates cost here

/// Seed 001 (Luke Yang, AMD EPYC Zen 3 Milan, bare metal), 40000 KiB region:
/// 172613 ns/call on v6.16 and 427731 ns/call on v6.17-rc1 over 10000 pages.
const SEED_001_NS_PER_PAGE: (f64, f64) = (172_613.0 / 10_000.0, 427_731.0 / 10_000.0);

/// Median ns per 4K page of one mprotect call over a 16 MiB region of base
/// pages (bench's region, 20 calls alternating PROT_NONE and
/// PROT_READ|PROT_WRITE).
fn probe_mprotect_ns_per_page() -> anyhow::Result<f64> {
    const LEN: u64 = 16 << 20;
    let mut r = Region::map(LEN, FolioSpec::Base, false)?;
    r.populate()?;
    let pages = (r.len() / crate::kernel::region::PAGE_SIZE) as f64;
    let mut samples = Vec::with_capacity(20);
    for i in 0..22 {
        let prot = if i % 2 == 0 {
            libc::PROT_NONE
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        let t = Instant::now();
        r.protect(prot)?;
        if i >= 2 {
            samples.push(t.elapsed().as_nanos() as f64 / pages);
        }
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

fn virt_check(virt: &Virt) -> Check {
    let probe = probe_mprotect_ns_per_page();
    let (lo, hi) = SEED_001_NS_PER_PAGE;
    let cost = match &probe {
        Ok(ns) => format!(
            "{ns:.0} ns per 4K page per mprotect call (measured now: 16 MiB of 4K pages, median of 20 calls) \
             vs {lo:.0}-{hi:.0} ns published for bare-metal AMD EPYC Zen 3 (seed 001, v6.16 and v6.17-rc1)"
        ),
        Err(e) => format!("page-table cost probe failed: {e:#}"),
    };
    match virt.describe() {
        None => check("virtualization", Status::Info, "bare metal (no hypervisor flag)", cost),
        Some(desc) if virt.paravirtual_mmu() => check(
            "virtualization",
            Status::Warn,
            desc,
            format!("each PTE update is a paravirtual call: {cost}; compare ratios across kernels, not absolute ns with bare metal"),
        ),
        Some(desc) => check(
            "virtualization",
            Status::Warn,
            desc,
            format!("page-table updates run under a hypervisor: {cost}; compare ratios across kernels, not absolute ns with bare metal"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_serializes_lowercase() {
        let c = check("root", Status::Missing, "not root", "x");
        let j = serde_json::to_value(&c).unwrap();
        assert_eq!(j["status"], "missing");
        assert_eq!(j["name"], "root");
    }

    #[test]
    fn table_shape() {
        let t = render_table(&[
            check("root", Status::Ok, "uid 0", ""),
            check("swap", Status::Warn, "none", "no swap"),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "check  status   value");
        assert_eq!(lines[1], "root   ok       uid 0");
        assert_eq!(lines[2], "swap   warn     none");
        assert_eq!(lines[3], "                -> no swap");
    }

    #[test]
    fn knob_display_order() {
        let mut k = vec![
            "hugepages-2048kB/enabled",
            "khugepaged/defrag",
            "hugepages-64kB/enabled",
            "enabled",
            "hugepages-16kB/enabled",
        ];
        k.sort_by_key(|k| knob_order(k));
        assert_eq!(
            k,
            [
                "enabled",
                "khugepaged/defrag",
                "hugepages-16kB/enabled",
                "hugepages-64kB/enabled",
                "hugepages-2048kB/enabled"
            ]
        );
    }

    #[test]
    fn seed_figures_per_page() {
        assert_eq!(
            format!(
                "{:.0}-{:.0}",
                SEED_001_NS_PER_PAGE.0, SEED_001_NS_PER_PAGE.1
            ),
            "17-43"
        );
    }

    /// Doctor's "ok" is bench's: the tracepoint check fails exactly when a
    /// measurement's flush count is unavailable, and the pagemap checks pass
    /// exactly when layout verification is available.
    #[test]
    fn checks_agree_with_what_bench_gets() {
        let t = tracepoint_check();
        let counted = tlbtrace::count_flushes_with(1, 1, || {}, || {});
        assert_eq!(
            t.status == Status::Missing,
            counted.unavailable.is_some(),
            "{t:?} vs {counted:?}"
        );
        let pm = pagemap_checks();
        assert_eq!(
            pm.iter().all(|c| c.status == Status::Ok),
            layout::verification_available().is_ok(),
            "{pm:?}"
        );
    }

    #[test]
    fn probe_measures_something() {
        let ns = probe_mprotect_ns_per_page().unwrap();
        assert!(ns > 0.0 && ns < 100_000.0, "{ns}");
    }
}
