//! ptelab's kernel config: a fragment on top of the arch's defconfig, kept
//! in `crates/guest/kconfig/` and documented there option by option, in
//! three sections. `[boot]`: what every guest needs; a config without one
//! is refused before the image builds. `[cells]`: what some experiments
//! need; a config without one is refused when the cells asked for need it
//! ([`Need`]), else builds with a warning naming them. `[lean]`: what no
//! guest uses, switched off for a shorter build.

use std::collections::{BTreeSet, HashMap};

use crate::error::bail_usage;
use crate::workload::{Arch, FolioSpec, WorkloadKind};

use super::Config;

const COMMON: &str = include_str!("../../kconfig/ptelab.config");
const X86_64: &str = include_str!("../../kconfig/ptelab-x86_64.config");
const ARM64: &str = include_str!("../../kconfig/ptelab-arm64.config");

/// The fragment for `arch`: the common lines, then the arch's own.
pub fn fragment(arch: Arch) -> String {
    let own = match arch {
        Arch::X86_64 => X86_64,
        Arch::Arm64 => ARM64,
    };
    format!("\n{COMMON}\n{own}")
}

/// What the fragment sets for `arch`, whatever its comments and order say:
/// every `OPTION=value` (`OPTION=n` for `is not set`), sorted, the last of
/// one option winning as it does in Kconfig. Builds are cached by this, so
/// that documenting an option rebuilds nothing.
pub fn identity(arch: Arch) -> String {
    let mut set = std::collections::BTreeMap::new();
    for s in settings(arch) {
        set.insert(s.option, s.value.unwrap_or_else(|| "n".into()));
    }
    set.iter().map(|(o, v)| format!("{o}={v}\n")).collect()
}

/// A fragment's section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Boot,
    Cells,
    Lean,
}

impl Section {
    pub const ALL: &'static [Section] = &[Section::Boot, Section::Cells, Section::Lean];
}

/// One option of the fragment: its value (`None`: `is not set`), section,
/// and the comment above it, which says what it is for.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    pub option: String,
    pub value: Option<String>,
    pub section: Section,
    pub why: String,
}

/// The fragment's settings for `arch`.
pub fn settings(arch: Arch) -> Vec<Setting> {
    parse(&fragment(arch))
}

fn parse(text: &str) -> Vec<Setting> {
    let mut out = Vec::new();
    let mut section = Section::Boot;
    // The comment lines above an option, shared by the options that follow
    // it until the next comment.
    let mut why: Vec<&str> = Vec::new();
    let mut after_option = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            why.clear();
            after_option = false;
            continue;
        }
        if after_option && line.starts_with('#') && !line.ends_with(" is not set") {
            why.clear();
        }
        after_option = !line.starts_with('#') || line.ends_with(" is not set");
        match line {
            "# [boot]" => section = Section::Boot,
            "# [cells]" => section = Section::Cells,
            "# [lean]" => section = Section::Lean,
            _ => {}
        }
        if let Some(rest) = line.strip_prefix("# CONFIG_") {
            if let Some(option) = rest.strip_suffix(" is not set") {
                out.push(setting(format!("CONFIG_{option}"), None, section, &why));
                continue;
            }
        }
        if let Some(comment) = line.strip_prefix('#') {
            if !comment.trim_start().starts_with('[') {
                why.push(comment.trim());
            }
            continue;
        }
        if let Some((option, value)) = line.split_once('=') {
            out.push(setting(option.into(), Some(value.into()), section, &why));
        }
    }
    out
}

fn setting(option: String, value: Option<String>, section: Section, why: &[&str]) -> Setting {
    Setting {
        option,
        value,
        section,
        why: why.join(" "),
    }
}

/// `.config` lines for the fragment's settings of `sections` that set a
/// value: a config that boots and no more (`[Section::Boot]`), or the whole
/// fragment's (`Section::ALL`), for tests and their stand-in trees.
pub fn config_lines(arch: Arch, sections: &[Section]) -> String {
    settings(arch)
        .iter()
        .filter(|s| sections.contains(&s.section))
        .filter_map(|s| Some(format!("{}={}\n", s.option, s.value.as_ref()?)))
        .collect()
}

/// A `.config`'s options that are set (`CONFIG_X` → its value).
pub fn read(config: &str) -> HashMap<&str, &str> {
    config
        .lines()
        .filter(|l| l.starts_with("CONFIG_"))
        .filter_map(|l| l.split_once('='))
        .collect()
}

/// The settings of `section` that `config` (a `.config` after
/// `olddefconfig`) does not hold.
pub fn missing(config: &str, arch: Arch, section: Section) -> Vec<Setting> {
    let set = read(config);
    settings(arch)
        .into_iter()
        .filter(|s| {
            s.section == section && s.value.as_deref() != set.get(s.option.as_str()).copied()
        })
        .collect()
}

/// What the cells a guest is asked to run need of its kernel's config
/// beyond booting: a config without one of a need's `[cells]` options
/// cannot run them, and is refused before the image builds.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Need {
    /// Folios above 4K: THP and mTHP (on arm64 with contiguous PTEs, which
    /// the seeds' arm64 figures are about).
    LargeFolios,
    /// The reclaim workload: a memory cgroup to reclaim from.
    Reclaim,
    /// Files on the guest's disk (reclaim's page cache, its swapfile).
    Disk,
    /// Kernel functions named (`--profile`, the mechanism counters).
    Symbols,
}

impl Need {
    /// The `[cells]` options this need takes on `arch`.
    pub fn options(self, arch: Arch) -> Vec<&'static str> {
        let mut o = match self {
            Need::LargeFolios => vec!["CONFIG_TRANSPARENT_HUGEPAGE"],
            Need::Reclaim => vec!["CONFIG_CGROUPS", "CONFIG_MEMCG"],
            Need::Disk => vec![
                "CONFIG_PCI",
                "CONFIG_BLK_DEV",
                "CONFIG_BLK_DEV_NVME",
                "CONFIG_EXT4_FS",
            ],
            Need::Symbols => vec!["CONFIG_KALLSYMS", "CONFIG_KALLSYMS_ALL"],
        };
        match (self, arch) {
            (Need::LargeFolios, Arch::Arm64) => o.push("CONFIG_ARM64_CONTPTE"),
            (Need::Disk, Arch::Arm64) => o.push("CONFIG_PCI_HOST_GENERIC"),
            _ => {}
        }
        o
    }

    /// What needs it, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Need::LargeFolios => "folios above 4K",
            Need::Reclaim => "the reclaim workload",
            Need::Disk => "the guest's disk",
            Need::Symbols => "kernel function names (--profile, the mechanism counters)",
        }
    }

    /// What cells of `workload` at `folios` need, with `symbols` when
    /// kernel functions are named.
    pub fn of(workload: WorkloadKind, folios: &[FolioSpec], symbols: bool) -> BTreeSet<Need> {
        let mut needs = BTreeSet::new();
        if folios.iter().any(|f| *f != FolioSpec::Base) {
            needs.insert(Need::LargeFolios);
        }
        if workload == WorkloadKind::Reclaim {
            needs.extend([Need::Reclaim, Need::Disk]);
        }
        if symbols {
            needs.insert(Need::Symbols);
        }
        needs
    }
}

/// Check a build's `.config` after `olddefconfig`: refuse one that cannot
/// boot a guest, or cannot run the cells asked for (`needs`), naming the
/// options; warn of the other experiments it cannot run.
pub fn check(
    config: &str,
    arch: Arch,
    from: &Config,
    needs: &BTreeSet<Need>,
) -> anyhow::Result<()> {
    let names = |m: &[Setting]| {
        m.iter()
            .map(|s| format!("{} ({})", s.option, s.why))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let remedy = match from {
        Config::Ptelab => "the tree's Kconfig lacks them or their dependencies: is it a Linux kernel of 6.1 or later?",
        Config::Defconfig => "leave --defconfig out to build ptelab's config",
        Config::File(_) => "add them to your --config, or leave --config out to build ptelab's config",
    };
    let boot = missing(config, arch, Section::Boot);
    if !boot.is_empty() {
        bail_usage!(
            "the {} config cannot boot a ptelab guest; it lacks {}: {remedy}",
            arch,
            names(&boot)
        );
    }
    let cells = missing(config, arch, Section::Cells);
    let lacking: Vec<String> = needs
        .iter()
        .filter_map(|n| {
            let options = n.options(arch);
            let gone: Vec<&str> = cells
                .iter()
                .map(|s| s.option.as_str())
                .filter(|o| options.contains(o))
                .collect();
            (!gone.is_empty()).then(|| format!("{} need {}", n.what(), gone.join(", ")))
        })
        .collect();
    if !lacking.is_empty() {
        bail_usage!(
            "the {arch} config cannot run the cells asked for: {}: {remedy}",
            lacking.join("; ")
        );
    }
    if !cells.is_empty() {
        eprintln!(
            "ptelab: warning: the {arch} config lacks {}: the experiments these serve cannot run on it",
            names(&cells)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_is_documented_and_in_a_section() {
        for arch in [Arch::X86_64, Arch::Arm64] {
            let s = settings(arch);
            assert!(s.len() > 30, "{arch}: {}", s.len());
            for setting in &s {
                assert!(
                    setting.option.starts_with("CONFIG_") && !setting.option.contains(' '),
                    "{setting:?}"
                );
                assert!(!setting.why.is_empty(), "undocumented: {setting:?}");
            }
            let get = |o: &str| s.iter().find(|x| x.option == o).cloned();
            assert_eq!(
                get("CONFIG_SERIAL_AMBA_PL011").is_some(),
                arch == Arch::Arm64
            );
            assert_eq!(get("CONFIG_SERIAL_8250").is_some(), arch == Arch::X86_64);
            assert_eq!(get("CONFIG_BLK_DEV_INITRD").unwrap().section, Section::Boot);
            assert_eq!(get("CONFIG_LRU_GEN").unwrap().section, Section::Cells);
            assert_eq!(
                get("CONFIG_TRANSPARENT_HUGEPAGE").unwrap().section,
                Section::Cells
            );
            // A comment covers the options under it, up to the next comment.
            let tmpfs = get("CONFIG_TMPFS").unwrap().why;
            assert!(
                tmpfs.starts_with("The init mounts proc") && !tmpfs.contains("Initramfs"),
                "{tmpfs}"
            );
            let net = get("CONFIG_NET").unwrap();
            assert_eq!((net.section, net.value), (Section::Lean, None));
        }
        let contpte = settings(Arch::Arm64)
            .into_iter()
            .find(|s| s.option == "CONFIG_ARM64_CONTPTE")
            .unwrap();
        assert_eq!(contpte.section, Section::Cells);
        assert!(contpte.why.contains("contpte"), "{}", contpte.why);
    }

    /// `[cells]` options whose absence only costs a figure part of its detail,
    /// never a cell: MGLRU (reclaim falls back to the classic LRU, and says so),
    /// swap (reclaim's page cache needs none), the tracepoints (x86's TLB-flush
    /// counts, which a cell without them reports as missing).
    const DETAIL_ONLY: [&str; 6] = [
        "CONFIG_LRU_GEN",
        "CONFIG_LRU_GEN_ENABLED",
        "CONFIG_SWAP",
        "CONFIG_FTRACE",
        "CONFIG_TRACEPOINTS",
        "CONFIG_EVENT_TRACING",
    ];

    /// Every [cells] option is some need's or costs only detail; every
    /// need's option is a [cells] option of that arch.
    #[test]
    fn needs_and_the_cells_section_agree() {
        let all = [Need::LargeFolios, Need::Reclaim, Need::Disk, Need::Symbols];
        for arch in [Arch::X86_64, Arch::Arm64] {
            let cells: BTreeSet<String> = settings(arch)
                .into_iter()
                .filter(|s| s.section == Section::Cells)
                .map(|s| s.option)
                .collect();
            let mut covered: BTreeSet<String> = DETAIL_ONLY.iter().map(|o| o.to_string()).collect();
            for n in all {
                for o in n.options(arch) {
                    assert!(
                        cells.contains(o),
                        "{arch} {n:?}: {o} is not a [cells] option"
                    );
                    covered.insert(o.to_string());
                }
            }
            assert_eq!(cells, covered, "{arch}");
        }
        assert_eq!(
            Need::of(WorkloadKind::Reclaim, &[FolioSpec::Pmd], true),
            BTreeSet::from([Need::LargeFolios, Need::Reclaim, Need::Disk, Need::Symbols])
        );
        assert!(Need::of(WorkloadKind::MprotectToggle, &[FolioSpec::Base], false).is_empty());
    }

    #[test]
    fn the_identity_is_what_the_fragment_sets_not_how_it_is_written() {
        let x86 = identity(Arch::X86_64);
        assert!(
            x86.contains("CONFIG_SERIAL_8250_CONSOLE=y\n") && x86.contains("CONFIG_ACPI=n\n"),
            "{x86}"
        );
        let arm64 = identity(Arch::Arm64);
        assert!(arm64.contains("CONFIG_ACPI=n\n") && arm64.contains("CONFIG_ARM64_CONTPTE=y\n"));
        let options: Vec<&str> = arm64
            .lines()
            .map(|l| l.split('=').next().unwrap())
            .collect();
        let mut sorted = options.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(options, sorted);
        assert!(!arm64.contains('#'));
    }

    /// A config is held to the fragment's [boot] and [cells] lines; values
    /// other than `y` count, and `is not set` lines are [lean]'s only.
    #[test]
    fn a_config_without_boot_options_is_refused_naming_them() {
        let arch = Arch::X86_64;
        let all = config_lines(arch, Section::ALL);
        assert!(missing(&all, arch, Section::Boot).is_empty());
        let none = BTreeSet::new();
        assert!(check(&all, arch, &Config::Ptelab, &none).is_ok());
        let no_initrd = all.replace("CONFIG_BLK_DEV_INITRD=y\n", "");
        let e = check(&no_initrd, arch, &Config::File("my.config".into()), &none).unwrap_err();
        assert!(crate::error::is_usage(&e));
        let msg = e.to_string();
        assert!(
            msg.contains(
                "CONFIG_BLK_DEV_INITRD (Initramfs: the guest's userspace is ptelab's init in an \
                 uncompressed cpio.):"
            ),
            "{msg}"
        );
        assert!(msg.contains("add them to your --config"), "{msg}");
        // A [cells] option missing is a warning, not a refusal...
        let no_mglru = all.replace("CONFIG_LRU_GEN=y\n", "");
        let reclaim = Need::of(WorkloadKind::Reclaim, &[FolioSpec::Base], false);
        assert!(check(&no_mglru, arch, &Config::Ptelab, &reclaim).is_ok());
        let m = missing(&no_mglru, arch, Section::Cells);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].option, "CONFIG_LRU_GEN");
        // ...unless the cells asked for need it: refused, naming it.
        let no_thp = all.replace("CONFIG_TRANSPARENT_HUGEPAGE=y\n", "");
        let large = Need::of(
            WorkloadKind::MprotectToggle,
            &[FolioSpec::Mthp(65536)],
            false,
        );
        assert!(check(&no_thp, arch, &Config::Ptelab, &none).is_ok());
        let e = check(&no_thp, arch, &Config::File("my.config".into()), &large).unwrap_err();
        assert!(crate::error::is_usage(&e));
        assert_eq!(
            e.to_string(),
            "the x86_64 config cannot run the cells asked for: folios above 4K need \
             CONFIG_TRANSPARENT_HUGEPAGE: add them to your --config, or leave --config out to \
             build ptelab's config"
        );
        // `=m` is not `=y`.
        let module = all.replace("CONFIG_TMPFS=y", "CONFIG_TMPFS=m");
        assert_eq!(
            missing(&module, arch, Section::Boot)[0].option,
            "CONFIG_TMPFS"
        );
    }
}
