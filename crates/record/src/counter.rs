//! One mechanism counter of a profiled cell ([`Profile`]), per call, as
//! `bisect --metric` follows it (docs/bisect.md): `tlbi`, `tlbi:KIND`,
//! `calls:FUNCTION`, `insns:FUNCTION`.

use ptelab_counts::{Target, Tlb};
use serde::{Deserialize, Serialize};

use super::Profile;
use crate::workload::Arch;

/// A counter of [`Profile`], named as the flag takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Counter {
    /// TLB invalidations, every kind but the DSB barrier.
    Tlbi,
    /// One TLB-maintenance kind.
    Tlb(Tlb),
    /// Entries into a kernel function.
    Calls(String),
    /// Instructions executed in a kernel function, code inlined into it included.
    Insns(String),
}

/// What `--metric` takes besides `instructions` and `time`.
pub const ACCEPTED: &str = "tlbi (TLB invalidations per call), tlbi:KIND (one kind: page, range, \
     asid, all, other, dsb on arm64; invlpg, invpcid, cr3-write on x86_64), calls:FUNCTION \
     (entries into a kernel function per call), insns:FUNCTION (instructions in it per call)";

/// A TLB kind as `tlbi:KIND` names it: arm64's TLBI kinds without their
/// `tlbi-` prefix, every other kind by its record name.
fn short(k: Tlb) -> &'static str {
    k.name().strip_prefix("tlbi-").unwrap_or(k.name())
}

impl Counter {
    /// `text` as `--metric` takes it; the error says what is accepted.
    pub fn parse(text: &str) -> Result<Counter, String> {
        let function = |f: &str, make: fn(String) -> Counter| {
            if f.is_empty() || f.contains(char::is_whitespace) {
                Err(format!(
                    "'{text}' names no kernel function: pass its symbol, e.g. calls:vm_normal_page"
                ))
            } else {
                Ok(make(f.to_string()))
            }
        };
        match text.split_once(':') {
            None if text == "tlbi" => Ok(Counter::Tlbi),
            Some(("tlbi", kind)) => Tlb::ALL
                .into_iter()
                .find(|&k| short(k) == kind || k.name() == kind)
                .map(Counter::Tlb)
                .ok_or_else(|| {
                    format!(
                        "unknown TLB kind '{kind}': accepted kinds are {}",
                        Tlb::ALL.map(short).join(", ")
                    )
                }),
            Some(("calls", f)) => function(f, Counter::Calls),
            Some(("insns", f)) => function(f, Counter::Insns),
            _ => Err(format!(
                "unknown metric '{text}': accepted are instructions, time, {ACCEPTED}"
            )),
        }
    }

    /// The name `parse` takes back: `tlbi`, `tlbi:page`, `calls:vm_normal_page`.
    pub fn name(&self) -> String {
        match self {
            Counter::Tlbi => "tlbi".into(),
            Counter::Tlb(k) => format!("tlbi:{}", short(*k)),
            Counter::Calls(f) => format!("calls:{f}"),
            Counter::Insns(f) => format!("insns:{f}"),
        }
    }

    /// The kernel function counted, if one is.
    pub fn function(&self) -> Option<&str> {
        match self {
            Counter::Calls(f) | Counter::Insns(f) => Some(f),
            Counter::Tlbi | Counter::Tlb(_) => None,
        }
    }

    /// Its figure per call in `p`: 0 for a kind or function that never
    /// ran (a profile lists only those that did).
    pub fn of(&self, p: &Profile) -> f64 {
        match self {
            Counter::Tlbi => p.tlb_invalidations(),
            Counter::Tlb(k) => p.tlb.get(k.name()).copied().unwrap_or(0.0),
            Counter::Calls(f) => p.function(f).map_or(0.0, |f| f.entries),
            Counter::Insns(f) => p.function(f).map_or(0.0, |f| f.instructions),
        }
    }

    /// A TLB kind must be an instruction of the guests' arch: another
    /// arch's kind is 0 on every kernel.
    pub fn check_arch(&self, arch: Arch) -> Result<(), String> {
        let Counter::Tlb(k) = self else { return Ok(()) };
        let fits = matches!(
            (k.target(), arch),
            (Target::X86_64, Arch::X86_64) | (Target::Aarch64, Arch::Arm64)
        );
        if fits {
            return Ok(());
        }
        let theirs: Vec<&str> = Tlb::ALL
            .into_iter()
            .filter(|o| o.target() != k.target())
            .map(short)
            .collect();
        Err(format!(
            "{} counts an instruction {} guests never execute: for {arch} pass tlbi or tlbi:KIND \
             with KIND one of {}",
            self.name(),
            arch,
            theirs.join(", ")
        ))
    }

    /// The unit after a figure, and the step table's column:
    /// `tlbi/call`, `invlpg/call`, `vm_normal_page calls/call`.
    pub fn unit(&self) -> String {
        match self {
            Counter::Tlbi => "tlbi/call".into(),
            Counter::Tlb(k) => format!("{}/call", k.name()),
            Counter::Calls(f) => format!("{f} calls/call"),
            Counter::Insns(f) => format!("{f} instr/call"),
        }
    }

    /// The figure in words: `entries into vm_normal_page per call`.
    pub fn words(&self) -> String {
        match self {
            Counter::Tlbi => "TLB invalidations per call (every kind but the DSB barrier)".into(),
            Counter::Tlb(k) => format!("{} instructions per call", k.name()),
            Counter::Calls(f) => format!("entries into {f} per call"),
            Counter::Insns(f) => {
                format!(
                    "guest instructions executed in {f} per call (code inlined into it included)"
                )
            }
        }
    }
}

impl TryFrom<String> for Counter {
    type Error = String;

    fn try_from(s: String) -> Result<Counter, String> {
        Counter::parse(&s)
    }
}

impl From<Counter> for String {
    fn from(c: Counter) -> String {
        c.name()
    }
}

impl std::fmt::Display for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FunctionCount;

    #[test]
    fn names_parse_back_and_bad_ones_say_what_is_accepted() {
        for text in [
            "tlbi",
            "tlbi:page",
            "tlbi:range",
            "tlbi:dsb",
            "tlbi:invlpg",
            "tlbi:cr3-write",
            "calls:vm_normal_page",
            "insns:change_pte_range.isra.0",
        ] {
            let c = Counter::parse(text).unwrap();
            assert_eq!(c.name(), text);
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<Counter>(&json).unwrap(), c);
        }
        assert_eq!(
            Counter::parse("tlbi:tlbi-page").unwrap(),
            Counter::Tlb(Tlb::TlbiPage)
        );
        for (bad, needle) in [
            ("tlbi:pages", "accepted kinds are page, range"),
            ("calls:", "names no kernel function"),
            ("insns:a b", "names no kernel function"),
            (
                "entries:vm_normal_page",
                "accepted are instructions, time, tlbi",
            ),
            ("tlb", "calls:FUNCTION"),
        ] {
            let e = Counter::parse(bad).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn figures_come_from_the_profile_and_absent_ones_are_zero() {
        let p = Profile {
            windows: 3,
            kernel_instructions: 1000.0,
            user_instructions: 10.0,
            tlb: [("invlpg".to_string(), 2.0), ("cr3-write".to_string(), 0.5)].into(),
            functions: vec![FunctionCount {
                name: "vm_normal_page".into(),
                entries: 100.0,
                instructions: 1900.0,
            }],
            symbols: "kallsyms".into(),
            max_window_deviation: 0.0,
            parts: Vec::new(),
        };
        let of = |t: &str| Counter::parse(t).unwrap().of(&p);
        assert_eq!(of("tlbi"), 2.5);
        assert_eq!(of("tlbi:invlpg"), 2.0);
        assert_eq!(of("tlbi:invpcid"), 0.0);
        assert_eq!(of("calls:vm_normal_page"), 100.0);
        assert_eq!(of("insns:vm_normal_page"), 1900.0);
        assert_eq!(of("calls:folio_pte_batch"), 0.0);
    }

    #[test]
    fn a_tlb_kind_must_be_the_guests_arch() {
        let c = |t: &str| Counter::parse(t).unwrap();
        assert!(c("tlbi:invlpg").check_arch(Arch::X86_64).is_ok());
        assert!(c("tlbi:page").check_arch(Arch::Arm64).is_ok());
        assert!(c("tlbi").check_arch(Arch::Arm64).is_ok());
        assert!(c("calls:f").check_arch(Arch::Arm64).is_ok());
        let e = c("tlbi:invlpg").check_arch(Arch::Arm64).unwrap_err();
        assert!(e.contains("page, range, asid, all, other, dsb"), "{e}");
        let e = c("tlbi:page").check_arch(Arch::X86_64).unwrap_err();
        assert!(e.contains("invlpg, invpcid, cr3-write"), "{e}");
    }
}
