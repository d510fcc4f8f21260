//! Sourcing guest kernels: kernel specs, Debian's archive (read from the
//! system's apt sources, fetched through a private apt state), images of the
//! user's own builds, and the cache a fetched kernel is kept in, verified.

pub mod cache;
pub mod debian;
pub mod fetch;
pub mod image;
pub mod sources;
pub mod spec;
