//! Layout verification: the folio-size histogram of a region, observed from
//! /proc/self/pagemap (present bit, PFN) + /proc/kpageflags (compound head and
//! tail) + /proc/self/smaps (`AnonHugePages`, i.e. PMD-mapped bytes).
//!
//! Folio sizes come from runs of one COMPOUND_HEAD page followed by
//! COMPOUND_TAIL pages at consecutive PFNs and consecutive virtual pages. The
//! THP flag is not used to tell mTHP from PMD THP: on 6.18 it is set on mTHP
//! folios too. PFNs are only visible with CAP_SYS_ADMIN; without them nothing
//! can be verified and the caller must say so.

use std::collections::BTreeMap;
use std::fs::File;

use std::os::unix::fs::FileExt;

use ::procfs::process::{MemoryPageFlags, PageInfo};
use ::procfs::{KPageFlags, PhysicalPageFlags};
use anyhow::Context;

use super::procfs;
use super::region::PAGE_SIZE;
use crate::record::Layout;
use crate::workload::FolioSpec;

/// Whether PFNs in pagemap and /proc/kpageflags are readable. `Err` says why not.
pub fn verification_available() -> Result<(), String> {
    pagemap_pfns_visible()?;
    kpageflags_readable()
}

/// Whether /proc/self/pagemap shows PFNs of present pages (it hides them
/// without CAP_SYS_ADMIN). `Err` says why not.
pub fn pagemap_pfns_visible() -> Result<(), String> {
    let probe = Box::new([1u8; PAGE_SIZE]);
    let page = std::hint::black_box(probe.as_ptr()) as usize / PAGE_SIZE * PAGE_SIZE;
    let info = procfs::pagemap(page as *const u8, 1)
        .map_err(|e| format!("/proc/self/pagemap unreadable: {e:#}"))?;
    match info[0] {
        PageInfo::MemoryPage(f) if f.get_page_frame_number().0 != 0 => Ok(()),
        PageInfo::MemoryPage(f) if f.contains(MemoryPageFlags::PRESENT) => {
            Err("pagemap hides PFNs (needs CAP_SYS_ADMIN: run as root)".into())
        }
        _ => Err("pagemap shows a touched page as not present".into()),
    }
}

/// Whether /proc/kpageflags can be opened. `Err` says why not.
pub fn kpageflags_readable() -> Result<(), String> {
    KPageFlags::new()
        .map(drop)
        .map_err(|e| format!("/proc/kpageflags unreadable ({e}): run as root"))
}

/// The layout a region of `len` bytes aligned to its folio size should get for
/// `spec`: whole folios where one fits, order-0 pages for the remainder (the
/// kernel's fault path never allocates a folio that would cross the VMA end).
pub fn expected(spec: FolioSpec, len: u64) -> (BTreeMap<u64, u64>, u64) {
    let f = spec.folio_bytes();
    let mut h = BTreeMap::new();
    let full = len / f;
    let rest_pages = (len % f) / PAGE_SIZE as u64;
    if full > 0 {
        h.insert(f, full);
    }
    if rest_pages > 0 {
        *h.entry(PAGE_SIZE as u64).or_insert(0) += rest_pages;
    }
    let pmd_bytes = if spec.pmd_mapped() { full * f } else { 0 };
    (h, pmd_bytes)
}

/// Observe `[addr, addr+len)` and judge it against `spec`.
pub fn observe(addr: *const u8, len: usize, spec: FolioSpec) -> anyhow::Result<Layout> {
    let start = addr as usize;
    let npages = len / PAGE_SIZE;
    let infos = procfs::pagemap(addr, npages)?;
    let pfns: Vec<Option<u64>> = infos
        .iter()
        .map(|i| match i {
            PageInfo::MemoryPage(f) if f.contains(MemoryPageFlags::PRESENT) => {
                Some(f.get_page_frame_number().0)
            }
            _ => None,
        })
        .collect();
    if pfns.iter().flatten().any(|&p| p == 0) {
        anyhow::bail!("pagemap hides PFNs (needs CAP_SYS_ADMIN): layout cannot be verified");
    }
    let kpf = File::open("/proc/kpageflags").context("opening /proc/kpageflags")?;
    let flags = read_flags(&kpf, &pfns)?;
    let mut layout = Layout {
        pages_total: npages as u64,
        pages_present: pfns.iter().flatten().count() as u64,
        pmd_mapped_bytes: pmd_mapped_bytes(start, len)?,
        ..Layout::default()
    };
    let mut partial = 0u64;
    let mut i = 0;
    while i < npages {
        let (Some(pfn), Some(fl)) = (pfns[i], flags[i]) else {
            i += 1;
            continue;
        };
        let head = fl.contains(PhysicalPageFlags::COMPOUND_HEAD);
        let tail = fl.contains(PhysicalPageFlags::COMPOUND_TAIL);
        if !head && !tail {
            *layout.histogram.entry(PAGE_SIZE as u64).or_insert(0) += 1;
            i += 1;
            continue;
        }
        // A run of tails at consecutive PFNs and virtual pages.
        let mut n = 1;
        while i + n < npages
            && pfns[i + n] == Some(pfn + n as u64)
            && flags[i + n].is_some_and(|f| f.contains(PhysicalPageFlags::COMPOUND_TAIL))
        {
            n += 1;
        }
        // A folio may continue past the region's end (or start before it):
        // such a folio is only partly inside and is counted apart.
        let runs_on = i + n == npages && is_tail(&kpf, pfn + n as u64);
        if tail || runs_on {
            partial += 1;
        } else {
            let bytes = (n * PAGE_SIZE) as u64;
            *layout.histogram.entry(bytes).or_insert(0) += 1;
            if !((start + i * PAGE_SIZE) as u64).is_multiple_of(bytes) {
                layout.misaligned_folios += 1;
            }
        }
        i += n;
    }
    judge(&mut layout, spec, len as u64, partial);
    Ok(layout)
}

fn is_tail(kpf: &File, pfn: u64) -> bool {
    let mut b = [0u8; 8];
    kpf.read_exact_at(&mut b, pfn * 8)
        .is_ok_and(|()| flags_of(b).contains(PhysicalPageFlags::COMPOUND_TAIL))
}

fn flags_of(entry: [u8; 8]) -> PhysicalPageFlags {
    PhysicalPageFlags::from_bits_retain(u64::from_ne_bytes(entry))
}

/// PFNs this close are read in one span: reading a few unneeded entries
/// costs less than another syscall.
const SPAN_GAP: u64 = 64;

/// kpageflags for every present page, in spans of nearby PFNs, each read
/// with exactly one pread.
///
/// Why not procfs's `KPageFlags::get_range_info`: it reads through an 8 KiB
/// buffer, so each lone PFN (order-0 pages come from the allocator in no
/// particular order) made the kernel snapshot 1024 pages: 2 of the 3.7 s of
/// a one-block 40 MiB order-0 cell were spent there (perf, this VM).
fn read_flags(kpf: &File, pfns: &[Option<u64>]) -> anyhow::Result<Vec<Option<PhysicalPageFlags>>> {
    let mut order: Vec<(u64, usize)> = pfns
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.map(|p| (p, i)))
        .collect();
    order.sort_unstable();
    let mut out = vec![None; pfns.len()];
    let mut buf = Vec::new();
    let mut k = 0;
    while k < order.len() {
        let first = order[k].0;
        let mut end = k + 1;
        while end < order.len() && order[end].0 <= order[end - 1].0 + SPAN_GAP {
            end += 1;
        }
        let last = order[end - 1].0;
        buf.resize(((last - first + 1) * 8) as usize, 0);
        kpf.read_exact_at(&mut buf, first * 8)
            .with_context(|| format!("reading /proc/kpageflags at PFN {first:#x}"))?;
        for &(pfn, i) in &order[k..end] {
            let at = ((pfn - first) * 8) as usize;
            out[i] = Some(flags_of(buf[at..at + 8].try_into().expect("8 bytes")));
        }
        k = end;
    }
    Ok(out)
}

/// Sum of `AnonHugePages` over the VMAs overlapping `[start, start+len)`.
fn pmd_mapped_bytes(start: usize, len: usize) -> anyhow::Result<u64> {
    Ok(procfs::vmas_overlapping(start, len, true)?
        .iter()
        .filter_map(|m| m.extension.map.get("AnonHugePages"))
        .sum())
}

fn describe(h: &BTreeMap<u64, u64>) -> String {
    if h.is_empty() {
        return "nothing".into();
    }
    h.iter()
        .rev()
        .map(|(b, n)| format!("{n} x {}", crate::workload::size::format_size(*b)))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// Fill `matches`/`mismatch` by comparing with [`expected`].
fn judge(layout: &mut Layout, spec: FolioSpec, len: u64, partial: u64) {
    let (want, want_pmd) = expected(spec, len);
    let mut why = Vec::new();
    if layout.pages_present != layout.pages_total {
        why.push(format!(
            "{} of {} pages not present",
            layout.pages_total - layout.pages_present,
            layout.pages_total
        ));
    }
    if layout.histogram != want {
        why.push(format!(
            "expected {}, observed {}",
            describe(&want),
            describe(&layout.histogram)
        ));
    }
    if partial > 0 {
        why.push(format!("{partial} folio(s) only partly inside the region"));
    }
    if layout.misaligned_folios > 0 {
        why.push(format!(
            "{} folio(s) not aligned to their size",
            layout.misaligned_folios
        ));
    }
    if layout.pmd_mapped_bytes != want_pmd {
        why.push(format!(
            "{} bytes PMD-mapped where {want_pmd} were expected",
            layout.pmd_mapped_bytes
        ));
    }
    layout.matches = why.is_empty();
    layout.mismatch =
        (!why.is_empty()).then(|| format!("requested {spec} folios: {}", why.join("; ")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_splits_remainder_into_base_pages() {
        let (h, pmd) = expected(FolioSpec::Mthp(64 << 10), 400 << 10);
        assert_eq!(h, BTreeMap::from([(4096, 4), (65536, 6)]));
        assert_eq!(pmd, 0);
        let (h, pmd) = expected(FolioSpec::Pmd, 40000 << 10);
        assert_eq!(h, BTreeMap::from([(4096, 272), (2 << 20, 19)]));
        assert_eq!(pmd, 19 * (2 << 20));
        assert_eq!(expected(FolioSpec::PmdPte, 4 << 20).1, 0);
    }

    #[test]
    fn judge_explains_a_mismatch() {
        let mut l = Layout {
            histogram: BTreeMap::from([(4096, 16)]),
            pages_present: 16,
            pages_total: 16,
            ..Layout::default()
        };
        judge(&mut l, FolioSpec::Mthp(64 << 10), 64 << 10, 0);
        assert!(!l.matches);
        let msg = l.mismatch.unwrap();
        assert!(msg.contains("expected 1 x 64K, observed 16 x 4K"), "{msg}");
    }

    #[test]
    fn summary_reads_well() {
        let l = Layout {
            histogram: BTreeMap::from([(4096, 16), (65536, 3)]),
            ..Layout::default()
        };
        assert_eq!(l.summary(), "75% 64K, 25% 4K");
    }
}
