//! Seed 002 (`mremap-move`): map a region, fill it, `mremap` it
//! `MREMAP_MAYMOVE | MREMAP_FIXED` to `addr + len`, `munmap` it; repeated.
//!
//! Two phases are reported, from the same iterations:
//! - `mremap`: ns per `mremap` call, the only mm call whose PTE loop
//!   (`move_ptes`) the seed's patch batches. This is the number a kernel
//!   developer compares across kernels and folio sizes.
//! - `iteration`: ns per whole iteration (mremap + munmap + mmap + madvise +
//!   fill), the quantity the seed's cover letter reports (total time of 10,000
//!   iterations). It is dominated by page allocation, zeroing and the fill,
//!   so a batching win in `mremap` shows diluted here; both are given so that
//!   neither figure is mistaken for the other.
//!
//! Why the `mremap` phase is timed alone, not the seed's whole loop: the
//! seed's figure mixes fault-in and freeing of 256 pages with the move; the
//! move is the part the patch changes and the only part whose TLB flushes
//! docs/kernel.md §7 predicts (one `flush_tlb_range` per `move_ptes` call, i.e. per PMD
//! extent; x86 turns a range of more than 33 pages into a full flush).
//!
//! Iteration shape. The runner populates and verifies a region; that region
//! is the first iteration's mapping: it is moved (by `mremap`, which keeps its
//! folios) into a placement with room above it, at `A`. Every iteration then
//! starts with `A` mapped and filled and ends the same way:
//! `mremap(A -> A+len)` (timed), `munmap(A+len)`, `mmap(A)`, madvise + fault
//! every page ([`Region::populate`], the runner's own procedure, so later
//! iterations get the same layout) and `memset(0xAA)` like the seed. The
//! runner's verification after sampling therefore observes a mapping made by
//! the loop itself, and the constructor verifies the *moved* mapping once
//! (folios must survive the move).
//!
//! Placement: `A` is aligned to at least 2 MiB, so a 1 MiB source and its
//! destination share one PTE table, as at the seed's fixed `1 << 30`. (With an
//! odd 1 MiB offset the destination is in the next PMD, and the emptied source
//! PTE table is freed with an extra TLB flush.) For sizes that are multiples of
//! 2 MiB the kernel moves whole PTE tables (`move_normal_pmd`), not PTEs.
//!
//! The destination must be free: `MREMAP_FIXED` silently unmaps whatever is
//! there. The room above `A` was unmapped when `A` was placed, and it is
//! checked in /proc/self/maps before every batch; ptelab measures on one
//! thread, so nothing maps there in between.
//!
//! `--neighbor` does not apply: the moved mapping never merges with the
//! runner's neighbour mapping.

use std::time::Instant;

use anyhow::{bail, Context};

use super::marker;
use super::ops::{BatchTime, KernelOp};
use crate::kernel::layout;
use crate::kernel::region::{self, vmas_overlapping, Region};
use crate::workload::folio::PMD_SIZE;

/// Byte the seed's `memset` writes.
const FILL: u8 = 0xAA;

/// Source `A` of a region (between iterations the region is mapped there).
fn src(r: &Region) -> *mut u8 {
    r.addr()
}

/// Destination `A + len`.
fn dst(r: &Region) -> *mut u8 {
    // SAFETY: the end of the region, computed, not dereferenced.
    unsafe { r.addr().add(r.len()) }
}

/// The mremap-move workload over the runner's regions.
pub struct MremapMove {
    /// The mappings at `A` (owned: dropped = unmapped).
    regions: Vec<Region>,
    /// The runner's regions, left as PROT_NONE placeholders at their old
    /// addresses so that their own drop unmaps only what they own.
    _origins: Vec<Region>,
    /// Every slot's mapping is at `A + len` (moved), not at `A`.
    moved: bool,
}

fn munmap(addr: *mut u8, len: usize) -> anyhow::Result<()> {
    // SAFETY: unmaps a range this workload mapped and no longer references.
    if unsafe { libc::munmap(addr.cast(), len) } != 0 {
        return Err(std::io::Error::last_os_error()).context("munmap");
    }
    Ok(())
}

/// mmap exactly `[addr, addr+len)`, refusing to replace anything there.
fn mmap_at(addr: *mut u8, len: usize, prot: i32, extra: i32) -> anyhow::Result<()> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
    let p = unsafe {
        libc::mmap(
            addr.cast(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE | extra,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error()).context(format!("mmap at {addr:p}"));
    }
    if p.cast::<u8>() != addr {
        // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat it as a hint.
        // SAFETY: the mapping just made, unused.
        unsafe { libc::munmap(p, len) };
        bail!("mmap at {addr:p} landed at {p:p} (range taken)");
    }
    Ok(())
}

impl MremapMove {
    /// Take over the runner's populated (and verified) regions.
    pub fn new(origins: Vec<Region>) -> anyhow::Result<MremapMove> {
        let verify = layout::verification_available().is_ok();
        let mut op = MremapMove {
            regions: Vec::with_capacity(origins.len()),
            _origins: Vec::with_capacity(origins.len()),
            moved: false,
        };
        for origin in origins {
            let region = relocate(&origin, verify)?;
            op.regions.push(region);
            op._origins.push(origin);
        }
        if verify {
            op.verify_moved()?;
        }
        Ok(op)
    }

    /// One untimed move: the moved mapping must keep the requested layout.
    fn verify_moved(&mut self) -> anyhow::Result<()> {
        for i in 0..self.regions.len() {
            let r = &self.regions[i];
            let before = layout::observe(src(r), r.len(), r.spec())?;
            region::mremap_fixed(src(r), r.len(), dst(r))?;
            let after = layout::observe(dst(r), r.len(), r.spec())?;
            munmap(dst(r), r.len())?;
            self.refill(i)?;
            if after.histogram != before.histogram {
                bail!(
                    "mremap changed the layout: at the source {}, at the destination {}",
                    before.summary(),
                    after.summary()
                );
            }
        }
        Ok(())
    }

    /// Map `A` again and populate it the runner's way, then fill like the seed.
    fn refill(&mut self, i: usize) -> anyhow::Result<()> {
        let r = &mut self.regions[i];
        mmap_at(src(r), r.len(), libc::PROT_READ | libc::PROT_WRITE, 0)?;
        r.populate()?;
        // SAFETY: [A, A+len) was just mapped read-write and is ours.
        unsafe { std::ptr::write_bytes(src(r), FILL, r.len()) };
        Ok(())
    }

    /// Bring every region back to "mapped and filled at A" (untimed).
    fn restore(&mut self) -> anyhow::Result<()> {
        if !self.moved {
            return Ok(());
        }
        for i in 0..self.regions.len() {
            let r = &self.regions[i];
            munmap(dst(r), r.len())?;
            self.refill(i)?;
        }
        self.moved = false;
        Ok(())
    }

    fn move_all(&mut self) -> anyhow::Result<()> {
        self.moved = true;
        for r in &self.regions {
            region::mremap_fixed(src(r), r.len(), dst(r))?;
        }
        Ok(())
    }
}

/// Move `origin`'s populated mapping to a fresh placement with free room
/// above it; leave a PROT_NONE placeholder at the origin's range.
fn relocate(origin: &Region, verify: bool) -> anyhow::Result<Region> {
    let len = origin.len();
    let region = Region::map_with_room(len as u64, origin.spec(), len, PMD_SIZE as usize)?;
    let before = verify
        .then(|| layout::observe(origin.addr(), len, origin.spec()))
        .transpose()?;
    region::mremap_fixed(origin.addr(), len, region.addr())?;
    // The old range is unmapped now; the placeholder makes the origin's drop
    // unmap its own range and nobody else's. (Failure means another thread
    // mapped into it within microseconds; the origin's drop would then unmap
    // that mapping, so it is better to abort loudly.)
    if let Err(e) = mmap_at(origin.addr(), len, libc::PROT_NONE, libc::MAP_NORESERVE) {
        panic!("re-reserving the runner's region after moving it: {e:#}");
    }
    if let Some(before) = before {
        let after = layout::observe(region.addr(), len, region.spec())?;
        if after.histogram != before.histogram {
            bail!(
                "moving the populated region changed its layout: before {}, after {}",
                before.summary(),
                after.summary()
            );
        }
    }
    check_room(&region)?;
    Ok(region)
}

/// The destination `[A+len, A+2len)` must be unmapped.
fn check_room(r: &Region) -> anyhow::Result<()> {
    let n = vmas_overlapping(dst(r) as usize, r.len())?;
    if n != 0 {
        bail!(
            "the mremap destination {:p}..+{} is not free ({n} mapping(s) there); \
             another thread mapped into it",
            dst(r),
            r.len()
        );
    }
    Ok(())
}

impl KernelOp for MremapMove {
    fn phases(&self) -> Vec<Option<&'static str>> {
        crate::workload::MREMAP_PHASES.map(Some).to_vec()
    }

    fn calls_per_iteration(&self) -> u64 {
        self.regions.len() as u64
    }

    fn run(&mut self, iterations: u64) -> anyhow::Result<Vec<BatchTime>> {
        self.restore()?;
        for r in &self.regions {
            check_room(r)?;
        }
        let (mut mremap_ns, mut iter_ns) = (0u64, 0u64);
        for _ in 0..iterations {
            for i in 0..self.regions.len() {
                let r = &self.regions[i];
                let (len, from, to) = (r.len(), src(r), dst(r));
                let t0 = Instant::now();
                marker::begin(1);
                marker::begin(0);
                region::mremap_fixed(from, len, to)?;
                marker::end(0);
                let t1 = Instant::now();
                self.moved = true;
                munmap(to, len)?;
                self.refill(i)?;
                self.moved = false;
                marker::end(1);
                let t2 = Instant::now();
                mremap_ns += (t1 - t0).as_nanos() as u64;
                iter_ns += (t2 - t0).as_nanos() as u64;
            }
        }
        let calls = iterations * self.regions.len() as u64;
        Ok(vec![
            BatchTime {
                ns: mremap_ns,
                calls,
            },
            BatchTime { ns: iter_ns, calls },
        ])
    }

    /// Both phases start from "filled at A"; the previous destination's
    /// munmap (and its own TLB flush) happens here, outside the count.
    fn phase_setup(&mut self, _phase: usize) -> anyhow::Result<()> {
        self.restore()
    }

    /// Phase 0 (`mremap`): the moves only. Phase 1: one whole iteration.
    fn phase_call(&mut self, phase: usize) -> anyhow::Result<u64> {
        if phase == 0 {
            self.move_all()?;
        } else {
            self.run(1)?;
        }
        Ok(self.regions.len() as u64)
    }

    /// Mapped at `A` whenever the runner looks: `run` and `phase_setup` end
    /// that way, and the runner's last step before verifying is a
    /// `phase_setup`.
    fn regions(&self) -> &[Region] {
        &self.regions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::FolioSpec;

    // No test here moves a mapping: other test threads map memory
    // concurrently and MREMAP_FIXED would replace whatever they put in the
    // room. The moves are tested through the binary (tests/workloads_cli.rs).

    #[test]
    fn placement_is_pmd_aligned_with_free_room() {
        let r = Region::map_with_room(
            1 << 20,
            FolioSpec::Mthp(64 << 10),
            1 << 20,
            PMD_SIZE as usize,
        )
        .unwrap();
        assert_eq!(r.addr() as usize % PMD_SIZE as usize, 0);
        assert_eq!(r.vma_count().unwrap(), 1);
    }

    #[test]
    fn a_taken_destination_is_refused() {
        let r =
            Region::map_with_room(64 << 10, FolioSpec::Base, 64 << 10, PMD_SIZE as usize).unwrap();
        match mmap_at(dst(&r), r.len(), libc::PROT_NONE, libc::MAP_NORESERVE) {
            Ok(()) => {
                let err = check_room(&r).unwrap_err().to_string();
                assert!(err.contains("not free"), "{err}");
                munmap(dst(&r), r.len()).unwrap();
            }
            // Another test thread took the room first: that is the point.
            Err(_) => assert!(check_room(&r).is_err()),
        }
    }
}
