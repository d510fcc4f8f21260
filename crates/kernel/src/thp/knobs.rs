//! Reading the knobs (selected values, offered mTHP sizes, whether a folio
//! spec can be given here) and writing one knob under the process-wide write
//! mutex.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{bail, Context};

use super::THP_ROOT;
use crate::error::usage;
use crate::procfs;
use crate::workload::folio::{FolioSpec, PMD_SIZE};

/// Top-level knobs (files directly under the THP directory).
const TOP_KNOBS: [&str; 5] = [
    "enabled",
    "defrag",
    "shmem_enabled",
    "use_zero_page",
    "shrink_underused",
];

/// khugepaged tunables (its counters `pages_collapsed`, `full_scans` are not knobs).
const KHUGEPAGED_KNOBS: [&str; 7] = [
    "defrag",
    "max_ptes_none",
    "max_ptes_swap",
    "max_ptes_shared",
    "pages_to_scan",
    "scan_sleep_millisecs",
    "alloc_sleep_millisecs",
];

// ---------------------------------------------------------------------------
// Reading

/// The selected value of a knob file: the `[bracketed]` word of a choice list
/// (`"always [madvise] never"` → `"madvise"`), else the trimmed text (`"511"`).
pub fn selected_value(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .map(str::to_owned)
        .unwrap_or_else(|| text.trim().to_owned())
}

/// The values a choice-list knob accepts (`"always [madvise] never"` →
/// `["always", "madvise", "never"]`); empty for scalar knobs.
pub fn choices(text: &str) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() < 2 && !text.contains('[') {
        return Vec::new();
    }
    words
        .iter()
        .map(|w| w.trim_start_matches('[').trim_end_matches(']').to_owned())
        .collect()
}

/// Every knob: `"enabled"`, `"defrag"`, `"shmem_enabled"`, `"khugepaged/defrag"`,
/// `"hugepages-64kB/enabled"`, ... → the selected value (`"madvise"`). Empty
/// when the kernel has no THP at all.
pub fn read_knobs() -> anyhow::Result<BTreeMap<String, String>> {
    read_knobs_at(Path::new(THP_ROOT))
}

/// [`read_knobs`] under another THP directory.
pub fn read_knobs_at(root: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut knobs = BTreeMap::new();
    if !root.is_dir() {
        return Ok(knobs);
    }
    let mut names: Vec<String> = TOP_KNOBS.iter().map(|k| k.to_string()).collect();
    names.extend(KHUGEPAGED_KNOBS.iter().map(|k| format!("khugepaged/{k}")));
    for (dir, _) in size_dirs(root)? {
        names.push(format!("{dir}/enabled"));
        names.push(format!("{dir}/shmem_enabled"));
    }
    for name in names {
        let path = root.join(&name);
        match fs::read_to_string(&path) {
            Ok(text) => {
                knobs.insert(name, selected_value(&text));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("reading THP knob {}", path.display()))
            }
        }
    }
    Ok(knobs)
}

/// `hugepages-<N>kB` directories under `root` with their size in bytes, by size.
fn size_dirs(root: &Path) -> anyhow::Result<Vec<(String, u64)>> {
    let mut dirs = Vec::new();
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(dirs),
        Err(e) => return Err(e).with_context(|| format!("listing {}", root.display())),
    };
    for entry in entries {
        let name = entry
            .with_context(|| format!("listing {}", root.display()))?
            .file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(kib) = size_dir_kib(name) {
            dirs.push((name.to_owned(), kib << 10));
        }
    }
    dirs.sort_by_key(|&(_, bytes)| bytes);
    Ok(dirs)
}

/// `"hugepages-64kB"` → `Some(64)`.
fn size_dir_kib(name: &str) -> Option<u64> {
    name.strip_prefix("hugepages-")?
        .strip_suffix("kB")?
        .parse()
        .ok()
}

/// Name of the per-size `enabled` knob for folios of `bytes`.
pub fn size_knob(bytes: u64) -> String {
    format!("hugepages-{}kB/enabled", bytes >> 10)
}

/// PMD size the kernel reports (`hpage_pmd_size`), else 2 MiB.
pub(super) fn pmd_size_at(root: &Path) -> u64 {
    fs::read_to_string(root.join("hpage_pmd_size"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(PMD_SIZE)
}

/// Anonymous mTHP sizes in bytes the kernel offers (order >= 2, below PMD).
pub fn offered_mthp_sizes() -> Vec<u64> {
    offered_mthp_sizes_at(Path::new(THP_ROOT))
}

/// [`offered_mthp_sizes`] under another THP directory.
pub fn offered_mthp_sizes_at(root: &Path) -> Vec<u64> {
    let pmd = pmd_size_at(root);
    let page = procfs::page_size();
    size_dirs(root)
        .unwrap_or_default()
        .into_iter()
        // Order 1 has only shmem_enabled: anonymous memory never uses it.
        .filter(|(dir, bytes)| {
            *bytes >= 4 * page && *bytes < pmd && root.join(dir).join("enabled").exists()
        })
        .map(|(_, bytes)| bytes)
        .collect()
}

/// Whether the kernel has transparent hugepages at all (`enabled` exists).
pub fn thp_available() -> bool {
    thp_available_at(Path::new(THP_ROOT))
}

fn thp_available_at(root: &Path) -> bool {
    root.join("enabled").exists()
}

/// Refuse (usage error, listing what is offered) a spec this kernel cannot give.
pub fn check_offered(spec: FolioSpec) -> anyhow::Result<()> {
    check_offered_at(Path::new(THP_ROOT), spec)
}

/// [`check_offered`] under another THP directory.
pub fn check_offered_at(root: &Path, spec: FolioSpec) -> anyhow::Result<()> {
    let offered = offered_mthp_sizes_at(root);
    let thp = thp_available_at(root);
    let mut accepted = vec!["4K".to_owned()];
    accepted.extend(offered.iter().map(|&b| FolioSpec::Mthp(b).to_string()));
    if thp {
        accepted.extend(["2M".to_owned(), "2M-pte".to_owned()]);
    }
    let accepted = accepted.join(", ");
    match spec {
        FolioSpec::Base => Ok(()),
        FolioSpec::Mthp(bytes) if offered.contains(&bytes) => Ok(()),
        FolioSpec::Mthp(_) if offered.is_empty() => Err(usage(format!(
            "folio spec {spec} needs anonymous mTHP, which this kernel does not offer \
             (no {}/hugepages-*kB/enabled; mTHP needs Linux 6.8 or later): \
             folio specs available here are {accepted}",
            root.display()
        ))),
        FolioSpec::Mthp(bytes) => Err(usage(format!(
            "folio spec {spec} is not offered by this kernel (no {}): \
             folio specs available here are {accepted}",
            root.join(size_knob(bytes)).display()
        ))),
        FolioSpec::Pmd | FolioSpec::PmdPte if thp && pmd_size_at(root) == PMD_SIZE => Ok(()),
        FolioSpec::Pmd | FolioSpec::PmdPte => Err(usage(format!(
            "folio spec {spec} needs 2 MiB PMD THP, which this kernel does not offer \
             (no {}/enabled, or hpage_pmd_size is not 2 MiB): folio specs available here are {accepted}",
            root.display()
        ))),
    }
}

// ---------------------------------------------------------------------------
// Which names and values are knobs

/// A knob name this module may write (guards the recovery file against
/// tampering: `/run/lock` is world-writable).
pub(super) fn is_known_knob(name: &str) -> bool {
    if TOP_KNOBS.contains(&name) {
        return true;
    }
    if let Some(k) = name.strip_prefix("khugepaged/") {
        return KHUGEPAGED_KNOBS.contains(&k);
    }
    match name.split_once('/') {
        Some((dir, file)) => {
            size_dir_kib(dir).is_some() && matches!(file, "enabled" | "shmem_enabled")
        }
        None => false,
    }
}

pub(super) fn is_plausible_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() < 32
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+_-".contains(&b))
}

// ---------------------------------------------------------------------------
// Writing (always under the process-wide write mutex)

/// Serializes every knob write in this process with the forced restore of the
/// signal thread (which takes it and never gives it back).
pub(crate) fn knob_write_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Write `value` to knob `name` if it differs; read back to confirm.
pub(super) fn write_knob(root: &Path, name: &str, value: &str) -> anyhow::Result<bool> {
    let path = root.join(name);
    let now = fs::read_to_string(&path)
        .with_context(|| format!("reading THP knob {}", path.display()))?;
    if selected_value(&now) == value {
        return Ok(false);
    }
    let offered = choices(&now);
    if !offered.is_empty() && !offered.iter().any(|c| c == value) {
        bail!(
            "THP knob {} does not accept '{value}' (accepts: {})",
            path.display(),
            offered.join(", ")
        );
    }
    let mut f = OpenOptions::new().write(true).truncate(true).open(&path).with_context(|| {
        format!(
            "opening THP knob {} for writing{}",
            path.display(),
            if procfs::is_root() { "" } else { ": setting THP knobs needs root (run ptelab as root, or pass --allow-unverified to measure without layout control)" }
        )
    })?;
    f.write_all(format!("{value}\n").as_bytes())
        .with_context(|| format!("writing '{value}' to THP knob {}", path.display()))?;
    drop(f);
    let after = selected_value(
        &fs::read_to_string(&path)
            .with_context(|| format!("reading THP knob {}", path.display()))?,
    );
    if after != value {
        bail!(
            "THP knob {} reads '{after}' after writing '{value}'",
            path.display()
        );
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{fake_sysfs, MTHP_KB};
    use super::*;

    #[test]
    fn bracket_parsing() {
        assert_eq!(selected_value("always [madvise] never\n"), "madvise");
        assert_eq!(selected_value("[always] inherit madvise never"), "always");
        assert_eq!(
            selected_value("always defer defer+madvise [madvise] never"),
            "madvise"
        );
        assert_eq!(selected_value("511\n"), "511");
        assert_eq!(selected_value("madvise\n"), "madvise");
        assert_eq!(
            choices("always [madvise] never"),
            ["always", "madvise", "never"]
        );
        assert!(choices("511\n").is_empty());
        assert!(choices("madvise\n").is_empty());
    }

    #[test]
    fn reads_every_knob_of_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let k = read_knobs_at(&paths.sysfs).unwrap();
        assert_eq!(k["enabled"], "madvise");
        assert_eq!(k["defrag"], "madvise");
        assert_eq!(k["shmem_enabled"], "never");
        assert_eq!(k["use_zero_page"], "1");
        assert_eq!(k["khugepaged/max_ptes_none"], "511");
        assert_eq!(k["hugepages-2048kB/enabled"], "inherit");
        assert_eq!(k["hugepages-64kB/enabled"], "never");
        assert_eq!(k["hugepages-8kB/shmem_enabled"], "never");
        assert!(!k.contains_key("hugepages-8kB/enabled"));
        assert!(
            !k.contains_key("khugepaged/pages_collapsed"),
            "counters are not knobs"
        );
        assert!(!k.contains_key("hpage_pmd_size"));
        assert!(read_knobs_at(&dir.path().join("absent"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn offered_sizes_skip_order_1_and_pmd() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        let kib: Vec<u64> = offered_mthp_sizes_at(&paths.sysfs)
            .iter()
            .map(|b| b >> 10)
            .collect();
        assert_eq!(kib, [16, 32, 64, 128, 256, 512, 1024]);
        for spec in FolioSpec::all() {
            check_offered_at(&paths.sysfs, spec).unwrap();
        }
    }

    #[test]
    fn spec_not_offered_is_a_usage_error_listing_offered() {
        let dir = tempfile::tempdir().unwrap();
        let paths = fake_sysfs(dir.path());
        fs::remove_dir_all(paths.sysfs.join("hugepages-128kB")).unwrap();
        let err = check_offered_at(&paths.sysfs, FolioSpec::Mthp(128 << 10)).unwrap_err();
        assert!(crate::error::is_usage(&err));
        let msg = err.to_string();
        assert!(
            msg.contains("4K, 16K, 32K, 64K, 256K, 512K, 1M, 2M, 2M-pte"),
            "{msg}"
        );
        assert!(msg.contains("hugepages-128kB/enabled"), "{msg}");

        // A kernel before mTHP (6.7): no per-size directories at all.
        for kb in MTHP_KB.iter().chain(&[2048]) {
            fs::remove_dir_all(paths.sysfs.join(format!("hugepages-{kb}kB"))).ok();
        }
        let err = check_offered_at(&paths.sysfs, FolioSpec::Mthp(64 << 10)).unwrap_err();
        assert!(crate::error::is_usage(&err));
        assert!(err.to_string().contains("mTHP needs Linux 6.8"), "{err}");
        assert!(err.to_string().contains("are 4K, 2M, 2M-pte"), "{err}");
        check_offered_at(&paths.sysfs, FolioSpec::Pmd).unwrap();

        // No THP at all.
        let err = check_offered_at(&dir.path().join("none"), FolioSpec::PmdPte).unwrap_err();
        assert!(
            crate::error::is_usage(&err) && err.to_string().contains("are 4K"),
            "{err}"
        );
    }

    #[test]
    fn known_knob_names() {
        for k in [
            "enabled",
            "defrag",
            "khugepaged/defrag",
            "hugepages-64kB/enabled",
            "hugepages-8kB/shmem_enabled",
        ] {
            assert!(is_known_knob(k), "{k}");
        }
        for k in [
            "../enabled",
            "hpage_pmd_size",
            "khugepaged/full_scans",
            "hugepages-64kB/stats/split",
            "hugepages-x/enabled",
            "/etc/passwd",
        ] {
            assert!(!is_known_knob(k), "{k}");
        }
        assert!(is_plausible_value("defer+madvise") && is_plausible_value("511"));
        assert!(
            !is_plausible_value("") && !is_plausible_value("a b") && !is_plausible_value("x\n")
        );
    }
}
