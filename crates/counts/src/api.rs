//! The QEMU plugin API levels the plugin speaks (docs/guests.md, "QEMU
//! versions"). A plugin exports the level it was written for; QEMU loads it
//! only when that level lies in the range it accepts, and that range moved:
//!
//! | QEMU        | accepts | what changed for ptelab's calls                         |
//! |-------------|---------|---------------------------------------------------------|
//! | 4.2 – 8.2   | 0 – 1   | (the original API)                                      |
//! | 9.0         | 2       | non-per-vCPU inline ops removed (ptelab uses none)      |
//! | 9.1 – 10.x  | 2 – 5   | `qemu_plugin_insn_data` copies into a buffer (level 3)  |
//! | 11.0        | 6       | register reads return bool (ptelab reads none)          |
//! | 11.1 –      | 7       | translation and at-exit callbacks take user data, no id |
//!
//! The level a plugin declares must be in the range, but the calls behave
//! as the running QEMU's newest level (`cur`) says: a level-2 plugin in
//! QEMU 10.0 gets the copying `insn_data`. So the plugin declares a level
//! by QEMU release ([`level_for_qemu`], which ptelab passes in [`ENV`]) and
//! binds its calls by the `cur` QEMU reports at install ([`Abi::of`]).
//! Measured: Debian 12's 7.2 (0..1), Debian 13's 10.0 (2..4) and sid's 11.1
//! (7..7).

/// The environment variable that tells the plugin which level to declare
/// (read when QEMU loads it, before it is installed).
pub const ENV: &str = "PTELAB_QEMU_PLUGIN_API";

/// What the plugin prints when asked only whether it loads (`probe=on`),
/// followed by `level L, QEMU accepts MIN..CUR, target T`.
pub const PROBE_LINE: &str = "ptelab plugin: loads: ";

/// The newest level the plugin speaks.
pub const NEWEST: i32 = 7;

/// The first QEMU release (major, minor) with TCG plugins.
pub const FIRST_QEMU_WITH_PLUGINS: (u32, u32) = (4, 2);

/// The newest QEMU release (major, minor) the plugin was measured on.
pub const NEWEST_QEMU_MEASURED: (u32, u32) = (11, 1);

/// A QEMU release (major, minor) from its version text: `7.2.22 (Debian
/// 1:7.2+dfsg-7+deb12u18+b3)` (what `--version` says) or `7.2` (the
/// plugin's `qemu=` argument) → (7, 2).
pub fn release(version: &str) -> Option<(u32, u32)> {
    let mut it = version.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The level to declare to QEMU `major.minor`; None before plugins
/// existed. A QEMU newer than any measured gets [`NEWEST`]: if it no longer
/// accepts that, it says so when loading the plugin.
pub fn level_for_qemu(major: u32, minor: u32) -> Option<i32> {
    Some(match (major, minor) {
        v if v < FIRST_QEMU_WITH_PLUGINS => return None,
        (..=8, _) => 1,
        (9..=10, _) => 2,
        (11, 0) => 6,
        _ => NEWEST,
    })
}

/// How `qemu_plugin_insn_data` hands over an instruction's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsnData {
    /// `const void *insn_data(insn)`: a pointer into QEMU's copy.
    Pointer,
    /// `size_t insn_data(insn, void *dest, size_t len)`: copied out.
    Copy,
    /// Level 2 (QEMU 9.0 only): either, told apart by what the call returns
    /// when made the copying way (see the plugin's `insn_bytes`).
    Either,
}

/// The shape of the calls the plugin makes, in a QEMU whose newest level is
/// `cur`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abi {
    pub insn_data: InsnData,
    /// Translation callbacks are `(tb, udata)` and registered with user
    /// data, at-exit callbacks `(udata)`; before, `(id, tb)` and
    /// `(id, udata)`.
    pub callbacks_with_udata: bool,
}

impl Abi {
    pub fn of(cur: i32) -> Abi {
        Abi {
            insn_data: match cur {
                ..=1 => InsnData::Pointer,
                2 => InsnData::Either,
                _ => InsnData::Copy,
            },
            callbacks_with_udata: cur >= 7,
        }
    }
}

/// The level to declare when ptelab did not say ([`ENV`] unset: QEMU run
/// by hand), from the calls this QEMU exports (`has`): scoreboards came
/// with level 2 (QEMU 9.0), `qemu_plugin_set_pc` with QEMU 11. QEMU 11.0
/// needs [`ENV`]`=6`.
pub fn level_from_exports(has: impl Fn(&str) -> bool) -> i32 {
    if has("qemu_plugin_set_pc") {
        NEWEST
    } else if has("qemu_plugin_scoreboard_new") {
        2
    } else {
        1
    }
}

/// The level in [`ENV`]'s value, when it is one the plugin speaks.
pub fn parse_level(value: &str) -> Option<i32> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|l| (1..=NEWEST).contains(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_from_version_text() {
        assert_eq!(
            release("7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"),
            Some((7, 2))
        );
        assert_eq!(release("7.2"), Some((7, 2)));
        assert_eq!(release("9.0.0"), Some((9, 0)));
        assert_eq!(release("garbage"), None);
    }

    #[test]
    fn levels_by_release() {
        assert_eq!(level_for_qemu(4, 1), None);
        assert_eq!(level_for_qemu(4, 2), Some(1));
        assert_eq!(level_for_qemu(7, 2), Some(1));
        assert_eq!(level_for_qemu(8, 2), Some(1));
        assert_eq!(level_for_qemu(9, 0), Some(2));
        assert_eq!(level_for_qemu(10, 0), Some(2));
        assert_eq!(level_for_qemu(10, 2), Some(2));
        assert_eq!(level_for_qemu(11, 0), Some(6));
        assert_eq!(level_for_qemu(11, 1), Some(7));
        assert_eq!(level_for_qemu(12, 0), Some(NEWEST));
    }

    #[test]
    fn calls_by_newest_level() {
        assert_eq!(Abi::of(1).insn_data, InsnData::Pointer);
        assert_eq!(Abi::of(2).insn_data, InsnData::Either);
        assert_eq!(Abi::of(4).insn_data, InsnData::Copy);
        assert!(!Abi::of(6).callbacks_with_udata);
        assert!(Abi::of(7).callbacks_with_udata);
    }

    #[test]
    fn levels_from_exports_and_env() {
        assert_eq!(level_from_exports(|_| false), 1);
        assert_eq!(level_from_exports(|s| s == "qemu_plugin_scoreboard_new"), 2);
        assert_eq!(level_from_exports(|_| true), 7);
        assert_eq!(parse_level("7"), Some(7));
        assert_eq!(parse_level(" 2\n"), Some(2));
        assert_eq!(parse_level("8"), None);
        assert_eq!(parse_level("0"), None);
        assert_eq!(parse_level("x"), None);
    }
}
