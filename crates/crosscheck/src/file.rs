//! Scenario (b): a `MAP_SHARED` read-write mapping of a regular file on a
//! file system with `page_mkwrite` (ext4), some pages dirty.
//!
//! Write-notify applies (`vma_wants_writenotify()`: the backer has
//! `page_mkwrite`), so `vm_page_prot` is read-only: a read fault maps a clean
//! read-only PTE, a write fault (`page_mkwrite`) a dirty writable one, and
//! mprotect RW passes `MM_CP_TRY_CHANGE_WRITABLE`, upgrading exactly the PTEs
//! `can_change_shared_pte_writable()` finds dirty (docs/kernel.md §4.1, §4.3).
//! v6.17+ evaluates it once per batch on the merged PTE, whose dirty bit is
//! the OR over the batch: a clean PTE batched with a dirty sibling becomes
//! writable without a write fault, a clean PTE in an all-clean batch still
//! faults (docs/kernel.md §4.6). v6.16 decides per PTE.
//!
//! The file is created with `O_TMPFILE` (no name ever, so nothing is left
//! behind even after SIGKILL; where unsupported a named file is unlinked at
//! once) in `$PTELAB_CROSSCHECK_DIR` (default /var/tmp), written in
//! folio-sized aligned chunks so the page cache allocates folios of that
//! size, and `fdatasync`ed so they are clean before they are mapped.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::kernel::region::{madvise, Region, PAGE_SIZE};
use crate::record::Layout;
use crate::workload::folio::PMD_SIZE;
use crate::workload::FolioSpec;

/// Environment variable naming the directory of the temporary file.
pub const DIR_ENV: &str = "PTELAB_CROSSCHECK_DIR";

/// Size of the file and of the mapping.
pub const SIZE: u64 = 256 << 10;

/// Pages of the mapping.
pub const PAGES: usize = (SIZE as usize) / PAGE_SIZE;

/// Size of each `pwrite`: the folio size asked of the page cache.
pub const CHUNK: usize = 64 << 10;

/// The directory of the temporary file.
pub fn dir() -> PathBuf {
    std::env::var_os(DIR_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

/// Pages written after the read faults. With 64K folios: folio 0 stays
/// clean; folio 1 gets one dirty page (21) among clean ones; folio 2 its
/// first four (32-35); folio 3 stays clean.
pub fn dirty_pages() -> Vec<bool> {
    (0..PAGES)
        .map(|i| i == 21 || (32..36).contains(&i))
        .collect()
}

/// The folio size (in pages) to build the model with: the observed layout
/// must be whole, present, aligned folios of one size (any size: the model
/// follows what the page cache gave).
pub fn model_folio_pages(layout: &Layout) -> Result<u64, String> {
    if layout.pages_present != layout.pages_total {
        return Err(format!(
            "{} of {} pages not present after the read faults",
            layout.pages_total - layout.pages_present,
            layout.pages_total
        ));
    }
    if layout.misaligned_folios > 0 {
        return Err(format!(
            "{} folio(s) not aligned to their size",
            layout.misaligned_folios
        ));
    }
    let whole: u64 = layout.histogram.iter().map(|(b, n)| b * n).sum();
    if whole != layout.pages_total * PAGE_SIZE as u64 {
        return Err("folio(s) only partly inside the mapping".into());
    }
    match layout.histogram.keys().collect::<Vec<_>>()[..] {
        [&bytes] => Ok(bytes / PAGE_SIZE as u64),
        _ => Err("folios of mixed sizes: their order in the file is not modelled".into()),
    }
}

/// Name of the file system of `dir` (statfs magic).
pub fn fs_type(dir: &Path) -> anyhow::Result<&'static str> {
    Ok(crate::kernel::files::fs_name(
        crate::kernel::files::statfs_magic(dir)?,
    ))
}

/// An unnamed temporary file in `dir` that cannot outlive ptelab.
pub fn temp_file(dir: &Path) -> anyhow::Result<File> {
    crate::kernel::files::unlinked_temp_file(dir, "crosscheck")
}

/// The file mapped `MAP_SHARED` read-write at a PMD-aligned address (so no
/// PTE-table boundary cuts a folio). Dropping it unmaps, then closes (the
/// file has no name: closing frees it).
pub struct SharedFile {
    region: Region,
    _file: File,
    /// File system of the directory.
    pub fs: &'static str,
}

impl SharedFile {
    /// Create, write in `CHUNK`s, `fdatasync`, map; no page is touched yet.
    pub fn create(dir: &Path) -> anyhow::Result<SharedFile> {
        let fs = fs_type(dir)?;
        let file = temp_file(dir)?;
        file.set_len(SIZE).context("sizing the file")?;
        let buf = vec![0x5Au8; CHUNK];
        for off in (0..SIZE).step_by(CHUNK) {
            file.write_all_at(&buf, off).context("writing the file")?;
        }
        file.sync_data().context("fdatasync of the file")?;
        let region =
            Region::map_with_room(SIZE, FolioSpec::Mthp(CHUNK as u64), 0, PMD_SIZE as usize)?;
        region
            .map_shared_file(&file, 0)
            .context("mapping the file")?;
        // Keep file THPs off the PMD path (the model is PTE-level).
        madvise(
            region.addr(),
            region.len(),
            libc::MADV_NOHUGEPAGE,
            "MADV_NOHUGEPAGE",
        )?;
        Ok(SharedFile {
            region,
            _file: file,
            fs,
        })
    }

    /// First byte of the mapping.
    pub fn addr(&self) -> *mut u8 {
        self.region.addr()
    }

    /// The mapping's region (for mprotect on both sides).
    pub fn region(&self) -> &Region {
        &self.region
    }

    /// Read one byte of every page (read faults: clean, read-only PTEs).
    pub fn read_all(&self) {
        for i in 0..PAGES {
            // SAFETY: page i of our readable mapping of a SIZE-byte file.
            unsafe { std::ptr::read_volatile(self.addr().add(i * PAGE_SIZE)) };
        }
    }

    /// Write one byte of each page in `pages` (write faults through
    /// `page_mkwrite`: dirty, writable PTEs).
    pub fn write(&self, pages: &[bool]) {
        for (i, _) in pages.iter().enumerate().filter(|(_, &d)| d) {
            // SAFETY: page i of our read-write mapping.
            unsafe { std::ptr::write_volatile(self.addr().add(i * PAGE_SIZE), 0xA5) };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn layout(h: &[(u64, u64)], present: u64) -> Layout {
        Layout {
            histogram: h.iter().copied().collect::<BTreeMap<_, _>>(),
            pages_present: present,
            pages_total: PAGES as u64,
            ..Layout::default()
        }
    }

    #[test]
    fn the_model_follows_a_uniform_observed_folio_size() {
        assert_eq!(model_folio_pages(&layout(&[(65536, 4)], 64)), Ok(16));
        assert_eq!(model_folio_pages(&layout(&[(16384, 16)], 64)), Ok(4));
        assert_eq!(model_folio_pages(&layout(&[(4096, 64)], 64)), Ok(1));
        let mixed = model_folio_pages(&layout(&[(65536, 3), (16384, 4)], 64));
        assert!(mixed.unwrap_err().contains("mixed"));
        let absent = model_folio_pages(&layout(&[(65536, 3)], 48));
        assert!(absent.unwrap_err().contains("16 of 64 pages not present"));
        let partial = model_folio_pages(&layout(&[(65536, 3)], 64));
        assert!(partial.unwrap_err().contains("partly"));
        let mut l = layout(&[(65536, 4)], 64);
        l.misaligned_folios = 1;
        assert!(model_folio_pages(&l).is_err());
    }

    #[test]
    fn dirty_pattern_mixes_batches() {
        let d = dirty_pages();
        assert_eq!(d.len(), 64);
        assert_eq!(crate::render_pages(&d), "21,32-35 (5 of 64)",);
    }

    #[test]
    fn the_temporary_file_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        {
            let f = temp_file(dir.path()).unwrap();
            f.write_all_at(b"x", 0).unwrap();
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // A directory that does not exist: an error, nothing created.
        assert!(temp_file(&dir.path().join("missing")).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
