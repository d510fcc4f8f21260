//! A timed region: its own VMA with unmapped gaps on both sides, aligned to its
//! folio size, populated so the requested folio layout arises.
//!
//! CONTRACT (implemented by the layout helper; keep these signatures):
//!
//! ```ignore
//! pub struct Region { .. }               // Drop unmaps region, gaps and neighbour
//! impl Region {
//!     /// Map (not populate). `neighbor`: an anonymous RW mapping right below it
//!     /// with identical flags, so the two merge into one VMA.
//!     pub fn map(size: u64, spec: FolioSpec, neighbor: bool) -> anyhow::Result<Region>;
//!     /// Fault in every page with a write so the kernel allocates the layout
//!     /// (knobs must already be configured); for 2M-pte also PTE-map the PMDs.
//!     pub fn populate(&mut self) -> anyhow::Result<()>;
//!     pub fn addr(&self) -> *mut u8;
//!     pub fn len(&self) -> usize;
//!     /// VMAs in /proc/self/maps that overlap the region.
//!     pub fn vma_count(&self) -> anyhow::Result<u64>;
//! }
//! ```
