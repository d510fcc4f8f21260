//! Guest kernels, in two halves. `source`: which kernel a guest boots
//! (specs), where Debian's prebuilt kernels come from (the archive, through
//! apt with a private state), images of the user's own builds, and the local
//! cache they are kept in. `boot`: running a command in a QEMU guest of such
//! a kernel (the guest binary, initramfs, qemu, init, frame, run, disk). See
//! docs/guests.md.
//!
//! This layer runs external tools (`apt-get`, `apt-cache`, `dpkg-deb`) and
//! writes only below the user's cache directory; it never touches the
//! system's apt configuration or state.

// The layers below this one, named as the layers are (docs/architecture.md).
use ptelab_error as error;
use ptelab_record as record;
use ptelab_workload as workload;

pub mod arch;
pub mod boot;
pub mod build;
pub mod source;

pub use source::KernelSpec;

/// The word of a `ptelab vm` command line that joins the guest commands
/// one boot runs in turn (`-- sweep … --then sweep …`).
pub const THEN: &str = "--then";
