//! Sample-window markers (docs/guests.md, "Mechanism counters"): one
//! instruction at each edge of a timed section and of a sample, which
//! ptelab's QEMU plugin counts between. On hardware each is a NOP (an
//! 8-byte `nopl` on x86-64, an unallocated `HINT` on arm64), so host and KVM
//! runs are unchanged; under TCG each adds one instruction to the guest's
//! count, two per timed section.
//!
//! The begin and end markers sit inside the clock reads, so a window holds
//! the timed mm calls and not the reading of the clock.

use std::sync::atomic::{AtomicU64, Ordering};

use ptelab_counts::Marker;

/// Emit the marker whose code is `CODE`.
#[inline(always)]
fn emit<const CODE: u8>() {
    // SAFETY: a NOP: no registers, memory or flags change.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!(
            ".byte 0x0f, 0x1f, 0x84, 0x00, {code}, 0x6c, 0x74, 0x70",
            code = const CODE,
            options(nostack, preserves_flags)
        );
    }
    // SAFETY: as above (an unallocated hint executes as a NOP).
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!(
            "hint #{imm}",
            imm = const 0x70 + CODE as u32,
            options(nostack, preserves_flags)
        );
    }
}

/// Commits made by this process: the plugin numbers windows the same way.
static COMMITS: AtomicU64 = AtomicU64::new(0);

/// A sample begins: the plugin forgets warm-up and calibration.
#[inline(always)]
pub fn reset() {
    emit::<{ Marker::Reset.code() }>();
}

/// A sample ends: the plugin writes the window; its number is returned.
#[inline(always)]
pub fn commit() -> u64 {
    emit::<{ Marker::Commit.code() }>();
    COMMITS.fetch_add(1, Ordering::Relaxed)
}

/// The guest's init starts its next command: the plugin numbers that
/// command's commits from 0, as its own `COMMITS` does.
#[inline(always)]
pub fn step() {
    emit::<{ Marker::Step.code() }>();
}

/// A timed section of `phase` begins (phases past the plugin's
/// `MAX_PHASES` are not marked).
#[inline(always)]
pub fn begin(phase: usize) {
    match phase {
        0 => emit::<{ Marker::Begin(0).code() }>(),
        1 => emit::<{ Marker::Begin(1).code() }>(),
        _ => {}
    }
}

/// A timed section of `phase` ends.
#[inline(always)]
pub fn end(phase: usize) {
    match phase {
        0 => emit::<{ Marker::End(0).code() }>(),
        1 => emit::<{ Marker::End(1).code() }>(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_nops_here_and_commits_are_numbered() {
        reset();
        begin(0);
        begin(1);
        end(1);
        end(0);
        begin(7);
        end(7);
        let a = commit();
        let b = commit();
        assert!(b > a, "{a} then {b}");
    }

    #[test]
    fn phases_marked_are_the_plugins() {
        assert_eq!(
            ptelab_counts::MAX_PHASES,
            2,
            "begin/end mark phases 0 and 1"
        );
    }
}
