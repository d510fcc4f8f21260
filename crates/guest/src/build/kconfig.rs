//! ptelab's kernel config: a fragment on top of the arch's defconfig, kept
//! in `crates/guest/kconfig/` and documented there option by option, in
//! three sections. `[boot]`: what every guest needs; a config without one
//! is refused before the image builds. `[cells]`: what some experiments
//! need; a config without one builds, with a warning naming them.
//! `[lean]`: what no guest uses, switched off for a shorter build.

use std::collections::HashMap;

use crate::error::bail_usage;
use crate::workload::Arch;

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

/// Check a build's `.config` after `olddefconfig`: refuse one that cannot
/// boot a guest, naming the options; warn of the experiments it cannot run.
pub fn check(config: &str, arch: Arch, from: &Config) -> anyhow::Result<()> {
    let names = |m: &[Setting]| {
        m.iter()
            .map(|s| format!("{} ({})", s.option, s.why))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let boot = missing(config, arch, Section::Boot);
    if !boot.is_empty() {
        let remedy = match from {
            Config::Ptelab => "the tree's Kconfig lacks them or their dependencies: is it a Linux kernel of 6.1 or later?",
            Config::Defconfig => "leave --defconfig out to build ptelab's config",
            Config::File(_) => "add them to your --config, or leave --config out to build ptelab's config",
        };
        bail_usage!(
            "the {} config cannot boot a ptelab guest; it lacks {}: {remedy}",
            arch,
            names(&boot)
        );
    }
    let cells = missing(config, arch, Section::Cells);
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
        let all: String = settings(arch)
            .iter()
            .filter_map(|s| Some(format!("{}={}\n", s.option, s.value.as_ref()?)))
            .collect();
        assert!(missing(&all, arch, Section::Boot).is_empty());
        assert!(check(&all, arch, &Config::Ptelab).is_ok());
        let no_initrd = all.replace("CONFIG_BLK_DEV_INITRD=y\n", "");
        let e = check(&no_initrd, arch, &Config::File("my.config".into())).unwrap_err();
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
        // A [cells] option missing is a warning, not a refusal.
        let no_mglru = all.replace("CONFIG_LRU_GEN=y\n", "");
        assert!(check(&no_mglru, arch, &Config::Ptelab).is_ok());
        let m = missing(&no_mglru, arch, Section::Cells);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].option, "CONFIG_LRU_GEN");
        // `=m` is not `=y`.
        let module = all.replace("CONFIG_TMPFS=y", "CONFIG_TMPFS=m");
        assert_eq!(
            missing(&module, arch, Section::Boot)[0].option,
            "CONFIG_TMPFS"
        );
    }
}
