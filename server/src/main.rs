//! The `mpm` command: serve a document root (or the embedded welcome site)
//! under a process model chosen at launch. The first user of [`mpm::main`].

#![forbid(unsafe_code)]

/// Every allocation goes through mpm's dispatcher, so that `--allocator`
/// picks system, mimalloc or locked at launch.
#[global_allocator]
static ALLOCATOR: mpm::MpmAllocator = mpm::MpmAllocator;

fn main() {
    std::process::exit(mpm::main(mpm::StaticSite::default()));
}
