//! The vocabulary shared by ptelab and its QEMU plugin (docs/guests.md,
//! "Mechanism counters"):
//!
//! - [`Marker`]: the instructions ptelab's measurement loop executes at the
//!   edges of each sample window. They are NOPs on hardware (an 8-byte
//!   `nopl` with a displacement no compiler emits on x86-64, an unallocated
//!   `HINT` on arm64), so host and KVM runs are unchanged by them; the
//!   plugin sees them under TCG.
//! - [`classify`]: which guest instructions the plugin counts, from their
//!   bytes: markers and TLB invalidations of both arches.
//! - [`record`]: the text the plugin writes per window, and its parser.
//! - [`api`]: which plugin API level each QEMU release loads, and how the
//!   plugin's calls look at each.
//!
//! Pure: no I/O, no unsafe. Unit-tested on byte patterns of both arches.

#![forbid(unsafe_code)]

pub mod record;

pub mod api;

/// Phases one sample can time separately (prot-transition and mremap-move
/// time two; their windows may overlap: mremap's iteration contains its move).
pub const MAX_PHASES: u8 = 2;

/// A guest architecture, as QEMU's `target_name` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    X86_64,
    Aarch64,
}

impl Target {
    /// QEMU's `info->target_name`.
    pub fn from_qemu(name: &str) -> Option<Target> {
        match name {
            "x86_64" => Some(Target::X86_64),
            "aarch64" => Some(Target::Aarch64),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Target::X86_64 => "x86_64",
            Target::Aarch64 => "aarch64",
        }
    }
}

/// A window edge in ptelab's measurement loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// A sample begins: forget whatever was counted since the last commit
    /// (warm-up, calibration and the flush-counting pass are not samples).
    Reset,
    /// A sample ends: write what each phase counted, as window `seq` (the
    /// commits' running number, which ptelab keeps too).
    Commit,
    /// A timed section of phase N begins.
    Begin(u8),
    /// A timed section of phase N ends.
    End(u8),
    /// The guest's init starts its next command (a boot that runs several):
    /// that command numbers its commits from 0, so the plugin does too, and
    /// marks where the command's windows begin (`record`'s `S` line).
    Step,
}

/// arm64 `HINT #imm` immediates from here up are the markers (unallocated
/// hints execute as NOPs).
const HINT_BASE: u32 = 0x70;
/// x86-64 marker: `nopl DISP(%rax,%rax,1)`, `0F 1F 84 00 disp32`, with the
/// displacement's upper three bytes "ptl" and its low byte the code.
const NOPL: [u8; 4] = [0x0F, 0x1F, 0x84, 0x00];
const NOPL_TAG: [u8; 3] = [0x6C, 0x74, 0x70];

impl Marker {
    /// 0 reset, 1 commit, 2.. begin phase N, then end phase N, then step.
    pub const fn code(self) -> u8 {
        match self {
            Marker::Reset => 0,
            Marker::Commit => 1,
            Marker::Begin(p) => 2 + p,
            Marker::End(p) => 2 + MAX_PHASES + p,
            Marker::Step => 2 + 2 * MAX_PHASES,
        }
    }

    pub fn from_code(code: u8) -> Option<Marker> {
        match code {
            0 => Some(Marker::Reset),
            1 => Some(Marker::Commit),
            c if (2..2 + MAX_PHASES).contains(&c) => Some(Marker::Begin(c - 2)),
            c if (2 + MAX_PHASES..2 + 2 * MAX_PHASES).contains(&c) => {
                Some(Marker::End(c - 2 - MAX_PHASES))
            }
            c if c == 2 + 2 * MAX_PHASES => Some(Marker::Step),
            _ => None,
        }
    }

    /// The arm64 instruction word (`HINT #0x70+code`).
    pub fn arm64_word(self) -> u32 {
        0xD503_201F | ((HINT_BASE + self.code() as u32) << 5)
    }

    /// The x86-64 instruction bytes.
    pub fn x86_bytes(self) -> [u8; 8] {
        let [a, b, c] = NOPL_TAG;
        let [n0, n1, n2, n3] = NOPL;
        [n0, n1, n2, n3, self.code(), a, b, c]
    }
}

/// A TLB-maintenance instruction the plugin counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tlb {
    /// arm64 TLBI of one page (VAE1, VALE1, VAAE1, VAALE1; IS, OS or local).
    TlbiPage,
    /// arm64 TLBI of a range (RVAE1, RVALE1, …; FEAT_TLBIRANGE).
    TlbiRange,
    /// arm64 TLBI of an ASID (ASIDE1).
    TlbiAsid,
    /// arm64 TLBI of everything at EL1 (VMALLE1).
    TlbiAll,
    /// arm64 TLBI of another kind (EL2, stage 2, …).
    TlbiOther,
    /// arm64 DSB (the barrier every TLBI sequence ends with).
    Dsb,
    /// x86-64 INVLPG.
    Invlpg,
    /// x86-64 INVPCID.
    Invpcid,
    /// x86-64 MOV to CR3 (a full flush of the non-global entries, or a
    /// PCID switch).
    Cr3Write,
}

impl Tlb {
    /// Every kind, in the order a record lists them.
    pub const ALL: [Tlb; 9] = [
        Tlb::TlbiPage,
        Tlb::TlbiRange,
        Tlb::TlbiAsid,
        Tlb::TlbiAll,
        Tlb::TlbiOther,
        Tlb::Dsb,
        Tlb::Invlpg,
        Tlb::Invpcid,
        Tlb::Cr3Write,
    ];

    pub fn index(self) -> usize {
        Tlb::ALL
            .iter()
            .position(|&k| k == self)
            .expect("every kind is listed")
    }

    /// The name used in records, JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Tlb::TlbiPage => "tlbi-page",
            Tlb::TlbiRange => "tlbi-range",
            Tlb::TlbiAsid => "tlbi-asid",
            Tlb::TlbiAll => "tlbi-all",
            Tlb::TlbiOther => "tlbi-other",
            Tlb::Dsb => "dsb",
            Tlb::Invlpg => "invlpg",
            Tlb::Invpcid => "invpcid",
            Tlb::Cr3Write => "cr3-write",
        }
    }

    pub fn from_name(name: &str) -> Option<Tlb> {
        Tlb::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A TLB invalidation proper (not the barrier that completes one).
    pub fn invalidates(self) -> bool {
        self != Tlb::Dsb
    }

    /// The architecture whose instruction this is.
    pub fn target(self) -> Target {
        match self {
            Tlb::Invlpg | Tlb::Invpcid | Tlb::Cr3Write => Target::X86_64,
            _ => Target::Aarch64,
        }
    }
}

/// An instruction the plugin acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insn {
    Marker(Marker),
    Tlb(Tlb),
}

/// What the instruction whose bytes start `bytes` is, when the plugin
/// counts it (`None` for every other instruction).
pub fn classify(target: Target, bytes: &[u8]) -> Option<Insn> {
    match target {
        Target::Aarch64 => {
            let w = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
            classify_arm64(w)
        }
        Target::X86_64 => classify_x86(bytes),
    }
}

fn classify_arm64(w: u32) -> Option<Insn> {
    // HINT #imm.
    if w & 0xFFFF_F01F == 0xD503_201F {
        let imm = (w >> 5) & 0x7F;
        return imm
            .checked_sub(HINT_BASE)
            .and_then(|c| Marker::from_code(c as u8))
            .map(Insn::Marker);
    }
    // DSB <option> (CRm is the option; 0 and 4 are SSBB/PSSBB, not DSBs).
    if w & 0xFFFF_F0FF == 0xD503_309F {
        let crm = (w >> 8) & 0xF;
        return (crm != 0 && crm != 4).then_some(Insn::Tlb(Tlb::Dsb));
    }
    // SYS #op1, C8, Cm, #op2: TLBI.
    if w & 0xFFF8_F000 == 0xD508_8000 {
        let op1 = (w >> 16) & 0x7;
        let crm = (w >> 8) & 0xF;
        let op2 = (w >> 5) & 0x7;
        let kind = match (op1, crm, op2) {
            // CRm 1 outer shareable, 3 inner shareable, 7 local.
            (0, 1 | 3 | 7, 0) => Tlb::TlbiAll,
            (0, 1 | 3 | 7, 2) => Tlb::TlbiAsid,
            (0, 1 | 3 | 7, 1 | 3 | 5 | 7) => Tlb::TlbiPage,
            // CRm 2 inner shareable, 5 outer shareable, 6 local: ranges.
            (0, 2 | 5 | 6, 1 | 3 | 5 | 7) => Tlb::TlbiRange,
            _ => Tlb::TlbiOther,
        };
        return Some(Insn::Tlb(kind));
    }
    None
}

/// x86 legacy prefixes (the opcode follows them, and REX, in any order).
fn is_legacy_prefix(b: u8) -> bool {
    matches!(
        b,
        0x66 | 0x67 | 0xF0 | 0xF2 | 0xF3 | 0x2E | 0x36 | 0x3E | 0x26 | 0x64 | 0x65
    )
}

fn classify_x86(bytes: &[u8]) -> Option<Insn> {
    let mut i = 0;
    let mut opsize = false;
    while i < bytes.len() && is_legacy_prefix(bytes[i]) {
        opsize |= bytes[i] == 0x66;
        i += 1;
    }
    let mut rex_r = false;
    if let Some(&b) = bytes.get(i) {
        if b & 0xF0 == 0x40 {
            rex_r = b & 0x04 != 0;
            i += 1;
        }
    }
    let op = bytes.get(i..)?;
    match op {
        [0x0F, 0x1F, 0x84, 0x00, code, rest @ ..] if rest.starts_with(&NOPL_TAG) => {
            Marker::from_code(*code).map(Insn::Marker)
        }
        // INVLPG m: 0F 01 /7 with a memory operand (mod 3 is SWAPGS/RDTSCP).
        [0x0F, 0x01, modrm, ..] if (modrm >> 3) & 7 == 7 && modrm >> 6 != 3 => {
            Some(Insn::Tlb(Tlb::Invlpg))
        }
        // INVPCID: 66 0F 38 82 /r.
        [0x0F, 0x38, 0x82, ..] if opsize => Some(Insn::Tlb(Tlb::Invpcid)),
        // MOV CR3, r64: 0F 22 /r with reg 3 (REX.R would make it CR11).
        [0x0F, 0x22, modrm, ..] if (modrm >> 3) & 7 == 3 && !rex_r => {
            Some(Insn::Tlb(Tlb::Cr3Write))
        }
        _ => None,
    }
}

/// Whether a guest virtual address is the kernel's: the top bit is set in
/// every kernel address of both arches (x86-64 from 0xffff800000000000,
/// arm64 from 0xfff0000000000000 with 52-bit VAs) and in no user address.
pub fn is_kernel_address(vaddr: u64) -> bool {
    vaddr >> 63 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(w: u32) -> Option<Insn> {
        classify(Target::Aarch64, &w.to_le_bytes())
    }

    #[test]
    fn marker_codes_round_trip_on_both_arches() {
        let all = [
            Marker::Reset,
            Marker::Commit,
            Marker::Begin(0),
            Marker::Begin(1),
            Marker::End(0),
            Marker::End(1),
            Marker::Step,
        ];
        let codes: Vec<u8> = all.iter().map(|m| m.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6]);
        for m in all {
            assert_eq!(Marker::from_code(m.code()), Some(m));
            assert_eq!(arm(m.arm64_word()), Some(Insn::Marker(m)));
            assert_eq!(
                classify(Target::X86_64, &m.x86_bytes()),
                Some(Insn::Marker(m))
            );
        }
        assert_eq!(Marker::from_code(7), None);
        // `hint #0x70` as GNU as assembles it.
        assert_eq!(Marker::Reset.arm64_word(), 0xD503_2E1F);
        assert_eq!(
            Marker::Commit.x86_bytes(),
            [0x0F, 0x1F, 0x84, 0x00, 0x01, 0x6C, 0x74, 0x70]
        );
    }

    #[test]
    fn ordinary_nops_and_hints_are_not_markers() {
        // nop, yield, the BTI and PAC hints, and an unallocated hint below ours.
        for w in [
            0xD503_201F,
            0xD503_203F,
            0xD503_245F,
            0xD503_233F,
            0xD503_2C1F,
        ] {
            assert_eq!(arm(w), None, "{w:#x}");
        }
        // hint #0x77 and #0x7f: above the codes in use.
        assert_eq!(arm(0xD503_201F | (0x77 << 5)), None);
        assert_eq!(arm(0xD503_201F | (0x7F << 5)), None);
        // The compilers' 8-byte NOP (displacement 0) and a 66-prefixed one.
        assert_eq!(
            classify(Target::X86_64, &[0x0F, 0x1F, 0x84, 0, 0, 0, 0, 0]),
            None
        );
        assert_eq!(
            classify(Target::X86_64, &[0x66, 0x0F, 0x1F, 0x84, 0, 0, 0, 0, 0]),
            None
        );
        // Our displacement with another tag byte.
        assert_eq!(
            classify(Target::X86_64, &[0x0F, 0x1F, 0x84, 0, 1, 0x6C, 0x74, 0x71]),
            None
        );
        assert_eq!(classify(Target::X86_64, &[0x0F]), None);
        assert_eq!(classify(Target::Aarch64, &[0x1F, 0x20]), None);
    }

    #[test]
    fn arm64_tlb_instructions() {
        // Words as GNU as assembles them, for each kind the kernel issues.
        let cases = [
            (0xD508_8320, Tlb::TlbiPage),  // tlbi vae1is, x0
            (0xD508_83A0, Tlb::TlbiPage),  // tlbi vale1is, x0
            (0xD508_8360, Tlb::TlbiPage),  // tlbi vaae1is, x0
            (0xD508_87A0, Tlb::TlbiPage),  // tlbi vale1, x0
            (0xD508_8220, Tlb::TlbiRange), // tlbi rvae1is, x0
            (0xD508_82A0, Tlb::TlbiRange), // tlbi rvale1is, x0
            (0xD508_8340, Tlb::TlbiAsid),  // tlbi aside1is, x0
            (0xD508_831F, Tlb::TlbiAll),   // tlbi vmalle1is
            (0xD508_871F, Tlb::TlbiAll),   // tlbi vmalle1
            (0xD50C_831F, Tlb::TlbiOther), // tlbi alle2is
            (0xD503_3B9F, Tlb::Dsb),       // dsb ish
            (0xD503_3A9F, Tlb::Dsb),       // dsb ishst
            (0xD503_3F9F, Tlb::Dsb),       // dsb sy
        ];
        for (w, kind) in cases {
            assert_eq!(arm(w), Some(Insn::Tlb(kind)), "{w:#x}");
            assert_eq!(kind.target(), Target::Aarch64, "{kind:?}");
        }
        // Not TLB maintenance: isb, dmb ish, ssbb, dc civac, ic iallu.
        for w in [
            0xD503_3FDF,
            0xD503_3BBF,
            0xD503_309F,
            0xD50B_7E20,
            0xD508_751F,
        ] {
            assert_eq!(arm(w), None, "{w:#x}");
        }
    }

    #[test]
    fn x86_tlb_instructions() {
        let x = |b: &[u8]| classify(Target::X86_64, b);
        assert_eq!(x(&[0x0F, 0x01, 0x38]), Some(Insn::Tlb(Tlb::Invlpg))); // invlpg (%rax)
        assert_eq!(x(&[0x0F, 0x01, 0x3F]), Some(Insn::Tlb(Tlb::Invlpg))); // invlpg (%rdi)
        assert_eq!(x(&[0x41, 0x0F, 0x01, 0x38]), Some(Insn::Tlb(Tlb::Invlpg))); // invlpg (%r8)
        assert_eq!(
            x(&[0x0F, 0x01, 0x7C, 0x24, 0x08]),
            Some(Insn::Tlb(Tlb::Invlpg))
        );
        assert_eq!(x(&[0x0F, 0x01, 0xF8]), None); // swapgs
        assert_eq!(x(&[0x0F, 0x01, 0xF9]), None); // rdtscp
        assert_eq!(x(&[0x0F, 0x01, 0x10]), None); // lgdt
        assert_eq!(
            x(&[0x66, 0x0F, 0x38, 0x82, 0x07]),
            Some(Insn::Tlb(Tlb::Invpcid))
        );
        assert_eq!(
            x(&[0x66, 0x44, 0x0F, 0x38, 0x82, 0x07]),
            Some(Insn::Tlb(Tlb::Invpcid))
        );
        assert_eq!(x(&[0x0F, 0x38, 0x82, 0x07]), None); // no 66: not INVPCID
        assert_eq!(x(&[0x0F, 0x22, 0xD8]), Some(Insn::Tlb(Tlb::Cr3Write))); // mov %rax,%cr3
        assert_eq!(x(&[0x0F, 0x22, 0xDF]), Some(Insn::Tlb(Tlb::Cr3Write))); // mov %rdi,%cr3
        assert_eq!(x(&[0x0F, 0x22, 0xE0]), None); // mov %rax,%cr4
        assert_eq!(x(&[0x44, 0x0F, 0x22, 0xD8]), None); // mov %rax,%cr11
        assert_eq!(x(&[0x0F, 0x20, 0xD8]), None); // mov %cr3,%rax: a read
        assert_eq!(x(&[0x90]), None);
        for k in [Tlb::Invlpg, Tlb::Invpcid, Tlb::Cr3Write] {
            assert_eq!(k.target(), Target::X86_64, "{k:?}");
        }
    }

    #[test]
    fn tlb_kinds_have_unique_names() {
        for k in Tlb::ALL {
            assert_eq!(Tlb::from_name(k.name()), Some(k));
            assert_eq!(Tlb::ALL[k.index()], k);
        }
        assert!(!Tlb::Dsb.invalidates() && Tlb::Invlpg.invalidates());
        assert_eq!(Tlb::from_name("tlbi"), None);
    }

    #[test]
    fn kernel_addresses() {
        assert!(is_kernel_address(0xffff_ffff_8100_0000));
        assert!(is_kernel_address(0xffff_8000_8000_0000));
        assert!(!is_kernel_address(0x0000_7fff_ffff_f000));
        assert!(!is_kernel_address(0x0000_ffff_ffff_f000));
    }

    #[test]
    fn targets() {
        assert_eq!(Target::from_qemu("aarch64"), Some(Target::Aarch64));
        assert_eq!(
            Target::from_qemu("x86_64").map(Target::name),
            Some("x86_64")
        );
        assert_eq!(Target::from_qemu("riscv64"), None);
    }
}
